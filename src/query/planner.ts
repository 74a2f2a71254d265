/**
 * The downsampling query planner (issue 6 §2): answers aggregated history from rollup tiers where whole tier
 * buckets fit inside the request's buckets, and from raw points only at the unaligned edges. It is the
 * `BucketSource` of history.ts for the LMDB store, so every aggregated query goes through it.
 *
 * Exactness (CONTRACT §5): a request bucket [bs, be) is cut greedily, left to right, into pieces:
 *   - runs of tier-T buckets [c, c + m·T) with c aligned to T, inside [bs, be), not overlapping a dirty chunk
 *     window (one with head fragments, which rollups do not reflect yet), T retained at c: the coarsest such T;
 *   - otherwise raw points of [c, next finest-tier boundary) (or to the end of the dirty window).
 * Each piece's BucketAgg is merged; BucketAgg merges exactly, so the result equals aggregating the raw points.
 *
 * Below the raw horizon (chunks dropped by retention or the disk budget) raw pieces are answered from the
 * finest retained tier instead: a tier bucket that straddles a request-bucket boundary is counted whole in the
 * request bucket holding its start (the documented edge approximation; README "Downsampling").
 */
import type { TsKv } from '../model/kv.js';
import { windowKey, windowStart } from '../store/chunks.js';
import type { EntityIdx, KeyIdx } from '../store/codec.js';
import { readOrderedI64 } from '../store/codec.js';
import { BlockCursor } from '../store/gorilla.js';
import { type RollupBucket, type TierSpec, rollupKey } from '../store/rollups.js';
import type { LmdbTimeseriesStore } from '../store/timeseries.js';
import { type BucketAgg, addPoint, emptyAgg, mergeAgg } from './aggregate.js';
import { type BucketPlan, bucketAt, bucketIndexOf } from './buckets.js';
import { type BucketAggregate, type BucketSource, RawScanSource } from './history.js';

/** What one query did (tests and the benchmark look at it). */
export interface PlanStats {
  rollupBuckets: number;
  rawPoints: number;
  rawPieces: number;
}

export class RollupPlanner implements BucketSource {
  private readonly raw: RawScanSource;
  /** stats of the most recent bucketAggs call */
  lastStats: PlanStats = { rollupBuckets: 0, rawPoints: 0, rawPieces: 0 };

  constructor(private readonly store: LmdbTimeseriesStore) {
    this.raw = new RawScanSource(store);
  }

  *bucketAggs(entityId: string, key: string, plan: BucketPlan): IterableIterator<BucketAggregate> {
    if (plan.count === 0) return;
    const finest = this.store.tiers[0];
    // Buckets finer than the finest tier gain nothing from rollups: one raw scan is the cheapest exact answer.
    if (finest === undefined || plan.interval < finest.bucketMs) {
      yield* this.raw.bucketAggs(entityId, key, plan);
      return;
    }
    const s = this.store.seriesOf(entityId, key);
    if (s === undefined) return;
    const reader = new SeriesReader(this.store, s.e, s.k, plan.startTs, plan.endTs);
    this.lastStats = reader.stats;
    const extent = reader.extent();
    if (extent === undefined) return;
    const first = extent.lo <= plan.startTs ? 0 : bucketIndexOf(plan, extent.lo);
    const last = extent.hi >= plan.endTs ? plan.count - 1 : Math.min(plan.count - 1, bucketIndexOf(plan, extent.hi - 1));
    for (let i = first; i <= last; i++) {
      const b = bucketAt(plan, i);
      const agg = reader.aggregate(b.start, b.end);
      if (agg !== undefined && agg.count > 0) yield { index: i, agg };
    }
  }
}

