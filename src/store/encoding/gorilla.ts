/**
 * Point-block codec for compressed chunks and head fragments (docs/design/storage.md). A block is a ts-ascending run of
 * distinct-ts points of ONE series. Layout:
 *
 *   [mode u8][count varint][firstTs zigzag varint][ts stream length varint][ts stream][values]
 *
 * Timestamps: delta-of-delta, zigzag varints, zero runs run-length encoded, so a regular series costs a few
 * bytes per block, not per point (Gorilla's idea, byte-aligned).
 * Values, one mode per block, chosen at encode time as the smallest exact one:
 *   - LONG_D1 / LONG_D2: every value a LONG with |v| < 2^50, first or second differences as zigzag varints with
 *     zero runs collapsed (steady counters: D2 is one run of zeros);
 *   - DEC_D1 / DEC_D2: every value a finite DOUBLE equal to m / 10^scale for an integer |m| < 2^50 and one
 *     scale 0..9 (sensor decimals: 21.37 → 2137 at scale 2), differences of m as above; `[scale u8]` first;
 *   - F64: every value a DOUBLE, 8 raw bytes each;
 *   - TAGGED: anything else (mixed types, strings, JSON, booleans, 64-bit longs): `[len varint][encodeValue]`.
 * Every mode round-trips exactly (type included: 42.0 stays DOUBLE, -0.0 stays -0.0 through F64/TAGGED).
 */
import { endianness } from 'node:os';
import type { KvValue, TsKv } from '../../model/kv.js';
import { kvDouble, kvLong } from '../../model/kv.js';
import { SeriesColumn } from '../../model/batch.js';
import { ByteReader, ByteWriter, readDiffs, writeDiffs } from './bytes.js';
import { decodeValue, encodeValue } from './codec.js';

const MODE_TAGGED = 0;
const MODE_LONG_D1 = 1;
const MODE_LONG_D2 = 2;
const MODE_DEC_D1 = 3;
const MODE_DEC_D2 = 4;
const MODE_F64 = 5;

/** Magnitude bound keeping first and second differences exact in zigzag form (< 2^53). */
const INT_BOUND = 2 ** 50;
const POW10 = [1, 10, 100, 1000, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9];
/** F64 values are stored big-endian; `numbers` swaps them on a little-endian host (x86, ARM as Linux runs it). */
const LITTLE_ENDIAN = endianness() === 'LE';

/**
 * Scratch writers for the difference streams, reused across blocks: encoding runs synchronously, and only
 * finish() copies bytes out. The encoder tries both difference orders and keeps the smaller.
 */
const scratch = {
  ts: new ByteWriter(4096),
  d1: new ByteWriter(4096),
  d2: new ByteWriter(4096),
  mantissas: [] as number[],
};

/** The decimal scale (0..9) at which every value of nums[from..to) is m / 10^scale exactly (m into `out`), or -1. */
function decimalScale(nums: readonly number[], from: number, to: number, out: number[]): number {
  let scale = 0;
  for (let i = from; i < to; i++) {
    const v = nums[i] as number;
    if (!Number.isFinite(v) || Object.is(v, -0)) return -1;
    for (;;) {
      const p = POW10[scale] as number;
      const m = Math.round(v * p);
      if (Math.abs(m) < INT_BOUND && m / p === v) break;
      if (++scale >= POW10.length) return -1;
    }
  }
  out.length = 0;
  const p = POW10[scale] as number;
  for (let i = from; i < to; i++) {
    const v = nums[i] as number;
    const m = Math.round(v * p);
    if (m / p !== v) return -1;
    out.push(m);
  }
  return scale;
}

/** Encodes ts-ascending, distinct-ts points of one series. */
export function encodePoints(points: readonly TsKv[]): Buffer {
  return encodeColumn(SeriesColumn.fromPoints(points));
}

/**
 * Encodes points [from, to) of a column (ts-ascending, distinct ts) as one block: the same bytes as
 * encodePoints of the same points. Numeric columns are read without a KvValue per point.
 */
