/**
 * The timeseries store. CONTRACT §5 semantics live here: same (entity, key, ts) overwrites (the later write
 * wins); "latest" follows the newest ts and an older point never replaces it; ranges are [startTs, endTs).
 *
 * Layout (issue 6, see chunks.ts): a write puts one compressed head fragment per (series, chunk window) it
 * touches, so a TB array of 1,000 `{ts, values}` costs a handful of puts, not one per point. Compaction
 * (`compactStep`, driven by the DownsampleEngine in retention.ts) folds fragments of windows older than
 * `headWindowMs` into one compressed chunk per window and rebuilds that window's rollups (rollups.ts) in the
 * same transaction. Reads stream: each window's chunk and fragments are decoded into reused columns and merged
 * point by point (issue 7: no window-sized arrays of point objects).
 *
 * Write path (group commit): a request's puts are all issued in one synchronous turn, so lmdb-js puts them in
 * the same transaction as every other request of that turn; the request is acknowledged after that
 * transaction is committed *and* flushed. No fsync per request, and no request is half-stored.
 */
import { performance } from 'node:perf_hooks';
import { DEFAULTS } from '../config/index.js';
import type { TsKv } from '../model/kv.js';
import type { TsRecord } from '../ingest/payload.js';
import { SeriesColumn, TelemetryBatch } from '../model/batch.js';
import type { EntityIdx, KeyIdx } from './codec.js';
import { decodeStamped, encodeStamped, entityPrefix, prefixEnd, readOrderedI64, seriesKey } from './codec.js';
import {
  type SeriesChunks, type WindowPoints, fragKey, fragmentPoints, headFragments, mergeWindow, rawHorizonOf, seriesPoints, seriesWindows, windowKey, windowStart,
} from './chunks.js';
import type { Dictionary } from './dict.js';
import { type StoreEnv, writeFailure } from './env.js';
import type { OutpostError } from '../errors.js';
import { ByteLru } from './lru.js';
import { BlockColumns, blockCount, decodePoints, encodeColumn, encodePoints } from './gorilla.js';
import { RollupStore, type TierSpec, makeTiers } from './rollups.js';
import type { AggFn } from './aggregate.js';
import type { BucketAggregate, BucketSource } from './bucket-source.js';
import type { BucketPlan } from './buckets.js';
import { type PlannedStore, RollupPlanner } from './planner.js';
import type { OutboxRecorder } from './outbox.js';
import { serveLogReaders } from './log-readers.js';
import type { CommitPacer } from './write-budget.js';
import { type PendingPoints, Wal, type WalFs, type WalStats, decodeRecord, encodePoints as encodeLogged, encodeSentMark } from './wal.js';

export type Order = 'ASC' | 'DESC';

export interface RangeQuery {
  readonly startTs: number;
  /** exclusive */
  readonly endTs: number;
  readonly order: Order;
  readonly limit?: number;
}

export interface DeleteRequest {
  readonly keys: readonly string[];
  readonly startTs: number;
  /** exclusive */
  readonly endTs: number;
  /** remove the latest value when it lies in the range (TB default true) */
  readonly deleteLatest: boolean;
  /** after removing the latest value, promote the newest remaining point (TB default false) */
  readonly rewriteLatest: boolean;
}

/** The storage seam the query layer, websocket and downloads read through (STYLE §2). */
export interface TimeseriesStore {
  /**
   * Stores every point for one entity; resolves once they are on disk. Records (TB's shape) are converted to
   * the columnar batch the ingest path parses into.
   */
  write(entityId: string, points: TelemetryBatch | readonly TsRecord[]): Promise<void>;
  /** Latest value per key; all keys of the entity when `keys` is undefined. Missing keys are absent. */
  latest(entityId: string, keys?: readonly string[]): Map<string, TsKv>;
  /** Timeseries keys that have a latest value, sorted. */
  keys(entityId: string): string[];
  /** Raw points of one key in [startTs, endTs), in `order`, at most `limit`. Lazy: reads window by window. */
  range(entityId: string, key: string, q: RangeQuery): IterableIterator<TsKv>;
  /** Deletes points of `keys` in [startTs, endTs). Resolves once durable. */
  delete(entityId: string, req: DeleteRequest): Promise<void>;
}

export interface StoreOptions {
  /** ms; chunk window (config store.chunkWindowMs) */
  readonly windowMs: number;
  /** ms; fragments of windows ending more than this before `now` are compacted (config store.headWindowMs) */
  readonly headWindowMs: number;
  readonly tiersMs: readonly number[];
  readonly tierRetentionMs: readonly number[];
  /** bytes for decoded rollup blocks and chunks kept for readers (config query.readCacheBytes) */
  readonly readCacheBytes?: number;
  /** ms one transaction of a delete may run before yielding the event loop (config downsample.stepBudgetMs) */
  readonly stepBudgetMs?: number;
  /** ms a write may wait for others to share its commit; 0: the next event-loop turn (config store.commitDelayMs) */
  readonly commitDelayMs?: number;
  /** decides the commit delay instead of commitDelayMs (write-budget.ts) */
  readonly pacer?: CommitPacer;
  /** the write-ahead log (wal.ts); absent: a write is acknowledged once its LMDB commit is flushed */
  readonly wal?: LogOptions;
  /**
   * upstream sync's bookkeeping (outbox.ts), when sync is on: given here, not set later, because the log's
   * replay at start records what is left to send too
   */
  readonly outbox?: OutboxRecorder;
}

export interface LogOptions {
  readonly fs: WalFs;
  /** bytes per log segment */
  readonly segmentBytes: number;
  /** ms; logged points are put into LMDB at least this often (config store.applyIntervalMs) */
  readonly applyIntervalMs: number;
  /** logged points not yet in LMDB that make an apply happen before applyIntervalMs */
  readonly applyMaxPoints: number;
}

/** A logged group commit not yet in LMDB. */
interface Logged {
  readonly points: PendingPoints;
  readonly lsn: number;
  readonly count: number;
  /** its record is on disk (only durable ones are applied: their LSN must never be reused) */
  durable: boolean;
  readonly done: Promise<void>;
}

