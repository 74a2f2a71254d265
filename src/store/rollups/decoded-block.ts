/**
 * A committed rollup block as queries read it (the layout is encodeBlock's, store.ts): bucket starts and, for
 * COUNT/SUM/AVG, each bucket's counts and sums in flat columns, decoded straight from the block's bytes without
 * an object per bucket; the bucket states themselves (`buckets`) only when a reader asks for them (MIN/MAX, a
 * bucket without a compact form).
 */
import type { BucketAgg } from './aggregate.js';
import { ByteReader } from '../encoding/bytes.js';
import { BlockColumns } from '../encoding/gorilla.js';

/** One tier bucket's state (store.ts: the tiers' codec). */
export interface RollupBucket {
  /** inclusive bucket start, aligned to the tier */
  readonly start: number;
  readonly agg: BucketAgg;
}

/**
 * The most double-sum partials a bucket's compact form holds. Two would do for the exact sum of most sensor
 * data, but Shewchuk's partials are not minimal: 592 of 718 hourly sums of a month of 2-decimal temperatures
 * have three, and with two they all fell back to the bucket objects.
 */
export const SUM_MAX_PARTIALS = 4;
/** Numbers per bucket in DecodedBlock.sums. */
export const SUM_STRIDE = 7 + SUM_MAX_PARTIALS;
/** Offsets in a bucket's stride of DecodedBlock.sums. */
export const SUM_COUNT = 0;
export const SUM_LONG_COUNT = 1;
export const SUM_DOUBLE_COUNT = 2;
export const SUM_FIRST_TS = 3;
export const SUM_LAST_TS = 4;
export const SUM_LONG_SUM = 5;
/**
 * the number of double-sum partials (0 to SUM_MAX_PARTIALS), or when the bucket has no compact form
 * NO_COMPACT_FORM, or NON_FINITE when that is because it holds a non-finite double (it cannot be subtracted)
 */
export const SUM_PARTIALS = 6;
export const SUM_PARTIAL_0 = 7;
export const NO_COMPACT_FORM = -1;
export const NON_FINITE = -2;

/**
 * Approximate bytes a block holds besides its encoded bytes and columns (the object, its typed arrays' headers
 * and backing stores, the cache entry), and per bucket once `buckets` is decoded (a BucketAgg with its partials,
 * values and wrapper: 528 measured over a month of 10-s data, rounded up): the read cache's accounting units.
 */
const BLOCK_BYTES = 320;
const BUCKET_OBJECT_BYTES = 544;

/**
 * A month query visits two or three buckets in each of ~700 blocks it has decoded before; reading a few numbers
 * from a typed array, rather than chasing a bucket object and its state across the heap, is what keeps those
 * visits cheap, and decoding no object per bucket is what keeps the first query after a start cheap. A bucket
 * has a compact form when its long sum is a safe integer, its double sum has at most SUM_MAX_PARTIALS partials,
 * and it holds numbers only (no non-finite doubles, booleans, strings or JSON); readers use `buckets` for the
 * others.
 */
export class DecodedBlock {
  /** bucket starts, ascending */
  readonly starts: Float64Array;
  /** SUM_STRIDE numbers per bucket (SUM_* offsets) */
  readonly sums: Float64Array;
  /** called once `buckets` has been decoded: the cache holding the block accounts it again */
  onGrown: (() => void) | undefined;
  private decoded: readonly RollupBucket[] | undefined;

  /**
   * `raw`: the block's encoded bytes, owned by the block (what `decodeBuckets` decodes); `columns`: starts
   * followed by sums, `n` buckets.
   */
  constructor(
    readonly raw: Buffer,
    n: number,
    columns: Float64Array,
    private readonly decodeBuckets: () => readonly RollupBucket[],
  ) {
    this.starts = columns.subarray(0, n);
    this.sums = columns.subarray(n, n + n * SUM_STRIDE);
  }

  get length(): number {
    return this.starts.length;
  }

  /** The bucket states, ascending (decoded on first use, then kept with the block). */
  get buckets(): readonly RollupBucket[] {
    if (this.decoded === undefined) {
      this.decoded = this.decodeBuckets();
      this.onGrown?.();
    }
    return this.decoded;
  }

  /** The read cache's estimate of what the block holds. */
  get bytes(): number {
    const n = this.length;
    return (
      BLOCK_BYTES +
      this.raw.length +
      n * 8 * (1 + SUM_STRIDE) +
      (this.decoded === undefined ? 0 : n * BUCKET_OBJECT_BYTES)
    );
  }
}

/** Reused by decodeSums (synchronous): the integer columns and the value columns' point blocks. */
let ints: Float64Array = new Float64Array(128);
let present: Float64Array = new Float64Array(128);
/** whether the column readInts read last holds a value other than 0 (most bucket columns are one run) */
let nonZero = false;
const values = new BlockColumns();

/**
 * Reads `n` values written by writeDiffs (order 1) into `out` from index 0, growing it as needed (returned):
 * readDiffs' loop, into a typed array, as a block's columns are read a few thousand times by the first month
 * query after a start and a plain array's growth was most of what it allocated.
 */
