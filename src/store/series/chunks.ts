/**
 * Raw-point layout of the downsampling engine (docs/design/storage.md).
 *
 * Time is cut into windows of `chunkWindowMs`, aligned to epoch 0 (window of ts = floor(ts / W) · W, so
 * negative timestamps work too). Per series:
 *   - head fragments, `env.head`: [entity u32][key u32][firstTs i64][seq i64] → a point block (gorilla.ts)
 *     holding the points of ONE put for ONE window: a bulk write's, or an apply's of all the log records it holds
 *     (apply.ts). A put costs one entry per (series, window), not per point or per post.
 *     `seq` grows with every put, so for equal ts the fragment with the higher seq is newer and wins.
 *   - chunks, `env.chunks`: [entity u32][key u32][windowStart i64] → one point block per window, built by
 *     compaction from the previous chunk and the window's fragments.
 * Reads merge a window's chunk and fragments (fragments win on equal ts: they are newer than any chunk,
 * because compaction consumes fragments in the same transaction that rewrites the chunk).
 */
import type { KvValue, TsKv } from '../../model/kv.js';
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import { decodeValue, readOrderedI64, setOrderedI64, writeOrderedI64 } from '../encoding/codec.js';
import type { StoreEnv } from '../env.js';
import { BlockColumns, decodePoints } from '../encoding/gorilla.js';

/**
 * A cached chunk: its encoded bytes (a point block, gorilla.ts) and, once a raw edge has needed them, its first
 * points decoded (`cols`: every point with ts < `upTo`).
 */
export interface CachedChunk {
  readonly block: Buffer;
  cols: BlockColumns | undefined;
  upTo: number;
}

/** One series' cached chunks by window start; null: the window has no chunk. */
export type SeriesChunks = Map<number, CachedChunk | null>;

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

const lookupKey = Buffer.alloc(16);
const lookupView = new DataView(lookupKey.buffer, lookupKey.byteOffset, 16);

/**
 * windowKey's bytes in one shared Buffer, valid until the next call: for a lookup that is done with the key
 * when it returns (lmdb-js copies it). A raw edge of a month query reads ~700 chunks; a new Buffer and
 * Buffer's JavaScript writers for each cost the first query after a start 1–4 ms before V8 optimized them.
 */
export function windowLookupKey(e: EntityIdx, k: KeyIdx, start: number): Buffer {
  lookupView.setUint32(0, e);
  lookupView.setUint32(4, k);
  setOrderedI64(lookupView, start, 8);
  return lookupKey;
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
  if ((chunk === undefined || chunk.length === 0) && fragments.length === 1)
    return fragmentPoints(fragments[0] as HeadFragment);
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
  constructor(private readonly it: Iterator<T>) {
    this.cur = it.next();
  }
  get value(): T | undefined {
    return this.cur.done === true ? undefined : this.cur.value;
  }
  next(): void {
    this.cur = this.it.next();
  }
}

interface Entry {
  readonly key: Buffer;
  readonly value: Buffer;
}

/** One window of a series as stored: its chunk (if any) and its head fragments in key order, not decoded. */
export interface WindowEntries {
  readonly start: number;
  readonly chunk: Buffer | undefined;
  /** ascending by (firstTs, seq): NOT seq order */
  readonly fragments: HeadFragment[];
}

/**
 * The windows of series (e, k) overlapping [fromTs, toTs) that hold data, in ascending or descending window
 * order, undecoded. Lazy: a window is read only when it is pulled.
 */
export function* seriesEntries(
  env: StoreEnv,
  e: EntityIdx,
  k: KeyIdx,
  fromTs: number,
  toTs: number,
  windowMs: number,
  descending: boolean,
): IterableIterator<WindowEntries> {
  const lo = windowStart(fromTs, windowMs);
  if (toTs <= lo) return;
  // lmdb-js ranges include `start` and exclude `end` in either direction.
  const range = descending
    ? { start: windowKey(e, k, toTs - 1), end: windowKey(e, k, lo - 1), reverse: true }
    : { start: windowKey(e, k, lo), end: windowKey(e, k, toTs) };
  const chunks = new Peek<Entry>(env.chunks.getRange(range)[Symbol.iterator]() as Iterator<Entry>);
  // Fragment keys are 24 bytes, so a descending scan must start past every fragment of the last window.
  const headRange = descending
    ? {
        start: fragKey(e, k, toTs - 1, Number.MAX_SAFE_INTEGER),
        end: fragKey(e, k, lo - 1, Number.MAX_SAFE_INTEGER),
        reverse: true,
      }
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
    let chunk: Buffer | undefined;
    if (cw === w && c !== undefined) {
      chunk = c.value;
      chunks.next();
    }
    const fragments: HeadFragment[] = [];
    for (let f = head.value; f !== undefined && windowStart(readOrderedI64(f.key, 8), windowMs) === w; f = head.value) {
      fragments.push(fragmentOf(f.key, f.value));
      head.next();
    }
    // A descending scan meets a window's fragments in descending key order.
    if (descending && fragments.length > 1) fragments.reverse();
    yield { start: w, chunk, fragments };
  }
}

/**
 * The windows of series (e, k) overlapping [fromTs, toTs) that hold data, in ascending or descending window
 * order, each merged (chunk + fragments) into an array. Lazy per window. (Compaction and the planner's dirty
 * windows; `seriesPoints` streams without the arrays.)
 */