/** Per-query access to one series: dirty windows, cached rollup blocks and chunk buffers. */
class SeriesReader {
  readonly stats: PlanStats = { rollupBuckets: 0, rawPoints: 0, rawPieces: 0 };
  private readonly W: number;
  private readonly tiers: readonly TierSpec[];
  private readonly rawHorizon: number;
  private readonly tierHorizon: number[];
  /** ascending starts of windows with head fragments in the query range */
  private readonly dirty: number[] = [];
  private dirtyPos = 0;
  private readonly blockCache = new Map<number, { start: number; buckets: readonly RollupBucket[] }>();
  private chunkCache: { w: number; cursor: BlockCursor | undefined } | undefined;
  private dirtyCache: { w: number; points: TsKv[] } | undefined;

  constructor(private readonly store: LmdbTimeseriesStore, private readonly e: EntityIdx, private readonly k: KeyIdx,
    private readonly startTs: number, private readonly endTs: number) {
    this.W = store.windowMs;
    this.tiers = store.tiers;
    this.rawHorizon = store.rawHorizonTs;
    this.tierHorizon = this.tiers.map((t) => store.tierHorizonTs(t.index));
    const lo = windowStart(startTs, this.W);
    for (const key of store.env.head.getKeys({ start: windowKey(e, k, lo), end: windowKey(e, k, endTs) })) {
      const w = windowStart(readOrderedI64(key as Buffer, 8), this.W);
      if (this.dirty[this.dirty.length - 1] !== w) this.dirty.push(w);
    }
  }

  /** [lo, hi) covering every stored datum of the series in the query range, window/block granular. */
  extent(): { lo: number; hi: number } | undefined {
    const { env } = this.store;
    let lo = Infinity;
    let hi = -Infinity;
    // `tsOff` is also the length of the series prefix: a reverse range ending at the bare prefix (exclusive)
    // includes `from` itself.
    const scan = (db: typeof env.chunks, from: Buffer, to: Buffer, tsOff: number, span: number): void => {
      for (const key of db.getKeys({ start: from, end: to, limit: 1 })) lo = Math.min(lo, readOrderedI64(key as Buffer, tsOff));
      for (const key of db.getKeys({ start: to, end: from.subarray(0, tsOff), reverse: true, limit: 1 })) hi = Math.max(hi, readOrderedI64(key as Buffer, tsOff) + span);
    };
    const w0 = windowStart(this.startTs, this.W);
    scan(env.chunks, windowKey(this.e, this.k, w0), windowKey(this.e, this.k, this.endTs), 8, this.W);
    if (this.dirty.length > 0) {
      lo = Math.min(lo, this.dirty[0] as number);
      hi = Math.max(hi, (this.dirty[this.dirty.length - 1] as number) + this.W);
    }
    for (const t of this.tiers) {
      const b0 = windowStart(this.startTs, t.blockMs);
      scan(env.rollups, rollupKey(t.index, this.e, this.k, b0), rollupKey(t.index, this.e, this.k, this.endTs), 9, t.blockMs);
    }
    return lo < hi ? { lo, hi } : undefined;
  }

  /** The first dirty window that ends after `c` (the pointer only moves forward: pieces are visited in order). */
  private nextDirty(c: number): number | undefined {
    while (this.dirtyPos < this.dirty.length && (this.dirty[this.dirtyPos] as number) + this.W <= c) this.dirtyPos++;
    return this.dirty[this.dirtyPos];
  }

