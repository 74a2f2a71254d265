/** The planner's per-query view of one series' chunks for its raw edges (series-reader.ts). */
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import { BlockColumns } from '../encoding/gorilla.js';
import { type SeriesChunks, windowStart } from '../series/chunks.js';
import type { PlannedStore } from './planned-store.js';

/**
 * The chunk of the window last asked for (the store's shared cache holds it encoded) and the part of it an edge
 * needs, decoded into columns of its own: the points from the boundary to the finest tier's nearest one, so the
 * rest of the chunk is not decoded. Pieces are visited in order, so one window at a time.
 */
export class EdgeChunk {
  /** the window in `block` (NaN: none yet; `block` undefined: the window has no chunk) */
  private w = NaN;
  private block: Buffer | undefined;
  /** `block`'s points before `upTo`, decoded (NaN: none decoded yet) */
  private readonly cols = new BlockColumns();
  private upTo = NaN;
  /** the store's cached chunks of this series */
  private readonly chunks: SeriesChunks;

  constructor(
    private readonly store: PlannedStore,
    private readonly e: EntityIdx,
    private readonly k: KeyIdx,
  ) {
    this.chunks = store.seriesChunks(e, k);
  }

  /** The chunk of the window holding `ts`, encoded, or undefined when it has none. */
  at(ts: number): Buffer | undefined {
    const w = windowStart(ts, this.store.windowMs);
    if (this.w !== w) {
      this.w = w;
      this.block = this.store.chunkBlock(this.e, this.k, w, this.chunks);
      this.upTo = NaN;
    }
    return this.block;
  }

  /**
   * The points before `upTo` of the chunk of the window holding `ts`, decoded (valid until the next call), or
   * undefined when the window has no chunk.
   */
  before(ts: number, upTo: number): BlockColumns | undefined {
    const block = this.at(ts);
    if (block === undefined) return undefined;
    if (!(this.upTo >= upTo)) {
      this.cols.load(block, upTo);
      this.upTo = upTo;
    }
    return this.cols;
  }
}
