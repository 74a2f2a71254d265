/**
 * A mergeable per-bucket aggregate state: what rollup tiers store and the planner merges. The rules of docs/api.md
 * that turn a state into a value (AVG a double, SUM a long unless a double is present, ...) are TB's semantics and
 * live in src/query/aggregate.ts (`finalizeAgg`).
 *
 * Mergeability contract (the downsampling tiers rely on it): for any split of a bucket's points into parts,
 * `finalizeAgg(merge of the parts' states, fn)` equals `finalizeAgg(state of all points added one by one, fn)`
 * exactly, in any order. That holds because every field is order-independent: counts, an exact integer sum
 * of longs (bigint once it leaves the safe range), an exact sum of doubles (Shewchuk non-overlapping partials,
 * as Python's math.fsum), min/max, and first/last by timestamp.
 *
 * Rounding (the one place a double is rounded): SUM with a double present and AVG use
 * `S = the exact sum of all numeric values, rounded once to the nearest double (ties to even)`;
 * AVG = S / (number of numeric points), one IEEE division.
 */
import type { KvValue } from '../../model/kv.js';
import type { EpochMs } from '../../types.js';

/** The aggregation functions (docs/api.md; NONE is a raw query, not a function). */
export const AGG_FNS = ['MIN', 'MAX', 'AVG', 'SUM', 'COUNT'] as const;
export type AggFn = (typeof AGG_FNS)[number];

export function isAggFn(s: string): s is AggFn {
  return (AGG_FNS as readonly string[]).includes(s);
}

/** An exactly-represented long: a JS number while it is a safe integer, a bigint beyond. */
export type ExactLong = number | bigint;

export interface BucketAgg {
  /** points of every type */
  count: number;
  longCount: number;
  doubleCount: number;
  boolCount: number;
  stringCount: number;
  jsonCount: number;
  /** exact sum of the long values */
  longSum: ExactLong;
  /** exact sum of the double values as non-overlapping partials, increasing magnitude (empty = 0) */
  doubleSum: number[];
  /** sum of non-finite doubles (±Infinity/NaN) kept apart: partials must stay finite */
  doubleSpecial: number;
  longMin: ExactLong | undefined;
  longMax: ExactLong | undefined;
  doubleMin: number | undefined;
  doubleMax: number | undefined;
  /** lexicographic (UTF-16 code unit order, as Java's String.compareTo) over STRING values */
  stringMin: string | undefined;
  stringMax: string | undefined;
  /** earliest point; ties keep the value seen first */
  firstTs: EpochMs;
  first: KvValue | undefined;
  /** newest point; ties keep the value seen last */
  lastTs: EpochMs;
  last: KvValue | undefined;
}

export function emptyAgg(): BucketAgg {
  return {
    count: 0,
    longCount: 0,
    doubleCount: 0,
    boolCount: 0,
    stringCount: 0,
    jsonCount: 0,
    longSum: 0,
    doubleSum: [],
    doubleSpecial: 0,
    longMin: undefined,
    longMax: undefined,
    doubleMin: undefined,
    doubleMax: undefined,
    stringMin: undefined,
    stringMax: undefined,
    firstTs: Infinity,
    first: undefined,
    lastTs: -Infinity,
    last: undefined,
  };
}

/** Empties `agg` in place (emptyAgg's values; its partials array is kept): for a scratch state reused per use. */
export function clearAgg(agg: BucketAgg): void {
  agg.count = agg.longCount = agg.doubleCount = agg.boolCount = agg.stringCount = agg.jsonCount = 0;
  agg.longSum = 0;
  while (agg.doubleSum.length > 0) agg.doubleSum.pop();
  agg.doubleSpecial = 0;
  agg.longMin = agg.longMax = agg.doubleMin = agg.doubleMax = undefined;
  agg.stringMin = agg.stringMax = undefined;
  agg.firstTs = Infinity;
  agg.first = undefined;
  agg.lastTs = -Infinity;
  agg.last = undefined;
}

const SAFE_MAX = Number.MAX_SAFE_INTEGER;

/** a + b exactly (a bigint once the sum leaves the safe range). */
export function addLong(a: ExactLong, b: ExactLong): ExactLong {
  if (typeof a === 'number' && typeof b === 'number') {
    const s = a + b;
    if (s <= SAFE_MAX && s >= -SAFE_MAX) return s;
  }
  const big = BigInt(a) + BigInt(b);
  return big <= BigInt(SAFE_MAX) && big >= -BigInt(SAFE_MAX) ? Number(big) : big;
}