  /** The merged state of every point in [bs, be), or undefined when there is none. */
  aggregate(bs: number, be: number): BucketAgg | undefined {
    let agg: BucketAgg | undefined;
    // mergeAgg returns a new state: cached rollup buckets are never modified, not even by the caller.
    const merge = (x: BucketAgg): void => { agg = mergeAgg(agg ?? emptyAgg(), x); };
    let c = bs;
    while (c < be) {
      const d = this.nextDirty(c);
      const inDirty = d !== undefined && d <= c;
      let next: number | undefined;
      if (!inDirty) {
        for (let ti = this.tiers.length - 1; ti >= 0; ti--) {
          const tier = this.tiers[ti] as TierSpec;
          const T = tier.bucketMs;
          if (c < (this.tierHorizon[ti] as number) || ((c % T) + T) % T !== 0 || c + T > be) continue;
          let end = c + Math.floor((be - c) / T) * T;
          if (d !== undefined) end = Math.min(end, windowStart(d, T));
          // Stop where the next coarser tier aligns, so it takes over from there.
          const coarser = this.tiers[ti + 1];
          if (coarser !== undefined) end = Math.min(end, windowStart(c, coarser.bucketMs) + coarser.bucketMs);
          if (end <= c) continue;
          this.tierBuckets(tier, c, end, merge);
          next = end;
          break;
        }
      }
      if (next === undefined) {
        const finest = this.tiers[0] as TierSpec;
        let end = inDirty ? (d as number) + this.W : windowStart(c, finest.bucketMs) + finest.bucketMs;
        end = Math.min(end, be, windowStart(c, this.W) + this.W);
        if (c < this.rawHorizon && !inDirty) this.approximate(c, end, merge);
        else this.rawPiece(c, end, inDirty, merge);
        next = end;
      }
      c = next;
    }
    return agg;
  }

  /** Raw points of [from, to), all inside one chunk window. Pieces arrive in ascending order. */
  private rawPiece(from: number, to: number, dirty: boolean, merge: (a: BucketAgg) => void): void {
    const w = windowStart(from, this.W);
    const agg = emptyAgg();
    if (dirty) {
      if (this.dirtyCache?.w !== w) {
        let points: TsKv[] = [];
        for (const win of this.store.windowsOf(this.e, this.k, w, w + this.W)) points = win.points;
        this.dirtyCache = { w, points };
      }
      for (const p of this.dirtyCache.points) if (p.ts >= from && p.ts < to) addPoint(agg, p.ts, p.value);
    } else {
      if (this.chunkCache?.w !== w) {
        const block = this.store.env.chunks.get(windowKey(this.e, this.k, w));
        this.chunkCache = { w, cursor: block === undefined ? undefined : new BlockCursor(block) };
      }
      this.chunkCache.cursor?.forEachIn(from, to, (ts, v) => addPoint(agg, ts, v));
    }
    this.stats.rawPieces++;
    if (agg.count === 0) return;
    this.stats.rawPoints += agg.count;
    merge(agg);
  }

  /** Below the raw horizon: the finest retained tier's buckets whose start lies in [from, to). */
  private approximate(from: number, to: number, merge: (a: BucketAgg) => void): void {
    for (let ti = 0; ti < this.tiers.length; ti++) {
      if (from >= (this.tierHorizon[ti] as number)) {
        this.tierBuckets(this.tiers[ti] as TierSpec, from, to, merge);
        return;
      }
    }
  }

  /** Merges the tier's buckets with start in [from, to). */
  private tierBuckets(tier: TierSpec, from: number, to: number, merge: (a: BucketAgg) => void): void {
    for (let b = windowStart(from, tier.blockMs); b < to; b += tier.blockMs) {
      const buckets = this.block(tier, b);
      let i = lowerBound(buckets, from);
      for (; i < buckets.length && (buckets[i] as RollupBucket).start < to; i++) {
        merge((buckets[i] as RollupBucket).agg);
        this.stats.rollupBuckets++;
      }
    }
  }

  private block(tier: TierSpec, blockStart: number): readonly RollupBucket[] {
    const cached = this.blockCache.get(tier.index);
    if (cached?.start === blockStart) return cached.buckets;
    const buckets = this.store.rollups.readBlock(tier, this.e, this.k, blockStart);
    this.blockCache.set(tier.index, { start: blockStart, buckets });
    return buckets;
  }
}

function lowerBound(buckets: readonly RollupBucket[], ts: number): number {
  let lo = 0;
  let hi = buckets.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((buckets[mid] as RollupBucket).start < ts) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