export function encodeColumn(col: SeriesColumn, from = 0, to = col.length): Buffer {
  const n = to - from;
  let kind = col.kind;
  let nums = col.nums;
  let lo = from;
  let hi = to;
  if (kind === 'BOXED' && n > 0) {
    // a slice of a mixed column may still be all LONG or all DOUBLE: the numeric modes apply to it
    const boxed = col.boxed;
    const t0 = (boxed[from] as KvValue).type;
    let same = t0 === 'LONG' || t0 === 'DOUBLE';
    for (let i = from; same && i < to; i++) {
      const v = boxed[i] as KvValue;
      same = v.type === t0 && typeof v.v === 'number';
    }
    if (same) {
      nums = [];
      for (let i = from; i < to; i++) nums.push((boxed[i] as KvValue).v as number);
      kind = t0 as 'LONG' | 'DOUBLE';
      lo = 0;
      hi = n;
    }
  }
  let ints: number[] | undefined;
  let mode = MODE_TAGGED;
  let scale = 0;
  if (n > 0 && kind === 'LONG') {
    let small = true;
    for (let i = lo; i < hi && small; i++) small = Math.abs(nums[i] as number) < INT_BOUND;
    if (small) {
      ints = nums;
      mode = MODE_LONG_D1;
    }
  } else if (n > 0 && kind === 'DOUBLE') {
    scale = decimalScale(nums, lo, hi, scratch.mantissas);
    if (scale >= 0) {
      ints = scratch.mantissas;
      mode = MODE_DEC_D1;
      lo = 0;
      hi = n;
    } else mode = MODE_F64;
  }
  let body: ByteWriter | undefined;
  if (ints !== undefined) {
    const { d1, d2 } = scratch;
    d1.length = 0;
    d2.length = 0;
    writeDiffs(d1, ints, 1, lo, hi);
    writeDiffs(d2, ints, 2, lo, hi);
    if (d2.length < d1.length) {
      body = d2;
      mode += 1;
    } else body = d1;
  }
  const w = new ByteWriter(n * 3 + 32);
  w.u8(mode);
  w.uvar(n);
  if (n === 0) return w.finish();
  const first = col.ts[from] as number;
  w.svar(first);
  const tsStream = scratch.ts;
  tsStream.length = 0;
  writeDiffs(tsStream, col.ts, 2, from, to, first);
  // The ts stream's length lets a reader stop decoding timestamps early and still find the values.
  w.uvar(tsStream.length);
  w.append(tsStream);
  if (body !== undefined) {
    if (mode === MODE_DEC_D1 || mode === MODE_DEC_D2) w.u8(scale);
    w.append(body);
  } else if (mode === MODE_F64) {
    for (let i = lo; i < hi; i++) w.f64(nums[i] as number);
  } else {
    for (let i = from; i < to; i++) {
      const b = encodeValue(col.value(i));
      w.uvar(b.length);
      w.bytes(b);
    }
  }
  return w.finish();
}

/** Number of points in a block without decoding it. */
export function blockCount(block: Buffer): number {
  const r = new ByteReader(block, 1);
  return r.uvar();
}

/** Decodes a block produced by encodePoints. */
export function decodePoints(block: Buffer): TsKv[] {
  return decodePointsIn(block, -Infinity, Infinity);
}

/**
 * The block's points with ts in [fromTs, toTs), ascending. Only those points are materialised, and the
 * value stream is read no further than the last of them (edge reads of the planner stay cheap).
 */