/** Exact comparison of two longs of either representation. */
function cmpLong(a: ExactLong, b: ExactLong): number {
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  const x = BigInt(a);
  const y = BigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

/** Adds finite `x` into the partials in place (Shewchuk's grow-expansion; exact). */
export function addPartial(partials: number[], x: number): void {
  let i = 0;
  for (let j = 0; j < partials.length; j++) {
    let y = partials[j] as number;
    if (Math.abs(x) < Math.abs(y)) {
      const t = x;
      x = y;
      y = t;
    }
    const hi = x + y;
    const lo = y - (hi - x);
    if (lo !== 0) partials[i++] = lo;
    x = hi;
  }
  // = `partials.length = i; partials.push(x)`: pop, not a length store, which is a runtime call.
  if (i < partials.length) {
    partials[i] = x;
    while (partials.length > i + 1) partials.pop();
  } else partials.push(x);
}

/**
 * Adds the doubles ints[i] / div, i in [i0, i1) (a decimal chunk's values), to `partials` exactly, or returns
 * false having added nothing.
 * A running sum plus one compensation term, each step's rounding error caught exactly by TwoSum: the pair
 * (sum, comp) is the exact total as long as adding each error to `comp` was itself exact, which is checked.
 * About 3× cheaper per point than addPartial; when a check fails (or the sum overflows), the caller adds the
 * values one by one.
 */
export function addScaledExactly(partials: number[], ints: Float64Array, div: number, i0: number, i1: number): boolean {
  let sum = 0;
  let comp = 0;
  for (let i = i0; i < i1; i++) {
    const v = (ints[i] as number) / div;
    const t = sum + v;
    const tv = t - sum;
    const err = sum - (t - tv) + (v - tv);
    sum = t;
    const c = comp + err;
    const ce = c - comp;
    if (comp - (c - ce) + (err - ce) !== 0) return false;
    comp = c;
  }
  // (sum, comp) may overlap; addPartial keeps the partials exact and non-overlapping whatever it is given.
  if (!Number.isFinite(sum)) return false;
  if (comp !== 0) addPartial(partials, comp);
  addPartial(partials, sum);
  return true;
}

/** The exact value of the partials rounded once to the nearest double, ties to even (math.fsum's last step). */
function roundPartials(p: readonly number[]): number {
  let n = p.length;
  if (n === 0) return 0;
  let hi = p[--n] as number;
  let lo = 0;
  while (n > 0) {
    const x = hi;
    const y = p[--n] as number;
    hi = x + y;
    const yr = hi - x;
    lo = y - yr;
    if (lo !== 0) break;
  }
  // Half-way case: the remaining partials decide the direction of rounding.
  if (n > 0 && ((lo < 0 && (p[n - 1] as number) < 0) || (lo > 0 && (p[n - 1] as number) > 0))) {
    const y = lo * 2;
    const x = hi + y;
    const yr = x - hi;
    if (y === yr) hi = x;
  }
  return hi;
}

/** Splits an exact long into doubles whose sum is exactly it (one piece while it is a safe integer). */
function longPieces(v: ExactLong): number[] {
  if (typeof v === 'number') return [v];
  const out: number[] = [];
  let rest = v;
  while (rest !== 0n) {
    const piece = Number(rest);
    out.push(piece);
    rest -= BigInt(piece);
  }
  return out;
}

/** The exact sum of every numeric value of the bucket, rounded once to a double. */
export function numericSum(agg: BucketAgg): number {
  // ±Infinity or NaN (true for NaN too) dominate any finite sum.
  if (agg.doubleSpecial !== 0) return agg.doubleSpecial;
  const partials = agg.doubleSum.slice();
  for (const piece of longPieces(agg.longSum)) addPartial(partials, piece);
  return roundPartials(partials);
}

/** Adds one point. `value` is not retained beyond first/last. */
export function addPoint(agg: BucketAgg, ts: EpochMs, value: KvValue): BucketAgg {
  agg.count++;
  switch (value.type) {
    case 'LONG': {
      const v = value.v;
      agg.longCount++;
      agg.longSum = addLong(agg.longSum, v);
      if (agg.longMin === undefined || cmpLong(v, agg.longMin) < 0) agg.longMin = v;
      if (agg.longMax === undefined || cmpLong(v, agg.longMax) > 0) agg.longMax = v;
      break;
    }
    case 'DOUBLE': {
      const v = value.v;
      agg.doubleCount++;
      if (Number.isFinite(v)) addPartial(agg.doubleSum, v);
      else agg.doubleSpecial += v;
      if (agg.doubleMin === undefined || v < agg.doubleMin) agg.doubleMin = v;
      if (agg.doubleMax === undefined || v > agg.doubleMax) agg.doubleMax = v;
      break;
    }
    case 'STRING': {
      const v = value.v;
      agg.stringCount++;
      if (agg.stringMin === undefined || v < agg.stringMin) agg.stringMin = v;
      if (agg.stringMax === undefined || v > agg.stringMax) agg.stringMax = v;
      break;
    }
    case 'BOOLEAN':
      agg.boolCount++;
      break;
    case 'JSON':
      agg.jsonCount++;
      break;
  }
  if (ts < agg.firstTs) {
    agg.firstTs = ts;
    agg.first = value;
  }
  if (ts >= agg.lastTs) {
    agg.lastTs = ts;
    agg.last = value;
  }
  return agg;
}

const minOf = <T>(a: T | undefined, b: T | undefined, less: (x: T, y: T) => boolean): T | undefined =>
  a === undefined ? b : b === undefined ? a : less(b, a) ? b : a;

/** A new state equal to having added the points of `a` and then those of `b`. Inputs are not modified. */
export function mergeAgg(a: BucketAgg, b: BucketAgg): BucketAgg {
  const doubleSum = a.doubleSum.slice();
  for (const p of b.doubleSum) addPartial(doubleSum, p);
  const lessLong = (x: ExactLong, y: ExactLong): boolean => cmpLong(x, y) < 0;
  const moreLong = (x: ExactLong, y: ExactLong): boolean => cmpLong(x, y) > 0;
  const less = <T>(x: T, y: T): boolean => x < y;
  const more = <T>(x: T, y: T): boolean => x > y;
  const firstFromB = b.firstTs < a.firstTs;
  const lastFromB = b.lastTs >= a.lastTs && b.last !== undefined;
  return {
    count: a.count + b.count,
    longCount: a.longCount + b.longCount,
    doubleCount: a.doubleCount + b.doubleCount,
    boolCount: a.boolCount + b.boolCount,
    stringCount: a.stringCount + b.stringCount,
    jsonCount: a.jsonCount + b.jsonCount,
    longSum: addLong(a.longSum, b.longSum),
    doubleSum,
    doubleSpecial: a.doubleSpecial + b.doubleSpecial,
    longMin: minOf(a.longMin, b.longMin, lessLong),
    longMax: minOf(a.longMax, b.longMax, moreLong),
    doubleMin: minOf(a.doubleMin, b.doubleMin, less),
    doubleMax: minOf(a.doubleMax, b.doubleMax, more),
    stringMin: minOf(a.stringMin, b.stringMin, less),
    stringMax: minOf(a.stringMax, b.stringMax, more),
    firstTs: firstFromB ? b.firstTs : a.firstTs,
    first: firstFromB ? b.first : a.first,
    lastTs: lastFromB ? b.lastTs : a.lastTs,
    last: lastFromB ? b.last : a.last,
  };
}

/**
 * Which fields of a state a merge maintains: 'all'; 'sums' (counts and sums: enough for COUNT, SUM, AVG);
 * 'extremes' (counts, min and max: enough for MIN, MAX, COUNT). The other fields of a partial merge's result
 * are meaningless.
 */
export type MergeFields = 'all' | 'sums' | 'extremes';

/** The fields `fn` finalizes from ('all' when the function is not known). */
export function fieldsFor(fn: AggFn | undefined): MergeFields {
  if (fn === undefined) return 'all';
  return fn === 'MIN' || fn === 'MAX' ? 'extremes' : 'sums';
}

/**
 * Merges `b` into `acc` in place (with 'all', the same result as `mergeAgg(acc, b)`, without a new state).
 * `b` is not modified and none of its arrays are shared with `acc`, so `b` may be a cached rollup bucket.
 */
export function mergeInto(acc: BucketAgg, b: BucketAgg, fields: MergeFields = 'all'): BucketAgg {
  acc.count += b.count;
  acc.longCount += b.longCount;
  acc.doubleCount += b.doubleCount;
  acc.boolCount += b.boolCount;
  acc.stringCount += b.stringCount;
  acc.jsonCount += b.jsonCount;
  if (fields !== 'extremes') {
    if (b.longSum !== 0) acc.longSum = addLong(acc.longSum, b.longSum);
    const ps = b.doubleSum;
    for (let j = 0; j < ps.length; j++) addPartial(acc.doubleSum, ps[j] as number);
    acc.doubleSpecial += b.doubleSpecial;
  }
  if (fields !== 'sums') {
    if (b.longMin !== undefined && (acc.longMin === undefined || cmpLong(b.longMin, acc.longMin) < 0))
      acc.longMin = b.longMin;
    if (b.longMax !== undefined && (acc.longMax === undefined || cmpLong(b.longMax, acc.longMax) > 0))
      acc.longMax = b.longMax;
    if (b.doubleMin !== undefined && (acc.doubleMin === undefined || b.doubleMin < acc.doubleMin))
      acc.doubleMin = b.doubleMin;
    if (b.doubleMax !== undefined && (acc.doubleMax === undefined || b.doubleMax > acc.doubleMax))
      acc.doubleMax = b.doubleMax;
    if (b.stringMin !== undefined && (acc.stringMin === undefined || b.stringMin < acc.stringMin))
      acc.stringMin = b.stringMin;
    if (b.stringMax !== undefined && (acc.stringMax === undefined || b.stringMax > acc.stringMax))
      acc.stringMax = b.stringMax;
  }
  if (fields === 'all') {
    if (b.firstTs < acc.firstTs) {
      acc.firstTs = b.firstTs;
      acc.first = b.first;
    }
    if (b.lastTs >= acc.lastTs && b.last !== undefined) {
      acc.lastTs = b.lastTs;
      acc.last = b.last;
    }
  }
  return acc;
}

/**
 * addPoint for a numeric value given as a number (a safe-integer LONG when `isLong`, else a DOUBLE), except
 * first/last, which the caller maintains (the raw-edge fast path: no KvValue per point).
 */
export function addNumber(agg: BucketAgg, v: number, isLong: boolean): void {
  agg.count++;
  if (isLong) {
    agg.longCount++;
    agg.longSum = addLong(agg.longSum, v);
    if (agg.longMin === undefined || cmpLong(v, agg.longMin) < 0) agg.longMin = v;
    if (agg.longMax === undefined || cmpLong(v, agg.longMax) > 0) agg.longMax = v;
    return;
  }
  agg.doubleCount++;
  if (Number.isFinite(v)) addPartial(agg.doubleSum, v);
  else agg.doubleSpecial += v;
  if (agg.doubleMin === undefined || v < agg.doubleMin) agg.doubleMin = v;
  if (agg.doubleMax === undefined || v > agg.doubleMax) agg.doubleMax = v;
}

/** Whether `fn` finalizes from counts and sums only, so `removePoint`/`removeNumber` may be applied. */
export function subtractable(fn: AggFn | undefined): boolean {
  return fn === 'COUNT' || fn === 'SUM' || fn === 'AVG';
}

/**
 * Takes one point back out of a state that holds it: exact for the counts and sums (the fields COUNT, SUM and
 * AVG finalize from), while min/max/first/last keep their old values and are no longer meaningful. The state
 * must have no non-finite double (`doubleSpecial === 0`). Lets the planner answer a piece of a rollup bucket
 * as the whole bucket minus the smaller rest.
 */
export function removePoint(agg: BucketAgg, value: KvValue): void {
  agg.count--;
  switch (value.type) {
    case 'LONG':
      agg.longCount--;
      agg.longSum = addLong(agg.longSum, -value.v);
      break;
    case 'DOUBLE':
      agg.doubleCount--;
      addPartial(agg.doubleSum, -value.v);
      break;
    case 'STRING':
      agg.stringCount--;
      break;
    case 'BOOLEAN':
      agg.boolCount--;
      break;
    case 'JSON':
      agg.jsonCount--;
      break;
  }
}

/**
 * Takes the points of `b` back out of `acc`, a state that holds them (see removePoint: counts and sums only;
 * `b.doubleSpecial` must be 0). `b` is not modified.
 */
export function removeAgg(acc: BucketAgg, b: BucketAgg): void {
  acc.count -= b.count;
  acc.longCount -= b.longCount;
  acc.doubleCount -= b.doubleCount;
  acc.boolCount -= b.boolCount;
  acc.stringCount -= b.stringCount;
  acc.jsonCount -= b.jsonCount;
  if (b.longSum !== 0) acc.longSum = addLong(acc.longSum, -b.longSum);
  const ps = b.doubleSum;
  for (let j = 0; j < ps.length; j++) addPartial(acc.doubleSum, -(ps[j] as number));
}

/** removePoint for a numeric value given as a number (see addNumber). */
export function removeNumber(agg: BucketAgg, v: number, isLong: boolean): void {
  agg.count--;
  if (isLong) {
    agg.longCount--;
    agg.longSum = addLong(agg.longSum, -v);
  } else {
    agg.doubleCount--;
    addPartial(agg.doubleSum, -v);
  }
}
