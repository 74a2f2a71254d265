/** The planner's view of decoded rollup blocks: which points a bucket covers, and the search for a bucket. */
import { type DecodedBlock, NON_FINITE, SUM_PARTIALS } from '../rollups/decoded-block.js';

/** A decoded rollup block, with the index after the last bucket a piece took from it. */
export interface CachedBlock {
  readonly start: number;
  readonly blk: DecodedBlock;
  pos: number;
}

/** Which of bucket i of `blk`'s points (i < 0: a bucket without points) lie in [from, to). */
export function coverage(blk: DecodedBlock, i: number, from: number, to: number): 'none' | 'some' | 'all' {
  if (i < 0) return 'none';
  const firstTs = blk.firstTs(i);
  const lastTs = blk.lastTs(i);
  if (to <= firstTs || from > lastTs) return 'none';
  return from <= firstTs && to > lastTs ? 'all' : 'some';
}

/**
 * Whether bucket i of `blk` may be subtracted (removeAgg: its double sum must be finite), from its columns: the
 * bucket states are not decoded for it.
 */
export function subtractableBucket(blk: DecodedBlock, i: number): boolean {
  return blk.field(SUM_PARTIALS, i) !== NON_FINITE;
}

/** The index of the first bucket of `cb` starting at or after `ts`. */
export function seek(cb: CachedBlock, T: number, ts: number): number {
  const starts = cb.blk.starts;
  const n = starts.length;
  // A block with no gap before `ts` holds it at its offset in the block: regular data makes this the usual case.
  const k = Math.max(0, Math.ceil((ts - cb.start) / T));
  if (k < n && (starts[k] as number) >= ts && (k === 0 || (starts[k - 1] as number) < ts)) return k;
  // Pieces mostly arrive in ascending order: resume from the previous position when it is not past `ts`.
  let i = cb.pos;
  if (i > n || (i > 0 && (starts[i - 1] as number) >= ts)) return lowerBound(starts, ts);
  while (i < n && (starts[i] as number) < ts) i++;
  return i;
}

function lowerBound(starts: Float64Array, ts: number): number {
  let lo = 0;
  let hi = starts.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((starts[mid] as number) < ts) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