export function decodePointsIn(block: Buffer, fromTs: number, toTs: number): TsKv[] {
  const r = new ByteReader(block);
  const mode = r.u8();
  const n = r.uvar();
  if (n === 0) return [];
  const first = r.svar();
  const tsLen = r.uvar();
  const valuesAt = r.pos + tsLen;
  const ts: number[] = [];
  readDiffs(r, n, 2, ts, toTs - first);
  r.pos = valuesAt;
  const m = ts.length;
  let i0 = 0;
  while (i0 < m && first + (ts[i0] as number) < fromTs) i0++;
  let i1 = i0;
  while (i1 < m && first + (ts[i1] as number) < toTs) i1++;
  if (i1 === i0) return [];
  const out = new Array<TsKv>(i1 - i0);
  switch (mode) {
    case MODE_LONG_D1:
    case MODE_LONG_D2: {
      const ints: number[] = [];
      readDiffs(r, i1, mode === MODE_LONG_D1 ? 1 : 2, ints);
      for (let i = i0; i < i1; i++) out[i - i0] = { ts: first + (ts[i] as number), value: kvLong(ints[i] as number) };
      break;
    }
    case MODE_DEC_D1:
    case MODE_DEC_D2: {
      const p = POW10[r.u8()] as number;
      const ints: number[] = [];
      readDiffs(r, i1, mode === MODE_DEC_D1 ? 1 : 2, ints);
      for (let i = i0; i < i1; i++)
        out[i - i0] = { ts: first + (ts[i] as number), value: kvDouble((ints[i] as number) / p) };
      break;
    }
    case MODE_F64:
      r.pos += 8 * i0;
      for (let i = i0; i < i1; i++) out[i - i0] = { ts: first + (ts[i] as number), value: kvDouble(r.f64()) };
      break;
    case MODE_TAGGED:
      for (let i = 0; i < i1; i++) {
        const len = r.uvar();
        const start = r.pos;
        r.pos += len;
        if (i >= i0) out[i - i0] = { ts: first + (ts[i] as number), value: decodeValue(block, start, start + len) };
      }
      break;
    default:
      throw new Error(`corrupt block: unknown mode ${mode}`);
  }
  return out;
}

/** Mode of a `BlockColumns` loaded from a legacy single-point head value (a 16-byte key: `encodeValue` bytes). */
const MODE_SINGLE = -1;
const EMPTY_BLOCK = Buffer.alloc(0);
/** never written: a column grows (a new array) before its first point */
const NO_COLUMN = new Float64Array(0);

/** How a loaded block's values read as plain numbers (`BlockColumns.num`), without a KvValue per point. */
export type NumericKind = 'LONG' | 'DOUBLE' | 'NONE';

/**
 * Random access to one block's points without an object per point (`range` streams, the
 * planner's raw edges). `load` decodes the timestamps below `toTs` into a reused Float64Array; values are
 * decoded on demand: difference streams sequentially up to the highest index asked, into a reused
 * Float64Array; F64 by offset; TAGGED through a lazily built offset table. A KvValue is allocated only by
 * `valueAt`. Reusable: `load` resets it for another block. The block is referenced, not copied, so it must
 * stay unmodified while loaded (lmdb-js hands out copies of stored values).
 */
export class BlockColumns {
  /** points loaded: the block's points with ts < the `toTs` given to `load` (a prefix of the block) */
  count = 0;
  private tsCol = NO_COLUMN;
  private block: Buffer = EMPTY_BLOCK;
  private mode = MODE_TAGGED;
  private div = 1;
  private valuesAt = 0;
  /** LONG/DEC: decoded integers; TAGGED: value start offsets */
  private ints = NO_COLUMN;
  /** TAGGED: value end offsets */
  private ends = NO_COLUMN;
  /** values decoded into `ints`/`ends` so far */
  private done = 0;
  /** the value stream cursor and the difference decoder's state */
  private vpos = 0;
  private prev = 0;
  private prevDelta = 0;
  private d = 0;
  private left = 0;
  private order: 1 | 2 = 1;
  /** ts of point 0 and the step between points when every ts lies on that grid (regular sampling), else NaN */
  private ts0 = NaN;
  private step = NaN;