export const DEFAULT_STORE_OPTIONS: StoreOptions = {
  windowMs: DEFAULTS.store.chunkWindowMs,
  headWindowMs: DEFAULTS.store.headWindowMs,
  tiersMs: DEFAULTS.downsample.tiersMs,
  tierRetentionMs: DEFAULTS.downsample.tierRetentionMs,
};

/** Counters since start (issue 6 §4: for the status/metrics endpoints). */
export interface CompactionCounters {
  /** windows folded into chunks */
  compactedWindows: number;
  /** head fragments consumed by compaction */
  compactedFragments: number;
  /** late points that arrived for windows whose raw data retention had already dropped (not stored) */
  droppedLatePoints: number;
  /** points older than the raw horizon when compacted: kept in rollups only (a backfill beyond retention) */
  rollupOnlyPoints: number;
}

/**
 * Approximate bytes of a decoded chunk (BlockColumns, its typed arrays and its own copy of the block; ~1.4 KB
 * measured for 120 points of 10-s data) besides 16 per point: the chunk and fragment caches' accounting unit.
 */
const DECODED_CHUNK_BYTES = 512;
const DECODED_POINT_BYTES = 16;

/**
 * The value under `key` in a buffer of its own and of exactly its size, for a cache to keep: lmdb-js'
 * getBinaryFast hands out its shared read buffer, and getBinary's copies hold ~4 KB each.
 */
function readOwnCopy(db: StoreEnv['head'], key: Buffer): Buffer | undefined {
  const fast = db.getBinaryFast(key);
  if (fast === undefined) return undefined;
  const own = Buffer.allocUnsafeSlow(fast.length);
  own.set(new Uint8Array(fast.buffer, fast.byteOffset, fast.length));
  return own;
}


const chunkBytes = (cols: BlockColumns | null): number => DECODED_CHUNK_BYTES + (cols === null ? 0 : cols.count * DECODED_POINT_BYTES);

function countPoints(points: PendingPoints): number {
  let n = 0;
  for (const bySeries of points.values()) for (const cols of bySeries.values()) for (const c of cols) n += c.length;
  return n;
}

/** the least writes a batch holds before it may be written early (batchFull) */
const EARLY_FLUSH_WRITES = 8;
/** points in a batch that are written at once: ~4 KiB of log record, a page (msgpack ~16 bytes a point) */
const EARLY_FLUSH_POINTS = 256;
/**
 * points from which a batch bypasses the log for an LMDB commit of its own: ~50 KB of copied pages is then
 * ≤ 25 bytes a point, and the commit runs on lmdb-js' writer thread (bulk ingest: 1,000-timestamp bodies)
 */
const BULK_POINTS = 2000;

/** Head sequence numbers are reserved in blocks so a restart never reuses one (meta key `headSeq`). */
const SEQ_RESERVATION = 1_000_000;

export class LmdbTimeseriesStore implements TimeseriesStore, BucketSource, PlannedStore {
  /**
   * entity UUID → key → the columns written to it, in call order, waiting for this turn's flush. Bounded by
   * the requests in flight: each caller awaits the batch, and bodies are capped (http.maxBodyBytes).
   */
  private pending = new Map<string, Map<string, SeriesColumn[]>>();
  private pendingDone: Promise<void> | undefined;
  private settlePending: { resolve: () => void; reject: (err: unknown) => void } | undefined;
  /** a flushed batch whose transaction has not committed yet */
  private committing = false;
  /** performance.now() of the first write of the batch filling */
  private pendingSince = 0;
  /** points in `pending` */
  private pendingPoints = 0;
  /** write() calls in `pending`, and in the last batch flushed */
  private pendingWrites = 0;
  private lastBatchWrites = 0;
  /** points of the batch being flushed (set by flushPending) */
  private lastBatchPoints = 0;
  /** latest ts per series, so concurrent writes in one batch never let an older point win */
  private readonly latestTs = new Map<EntityIdx, Map<KeyIdx, number>>();
  readonly windowMs: number;
  readonly headWindowMs: number;
  private readonly stepBudgetMs: number;
  private readonly commitDelayMs: number;
  private readonly pacer: CommitPacer | undefined;
  /** the write-ahead log, when writes are acknowledged from it */
  private readonly wal: Wal | undefined;
  private readonly logOpts: LogOptions | undefined;
  /** logged group commits not yet put into LMDB, in LSN order; bounded by applyMaxPoints (an apply empties it) */
  private logged: Logged[] = [];
  private loggedPoints = 0;
  private applyTimer: NodeJS.Timeout | undefined;
  /** > 0 while writeChunks' callback runs (in an lmdb-js write transaction) */
  private inWriteTxn = 0;
  /** performance.now() before which no apply is tried, after one failed */
  private applyHeldUntil = 0;
  /** why the last apply failed (a full disk), until one succeeds */
  private applyFailure: OutpostError | undefined;
  /** stops serving other processes' reads (log-readers.ts); set with the log */
  private stopServingReaders: (() => void) | undefined;
  readonly tiers: readonly TierSpec[];
  readonly rollups: RollupStore;
  readonly counters: CompactionCounters = { compactedWindows: 0, compactedFragments: 0, droppedLatePoints: 0, rollupOnlyPoints: 0 };
  private seq: number;
  private seqReserved: number;
  private planner: RollupPlanner | undefined;
  /** records each batch's fragments for upstream sync in the batch's own transaction (outbox.ts); unset: sync off */
  readonly outbox: OutboxRecorder | undefined;
  /** performance.now() of the latest write() call: background work yields to foreground writes */
  lastWriteAt = 0;
  /** the newest ts of any point written (lazily loaded from `latest`), the reference for retention */
  private newest: number | undefined;
  /**
   * Per series with head fragments, the smallest firstTs among them as far as this process knows: never
   * above the truth (every fragment put lowers it; compaction, deletes and purges leave it low, and the seek
   * that finds it stale corrects it). Read from the head once at start. It tells compaction which series
   * have a window due without a seek per series at every sweep: with 10,000 live series that scan held the
   * event loop 45-90 ms every second.
   */
  private readonly headFirstTs = new Map<EntityIdx, Map<KeyIdx, number>>();
  /** the series the compaction sweep in progress visits (due when it began), and its position; undefined: none */
  private dueSeries: Array<readonly [EntityIdx, KeyIdx]> | undefined;
  private duePos = 0;
  /**
   * Decoded chunks kept for the planner's raw edges: a month query at a 2-h interval reads one chunk per bucket
   * boundary (360 per key), and a dashboard re-polling "the last 30 days" moves its boundaries by seconds, so
   * nearly the same windows again. "e:k" → that series' chunks by window start (null: no chunk), series least
   * recently used first, within a quarter of `readCacheBytes` (the rollup read cache has the rest).
   */
  private readonly chunkCache = new Map<string, SeriesChunks>();
  /** accounted bytes held in chunkCache */
  private chunkCacheSize = 0;
  private readonly chunkCacheBytes: number;
  /**
   * Decoded head fragments for the planner's dirty windows (the last hours, which a dashboard re-polls), by
   * fragment key (latin1), least recently used first, within 1/16 of `readCacheBytes`. A fragment's value never
   * changes under its key: every write takes a new seq, and the one rewrite (a delete) empties this cache first.
   */
  private readonly fragmentCache: ByteLru<string, BlockColumns>;
  /** transactions that change chunks or rollups and have not resolved yet: readers must not fill the caches */
  private cacheHolds = 0;

