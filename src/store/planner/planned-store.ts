/**
 * The seam between the series store and the rollup planner: what the planner reads of the LMDB series store
 * (series/store.ts implements it), in a module of its own so neither imports the other's implementation.
 */
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import type { BlockColumns } from '../encoding/gorilla.js';
import type { StoreEnv } from '../env.js';
import type { RollupStore, TierSpec } from '../rollups/store.js';
import type { CachedChunk, SeriesChunks, WindowPoints } from '../series/chunks.js';
import type { TimeseriesStore } from '../series/interface.js';

/**
 * What the planner reads of the LMDB timeseries store: its binary layout (head fragments, chunks, rollup
 * blocks) and horizons. A narrow view, so the planner depends on the layout and the store on the planner, not
 * each on the other.
 */
export interface PlannedStore extends TimeseriesStore {
  readonly env: Pick<StoreEnv, 'head' | 'chunks' | 'rollups'>;
  readonly windowMs: number;
  readonly tiers: readonly TierSpec[];
  readonly rollups: Pick<RollupStore, 'readBlock'>;
  readonly rawHorizonTs: number;
  tierHorizonsTs(): number[];
  seriesOf(entityId: string, key: string): { e: EntityIdx; k: KeyIdx } | undefined;
  seriesChunks(e: EntityIdx, k: KeyIdx): SeriesChunks;
  chunk(e: EntityIdx, k: KeyIdx, w: number, chunks?: SeriesChunks): CachedChunk | undefined;
  chunkColumns(e: EntityIdx, k: KeyIdx, w: number, c: CachedChunk, upTo: number, chunks?: SeriesChunks): BlockColumns;
  fragmentColumns(key: Buffer): BlockColumns | undefined;
  windowsOf(e: EntityIdx, k: KeyIdx, fromTs: number, toTs: number): IterableIterator<WindowPoints>;
}
