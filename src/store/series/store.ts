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
 * This class is a facade: it builds the parts, each of which owns its state and is handed only the other
 * parts it calls, and forwards the store's surface to them.
 *   read-cache.ts  ReadCache: decoded chunks and fragments, the holds while chunks or rollups may be committing
 *   compact.ts     Compactor: the series due for compaction, head fragments folded into chunks, its counters
 *   head.ts        HeadWriter: `putPoints`, the one place points become fragments; head seq, latest ts
 *   apply.ts       LogApplier: the write-ahead log, what it holds that LMDB does not, applies
 *   append.ts      GroupCommit: write(), the batch filling, its flush to the log or to LMDB, the commit delay
 *   read.ts        SeriesReader: latest values and ranges
 *   delete.ts      Deleter: range deletes, latest values dropped or rewritten
 * The seams it implements live apart: interface.ts (TimeseriesStore) and planner/planned-store.ts.
 */
import { DEFAULTS } from '../../config/index.js';
import type { TelemetryBatch } from '../../model/batch.js';
import type { TsKv } from '../../model/kv.js';
import type { TsRecord } from '../../model/record.js';
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import type { Dictionary } from '../encoding/dict.js';
import type { BlockColumns } from '../encoding/gorilla.js';
import type { StoreEnv } from '../env.js';
import { serveLogReaders } from '../log-readers.js';
import type { OutboxRecorder } from '../outbox.js';
import type { BucketAggregate, BucketSource } from '../planner/bucket-source.js';
import type { BucketPlan } from '../planner/buckets.js';
import type { PlannedStore } from '../planner/planned-store.js';
import { RollupPlanner } from '../planner/planner.js';
import type { AggFn } from '../rollups/aggregate.js';
import { RollupStore, type TierSpec, makeTiers } from '../rollups/store.js';
import type { WalStats } from '../wal.js';
import { GroupCommit } from './append.js';
import { LogApplier } from './apply.js';
import { type CachedChunk, type SeriesChunks, type WindowPoints, rawHorizonOf } from './chunks.js';
import { Compactor } from './compact.js';
import { Deleter } from './delete.js';
import { HeadWriter } from './head.js';
import type { DeleteRequest, RangeQuery, TimeseriesStore } from './interface.js';
import { type CompactionCounters, DEFAULT_STORE_OPTIONS, type StoreOptions } from './options.js';
import { ReadCache, readCacheBudgets } from './read-cache.js';
import { SeriesReader } from './read.js';

export class LmdbTimeseriesStore implements TimeseriesStore, BucketSource, PlannedStore {
  readonly windowMs: number;
  readonly headWindowMs: number;
  readonly tiers: readonly TierSpec[];
  readonly rollups: RollupStore;
  readonly counters: CompactionCounters;
  /** records each batch's fragments for upstream sync in the batch's own transaction (outbox.ts); unset: sync off */
  readonly outbox: OutboxRecorder | undefined;
  private readonly cache: ReadCache;
  private readonly compactor: Compactor;
  private readonly head: HeadWriter;
  /** the write-ahead log's applier, when writes are acknowledged from the log */
  private readonly log: LogApplier | undefined;
  private readonly commit: GroupCommit;
  private readonly reader: SeriesReader;
  private readonly deleter: Deleter;
  /** stops serving other processes' reads (log-readers.ts); set with the log */
  private readonly stopServingReaders: (() => void) | undefined;
  private planner: RollupPlanner | undefined;