export function* seriesWindows(
  env: StoreEnv,
  e: EntityIdx,
  k: KeyIdx,
  fromTs: number,
  toTs: number,
  windowMs: number,
  descending: boolean,
): IterableIterator<WindowPoints> {
  for (const win of seriesEntries(env, e, k, fromTs, toTs, windowMs, descending)) {
    const chunkPoints = win.chunk === undefined ? undefined : decodePoints(win.chunk);
    yield { start: win.start, points: mergeWindow(chunkPoints, win.fragments), dirty: win.fragments.length > 0 };
  }
}

/** Idle BlockColumns (and their typed arrays), shared by every `seriesPoints` iteration of the process. */
const columnPool: BlockColumns[] = [];
const COLUMN_POOL_MAX = 32;

/**
 * The points of series (e, k) with ts in [fromTs, toTs), ascending or descending, streamed: each
 * window's chunk and fragments are decoded into reused typed-array columns (BlockColumns) and merged lazily;
 * the only per-point allocations are the yielded TsKv and its value. Same answer as seriesWindows + filter:
 * distinct ts, and on an equal ts a fragment beats the chunk and a later fragment (higher seq) beats an
 * earlier one. At most `limit` points. Callers that stop early must call `return()` (for-of does) to release
 * the LMDB iterators.
 */
export function* seriesPoints(
  env: StoreEnv,
  e: EntityIdx,
  k: KeyIdx,
  fromTs: number,
  toTs: number,
  windowMs: number,
  descending: boolean,
  limit = Infinity,
): Generator<TsKv, void, undefined> {
  let remaining = limit;
  if (remaining <= 0) return;
  /** this iteration's columns; source i of a window (0 = lowest priority) uses cols[i] */
  const cols: BlockColumns[] = [];
  const col = (i: number): BlockColumns => (cols[i] ??= columnPool.pop() ?? new BlockColumns());
  // merge state, reused across windows: per source its next index and its bound, and a heap of sources
  const pos: number[] = [];
  const stop: number[] = [];
  const heap: number[] = [];
  try {
    for (const win of seriesEntries(env, e, k, fromTs, toTs, windowMs, descending)) {
      const frags = win.fragments;
      if (frags.length > 1) frags.sort((a, b) => a.seq - b.seq);
      let n = 0;
      if (win.chunk !== undefined) col(n++).load(win.chunk, toTs);
      for (const f of frags) {
        const c = col(n++);
        if (f.key.length === 16) c.loadSingle(f.firstTs, f.value, toTs);
        else c.load(f.value, toTs);
      }
      if (n === 1) {
        const c = cols[0] as BlockColumns;
        const lo = c.lowerBound(fromTs);
        if (descending) {
          for (let i = c.count - 1; i >= lo; i--) {
            yield { ts: c.tsAt(i), value: c.valueAt(i) };
            if (--remaining <= 0) return;
          }
        } else {
          for (let i = lo; i < c.count; i++) {
            yield { ts: c.tsAt(i), value: c.valueAt(i) };
            if (--remaining <= 0) return;
          }
        }
        continue;
      }
      // k-way merge. Heap order: the next ts first (smallest ascending, largest descending); on an equal ts
      // the source of higher priority (index) first, so the top is the winner of its ts.
      const first = (a: number, b: number): boolean => {
        const ta = (cols[a] as BlockColumns).tsAt(pos[a] as number);
        const tb = (cols[b] as BlockColumns).tsAt(pos[b] as number);
        if (ta !== tb) return descending ? ta > tb : ta < tb;
        return a > b;
      };
      const siftDown = (i: number): void => {
        const len = heap.length;
        for (;;) {
          const l = 2 * i + 1;
          if (l >= len) return;
          const r = l + 1;
          const m = r < len && first(heap[r] as number, heap[l] as number) ? r : l;
          if (!first(heap[m] as number, heap[i] as number)) return;
          const t = heap[i] as number;
          heap[i] = heap[m] as number;
          heap[m] = t;
          i = m;
        }
      };
      heap.length = 0;
      for (let i = 0; i < n; i++) {
        const c = cols[i] as BlockColumns;
        const lo = c.lowerBound(fromTs);
        if (lo >= c.count) continue;
        pos[i] = descending ? c.count - 1 : lo;
        stop[i] = descending ? lo - 1 : c.count;
        heap.push(i);
      }
      for (let i = (heap.length >> 1) - 1; i >= 0; i--) siftDown(i);
      const step = descending ? -1 : 1;
      while (heap.length > 0) {
        const top = heap[0] as number;
        const c = cols[top] as BlockColumns;
        const ts = c.tsAt(pos[top] as number);
        const value = c.valueAt(pos[top] as number);
        // Advance every source positioned at this ts (the winner and the ones it overwrites).
        for (;;) {
          const s = heap[0] as number;
          if ((cols[s] as BlockColumns).tsAt(pos[s] as number) !== ts) break;
          const next = (pos[s] as number) + step;
          pos[s] = next;
          if (next === stop[s]) {
            const last = heap.pop() as number;
            if (heap.length === 0) break;
            heap[0] = last;
          }
          siftDown(0);
        }
        yield { ts, value };
        if (--remaining <= 0) return;
      }
    }
  } finally {
    for (const c of cols) if (columnPool.length < COLUMN_POOL_MAX) columnPool.push(c.release());
  }
}

/**
 * The raw horizon as `env`'s current read snapshot has it (meta `rawHorizonTs`): retention persists it before it
 * removes chunks, so a reader that finds a chunk gone in the same snapshot finds the horizon past it.
 */
export function rawHorizonOf(env: StoreEnv): number {
  return (env.meta.get('rawHorizonTs') as number | undefined) ?? Number.MIN_SAFE_INTEGER;
}
