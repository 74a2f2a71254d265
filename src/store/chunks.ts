/**
 * Raw-point layout of the downsampling engine (issue 6).
 *
 * Time is cut into windows of `chunkWindowMs`, aligned to epoch 0 (window of ts = floor(ts / W) · W, so
 * negative timestamps work too). Per series:
 *   - head fragments, `env.head`: [entity u32][key u32][firstTs i64][seq i64] → a point block (gorilla.ts)
 *     holding the points of ONE write for ONE window. A write costs one put per (series, window), not per point.
 *     `seq` grows with every write, so for equal ts the fragment with the higher seq is newer and wins.
 *   - chunks, `env.chunks`: [entity u32][key u32][windowStart i64] → one point block per window, built by
 *     compaction from the previous chunk and the window's fragments.
 * Reads merge a window's chunk and fragments (fragments win on equal ts: they are newer than any chunk,
 * because compaction consumes fragments in the same transaction that rewrites the chunk).
 */
import type { KvValue, TsKv } from '../model/kv.js';
import type { EntityIdx, KeyIdx } from './codec.js';
import { decodeValue, readOrderedI64, writeOrderedI64 } from './codec.js';
import type { StoreEnv } from './env.js';
import { decodePoints } from './gorilla.js';

/** The start of the window holding `ts` (inclusive); the window is [start, start + W). */
export function windowStart(ts: number, windowMs: number): number {
  return Math.floor(ts / windowMs) * windowMs;
}

/** [entity u32][key u32][firstTs i64][seq i64] */
export function fragKey(e: EntityIdx, k: KeyIdx, firstTs: number, seq: number): Buffer {
  const b = Buffer.allocUnsafe(24);
  b.writeUInt32BE(e, 0);
  b.writeUInt32BE(k, 4);
  writeOrderedI64(b, firstTs, 8);
  writeOrderedI64(b, seq, 16);
  return b;
}

/** [entity u32][key u32][windowStart i64]: the chunk key, and the lower bound of a window's fragments. */
export function windowKey(e: EntityIdx, k: KeyIdx, start: number): Buffer {
  const b = Buffer.allocUnsafe(16);
  b.writeUInt32BE(e, 0);
  b.writeUInt32BE(k, 4);
  writeOrderedI64(b, start, 8);
  return b;
}

export interface HeadFragment {
  readonly key: Buffer;
  readonly firstTs: number;
  readonly seq: number;
  /** the raw LMDB value (a point block; or, for a 16-byte legacy key, one encoded value) */
  readonly value: Buffer;
}

export function fragmentOf(key: Buffer, value: Buffer): HeadFragment {
  return { key, firstTs: readOrderedI64(key, 8), seq: key.length >= 24 ? readOrderedI64(key, 16) : 0, value };
}

export function fragmentPoints(f: HeadFragment): TsKv[] {
  // 16-byte keys are single points written before fragments existed: [e][k][ts] → encodeValue.
  if (f.key.length === 16) return [{ ts: f.firstTs, value: decodeValue(f.value) }];
  return decodePoints(f.value);
}

/**
 * The points of one window: the chunk's, overwritten by the fragments' in seq order. Ascending ts, distinct.
 * `fragments` is not modified.
 */
export function mergeWindow(chunk: readonly TsKv[] | undefined, fragments: readonly HeadFragment[]): TsKv[] {
  if (fragments.length === 0) return chunk === undefined ? [] : chunk.slice();
  if ((chunk === undefined || chunk.length === 0) && fragments.length === 1) return fragmentPoints(fragments[0] as HeadFragment);
  const byTs = new Map<number, KvValue>();
  if (chunk !== undefined) for (const p of chunk) byTs.set(p.ts, p.value);
  const ordered = fragments.length === 1 ? fragments : [...fragments].sort((a, b) => a.seq - b.seq);
  for (const f of ordered) for (const p of fragmentPoints(f)) byTs.set(p.ts, p.value);
  const out: TsKv[] = [];
  for (const [ts, value] of byTs) out.push({ ts, value });
  out.sort((a, b) => a.ts - b.ts);
  return out;
}

/** The fragments of series (e, k) whose firstTs lies in [fromTs, toTs), ascending by (firstTs, seq). */
export function headFragments(env: StoreEnv, e: EntityIdx, k: KeyIdx, fromTs: number, toTs: number): HeadFragment[] {
  const out: HeadFragment[] = [];
  for (const { key, value } of env.head.getRange({ start: windowKey(e, k, fromTs), end: windowKey(e, k, toTs) })) {
    out.push(fragmentOf(key as Buffer, value));
  }
  return out;
}

export interface WindowPoints {
  readonly start: number;
  /** ascending ts, distinct */
  readonly points: TsKv[];
  /** true when the window has head fragments (its rollups do not reflect them yet) */
  readonly dirty: boolean;
}

/** A key-ordered LMDB range iterator with one entry of look-ahead. */
class Peek<T> {
  private cur: IteratorResult<T>;
  constructor(private readonly it: Iterator<T>) { this.cur = it.next(); }
  get value(): T | undefined { return this.cur.done === true ? undefined : this.cur.value; }
  next(): void { this.cur = this.it.next(); }
}

interface Entry { readonly key: Buffer; readonly value: Buffer }

/**
 * The windows of series (e, k) overlapping [fromTs, toTs) that hold data, in ascending or descending window
 * order, each merged (chunk + fragments). Lazy: a window is read and decoded only when it is pulled.
 */
export function* seriesWindows(
  env: StoreEnv, e: EntityIdx, k: KeyIdx, fromTs: number, toTs: number, windowMs: number, descending: boolean,
): IterableIterator<WindowPoints> {
  const lo = windowStart(fromTs, windowMs);
  if (toTs <= lo) return;
  // lmdb-js ranges include `start` and exclude `end` in either direction.
  const range = descending
    ? { start: windowKey(e, k, toTs - 1), end: windowKey(e, k, lo - 1), reverse: true }
    : { start: windowKey(e, k, lo), end: windowKey(e, k, toTs) };
  const chunks = new Peek<Entry>(env.chunks.getRange(range)[Symbol.iterator]() as Iterator<Entry>);
  // Fragment keys are 24 bytes, so a descending scan must start past every fragment of the last window.
  const headRange = descending
    ? { start: fragKey(e, k, toTs - 1, Number.MAX_SAFE_INTEGER), end: fragKey(e, k, lo - 1, Number.MAX_SAFE_INTEGER), reverse: true }
    : range;
  const head = new Peek<Entry>(env.head.getRange(headRange)[Symbol.iterator]() as Iterator<Entry>);
  const before = (a: number, b: number): boolean => (descending ? a > b : a < b);
  for (;;) {
    const c = chunks.value;
    const h = head.value;
    if (c === undefined && h === undefined) return;
    const cw = c === undefined ? undefined : readOrderedI64(c.key, 8);
    const hw = h === undefined ? undefined : windowStart(readOrderedI64(h.key, 8), windowMs);
    let w: number;
    if (cw === undefined) w = hw as number;
    else if (hw === undefined) w = cw;
    else w = before(cw, hw) ? cw : hw;
    let chunkPoints: TsKv[] | undefined;
    if (cw === w && c !== undefined) {
      chunkPoints = decodePoints(c.value);
      chunks.next();
    }
    const frags: HeadFragment[] = [];
    for (let f = head.value; f !== undefined && windowStart(readOrderedI64(f.key, 8), windowMs) === w; f = head.value) {
      frags.push(fragmentOf(f.key, f.value));
      head.next();
    }
    yield { start: w, points: mergeWindow(chunkPoints, frags), dirty: frags.length > 0 };
  }
}