  /** Loads a point block (encodePoints; `block` may extend past it), keeping its points with ts < toTs. */
  load(block: Buffer, toTs = Infinity): this {
    this.block = block;
    this.count = 0;
    this.done = 0;
    let pos = 0;
    const mode = block[pos++] as number;
    if (mode < MODE_TAGGED || mode > MODE_F64) throw new Error(`corrupt block: unknown mode ${String(mode)}`);
    this.mode = mode;
    // count, first (zigzag) and the ts stream length: plain varints
    let n = 0;
    for (let mul = 1; ; mul *= 0x80) {
      const b = block[pos++] as number;
      n += (b & 0x7f) * mul;
      if (b < 0x80) break;
    }
    if (n === 0) return this;
    let z = 0;
    for (let mul = 1; ; mul *= 0x80) {
      const b = block[pos++] as number;
      z += (b & 0x7f) * mul;
      if (b < 0x80) break;
    }
    const first = z % 2 === 0 ? z / 2 : -(z + 1) / 2;
    let tsLen = 0;
    for (let mul = 1; ; mul *= 0x80) {
      const b = block[pos++] as number;
      tsLen += (b & 0x7f) * mul;
      if (b < 0x80) break;
    }
    this.valuesAt = pos + tsLen;
    // room for the first two ts; a block off the grid grows it (below)
    if (this.tsCol.length < Math.min(n, 2)) this.tsCol = new Float64Array(Math.min(n, 2));
    let ts = this.tsCol;
    // The ts stream: second differences of (ts - first), zero runs collapsed (writeDiffs order 2).
    let prev = 0;
    let prevDelta = 0;
    let len = 0;
    const limit = toTs - first;
    // a second difference other than 0 past the second point: the points loaded are not one step apart
    let irregular = false;
    // While they are, a run of zero second differences is taken at once and `ts` is not written past the
    // second point (`tsAt` computes them): a regular block's ts cost a few steps, not one per point, which is
    // what the first queries after a start, before V8 has optimized this loop, spend most on. `written`: how
    // many of `ts` are.
    let written = 0;
    outer: while (len < n) {
      let b = block[pos++] as number;
      let v = b & 0x7f;
      for (let mul = 0x80; b >= 0x80; mul *= 0x80) {
        b = block[pos++] as number;
        v += (b & 0x7f) * mul;
      }
      if (b === undefined) throw new Error('corrupt block: truncated');
      const dd = v % 2 === 0 ? v / 2 : -(v + 1) / 2;
      let repeats = 1;
      if (dd === 0) {
        b = block[pos++] as number;
        let c = b & 0x7f;
        for (let mul = 0x80; b >= 0x80; mul *= 0x80) {
          b = block[pos++] as number;
          c += (b & 0x7f) * mul;
        }
        repeats = c + 1;
        if (!irregular && len >= 2 && prevDelta > 0) {
          // the run's points below the limit: prev + j·prevDelta < limit for j = 1 .. room
          const take = Math.min(repeats, n - len, Math.ceil((limit - prev) / prevDelta) - 1);
          len += take;
          prev += take * prevDelta;
          if (take < repeats && len < n) break;
          continue;
        }
      }
      for (let j = 0; j < repeats && len < n; j++) {
        prevDelta += dd;
        prev += prevDelta;
        if (prev >= limit) break outer;
        if (dd !== 0 && len >= 2) irregular = true;
        if (len >= ts.length) {
          const grown = new Float64Array(Math.max(n, 2 * ts.length));
          grown.set(ts.subarray(0, written));
          ts = this.tsCol = grown;
        }
        if (written < len) {
          // off the grid after a run taken at once: the points before it, computed
          const t0 = ts[0] as number;
          const step = (ts[1] as number) - t0;
          for (; written < len; written++) ts[written] = t0 + written * step;
        }
        ts[len++] = first + prev;
        written = len;
      }
    }
    this.count = len;
    // a regular block (one delta, then zero second differences): lowerBound computes instead of searching
    this.ts0 = len > 0 ? (ts[0] as number) : NaN;
    this.step = len > 1 && !irregular ? (ts[1] as number) - (ts[0] as number) : NaN;
    this.vpos = this.valuesAt;
    this.div = 1;
    if (mode === MODE_DEC_D1 || mode === MODE_DEC_D2) this.div = POW10[block[this.vpos++] as number] as number;
    this.order = mode === MODE_LONG_D2 || mode === MODE_DEC_D2 ? 2 : 1;
    this.prev = 0;
    this.prevDelta = 0;
    this.left = 0;
    if (mode !== MODE_F64 && this.ints.length < len) this.ints = new Float64Array(Math.max(len, this.ints.length * 2));
    if (mode === MODE_TAGGED && this.ends.length < len)
      this.ends = new Float64Array(Math.max(len, 16, this.ends.length * 2));
    return this;
  }