function readInts(r: ByteReader, n: number, out: Float64Array): Float64Array {
  if (out.length < n) out = new Float64Array(Math.max(n, 2 * out.length));
  const buf = r.buf;
  let pos = r.pos;
  let prev = 0;
  let len = 0;
  let any = false;
  while (len < n) {
    let b = buf[pos++] as number;
    let z = b & 0x7f;
    for (let mul = 0x80; b >= 0x80; mul *= 0x80) {
      b = buf[pos++] as number;
      z += (b & 0x7f) * mul;
    }
    if (b === undefined) throw new Error('corrupt rollup block: truncated');
    const d = z % 2 === 0 ? z / 2 : -(z + 1) / 2;
    let repeats = 1;
    if (d === 0) {
      b = buf[pos++] as number;
      let c = b & 0x7f;
      for (let mul = 0x80; b >= 0x80; mul *= 0x80) {
        b = buf[pos++] as number;
        c += (b & 0x7f) * mul;
      }
      repeats = c + 1;
    }
    for (let j = 0; j < repeats && len < n; j++) {
      prev += d;
      out[len++] = prev;
    }
    if (prev !== 0) any = true;
  }
  r.pos = pos;
  nonZero = any;
  return out;
}

/** Moves `r` past a value column (its presence column, then its point block). */
function skipValues(r: ByteReader, n: number): void {
  present = readInts(r, n, present);
  const len = r.uvar();
  r.pos += len;
}

/** Loads a value column's point block into `values` (its ts: the index of the bucket, or of the partial). */
function loadValues(r: ByteReader, n: number): void {
  present = readInts(r, n, present);
  const len = r.uvar();
  values.load(r.buf.subarray(r.pos, r.pos + len));
  r.pos += len;
}

/** The value of point i of `values` as a number, or NaN when it is none (a bigint, a string). */
function numberAt(i: number): number {
  if (values.numericKind !== 'NONE') return values.num(i);
  const v = values.valueAt(i).v;
  return typeof v === 'number' ? v : NaN;
}

/**
 * The starts, counts and sums of block `raw` (encodeBlock of tier buckets of `bucketMs` from `blockStart`), a
 * bucket marked without compact form (SUM_PARTIALS < 0) where decodeBlock's state would not have one.
 */
export function decodeSums(
  raw: Buffer,
  blockStart: number,
  bucketMs: number,
  decodeBuckets: () => readonly RollupBucket[],
): DecodedBlock {
  const r = new ByteReader(raw);
  const n = raw.length === 0 ? 0 : r.uvar();
  const cols = new Float64Array(n * (1 + SUM_STRIDE));
  if (n === 0) return new DecodedBlock(raw, 0, cols, decodeBuckets);
  // bucket i's field f is at n + i * SUM_STRIDE + f
  ints = readInts(r, n, ints);
  for (let i = 0; i < n; i++) cols[i] = blockStart + (ints[i] as number) * bucketMs;
  for (const f of [SUM_COUNT, SUM_LONG_COUNT, SUM_DOUBLE_COUNT]) {
    ints = readInts(r, n, ints);
    if (nonZero) for (let i = 0, at = n + f; i < n; i++, at += SUM_STRIDE) cols[at] = ints[i] as number;
  }
  // booleans, strings, JSON: a bucket holding any has no compact form
  for (let c = 0; c < 3; c++) {
    ints = readInts(r, n, ints);
    if (nonZero)
      for (let i = 0, at = n + SUM_PARTIALS; i < n; i++, at += SUM_STRIDE)
        if ((ints[i] as number) !== 0) cols[at] = NO_COMPACT_FORM;
  }
  const wide = r.u8() === 1;
  // long sums: present where the bucket holds longs; a wide column (decimal strings) or a sum past ±2^53 has
  // no compact form
  loadValues(r, n);
  for (let j = 0; j < values.count; j++) {
    const at = n + values.tsAt(j) * SUM_STRIDE;
    const s = wide ? NaN : numberAt(j);
    if (Number.isSafeInteger(s)) cols[at + SUM_LONG_SUM] = s;
    else cols[at + SUM_PARTIALS] = NO_COMPACT_FORM;
  }
  ints = readInts(r, n, ints);
  let total = 0;
  for (let i = 0, at = n + SUM_PARTIALS; i < n; i++, at += SUM_STRIDE) {
    const len = ints[i] as number;
    total += len;
    if (len > SUM_MAX_PARTIALS) cols[at] = NO_COMPACT_FORM;
    else if ((cols[at] as number) >= 0) cols[at] = len;
  }
  // the partials, bucket after bucket (ints still holds each bucket's number of them)
  if (total > 0) {
    loadValues(r, total);
    for (let i = 0, p = 0, at = n; i < n; i++, at += SUM_STRIDE) {
      const len = ints[i] as number;
      if ((cols[at + SUM_PARTIALS] as number) >= 0)
        for (let j = 0; j < len; j++) cols[at + SUM_PARTIAL_0 + j] = numberAt(p + j);
      p += len;
    }
  } else skipValues(r, 0);
  // non-finite doubles: present where a bucket holds one
  skipValues(r, n);
  if (nonZero)
    for (let i = 0, at = n + SUM_PARTIALS; i < n; i++, at += SUM_STRIDE)
      if ((present[i] as number) !== 0) cols[at] = NON_FINITE;
  // long and double min/max, string min/max
  for (let c = 0; c < 6; c++) skipValues(r, n);
  ints = readInts(r, n, ints);
  for (let i = 0, at = n + SUM_FIRST_TS; i < n; i++, at += SUM_STRIDE)
    cols[at] = (cols[i] as number) + (ints[i] as number);
  ints = readInts(r, n, ints);
  for (let i = 0, at = n + SUM_LAST_TS; i < n; i++, at += SUM_STRIDE)
    cols[at] = (cols[i] as number) + (ints[i] as number);
  values.release();
  return new DecodedBlock(raw, n, cols, decodeBuckets);
}
