/**
 * Bucket planning for aggregated history queries (docs/api.md).
 *
 * Buckets are anchored at startTs: bucket i is [startTs + i·interval, startTs + (i+1)·interval), the last one
 * cut at endTs; all bounds are inclusive start, exclusive end, in epoch ms. A bucket's point carries the
 * midpoint `start + floor((end - start) / 2)`. A plan is a description, never a materialised list, so a huge
 * `limit` costs nothing until points are found.
 */
import { OutpostError } from '../../errors.js';
import type { DurationMs, EpochMs } from '../../types.js';

export interface Bucket {
  /** inclusive */
  readonly start: EpochMs;
  /** exclusive */
  readonly end: EpochMs;
  /** the timestamp the aggregated point is reported at */
  readonly ts: EpochMs;
}

export interface BucketPlan {
  readonly startTs: EpochMs;
  /** exclusive end of the last planned bucket (≤ the query's endTs when `limit` cut the plan) */
  readonly endTs: EpochMs;
  /** > 0 */
  readonly interval: DurationMs;
  /** number of buckets in the plan (≥ 0) */
  readonly count: number;
}

export interface PlanOptions {
  /** explicit limit: keep the first `limit` buckets from startTs, and skip the maxIntervals check */
  readonly limit?: number | undefined;
  /** the most buckets a query without an explicit limit may span (config query.maxIntervals) */
  readonly maxIntervals: number;
}

/**
 * Plans [startTs, endTs) in `interval` ms buckets. Throws BAD_PARAM (400) when interval ≤ 0, endTs < startTs,
 * or, without an explicit limit, when the range spans more than maxIntervals buckets.
 * endTs == startTs is an empty range: zero buckets.
 */
export function planBuckets(startTs: EpochMs, endTs: EpochMs, interval: DurationMs, opts: PlanOptions): BucketPlan {
  if (!Number.isSafeInteger(interval) || interval <= 0) {
    throw new OutpostError('BAD_PARAM', `Invalid TsKvQuery: 'interval' must be greater than 0, but got ${interval}`);
  }
  if (endTs < startTs) {
    throw new OutpostError('BAD_PARAM', `Incorrect TsKvQuery: 'endTs' (${endTs}) is before 'startTs' (${startTs})`);
  }
  const span = endTs - startTs;
  const total = Math.ceil(span / interval);
  if (opts.limit === undefined && total > opts.maxIntervals) {
    throw new OutpostError(
      'BAD_PARAM',
      `Incorrect TsKvQuery. Number of intervals is to high - ${total}. Please increase 'interval' parameter for your query or reduce the time range of the query.`,
    );
  }
  const count = opts.limit === undefined ? total : Math.min(total, Math.max(0, opts.limit));
  const planEnd = count === total ? endTs : startTs + count * interval;
  return { startTs, endTs: planEnd, interval, count };
}

/** The index of the bucket holding `ts`; the caller guarantees plan.startTs ≤ ts < plan.endTs. */
export function bucketIndexOf(plan: BucketPlan, ts: EpochMs): number {
  return Math.floor((ts - plan.startTs) / plan.interval);
}

/** Bucket `i` of the plan (0 ≤ i < count), its end cut at plan.endTs. */
export function bucketAt(plan: BucketPlan, i: number): Bucket {
  const start = plan.startTs + i * plan.interval;
  const end = Math.min(start + plan.interval, plan.endTs);
  return { start, end, ts: start + Math.floor((end - start) / 2) };
}

/** Every bucket of the plan, ascending (for tests and small plans; queries iterate points instead). */
export function* bucketsOf(plan: BucketPlan): IterableIterator<Bucket> {
  for (let i = 0; i < plan.count; i++) yield bucketAt(plan, i);
}