  /** Loads one legacy head point (16-byte key: ts in the key, `encodeValue` bytes as the value). */
  loadSingle(ts: number, value: Buffer, toTs = Infinity): this {
    if (this.tsCol.length === 0) this.tsCol = new Float64Array(16);
    this.block = value;
    this.step = NaN;
    this.mode = MODE_SINGLE;
    this.done = 0;
    this.count = ts < toTs ? 1 : 0;
    this.tsCol[0] = ts;
    return this;
  }

  /** Drops the reference to the block (before pooling); load again before use. */
  release(): this {
    this.block = EMPTY_BLOCK;
    this.count = 0;
    return this;
  }

  /** The ts of point i (0 ≤ i < count). */
  tsAt(i: number): number {
    // regular: computed (exact: integers below 2^53), as `compact` may have dropped the column
    return this.step > 0 ? this.ts0 + i * this.step : (this.tsCol[i] as number);
  }

  /**
   * For a loaded block kept in a cache: drops the timestamp column when the points are one step apart (`tsAt`
   * computes them) and trims it to the points loaded otherwise. Load again only into a fresh instance.
   */
  compact(): this {
    this.tsCol = this.step > 0 ? NO_COLUMN : this.tsCol.slice(0, this.count);
    return this;
  }

  /** Approximate bytes held besides the block: the object and its typed arrays (a cache's accounting). */
  get heapBytes(): number {
    return 160 + 8 * (this.tsCol.length + this.ints.length + this.ends.length);
  }

