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
/** Fields per bucket in DecodedBlock.sums. */
export const SUM_FIELDS = 8;
/** Fields of DecodedBlock.sums: field f of bucket i is `sums[f * length + i]` (`DecodedBlock.field`). */
export const SUM_COUNT = 0;
export const SUM_LONG_COUNT = 1;
export const SUM_DOUBLE_COUNT = 2;
/** the first and last point's ts, as offsets from the bucket's start (`firstTs`, `lastTs`) */
export const SUM_FIRST_OFFSET = 3;
export const SUM_LAST_OFFSET = 4;
export const SUM_LONG_SUM = 5;
/**
 * the number of double-sum partials (0 to SUM_MAX_PARTIALS), or when the bucket has no compact form
 * NO_COMPACT_FORM, or NON_FINITE when that is because it holds a non-finite double (it cannot be subtracted)
 */
export const SUM_PARTIALS = 6;
/** where the bucket's partials start in DecodedBlock.partials */
export const SUM_PARTIALS_AT = 7;
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
  /**
   * SUM_FIELDS numbers per bucket, field-major: field f of bucket i at `f * length + i`. Field by field, a
   * column of equal values (a count, a timestamp offset, a run of buckets without longs) is one native fill
   * when the block is decoded, not a loop over the buckets.
   */
  readonly sums: Float64Array;
  /** every bucket's double-sum partials, bucket after bucket (SUM_PARTIALS_AT, SUM_PARTIALS) */
  readonly partials: Float64Array;
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
    partials: Float64Array,
    private readonly decodeBuckets: () => readonly RollupBucket[],
  ) {
    this.starts = columns.subarray(0, n);
    this.sums = columns.subarray(n, n + n * SUM_FIELDS);
    this.partials = partials;
  }

  get length(): number {
    return this.starts.length;
  }

  /** Field `f` (a SUM_* offset) of bucket i. */
  field(f: number, i: number): number {
    return this.sums[f * this.starts.length + i] as number;
  }

  /** The ts of bucket i's first point. */
  firstTs(i: number): number {
    return (this.starts[i] as number) + (this.sums[SUM_FIRST_OFFSET * this.starts.length + i] as number);
  }

  /** The ts of bucket i's last point. */
  lastTs(i: number): number {
    return (this.starts[i] as number) + (this.sums[SUM_LAST_OFFSET * this.starts.length + i] as number);
  }

  /** Partial j of bucket i's double sum (j < its SUM_PARTIALS). */
  partial(i: number, j: number): number {
    return this.partials[(this.sums[SUM_PARTIALS_AT * this.starts.length + i] as number) + j] as number;
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
      n * 8 * (1 + SUM_FIELDS) +
      this.partials.length * 8 +
      (this.decoded === undefined ? 0 : n * BUCKET_OBJECT_BYTES)
    );
  }
}

/*
 * The decoder below runs for every block the first query after a start reads (a month of 2-h buckets: ~90 blocks
 * per key) before V8 has optimized it, so it spends as few interpreted steps as it can: runs of equal values
 * are filled natively, the columns the compact form does not need are walked varint by varint without being
 * expanded, and a value column's doubles are one copy and byte swap (`BlockColumns.numbers`).
 */

/** Reused by decodeSums (synchronous): an integer column, expanded. */
let ints: Float64Array = new Float64Array(128);
const values = new BlockColumns();

/**
 * Walks `n` values written by writeDiffs (order 1) and writes them into `out` from `at` (`out` has room), or,
 * without `out`, only moves `r` past them; returns whether any is not 0. A run of zero differences, a run of
 * equal values, is one step: one fill, or none.
 */
function walkInts(r: ByteReader, n: number, out?: Float64Array, at = 0): boolean {
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
    let end = len + 1;
    if (z !== 0) prev += z % 2 === 0 ? z / 2 : -(z + 1) / 2;
    else {
      b = buf[pos++] as number;
      let c = b & 0x7f;
      for (let mul = 0x80; b >= 0x80; mul *= 0x80) {
        b = buf[pos++] as number;
        c += (b & 0x7f) * mul;
      }
      end = Math.min(n, len + c + 1);
    }
    if (prev !== 0) any = true;
    if (out !== undefined) {
      if (end === len + 1) out[at + len] = prev;
      else out.fill(prev, at + len, at + end);
    }
    len = end;
  }
  r.pos = pos;
  return any;
}

/** `n` values of an integer column into the scratch column `ints` (grown as needed), returned. */
function readInts(r: ByteReader, n: number): Float64Array {
  if (ints.length < n) ints = new Float64Array(Math.max(n, 2 * ints.length));
  walkInts(r, n, ints);
  return ints;
}

