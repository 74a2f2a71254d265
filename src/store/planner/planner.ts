/**
 * The downsampling query planner (docs/design/downsampling.md): answers aggregated history from rollup tiers where whole tier
 * buckets fit inside the request's buckets, and from raw points only at the unaligned edges. It is the
 * `BucketSource` (bucket-source.ts) of the LMDB store, so every aggregated query goes through it.
 *
 * Exactness (docs/api.md): a request bucket [bs, be) is cut greedily, left to right, into pieces:
 *   - runs of tier-T buckets [c, c + m·T) with c aligned to T, inside [bs, be), not overlapping a dirty chunk
 *     window (one with head fragments, which rollups do not reflect yet), T retained at c: the coarsest such T;
 *   - otherwise raw points of [c, next finest-tier boundary) (or to the end of the dirty window).
 * Each piece's BucketAgg is merged; BucketAgg merges exactly, so the result equals aggregating the raw points.
 * A raw piece inside a finest-tier bucket B (TB anchors buckets at startTs, so every request-bucket
 * boundary splits one B) is read from B's rollup when it holds all or none of B's points, and, when the caller
 * finalizes with COUNT/SUM/AVG (`fn`) and the piece spans more than half of B, as B minus the raw points of the
 * rest: counts and exact sums subtract exactly. Merges keep only the fields `fn` finalizes from.
 *
 * COUNT/SUM/AVG take a shorter way first wherever no dirty window or horizon is near (`byBoundaries`): each
 * boundary of [bs, be) moves, one tier at a time, to an anchor on the grid of the coarsest tier no wider than the
 * interval; the tier buckets between the two anchors are merged, and what each boundary moved over (raw points,
 * then finer tier buckets) is added or taken out. A month of 2-h buckets then costs per bucket two 1-h merges,
 * at most three 10-min ones and a raw stretch of at most 5 minutes, the last two shared with the neighbouring
 * bucket.
 *
 * Below the raw horizon (chunks dropped by retention or the disk budget) raw pieces are answered from the
 * finest retained tier instead: a tier bucket that straddles a request-bucket boundary is counted whole in the
 * request bucket holding its start (the documented edge approximation; docs/design/downsampling.md).
 */
import type { AggFn } from '../rollups/aggregate.js';
import { type BucketAggregate, type BucketSource, RawScanSource } from './bucket-source.js';
import { type BucketPlan, bucketAt, bucketIndexOf } from './buckets.js';
import type { PlannedStore } from './planned-store.js';
import { SeriesReader } from './series-reader.js';
import { type PlanStats, noStats } from './stats.js';

export interface PlannerOptions {
  /**
   * false: COUNT/SUM/AVG buckets are cut piece by piece like the others, never by their boundaries (tests run
   * both ways, so the piece-by-piece path, which buckets near the head still take, is checked as hard)
   */
  readonly boundaries?: boolean;
}

export class RollupPlanner implements BucketSource {
  private readonly raw: RawScanSource;
  /** stats of the most recent bucketAggs call */
  lastStats: PlanStats = noStats();

  constructor(
    private readonly store: PlannedStore,
    private readonly opts: PlannerOptions = {},
  ) {
    this.raw = new RawScanSource(store);
  }

  /**
   * With `fn` COUNT, SUM or AVG, the states returned are exact for that function only (see `SeriesReader`);
   * without `fn`, for every function.
   */
  *bucketAggs(entityId: string, key: string, plan: BucketPlan, fn?: AggFn): IterableIterator<BucketAggregate> {
    if (plan.count === 0) return;
    const finest = this.store.tiers[0];
    // Buckets finer than the finest tier gain nothing from rollups: one raw scan is the cheapest exact answer.
    if (finest === undefined || plan.interval < finest.bucketMs) {
      yield* this.raw.bucketAggs(entityId, key, plan, fn);
      return;
    }
    const s = this.store.seriesOf(entityId, key);
    if (s === undefined) return;
    const reader = new SeriesReader(
      this.store,
      s.e,
      s.k,
      plan.startTs,
      plan.endTs,
      fn,
      this.opts.boundaries === false ? undefined : plan.interval,
    );
    this.lastStats = reader.stats;
    const extent = reader.extent();
    if (extent === undefined) return;
    const first = extent.lo <= plan.startTs ? 0 : bucketIndexOf(plan, extent.lo);
    const last =
      extent.hi >= plan.endTs ? plan.count - 1 : Math.min(plan.count - 1, bucketIndexOf(plan, extent.hi - 1));
    for (let i = first; i <= last; i++) {
      const b = bucketAt(plan, i);
      const agg = reader.aggregate(b.start, b.end);
      if (agg.count > 0) yield { index: i, agg };
    }
  }
}