  constructor(
    readonly env: StoreEnv,
    dict: Dictionary,
    opts: StoreOptions = DEFAULT_STORE_OPTIONS,
  ) {
    this.windowMs = opts.windowMs;
    this.headWindowMs = opts.headWindowMs;
    this.outbox = opts.outbox;
    this.tiers = makeTiers(opts.tiersMs, opts.tierRetentionMs, opts.windowMs);
    const budgets = readCacheBudgets(opts.readCacheBytes ?? DEFAULTS.query.readCacheBytes);
    this.rollups = new RollupStore(
      env,
      this.tiers,
      opts.windowMs,
      () => ({
        raw: this.rawHorizonTs,
        tiers: this.tiers.map((t) => this.tierHorizonTs(t.index)),
      }),
      budgets.rollup,
      () => this.cache.mayFill(),
    );
    const cache = new ReadCache(env, budgets, this.rollups);
    this.cache = cache;
    const compactor = new Compactor(env, opts.windowMs, opts.headWindowMs, this.rollups, cache);
    this.compactor = compactor;
    this.counters = compactor.counters;
    const head = new HeadWriter(env, dict, opts.windowMs, opts.outbox, (e, k, firstTs) =>
      compactor.noteHeadFragment(e, k, firstTs),
    );
    this.head = head;
    const log =
      opts.wal === undefined
        ? undefined
        : new LogApplier(env, opts.wal, opts.outbox, head, opts.pacer, () => cache.inWriteTransaction);
    this.log = log;
    this.commit = new GroupCommit(env, head, log, opts.outbox, opts.commitDelayMs ?? 0, opts.pacer);
    const applyLogged = (): void => log?.applyLogged();
    this.reader = new SeriesReader(env, dict, opts.windowMs, applyLogged);
    this.deleter = new Deleter(env, dict, opts.windowMs, opts.stepBudgetMs ?? DEFAULTS.downsample.stepBudgetMs, {
      cache,
      rollups: this.rollups,
      head,
      flushPending: () => this.commit.flushPending(),
      log,
      seriesRange: (e, k, q) => this.reader.seriesRange(e, k, q),
    });
    if (log !== undefined) {
      // Recovery: what was acknowledged from the log but is not in LMDB goes in now, through the same apply path.
      log.applyLogged();
      this.stopServingReaders = serveLogReaders(env, applyLogged);
    }
  }

  // ---- writes: group commit (append.ts), the log (apply.ts), deletes (delete.ts)

  /** TimeseriesStore.write: queued for this turn's group commit; resolves once durable (GroupCommit.write). */
  write(entityId: string, points: TelemetryBatch | readonly TsRecord[]): Promise<void> {
    return this.commit.write(entityId, points);
  }

  /** Writes every queued point now (to the log, or to LMDB). */
  flushPending(): void {
    this.commit.flushPending();
  }

  /** performance.now() of the latest write() call: background work yields to foreground writes */
  get lastWriteAt(): number {
    return this.commit.lastWriteAt;
  }

  delete(entityId: string, req: DeleteRequest): Promise<void> {
    return this.deleter.delete(entityId, req);
  }

  /** Puts what the log holds into LMDB, unless a write transaction of the store's is open (LogApplier). */
  applyLogged(): void {
    this.log?.applyLogged();
  }

  /** Resolves once every group commit logged so far has its record on disk (or failed). */
  logIdle(): Promise<void> {
    return this.log?.logIdle() ?? Promise.resolve();
  }

  /** Sync sent these devices' points of these log records upstream (LogApplier.noteSent). */
  noteSent(pairs: ReadonlyArray<readonly [lsn: number, entityId: string]>): void {
    this.log?.noteSent(pairs);
  }

  /** Closes the log after putting what it holds into LMDB (what is left is replayed at the next start). */
  async closeLog(): Promise<void> {
    const log = this.log;
    if (log === undefined) return;
    this.stopServingReaders?.();
    this.commit.flushPending();
    await log.logIdle();
    log.applyLogged();
    await log.close();
  }

  /** Points put into LMDB since start, and points logged but not yet put: the write budget's cost per point. */
  get pointCounts(): { readonly put: number; readonly logged: number } {
    return { put: this.head.pointsPutSinceStart, logged: this.log?.pointsLogged ?? 0 };
  }

  /** What the log held at open that LMDB did not (acknowledged, not yet applied): put in at start. */
  get replayed(): { readonly records: number; readonly points: number } {
    return this.log?.replayed ?? { records: 0, points: 0 };
  }

  /** What the log has cost since start (undefined without a log). */
  get walStats(): WalStats | undefined {
    return this.log?.stats;
  }

  // ---- reads (read.ts), and what the planner reads through (read-cache.ts)

  latest(entityId: string, keys?: readonly string[]): Map<string, TsKv> {
    return this.reader.latest(entityId, keys);
  }