  constructor(readonly env: StoreEnv, private readonly dict: Dictionary, opts: StoreOptions = DEFAULT_STORE_OPTIONS) {
    this.windowMs = opts.windowMs;
    this.headWindowMs = opts.headWindowMs;
    this.stepBudgetMs = opts.stepBudgetMs ?? DEFAULTS.downsample.stepBudgetMs;
    this.commitDelayMs = opts.commitDelayMs ?? 0;
    this.pacer = opts.pacer;
    this.tiers = makeTiers(opts.tiersMs, opts.tierRetentionMs, opts.windowMs);
    const cacheBytes = opts.readCacheBytes ?? DEFAULTS.query.readCacheBytes;
    this.chunkCacheBytes = cacheBytes / 4;
    this.fragmentCache = new ByteLru<string, BlockColumns>(cacheBytes / 16, chunkBytes);
    this.rollups = new RollupStore(env, this.tiers, opts.windowMs, () => ({
      raw: this.rawHorizonTs, tiers: this.tiers.map((t) => this.tierHorizonTs(t.index)),
    }), cacheBytes - this.chunkCacheBytes - this.fragmentCache.budget, () => this.cacheHolds === 0);
    this.seq = (env.meta.get('headSeq') as number | undefined) ?? 1;
    this.seqReserved = this.seq;
    // one seek per series with head data, once
    let start: Buffer = Buffer.alloc(0);
    for (;;) {
      let found: Buffer | undefined;
      for (const key of env.head.getKeys({ start, limit: 1 })) found = key as Buffer;
      if (found === undefined) break;
      const e = found.readUInt32BE(0);
      const k = found.readUInt32BE(4);
      this.noteHeadFragment(e, k, readOrderedI64(found, 8));
      start = prefixEnd(seriesKey(e, k));
    }
    this.logOpts = opts.wal;
    this.outbox = opts.outbox;
    if (opts.wal !== undefined) {
      // Recovery: what was acknowledged from the log but is not in LMDB goes in now, through the same apply path.
      const applied = (env.meta.get('walApplied') as number | undefined) ?? 0;
      const { wal, records } = Wal.open(opts.wal.fs, { segmentBytes: opts.wal.segmentBytes, appliedLsn: applied });
      this.wal = wal;
      for (const r of records) {
        const body = decodeRecord(r.payload);
        if (body.kind === 'sent') {
          for (const [lsn, entityId] of body.pairs) this.outbox?.replaySent(lsn, entityId);
          continue;
        }
        const points = body.points;
        this.logged.push({ points, lsn: r.lsn, count: countPoints(points), durable: true, done: Promise.resolve() });
      }
      this.applyLogged();
      this.stopServingReaders = serveLogReaders(env, () => this.applyLogged());
    }
  }

  /** What the log has cost since start (undefined without a log). */
  get walStats(): WalStats | undefined {
    return this.wal?.stats;
  }

  /**
   * Puts the logged points whose records are on disk into LMDB, in one synchronous transaction with the LSN
   * of the last of them (meta `walApplied`), so after any crash LMDB says exactly which records it holds.
   * Synchronous so that a read right after sees every acknowledged point. The log's segments are recycled once
   * that transaction is flushed. A failed transaction leaves the points logged, for the next apply or restart.
   */
  applyLogged(): void {
    // Never inside another write transaction (a compaction step reading the head): lmdb-js would run the
    // apply in it, and a failure of that one (a full disk) comes later, asynchronously, after the records
    // were taken as applied; they would be lost. Points the log holds wait for the next apply meanwhile.
    if (this.inWriteTxn > 0) return;
    clearTimeout(this.applyTimer);
    this.applyTimer = undefined;
    while (this.applyStep()) { /* until every durable record is in */ }
  }

  /**
   * One transaction of applyLogged, of at most applyMaxPoints points (one record at least). Returns whether
   * more durable records wait.
   */
  private applyStep(): boolean {
    let n = 0;
    let points = 0;
    const max = (this.logOpts?.applyMaxPoints ?? Infinity) * this.applyStretch();
    while (n < this.logged.length && (this.logged[n] as Logged).durable && (n === 0 || points + (this.logged[n] as Logged).count <= max)) {
      points += (this.logged[n] as Logged).count;
      n++;
    }
    if (n === 0 || this.wal === undefined) return false;
    // Not into a full disk: after a commit failed there, lmdb-js took the next synchronous transaction as
    // committed while its points never reached the file (env.ts keeps other writes from a full disk the same
    // way). The records stay in the log: applied once there is room again, or replayed at the next start.
    const refused = this.env.refusal();
    if (refused !== undefined || performance.now() < this.applyHeldUntil) {
      this.applyFailure = refused ?? this.applyFailure;
      this.scheduleApply();
      return false;
    }
    const batch = this.logged.slice(0, n);
    const lsn = (batch[n - 1] as Logged).lsn;
    try {
      this.env.root.transactionSync(() => {
        for (const l of batch) this.putPoints(l.points, l.lsn);
        void this.env.meta.put('walApplied', lsn);
      });
      this.applyFailure = undefined;
    } catch (err) {
      this.applyFailure = writeFailure(err);
      this.applyHeldUntil = performance.now() + APPLY_HOLD_MS;
      this.env.commitFailed(this.applyFailure);
      this.outbox?.discard();
      this.forgetUncommitted();
      this.scheduleApply();
      return false;
    }
    this.logged.splice(0, n);
    for (const l of batch) this.loggedPoints -= l.count;
    this.outbox?.appliedThrough(lsn);
    const wal = this.wal;
    // lmdb-js' own flush, not env.flushed(): after a failed commit that one falls back to an fdatasync of the
    // file, and a commit lmdb-js never flushed itself can be rolled back at the next open (overlappingSync picks
    // the last flushed meta; seen on a full disk under load: the first acknowledged post gone). Should the
    // flush never come, the records stay in the log until a later apply's flush, and a restart replays them.
    this.env.root.flushed.then(() => wal.markApplied(lsn), () => undefined);
    if (this.logged.length > 0) this.scheduleApply();
    return this.logged.length > 0 && (this.logged[0] as Logged).durable;
  }

