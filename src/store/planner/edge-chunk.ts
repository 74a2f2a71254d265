/** The planner's per-query view of one series' chunks for its raw edges (series-reader.ts). */
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import type { BlockColumns } from '../encoding/gorilla.js';
import { type CachedChunk, type SeriesChunks, windowStart } from '../series/chunks.js';
import type { PlannedStore } from './planned-store.js';

/**
 * The chunk of the window last asked for, from the store's shared cache, and the part of it an edge needs,
 * decoded: the points from the window's start to the boundary, or to the finest tier's nearest one, not the
 * rest. Pieces are visited in order, so one window at a time.
 */
export class EdgeChunk {
  /** the window in `chunk` (NaN: none yet; `chunk` undefined: the window has no chunk) */
  private w = NaN;
  private chunk: CachedChunk | undefined;
  /** the store's cached chunks of this series */
  private readonly chunks: SeriesChunks;

  constructor(
    private readonly store: PlannedStore,
    private readonly e: EntityIdx,
    private readonly k: KeyIdx,
  ) {
    this.chunks = store.seriesChunks(e, k);
  }

  /** Whether the window holding `ts` has a chunk. */
  has(ts: number): boolean {
    return this.at(ts) !== undefined;
  }

  /**
   * The points before `upTo` (at least those) of the chunk of the window holding `ts`, decoded, or undefined
   * when the window has no chunk.
   */
  before(ts: number, upTo: number): BlockColumns | undefined {
    const c = this.at(ts);
    if (c === undefined) return undefined;
    if (c.cols !== undefined && c.upTo >= upTo) return c.cols;
    return this.store.chunkColumns(this.e, this.k, this.w, c, upTo, this.chunks);
  }

  private at(ts: number): CachedChunk | undefined {
    const w = windowStart(ts, this.store.windowMs);
    if (this.w !== w) {
      this.w = w;
      this.chunk = this.store.chunk(this.e, this.k, w, this.chunks);
    }
    return this.chunk;
  }
}