/** An integer column's values expanded into `ints` (returned), or undefined, `r` moved past it, when all are 0. */
function nonZeroInts(r: ByteReader, n: number): Float64Array | undefined {
  const at = r.pos;
  if (!walkInts(r, n)) return undefined;
  r.pos = at;
  return readInts(r, n);
}

/** Moves `r` past a length-prefixed point block. */
function skipBlock(r: ByteReader): void {
  const len = r.uvar();
  r.pos += len;
}

/** Moves `r` past a value column (its presence column, then its point block); whether any value is present. */
function skipValues(r: ByteReader, n: number): boolean {
  const any = walkInts(r, n);
  skipBlock(r);
  return any;
}

/**
 * Loads a value column's point block (after its presence column) into `values` and returns its numbers (a new
 * array; NaN for a value that is none: a bigint, a string).
 */
function readValues(r: ByteReader): Float64Array {
  const len = r.uvar();
  values.load(r.buf.subarray(r.pos, r.pos + len));
  r.pos += len;
  const out = values.numbers();
  if (out !== undefined) return out;
  const m = values.count;
  const nums = new Float64Array(m);
  for (let i = 0; i < m; i++) {
    const v = values.valueAt(i).v;
    nums[i] = typeof v === 'number' ? v : NaN;
  }
  return nums;
}

const NO_PARTIALS: Float64Array = new Float64Array(0);

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
  const cols = new Float64Array(n * (1 + SUM_FIELDS));
  if (n === 0) return new DecodedBlock(raw, 0, cols, NO_PARTIALS, decodeBuckets);
  // field f of bucket i is at (1 + f) * n + i
  const partialsAt = (1 + SUM_PARTIALS) * n;
  walkInts(r, n, cols, 0);
  for (let i = 0; i < n; i++) cols[i] = blockStart + (cols[i] as number) * bucketMs;
  walkInts(r, n, cols, (1 + SUM_COUNT) * n);
  walkInts(r, n, cols, (1 + SUM_LONG_COUNT) * n);
  walkInts(r, n, cols, (1 + SUM_DOUBLE_COUNT) * n);
  // booleans, strings, JSON: a bucket holding any has no compact form
  for (let c = 0; c < 3; c++) {
    const flags = nonZeroInts(r, n);
    if (flags !== undefined)
      for (let i = 0; i < n; i++) if ((flags[i] as number) !== 0) cols[partialsAt + i] = NO_COMPACT_FORM;
  }
  const wide = r.u8() === 1;
  // long sums: present where the bucket holds longs (the points' ts are bucket indices); a wide column (decimal
  // strings) or a sum past ±2^53 has no compact form
  if (walkInts(r, n)) {
    const sums = readValues(r);
    const m = values.count;
    const longSumAt = (1 + SUM_LONG_SUM) * n;
    // LONG blocks hold safe integers only (|v| < 2^50), and a sum for every bucket has them in bucket order
    if (!wide && m === n && values.numericKind === 'LONG') cols.set(sums, longSumAt);
    else
      for (let j = 0; j < m; j++) {
        const i = values.tsAt(j);
        const s = wide ? NaN : (sums[j] as number);
        if (Number.isSafeInteger(s)) cols[longSumAt + i] = s;
        else cols[partialsAt + i] = NO_COMPACT_FORM;
      }
  } else skipBlock(r);
  // partial counts: where each bucket's start in `partials`, and how many (unless it has no compact form)
  const lens = readInts(r, n);
  const offsetsAt = (1 + SUM_PARTIALS_AT) * n;
  let total = 0;
  for (let i = 0; i < n; i++) {
    const len = lens[i] as number;
    cols[offsetsAt + i] = total;
    total += len;
    if (len > SUM_MAX_PARTIALS) cols[partialsAt + i] = NO_COMPACT_FORM;
    else if ((cols[partialsAt + i] as number) >= 0) cols[partialsAt + i] = len;
  }
  // the partials, bucket after bucket
  walkInts(r, total);
  let partials: Float64Array = NO_PARTIALS;
  if (total > 0) partials = readValues(r);
  else skipBlock(r);
  // non-finite doubles: present where a bucket holds one
  const special = nonZeroInts(r, n);
  skipBlock(r);
  if (special !== undefined)
    for (let i = 0; i < n; i++) if ((special[i] as number) !== 0) cols[partialsAt + i] = NON_FINITE;
  // long and double min/max, string min/max
  for (let c = 0; c < 6; c++) skipValues(r, n);
  // first and last ts, as offsets from the bucket's start
  walkInts(r, n, cols, (1 + SUM_FIRST_OFFSET) * n);
  walkInts(r, n, cols, (1 + SUM_LAST_OFFSET) * n);
  values.release();
  return new DecodedBlock(raw, n, cols, partials, decodeBuckets);
}
