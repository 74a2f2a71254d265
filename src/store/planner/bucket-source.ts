/**
 * The aggregation seam: where the aggregated buckets of a history query come from. The default scans
 * raw points; the LMDB store answers from rollup tiers plus raw edges (planner.ts). query/history.ts finalizes
 * the states into TB values, so everything below it stays free of TB's result typing.
 */
import type { AggFn, BucketAgg } from '../rollups/aggregate.js';
import { addPoint, emptyAgg } from '../rollups/aggregate.js';
import { type BucketPlan, bucketIndexOf } from './buckets.js';
import type { TimeseriesStore } from '../series/interface.js';

/** One non-empty bucket of a series with the aggregate state of all its points. */
export interface BucketAggregate {
  /** bucket index in the plan */
  readonly index: number;
  readonly agg: BucketAgg;
}

/** Where aggregated buckets come from: raw points (default) or anything that merges equivalent states. */
export interface BucketSource {
  /**
   * The non-empty buckets of `plan` for one series, ascending by index, each holding exactly the points of
   * [bucket.start, bucket.end). Lazy: callers may stop early. `fn`, when given, is the only function the caller
   * will finalize the states with: a source may then return states exact for `fn` only (the planner answers
   * COUNT/SUM/AVG pieces as a rollup bucket minus the rest); without it, states must be exact for every function.
   */
  bucketAggs(entityId: string, key: string, plan: BucketPlan, fn?: AggFn): Iterable<BucketAggregate>;
}

/** The default BucketSource: one ascending scan of raw points over the plan's range. */
export class RawScanSource implements BucketSource {
  constructor(private readonly store: TimeseriesStore) {}

  *bucketAggs(entityId: string, key: string, plan: BucketPlan, _fn?: AggFn): IterableIterator<BucketAggregate> {
    if (plan.count === 0) return;
    let index = -1;
    let agg = emptyAgg();
    for (const p of this.store.range(entityId, key, { startTs: plan.startTs, endTs: plan.endTs, order: 'ASC' })) {
      const i = bucketIndexOf(plan, p.ts);
      if (i !== index) {
        if (index >= 0) yield { index, agg };
        index = i;
        agg = emptyAgg();
      }
      addPoint(agg, p.ts, p.value);
    }
    if (index >= 0) yield { index, agg };
  }
}

function isBucketSource(x: unknown): x is BucketSource {
  return typeof (x as Partial<BucketSource> | null)?.bucketAggs === 'function';
}

/** The store itself when it can answer buckets (e.g. from rollups), else a raw scan of it. */
export function bucketSourceOf(store: TimeseriesStore): BucketSource {
  return isBucketSource(store) ? store : new RawScanSource(store);
}