  /** Resolves once every group commit logged so far has its record on disk (or failed). */
  async logIdle(): Promise<void> {
    await Promise.all(this.logged.map((l) => l.done.catch(() => undefined)));
  }

  private scheduleApply(): void {
    if (this.applyTimer !== undefined || this.logOpts === undefined) return;
    this.applyTimer = setTimeout(() => this.applyLogged(), this.logOpts.applyIntervalMs * this.applyStretch());
    this.applyTimer.unref();
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

  /**
   * The newest ts ever written to any series (from `latest`; deletes do not lower it). Retention counts back
   * from min(now, this), as Prometheus counts from its newest block, so data with old timestamps (replays,
   * tests at ts 1000) is not dropped just for being old, and one far-future point cannot drop everything.
   */
  newestTs(): number {
    if (this.newest === undefined) {
      let newest = Number.MIN_SAFE_INTEGER;
      for (const { value } of this.env.latest.getRange({})) newest = Math.max(newest, readOrderedI64(value, 0));
      this.newest = newest;
    }
    return this.newest;
  }

  seriesOf(entityId: string, key: string): { e: EntityIdx; k: KeyIdx } | undefined {
    // a logged entity or key is interned when its points go into LMDB
    this.applyLogged();
    const e = this.dict.entityIdx(entityId);
    const k = this.dict.keyIdx(key);
    return e === undefined || k === undefined ? undefined : { e, k };
  }

  private nextSeq(): number {
    const s = this.seq++;
    if (this.seq > this.seqReserved) {
      // Queued before this write's puts, so it commits in the same or an earlier transaction.
      this.seqReserved = this.seq + SEQ_RESERVATION;
      void this.env.meta.put('headSeq', this.seqReserved);
    }
    return s;
  }

  /**
   * Group commit (issue 2): write() only queues the points; every request of the current event-loop turn (or
   * of the next `commitDelayMs`, when set) is written by one `flushPending()`, merged per series, so 64
   * concurrent 3-key posts to a device cost 3 fragment puts and 3 latest puts in one transaction instead of 384
   * puts. All of a batch's puts share one LMDB transaction, so each request is still all-or-nothing, and each is
   * acknowledged once that transaction is committed and flushed. Points are kept in call order, so on an equal
   * ts the later request wins, exactly as sequential upserts.
   */
  write(entityId: string, points: TelemetryBatch | readonly TsRecord[]): Promise<void> {
    this.lastWriteAt = performance.now();
    const batch = points instanceof TelemetryBatch ? points : TelemetryBatch.fromRecords(points);
    let queued = false;
    for (const [key, col] of batch.series) {
      if (col.length === 0) continue;
      let bySeries = this.pending.get(entityId);
      if (bySeries === undefined) this.pending.set(entityId, (bySeries = new Map()));
      const queuedCols = bySeries.get(key);
      if (queuedCols === undefined) bySeries.set(key, [col]);
      else queuedCols.push(col);
      this.pendingPoints += col.length;
      queued = true;
    }
    if (!queued) return Promise.resolve();
    if (this.pendingDone === undefined) {
      this.pendingDone = new Promise<void>((resolve, reject) => { this.settlePending = { resolve, reject }; });
      this.pendingSince = performance.now();
      // While a batch is committing, the next one keeps filling; it is written when that commit lands (flushNext).
      if (!this.committing) {
        const delay = this.commitDelay();
        if (delay > 0) setTimeout(() => this.flushPending(), delay);
        else setImmediate(() => this.flushPending());
      }
    }
    this.pendingWrites++;
    const done = this.pendingDone;
    if (!this.committing && this.batchFull()) {
      this.flushPending();
      return done;
    }
    // A bulk upload does not wait out the delay, nor become one huge log record (and a segment of its size)
    if (this.logOpts !== undefined && this.pendingPoints >= this.logOpts.applyMaxPoints) this.flushPending();
    return done;
  }

  /**
   * Writes every queued point: with the log, as one log record (acknowledged once it is on disk; LMDB gets it
   * at the next apply), else in one synchronous pass of puts (one LMDB transaction). Idempotent when nothing
   * is queued.
   */
  flushPending(): void {
    const batch = this.pending;
    const settle = this.settlePending;
    if (settle === undefined) return;
    this.pending = new Map();
    this.lastBatchWrites = this.pendingWrites;
    this.pendingWrites = 0;
    this.lastBatchPoints = this.pendingPoints;
    this.pendingPoints = 0;
    this.pendingDone = undefined;
    this.settlePending = undefined;
    const bulk = this.lastBatchPoints >= BULK_POINTS;
    if (this.wal !== undefined && !bulk) {
      this.logPending(this.wal, batch, settle);
      return;
    }
    let last: Promise<boolean> | undefined;
    try {
      // A bulk batch is an LMDB commit of its own, acknowledged once flushed: at this size a commit costs a few
      // bytes per point, and lmdb-js commits on its writer thread while this one parses the next bodies. What
      // the log holds goes in first, so a later write still wins on an equal ts.
      if (this.wal !== undefined) {
        this.applyLogged();
        // what the log holds must go in first; if it cannot (a full disk), neither can this
        if (this.applyFailure !== undefined) throw this.applyFailure;
      }
      last = this.putPoints(batch);
    } catch (err) {
      this.outbox?.discard();
      settle.reject(err);
      return;
    }
    if (last === undefined) {
      settle.resolve();
      return;
    }
    // Subscribe to the flush of the batch holding these puts now, in the same synchronous turn: lmdb-js'
    // `flushed` reads its pending-batch promise when `then` is called, so asking only after the commit
    // resolves waits for whichever batch is pending by then. A later batch's flush also covers ours: LMDB
    // flushes in commit order.
    const flushed = new Promise<void>((resolve, reject) => { this.env.root.flushed.then(() => resolve(), reject); });
    // the commit's own error first: it names the cause (507 for a full disk); lmdb-js' flush error does not
    flushed.catch(() => undefined);
    last.then(() => flushed).then(() => settle.resolve(), (err: unknown) => settle.reject(writeFailure(err)));
    this.committing = true;
    const next = (): void => {
      this.committing = false;
      this.flushNext();
    };
    last.then(next, () => {
      this.forgetUncommitted();
      next();
    });
  }

  /**
   * After a commit lands: the batch that filled meanwhile is written once its first write has waited
   * commitDelayMs, not at once. Written at once, it would take a commit (an fdatasync, a page of log or an
   * LMDB commit's pages) of its own for the few posts of one fsync's time; with the wait, each post still waits
   * at most commitDelayMs plus one commit (issue 19: at 10 posts/s and 250 ms, ~4.3 commits/s became ~2.9).
   */
  private flushNext(): void {
    if (this.settlePending === undefined) return;
    if (this.batchFull()) {
      this.flushPending();
      return;
    }
    const wait = this.pendingSince + this.commitDelay() - performance.now();
    if (wait <= 0) this.flushPending();
    else setTimeout(() => this.flushPending(), wait);
  }

  /**
   * Whether the batch filling is written before its delay is out, because waiting buys nothing (issue 19: an
   * adaptive delay): it holds as many writes as the last batch did, at least EARLY_FLUSH_WRITES. Where many
   * clients each wait for their answer before posting again (a bulk load on 64 connections), they are all back
   * within a millisecond of a commit, and no more come until it is answered; holding them the full delay would
   * cap them at (connections ÷ delay) posts/s. Devices posting one at a time on their own schedules never fill
   * that many within the delay, so they share commits as the delay intends. A batch of EARLY_FLUSH_POINTS or
   * more goes at once too: it fills a page of log by itself.
   */
  private batchFull(): boolean {
    if (this.commitDelay() === 0) return false;
    // a page of log or more already: waiting would save no page (a bulk upload, 1,000 timestamps a body)
    if (this.pendingPoints >= EARLY_FLUSH_POINTS) return true;
    // paced by the write budget, saving commits is the point: only a full page goes early
    if (this.pacer?.pacing() === true) return false;
    return this.pendingWrites >= Math.max(EARLY_FLUSH_WRITES, this.lastBatchWrites);
  }

  /** ms the batch filling may wait for others to share its commit */
  private commitDelay(): number {
    return this.pacer?.commitDelayMs() ?? this.commitDelayMs;
  }

  /** how many times applyIntervalMs and applyMaxPoints an apply waits: larger, rarer applies while wear is paced */
  private applyStretch(): number {
    return this.pacer?.applyStretch() ?? 1;
  }

  /** Appends a group commit to the log; its callers are answered once the record is on disk. */
  private logPending(wal: Wal, batch: PendingPoints, settle: { resolve: () => void; reject: (err: unknown) => void }): void {
    // the free-space reserve refuses telemetry as it would refuse the LMDB commit (env.ts)
    const refused = this.env.refusal();
    if (refused !== undefined) {
      settle.reject(refused);
      return;
    }
    let payload: Buffer;
    try {
      payload = encodeLogged(batch);
    } catch (err) {
      settle.reject(err);
      return;
    }
    const { lsn, durable } = wal.append(payload);
    const entry: Logged = { points: batch, lsn, count: countPoints(batch), durable: false, done: durable };
    this.logged.push(entry);
    this.loggedPoints += entry.count;
    this.committing = true;
    durable.then(() => {
      entry.durable = true;
      settle.resolve();
      this.outbox?.onLogged?.(lsn, batch);
    }, (err: unknown) => {
      // not acknowledged, and its LSN will be reused: it must never reach LMDB
      const i = this.logged.indexOf(entry);
      if (i >= 0) this.logged.splice(i, 1);
      this.loggedPoints -= entry.count;
      settle.reject(writeFailure(err));
    }).finally(() => {
      this.committing = false;
      // past applyMaxPoints, one bounded transaction per landed commit, so a bulk upload never holds the loop long
      if (this.loggedPoints >= (this.logOpts as LogOptions).applyMaxPoints * this.applyStretch()) this.applyStep();
      else this.scheduleApply();
      this.flushNext();
    });
  }

  /**
   * Puts a group commit's points in the current transaction (the turn's lmdb-js batch, or a synchronous
   * transaction around it), merged per series under one head seq. Returns the last put's promise.
   */
  private putPoints(batch: PendingPoints, lsn?: number): Promise<boolean> | undefined {
    let last: Promise<boolean> | undefined;
    const seq = this.nextSeq();
    const outbox = this.outbox;
    for (const [entityId, bySeries] of batch) {
      const e = this.dict.internEntity(entityId);
      // what sync already sent from the log is not left to send
      const record = outbox !== undefined && outbox.recordsLogged(lsn, entityId);
      if (record) outbox.recordedLogged(lsn, entityId, e, seq);
      for (const [key, cols] of bySeries) {
        const k = this.dict.internKey(key);
        // one column per request that wrote this series in this turn, in call order (the later one wins)
        let col = cols[0] as SeriesColumn;
        if (cols.length > 1) {
          col = new SeriesColumn();
          for (const c of cols) col.append(c);
        }
        col = col.sortedDistinct();
        const ts = col.ts;
        const n = ts.length;
        let from = 0;
        while (from < n) {
          const w = windowStart(ts[from] as number, this.windowMs);
          let to = from + 1;
          while (to < n && (ts[to] as number) < w + this.windowMs) to++;
          last = this.env.head.put(fragKey(e, k, ts[from] as number, seq), encodeColumn(col, from, to));
          this.noteHeadFragment(e, k, ts[from] as number);
          if (record) outbox.fragment(e, k, ts[from] as number, ts[to - 1] as number, to - from);
          from = to;
        }
        const newestTs = ts[n - 1] as number;
        if (this.newest !== undefined && newestTs > this.newest) this.newest = newestTs;
        if (newestTs >= this.cachedLatestTs(e, k)) {
          this.setLatestTs(e, k, newestTs);
          last = this.env.latest.put(seriesKey(e, k), encodeStamped(newestTs, col.value(n - 1)));
        }
      }
    }
    // sync's "what is left to send" (outbox.ts) in the same transaction: replaying the log regenerates it too
    return outbox?.commit(seq) ?? last;
  }

  /**
   * Sync sent these devices' points of these log records upstream: the mark goes into the log with its next
   * group commit (no sync of its own), so after a crash the replay leaves them out of what is left to send.
   * A crash before that commit re-sends them (at-least-once).
   */
  noteSent(pairs: ReadonlyArray<readonly [lsn: number, entityId: string]>): void {
    if (pairs.length > 0) this.wal?.appendLazy(encodeSentMark(pairs));
  }

  /**
   * After a batch failed to commit (a full disk): what this store believed of it in memory goes. The newest ts
   * per series and overall are read again from `latest`, and the next batch reserves seqs again, since the
   * failed one may have held the reservation that the seqs handed out since rely on.
   */
  private forgetUncommitted(): void {
    this.latestTs.clear();
    this.newest = undefined;
    this.seqReserved = this.seq;
  }

  latest(entityId: string, keys?: readonly string[]): Map<string, TsKv> {
    this.applyLogged();
    const out = new Map<string, TsKv>();
    const e = this.dict.entityIdx(entityId);
    if (e === undefined) return out;
    if (keys === undefined) {
      const prefix = entityPrefix(e);
      for (const { key, value } of this.env.latest.getRange({ start: prefix, end: prefixEnd(prefix) })) {
        const name = this.dict.keyName((key as Buffer).readUInt32BE(4));
        if (name !== undefined) out.set(name, decodeStamped(value));
      }
      return out;
    }
    for (const name of keys) {
      const k = this.dict.keyIdx(name);
      if (k === undefined) continue;
      const raw = this.env.latest.get(seriesKey(e, k));
      if (raw !== undefined) out.set(name, decodeStamped(raw));
    }
    return out;
  }

  keys(entityId: string): string[] {
    return [...this.latest(entityId).keys()].sort();
  }

  range(entityId: string, key: string, q: RangeQuery): IterableIterator<TsKv> {
    this.applyLogged();
    const s = this.seriesOf(entityId, key);
    if (s === undefined || q.endTs <= q.startTs) return [][Symbol.iterator]();
    return this.seriesRange(s.e, s.k, q);
  }

  /** range() by interned ids: streamed point by point from the decoded blocks (chunks.ts `seriesPoints`). */
  seriesRange(e: EntityIdx, k: KeyIdx, q: RangeQuery): IterableIterator<TsKv> {
    this.applyLogged();
    return seriesPoints(this.env, e, k, q.startTs, q.endTs, this.windowMs, q.order === 'DESC', q.limit ?? Infinity);
  }

  /**
   * BucketSource (bucket-source.ts seam): aggregated history answered from rollup tiers plus raw edges, exactly
   * (planner.ts).
   */
  bucketAggs(entityId: string, key: string, plan: BucketPlan, fn?: AggFn): Iterable<BucketAggregate> {
    this.applyLogged();
    this.planner ??= new RollupPlanner(this);
    return this.planner.bucketAggs(entityId, key, plan, fn);
  }

  /** The interned index of an entity, undefined when it never stored a point or attribute. */
  entityIdx(entityId: string): EntityIdx | undefined {
    this.applyLogged();
    return this.dict.entityIdx(entityId);
  }

  /** Forgets what is kept in memory of entity `e` (its data has been purged). */
  forgetEntity(e: EntityIdx): void {
    this.latestTs.delete(e);
    this.headFirstTs.delete(e);
  }

  /** The decoded-chunk cache of series (e, k), for chunkColumns (a query looks it up once). */
  seriesChunks(e: EntityIdx, k: KeyIdx): SeriesChunks {
    const id = `${e}:${k}`;
    let chunks = this.chunkCache.get(id);
    if (chunks !== undefined) this.chunkCache.delete(id);
    else chunks = new Map();
    this.chunkCache.set(id, chunks);
    return chunks;
  }

  /**
   * The committed chunk of window `w` of series (e, k), decoded (all timestamps; values on demand), or
   * undefined when it has none. Shared with other readers through `chunks` (seriesChunks(e, k)): callers must
   * not load another block into it. Chunks change only inside `writeChunks`, which keeps the cache empty until
   * the change has committed. Past the cache's bytes, the least recently used series go first.
   */
  chunkColumns(e: EntityIdx, k: KeyIdx, w: number, chunks: SeriesChunks = this.seriesChunks(e, k)): BlockColumns | undefined {
    const hit = chunks.get(w);
    if (hit !== undefined) return hit ?? undefined;
    const block = readOwnCopy(this.env.chunks, windowKey(e, k, w));
    const cols = block === undefined ? null : new BlockColumns().load(block);
    if (this.cacheHolds > 0) return cols ?? undefined;
    chunks.set(w, cols);
    // a reader's map dropped by clearReadCaches() mid-query is no longer the cache's: not counted
    if (this.chunkCache.get(`${e}:${k}`) !== chunks) return cols ?? undefined;
    this.chunkCacheSize += chunkBytes(cols);
    // Evict window by window: from the least recently used series, its first-read windows first.
    while (this.chunkCacheSize > this.chunkCacheBytes) {
      const [id, oldest] = this.chunkCache.entries().next().value as [string, SeriesChunks];
      const first = oldest.entries().next();
      if (first.done) { this.chunkCache.delete(id); continue; }
      const [firstW, firstCols] = first.value;
      if (oldest === chunks && firstW === w) break; // the window just read stays
      oldest.delete(firstW);
      this.chunkCacheSize -= chunkBytes(firstCols);
    }
    return cols ?? undefined;
  }

  /**
   * The head fragment under `key` (24 bytes: a point block) decoded, values included, or undefined when it is
   * gone. Shared with other readers through the fragment cache, so callers must not load another block into it.
   */
  fragmentColumns(key: Buffer): BlockColumns | undefined {
    const id = key.toString('latin1');
    const hit = this.fragmentCache.get(id);
    if (hit !== undefined) return hit;
    const block = readOwnCopy(this.env.head, key);
    if (block === undefined) return undefined;
    const cols = new BlockColumns().load(block);
    cols.intsUpTo(cols.count);
    if (this.cacheHolds === 0) this.fragmentCache.add(id, cols);
    return cols;
  }

  /** Accounted bytes of the decoded chunks, head fragments and rollup blocks held for readers, and budgets. */
  readCacheUsage(): { chunkBytes: number; chunkBudget: number; fragmentBytes: number; fragmentBudget: number; rollupBytes: number } {
    return {
      chunkBytes: this.chunkCacheSize, chunkBudget: this.chunkCacheBytes,
      fragmentBytes: this.fragmentCache.bytes, fragmentBudget: this.fragmentCache.budget, rollupBytes: this.rollups.readCacheUsage,
    };
  }

  /**
   * Runs `fn` in a write transaction that may change chunks or rollups; `fn` calls `clearReadCaches()` before
   * it changes any. Until the commit has resolved, readers do not fill the caches: once LMDB has committed, a
   * reader already sees the new state (a window's head fragments gone) while a decoded chunk or block cached
   * from the old one would miss their points. A step that changes nothing leaves the caches as they are.
   */
  async writeChunks<T>(fn: () => T): Promise<T> {
    this.cacheHolds++;
    try {
      return await this.env.root.transaction(() => {
        this.inWriteTxn++;
        try {
          return fn();
        } finally {
          this.inWriteTxn--;
        }
      });
    } finally {
      this.cacheHolds--;
    }
  }

  /** Drops the decoded chunks and rollup blocks readers share. */
  clearReadCaches(): void {
    this.chunkCache.clear();
    this.chunkCacheSize = 0;
    this.fragmentCache.clear();
    this.rollups.clearReadCache();
  }

  /** The merged windows of series (e, k) overlapping [fromTs, toTs), ascending. */
  windowsOf(e: EntityIdx, k: KeyIdx, fromTs: number, toTs: number): IterableIterator<WindowPoints> {
    this.applyLogged();
    return seriesWindows(this.env, e, k, fromTs, toTs, this.windowMs, false);
  }

  /**
   * Removes [startTs, endTs) of the keys from chunks (rebuilding their rollups) and head fragments, then their
   * latest values as asked. A range of months is done window by window in transactions of about
   * `stepBudgetMs` each (a month of one key is ~150 ms of decoding and rollup rebuilding here), so a large
   * delete does not hold the event loop, and with it every device's acknowledgement, for seconds; the promise
   * resolves after the last step, committed and flushed. Between steps readers may see part of the range
   * gone, and a point written meanwhile into a window the delete has not reached yet goes with it (a write
   * concurrent with a delete has no order in TB either). A crash between steps leaves the delete partial:
   * its request was not answered, and repeating it finishes it.
   */
  async delete(entityId: string, req: DeleteRequest): Promise<void> {
    // Points queued before this delete are written first, so the delete covers them (sequential semantics).
    this.flushPending();
    if (this.wal !== undefined) {
      await this.logIdle();
      this.applyLogged();
    }
    const e = this.dict.entityIdx(entityId);
    if (e === undefined || req.endTs <= req.startTs) return;
    for (const name of req.keys) {
      const k = this.dict.keyIdx(name);
      if (k === undefined) continue;
      const cursor = { w: windowStart(req.startTs, this.windowMs) };
      let done = false;
      while (!done) done = await this.writeChunks(() => this.rollups.batch(() => this.deleteStep(e, k, req, cursor)));
      if (req.deleteLatest) await this.env.root.transaction(() => this.dropLatest(e, k, req));
    }
    await this.env.flushed();
  }

  /**
   * Inside a transaction: deletes the range from the windows of series (e, k) from `cursor.w` on, one window
   * (its chunk and its fragments) at a time, until `stepBudgetMs` have passed. Returns true when done.
   */
  private deleteStep(e: EntityIdx, k: KeyIdx, req: DeleteRequest, cursor: { w: number }): boolean {
    const t0 = performance.now();
    this.clearReadCaches();
    const W = this.windowMs;
    const inRange = (p: TsKv): boolean => p.ts >= req.startTs && p.ts < req.endTs;
    const end = windowKey(e, k, req.endTs);
    for (;;) {
      // the next window holding a chunk or a fragment of the series
      let w = Infinity;
      for (const db of [this.env.chunks, this.env.head]) {
        for (const key of db.getKeys({ start: windowKey(e, k, cursor.w), end, limit: 1 })) w = Math.min(w, windowStart(readOrderedI64(key as Buffer, 8), W));
      }
      if (w === Infinity) return true;
      const ck = windowKey(e, k, w);
      const chunk = this.env.chunks.get(ck);
      if (chunk !== undefined) {
        // a window inside the range goes whole, without decoding it
        const kept = w >= req.startTs && w + W <= req.endTs ? [] : decodePoints(chunk).filter((p) => !inRange(p));
        if (kept.length < blockCount(chunk)) {
          if (kept.length === 0) void this.env.chunks.remove(ck);
          else void this.env.chunks.put(ck, encodePoints(kept));
          this.rollups.rebuildWindow(e, k, w, kept);
        }
      }
      for (const f of headFragments(this.env, e, k, w, w + W)) {
        const pts = fragmentPoints(f);
        const kept = pts.filter((p) => !inRange(p));
        if (kept.length === pts.length) continue;
        if (kept.length === 0 || f.key.length !== 24) void this.env.head.remove(f.key);
        else void this.env.head.put(f.key, encodePoints(kept));
      }
      cursor.w = w + W;
      if (performance.now() - t0 >= this.stepBudgetMs) return false;
    }
  }

  /** Inside a transaction: the latest value of series (e, k) goes when it lies in the range (then rewritten if asked). */
  private dropLatest(e: EntityIdx, k: KeyIdx, req: DeleteRequest): void {
    const sk = seriesKey(e, k);
    const cur = this.env.latest.get(sk);
    if (cur === undefined) return;
    const { ts } = decodeStamped(cur);
    if (ts < req.startTs || ts >= req.endTs) return;
    void this.env.latest.remove(sk);
    this.latestTs.get(e)?.delete(k);
    if (!req.rewriteLatest) return;
    for (const p of this.seriesRange(e, k, { startTs: Number.MIN_SAFE_INTEGER, endTs: Number.MAX_SAFE_INTEGER, order: 'DESC', limit: 1 })) {
      void this.env.latest.put(sk, encodeStamped(p.ts, p.value));
      this.setLatestTs(e, k, p.ts);
    }
  }

  /**
   * One bounded compaction step: folds the fragments of windows that ended at least `headWindowMs` before
   * `now` into their chunks, one window at a time, until `budgetMs` have passed. One transaction. Resolves
   * once committed, with the number of windows compacted, whether more are due, and the wall time spent
   * inside the transaction callback: the event-loop block of this step.
   */
  async compactStep(now: number, budgetMs: number): Promise<{ compacted: number; more: boolean; wallMs: number }> {
    // A fragment is due when its whole window ended at least headWindowMs ago: firstTs < this cutoff.
    const cutoff = windowStart(now - this.headWindowMs, this.windowMs);
    let compacted = 0;
    let more = false;
    let wallMs = 0;
    const horizon = this.rawHorizonTs;
    await this.writeChunks(() => {
      const t0 = performance.now();
      try {
        this.rollups.batch(() => {
          for (;;) {
            const target = this.nextCompactable(cutoff);
            if (target === undefined) return;
            this.compactWindow(target.e, target.k, target.w, horizon);
            compacted++;
            if (performance.now() - t0 >= budgetMs) { more = true; return; }
          }
        });
      } finally {
        wallMs = performance.now() - t0;
      }
    });
    return { compacted, more, wallMs };
  }

  /**
   * The next window of the sweep in progress with a fragment whose firstTs < cutoff; a new sweep starts with the
   * series that headFirstTs says have one. Undefined when the sweep is over.
   */
  private nextCompactable(cutoff: number): { e: EntityIdx; k: KeyIdx; w: number } | undefined {
    if (this.dueSeries === undefined) {
      this.dueSeries = [];
      this.duePos = 0;
      for (const [e, byKey] of this.headFirstTs) for (const [k, ts] of byKey) if (ts < cutoff) this.dueSeries.push([e, k]);
    }
    while (this.duePos < this.dueSeries.length) {
      const [e, k] = this.dueSeries[this.duePos] as readonly [EntityIdx, KeyIdx];
      // the series' first fragment as it is now (compaction of its previous window removed some)
      const sk = seriesKey(e, k);
      let firstTs: number | undefined;
      for (const key of this.env.head.getKeys({ start: sk, end: prefixEnd(sk), limit: 1 })) firstTs = readOrderedI64(key as Buffer, 8);
      const byKey = this.headFirstTs.get(e);
      if (firstTs === undefined) byKey?.delete(k);
      else byKey?.set(k, firstTs);
      if (firstTs !== undefined && firstTs < cutoff) return { e, k, w: windowStart(firstTs, this.windowMs) };
      this.duePos++;
    }
    this.dueSeries = undefined;
    return undefined;
  }

  /** Lowers series (e, k)'s smallest known head firstTs to `firstTs`. */
  private noteHeadFragment(e: EntityIdx, k: KeyIdx, firstTs: number): void {
    let byKey = this.headFirstTs.get(e);
    if (byKey === undefined) this.headFirstTs.set(e, (byKey = new Map()));
    const cur = byKey.get(k);
    if (cur === undefined || firstTs < cur) byKey.set(k, firstTs);
  }

  private compactWindow(e: EntityIdx, k: KeyIdx, w: number, rawHorizon: number): void {
    this.clearReadCaches();
    const frags = headFragments(this.env, e, k, w, w + this.windowMs);
    for (const f of frags) void this.env.head.remove(f.key);
    this.counters.compactedFragments += frags.length;
    if (w < rawHorizon) {
      // Raw retention already dropped this window. Rollups built from its dropped chunk are final (a late point
      // cannot be merged exactly: it might overwrite a dropped one), so it is dropped and counted; a window that
      // never had data gets rollups from the late points alone (a backfill older than the raw retention).
      if (this.rollups.hasFinestBuckets(e, k, w, w + this.windowMs)) {
        for (const f of frags) this.counters.droppedLatePoints += f.key.length === 24 ? blockCount(f.value) : 1;
      } else {
        const points = mergeWindow(undefined, frags);
        this.rollups.rebuildWindow(e, k, w, points);
        this.counters.rollupOnlyPoints += points.length;
      }
      return;
    }
    const ck = windowKey(e, k, w);
    const old = this.env.chunks.get(ck);
    const merged = mergeWindow(old === undefined ? undefined : decodePoints(old), frags);
    if (merged.length === 0) void this.env.chunks.remove(ck);
    else void this.env.chunks.put(ck, encodePoints(merged));
    this.rollups.rebuildWindow(e, k, w, merged);
    this.counters.compactedWindows++;
  }

  private cachedLatestTs(e: EntityIdx, k: KeyIdx): number {
    const m = this.latestTs.get(e);
    const cached = m?.get(k);
    if (cached !== undefined) return cached;
    const raw = this.env.latest.get(seriesKey(e, k));
    const ts = raw === undefined ? -Infinity : decodeStamped(raw).ts;
    if (raw !== undefined) this.setLatestTs(e, k, ts);
    return ts;
  }

  private setLatestTs(e: EntityIdx, k: KeyIdx, ts: number): void {
    let m = this.latestTs.get(e);
    if (m === undefined) this.latestTs.set(e, (m = new Map()));
    m.set(k, ts);
  }
}

/** how long applies wait after one failed (the free-space check reads the filesystem once a second) */
const APPLY_HOLD_MS = 2000;

