/**
 * The LMDB timeseries store. The semantics of docs/api.md live here: same (entity, key, ts) overwrites (the later
 * write wins); "latest" follows the newest ts and an older point never replaces it; ranges are [startTs, endTs).
 *
 * Layout (see chunks.ts): a write puts one compressed head fragment per (series, chunk window) it touches, so a
 * TB array of 1,000 `{ts, values}` costs a handful of puts, not one per point. Compaction (`compactStep`,
 * driven by the DownsampleEngine in background/downsample.ts) folds fragments of windows older than
 * `headWindowMs` into one compressed chunk per window and rebuilds that window's rollups (rollups/store.ts) in the
 * same transaction. Reads stream: each window's chunk and fragments are decoded into reused columns and merged
 * point by point (no window-sized arrays of point objects).
 *
 * Write path (group commit): a request's puts are all issued in one synchronous turn, so lmdb-js puts them in
 * the same transaction as every other request of that turn; the request is acknowledged after that
 * transaction is committed *and* flushed. No fsync per request, and no request is half-stored.
 *
 * One store, one state, a file per concern. Each file is a layer of the class and uses only the layers below it:
 *   state.ts    every field, grouped by owner, and the helpers several layers use (seq, latest ts, horizons)
 *   apply.ts    log apply: logged group commits into LMDB (`putPoints`: the one place points become fragments)
 *   append.ts   write() and group commit: the batch filling, its flush to the log or to LMDB, the commit delay
 *   read.ts     latest, ranges, and the decoded-chunk and fragment caches readers share
 *   compact.ts  head fragments folded into chunks, rollups rebuilt
 *   delete.ts   range deletes, latest values dropped or rewritten
 *   store.ts    this class: recovery at start, close, and the planner as the store's BucketSource
 * The seams it implements live apart: interface.ts (TimeseriesStore) and planner/planned-store.ts.
 */
import type { AggFn } from '../rollups/aggregate.js';
import type { Dictionary } from '../encoding/dict.js';
import type { StoreEnv } from '../env.js';
import { serveLogReaders } from '../log-readers.js';
import type { BucketAggregate, BucketSource } from '../planner/bucket-source.js';
import type { BucketPlan } from '../planner/buckets.js';
import type { PlannedStore } from '../planner/planned-store.js';
import { RollupPlanner } from '../planner/planner.js';
import { SeriesDelete } from './delete.js';
import type { TimeseriesStore } from './interface.js';
import { DEFAULT_STORE_OPTIONS, type StoreOptions } from './options.js';

export class LmdbTimeseriesStore extends SeriesDelete implements TimeseriesStore, BucketSource, PlannedStore {
  constructor(env: StoreEnv, dict: Dictionary, opts: StoreOptions = DEFAULT_STORE_OPTIONS) {
    super(env, dict, opts);
    if (this.wal !== undefined) {
      // Recovery: what was acknowledged from the log but is not in LMDB goes in now, through the same apply path.
      this.applyLogged();
      this.stopServingReaders = serveLogReaders(env, () => this.applyLogged());
    }
  }

  /** Closes the log after putting what it holds into LMDB (what is left is replayed at the next start). */
  async closeLog(): Promise<void> {
    if (this.wal === undefined) return;
    this.stopServingReaders?.();
    this.flushPending();
    await this.logIdle();
    this.applyLogged();
    clearTimeout(this.applyTimer);
    this.applyTimer = undefined;
    await this.env.flushed();
    await this.wal.close();
  }

  /**
   * BucketSource (planner/bucket-source.ts seam): aggregated history answered from rollup tiers plus raw edges, exactly
   * (planner/planner.ts).
   */
  bucketAggs(entityId: string, key: string, plan: BucketPlan, fn?: AggFn): Iterable<BucketAggregate> {
    this.applyLogged();
    this.planner ??= new RollupPlanner(this);
    return this.planner.bucketAggs(entityId, key, plan, fn);
  }
}