  keys(entityId: string): string[] {
    return [...this.latest(entityId).keys()].sort();
  }

  range(entityId: string, key: string, q: RangeQuery): IterableIterator<TsKv> {
    return this.reader.range(entityId, key, q);
  }

  seriesRange(e: EntityIdx, k: KeyIdx, q: RangeQuery): IterableIterator<TsKv> {
    return this.reader.seriesRange(e, k, q);
  }

  seriesOf(entityId: string, key: string): { e: EntityIdx; k: KeyIdx } | undefined {
    return this.reader.seriesOf(entityId, key);
  }

  entityIdx(entityId: string): EntityIdx | undefined {
    return this.reader.entityIdx(entityId);
  }

  windowsOf(e: EntityIdx, k: KeyIdx, fromTs: number, toTs: number): IterableIterator<WindowPoints> {
    return this.reader.windowsOf(e, k, fromTs, toTs);
  }

  seriesChunks(e: EntityIdx, k: KeyIdx): SeriesChunks {
    return this.cache.seriesChunks(e, k);
  }

  chunk(e: EntityIdx, k: KeyIdx, w: number, chunks?: SeriesChunks): CachedChunk | undefined {
    return this.cache.chunk(e, k, w, chunks);
  }

  chunkColumns(e: EntityIdx, k: KeyIdx, w: number, c: CachedChunk, upTo: number, chunks?: SeriesChunks): BlockColumns {
    return this.cache.chunkColumns(e, k, w, c, upTo, chunks);
  }

  fragmentColumns(key: Buffer): BlockColumns | undefined {
    return this.cache.fragmentColumns(key);
  }

  /** Accounted bytes of the decoded chunks, head fragments and rollup blocks held for readers, and budgets. */
  readCacheUsage(): ReturnType<ReadCache['usage']> {
    return this.cache.usage();
  }

  /** Runs `fn` in a write transaction that may change chunks or rollups (ReadCache.writeChunks). */
  writeChunks<T>(fn: () => T): Promise<T> {
    return this.cache.writeChunks(fn);
  }

  /** Drops the decoded chunks, head fragments and rollup blocks readers share. */
  clearReadCaches(): void {
    this.cache.clear();
  }

  /**
   * BucketSource (planner/bucket-source.ts seam): aggregated history answered from rollup tiers plus raw edges,
   * exactly (planner/planner.ts).
   */
  bucketAggs(entityId: string, key: string, plan: BucketPlan, fn?: AggFn): Iterable<BucketAggregate> {
    this.applyLogged();
    this.planner ??= new RollupPlanner(this);
    return this.planner.bucketAggs(entityId, key, plan, fn);
  }

  // ---- compaction (compact.ts), retention's reference and horizons

  /** One bounded compaction step (Compactor.compactStep). */
  compactStep(now: number, budgetMs: number): Promise<{ compacted: number; more: boolean; wallMs: number }> {
    return this.compactor.compactStep(now, budgetMs);
  }

  /** The newest ts ever written to any series: retention's reference (HeadWriter.newestTs). */
  newestTs(): number {
    return this.head.newestTs();
  }

  /** Forgets what is kept in memory of entity `e` (its data has been purged). */
  forgetEntity(e: EntityIdx): void {
    this.head.forgetEntity(e);
    this.compactor.forgetEntity(e);
  }

  /**
   * Raw chunks of windows starting before this ts were dropped by retention (meta `rawHorizonTs`);
   * answers there come from rollups. Number.MIN_SAFE_INTEGER = nothing dropped.
   */
  get rawHorizonTs(): number {
    return rawHorizonOf(this.env);
  }

  /** Per tier, the ts before which its rollup blocks were dropped (meta `tierHorizonTs`). */
  tierHorizonTs(tier: number): number {
    return this.tierHorizonsTs()[tier] ?? Number.MIN_SAFE_INTEGER;
  }

  /** tierHorizonTs of every tier (by index), in one read. */
  tierHorizonsTs(): number[] {
    const all = this.env.meta.get('tierHorizonTs') as number[] | undefined;
    return this.tiers.map((t) => all?.[t.index] ?? Number.MIN_SAFE_INTEGER);
  }
}
