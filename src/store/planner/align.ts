/** The planner's alignment arithmetic on integer timestamps (tier grids, anchors). */
import { windowStart } from '../series/chunks.js';

/**
 * Whether integer `ts` is a multiple of `T`. Not ts % T === 0: timestamps are doubles, and their % is a call to
 * fmod, ~5× the cost of this division, on every piece of every bucket.
 */
export function aligned(ts: number, T: number): boolean {
  return windowStart(ts, T) === ts;
}

/** The multiple of `T` nearest to integer `ts` (the lower one on a tie). */
export function nearestMultiple(ts: number, T: number): number {
  const down = windowStart(ts, T);
  return ts - down > T / 2 ? down + T : down;
}

/** The first multiple of `T` at or after integer `ts`. */
export function alignUp(ts: number, T: number): number {
  return windowStart(ts - 1, T) + T;
}