  /** The first index whose ts ≥ `ts` (count when none). */
  lowerBound(ts: number): number {
    const n = this.count;
    // regular: no look at the ts column, whose cache lines a month query's raw edges would each miss
    if (this.step > 0) return Math.min(n, Math.max(0, Math.ceil((ts - this.ts0) / this.step)));
    const col = this.tsCol;
    if (n === 0 || ts <= (col[0] as number)) return 0;
    const last = col[n - 1] as number;
    if (ts > last) return n;
    // Regularly sampled series (the usual device) hold `ts` at its interpolated index: probe there first.
    const k = Math.ceil(((ts - (col[0] as number)) * (n - 1)) / (last - (col[0] as number)));
    if (k > 0 && k < n && (col[k] as number) >= ts && (col[k - 1] as number) < ts) return k;
    let lo = 0;
    let hi = n;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((col[mid] as number) < ts) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** What `num` returns for this block's values. */
  get numericKind(): NumericKind {
    switch (this.mode) {
      case MODE_LONG_D1:
      case MODE_LONG_D2:
        return 'LONG';
      case MODE_DEC_D1:
      case MODE_DEC_D2:
      case MODE_F64:
        return 'DOUBLE';
      default:
        return 'NONE';
    }
  }

  /** The value of point i as a number when `numericKind` is LONG (a safe integer) or DOUBLE. */
  num(i: number): number {
    if (this.mode === MODE_F64) return this.block.readDoubleBE(this.valuesAt + 8 * i);
    if (i >= this.done) this.decodeInts(i);
    return this.div === 1 ? (this.ints[i] as number) : (this.ints[i] as number) / this.div;
  }

  /**
   * LONG/DEC blocks: the decoded integers, valid for indices below `upTo` (a point's value is the integer, or
   * for DEC the integer ÷ `divisor`); undefined for other blocks (use `num`).
   */
  intsUpTo(upTo: number): Float64Array | undefined {
    if (this.mode < MODE_LONG_D1 || this.mode > MODE_DEC_D2) return undefined;
    if (upTo > this.done) this.decodeInts(upTo - 1);
    return this.ints;
  }

  /**
   * The numbers of the loaded points, a new array, when `numericKind` is LONG or DOUBLE; undefined for other
   * blocks. One pass for the block where `num` is a call per point: F64 as one copy and byte swap (Buffer's
   * readDoubleBE is JavaScript, which a cold reader runs slowly).
   */
  numbers(): Float64Array | undefined {
    const n = this.count;
    switch (this.mode) {
      case MODE_F64: {
        const out = new Float64Array(n);
        new Uint8Array(out.buffer).set(this.block.subarray(this.valuesAt, this.valuesAt + 8 * n));
        if (LITTLE_ENDIAN) Buffer.from(out.buffer).swap64();
        return out;
      }
      case MODE_LONG_D1:
      case MODE_LONG_D2:
      case MODE_DEC_D1:
      case MODE_DEC_D2: {
        if (n > this.done) this.decodeInts(n - 1);
        const div = this.div;
        if (div === 1) return this.ints.slice(0, n);
        const out = new Float64Array(n);
        for (let i = 0; i < n; i++) out[i] = (this.ints[i] as number) / div;
        return out;
      }
      default:
        return undefined;
    }
  }

  /** DEC blocks: 10^scale; 1 otherwise. */
  get divisor(): number {
    return this.div;
  }

  /** The value of point i (0 ≤ i < count), a new KvValue. */
  valueAt(i: number): KvValue {
    switch (this.mode) {
      case MODE_LONG_D1:
      case MODE_LONG_D2:
        if (i >= this.done) this.decodeInts(i);
        return kvLong(this.ints[i] as number);
      case MODE_DEC_D1:
      case MODE_DEC_D2:
        if (i >= this.done) this.decodeInts(i);
        return kvDouble((this.ints[i] as number) / this.div);
      case MODE_F64:
        return kvDouble(this.block.readDoubleBE(this.valuesAt + 8 * i));
      case MODE_SINGLE:
        return decodeValue(this.block);
      default: {
        if (i >= this.done) this.decodeOffsets(i);
        return decodeValue(this.block, this.ints[i] as number, this.ends[i] as number);
      }
    }
  }

  /** Decodes the difference stream's values up to index i. */
  private decodeInts(i: number): void {
    const block = this.block;
    const ints = this.ints;
    let { done, vpos: pos, prev, prevDelta, d, left } = this;
    const order = this.order;
    while (done <= i) {
      if (left === 0) {
        let b = block[pos++] as number;
        let z = b & 0x7f;
        for (let mul = 0x80; b >= 0x80; mul *= 0x80) {
          b = block[pos++] as number;
          z += (b & 0x7f) * mul;
        }
        if (b === undefined) throw new Error('corrupt block: truncated');
        d = z % 2 === 0 ? z / 2 : -(z + 1) / 2;
        left = 1;
        if (d === 0) {
          b = block[pos++] as number;
          let c = b & 0x7f;
          for (let mul = 0x80; b >= 0x80; mul *= 0x80) {
            b = block[pos++] as number;
            c += (b & 0x7f) * mul;
          }
          left = c + 1;
        }
      }
      left--;
      const delta = order === 1 ? d : prevDelta + d;
      prev += delta;
      prevDelta = delta;
      ints[done++] = prev;
    }
    this.done = done;
    this.vpos = pos;
    this.prev = prev;
    this.prevDelta = prevDelta;
    this.d = d;
    this.left = left;
  }

  /** Walks the TAGGED value stream's `[len varint][bytes]` entries up to index i. */
  private decodeOffsets(i: number): void {
    const block = this.block;
    let pos = this.vpos;
    let done = this.done;
    while (done <= i) {
      let len = 0;
      for (let mul = 1; ; mul *= 0x80) {
        const b = block[pos++];
        if (b === undefined) throw new Error('corrupt block: truncated');
        len += (b & 0x7f) * mul;
        if (b < 0x80) break;
      }
      this.ints[done] = pos;
      pos += len;
      this.ends[done++] = pos;
    }
    this.done = done;
    this.vpos = pos;
  }
}
