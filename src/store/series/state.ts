/**
 * The state of the LMDB series store, in one place: every field the layers (apply.ts, append.ts, read.ts,
 * compact.ts, delete.ts) share, grouped by the concern that owns it, with the small helpers on it that several
 * layers use (head seq, newest and latest ts, horizons). The constructor opens the write-ahead log and takes what
 * it holds into `logged`; store.ts applies it once every layer is there.
 */
import { DEFAULTS } from '../../config/index.js';
import type { OutpostError } from '../../errors.js';
import type { SeriesColumn } from '../../model/batch.js';
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import { decodeStamped, prefixEnd, readOrderedI64, seriesKey } from '../encoding/codec.js';
import type { Dictionary } from '../encoding/dict.js';
import type { BlockColumns } from '../encoding/gorilla.js';
import type { StoreEnv } from '../env.js';
import { ByteLru } from '../lru.js';
import type { OutboxRecorder } from '../outbox.js';
import type { RollupPlanner } from '../planner/planner.js';
import { RollupStore, type TierSpec, makeTiers } from '../rollups/store.js';
import { type PendingPoints, Wal, type WalStats, decodeRecord } from '../wal.js';
import type { CommitPacer } from '../write-budget.js';
import { type SeriesChunks, rawHorizonOf } from './chunks.js';
import { type CompactionCounters, DEFAULT_STORE_OPTIONS, type LogOptions, type StoreOptions } from './options.js';

/** A logged group commit not yet in LMDB. */
export interface Logged {
  readonly points: PendingPoints;
  readonly lsn: number;
  readonly count: number;
  /** its record is on disk (only durable ones are applied: their LSN must never be reused) */
  durable: boolean;
  readonly done: Promise<void>;
}

/**
 * Approximate bytes of a decoded chunk (BlockColumns, its typed arrays and its own copy of the block; ~1.4 KB
 * measured for 120 points of 10-s data) besides 16 per point: the chunk and fragment caches' accounting unit.
 */
const DECODED_CHUNK_BYTES = 512;
const DECODED_POINT_BYTES = 16;

export const chunkBytes = (cols: BlockColumns | null): number =>
  DECODED_CHUNK_BYTES + (cols === null ? 0 : cols.count * DECODED_POINT_BYTES);

export function countPoints(points: PendingPoints): number {
  let n = 0;
  for (const bySeries of points.values()) for (const cols of bySeries.values()) for (const c of cols) n += c.length;
  return n;
}

/** Head sequence numbers are reserved in blocks so a restart never reuses one (meta key `headSeq`). */
const SEQ_RESERVATION = 1_000_000;

export abstract class SeriesState {
  /**
   * entity UUID → key → the columns written to it, in call order, waiting for this turn's flush. Bounded by
   * the requests in flight: each caller awaits the batch, and bodies are capped (http.maxBodyBytes).
   */
  protected pending = new Map<string, Map<string, SeriesColumn[]>>();
  protected pendingDone: Promise<void> | undefined;
  protected settlePending: { resolve: () => void; reject: (err: unknown) => void } | undefined;
  /** a flushed batch whose transaction has not committed yet */
  protected committing = false;
  /** performance.now() of the first write of the batch filling */
  protected pendingSince = 0;
  /** points in `pending` */
  protected pendingPoints = 0;
  /** write() calls in `pending`, and in the last batch flushed */
  protected pendingWrites = 0;
  protected lastBatchWrites = 0;
  /** points of the batch being flushed (set by flushPending) */
  protected lastBatchPoints = 0;
  /** latest ts per series, so concurrent writes in one batch never let an older point win */
  protected readonly latestTs = new Map<EntityIdx, Map<KeyIdx, number>>();
  readonly windowMs: number;
  readonly headWindowMs: number;
  protected readonly stepBudgetMs: number;
  protected readonly commitDelayMs: number;
  protected readonly pacer: CommitPacer | undefined;
  /** the write-ahead log, when writes are acknowledged from it */
  protected readonly wal: Wal | undefined;
  protected readonly logOpts: LogOptions | undefined;
  /** logged group commits not yet put into LMDB, in LSN order; bounded by applyMaxPoints (an apply empties it) */
  protected logged: Logged[] = [];
  protected loggedPoints = 0;
  /** points put into LMDB since start (applied from the log, or written directly) */
  protected pointsPut = 0;
  protected applyTimer: NodeJS.Timeout | undefined;
  /** > 0 while writeChunks' callback runs (in an lmdb-js write transaction) */
  protected inWriteTxn = 0;
  /** performance.now() before which no apply is tried, after one failed */
  protected applyHeldUntil = 0;
  /** why the last apply failed (a full disk), until one succeeds */
  protected applyFailure: OutpostError | undefined;
  /** stops serving other processes' reads (log-readers.ts); set with the log */
  protected stopServingReaders: (() => void) | undefined;
  readonly tiers: readonly TierSpec[];
  readonly rollups: RollupStore;
  readonly counters: CompactionCounters = {
    compactedWindows: 0,
    compactedFragments: 0,
    droppedLatePoints: 0,
    rollupOnlyPoints: 0,
  };
  protected seq: number;
  protected seqReserved: number;
  protected planner: RollupPlanner | undefined;
  /** records each batch's fragments for upstream sync in the batch's own transaction (outbox.ts); unset: sync off */
  readonly outbox: OutboxRecorder | undefined;
  /** performance.now() of the latest write() call: background work yields to foreground writes */
  lastWriteAt = 0;
  /** the newest ts of any point written (lazily loaded from `latest`), the reference for retention */
  protected newest: number | undefined;
  /**
   * Per series with head fragments, the smallest firstTs among them as far as this process knows: never
   * above the truth (every fragment put lowers it; compaction, deletes and purges leave it low, and the seek
   * that finds it stale corrects it). Read from the head once at start. It tells compaction which series
   * have a window due without a seek per series at every sweep: with 10,000 live series that scan held the
   * event loop 45-90 ms every second.
   */
  protected readonly headFirstTs = new Map<EntityIdx, Map<KeyIdx, number>>();
  /** the series the compaction sweep in progress visits (due when it began), and its position; undefined: none */
  protected dueSeries: Array<readonly [EntityIdx, KeyIdx]> | undefined;
  protected duePos = 0;
  /**
   * Decoded chunks kept for the planner's raw edges: a month query at a 2-h interval reads one chunk per bucket
   * boundary (360 per key), and a dashboard re-polling "the last 30 days" moves its boundaries by seconds, so
   * nearly the same windows again. "e:k" → that series' chunks by window start (null: no chunk), series least
   * recently used first, within a quarter of `readCacheBytes` (the rollup read cache has the rest).
   */
  protected readonly chunkCache = new Map<string, SeriesChunks>();
  /** accounted bytes held in chunkCache */
  protected chunkCacheSize = 0;
  protected readonly chunkCacheBytes: number;
  /**
   * Decoded head fragments for the planner's dirty windows (the last hours, which a dashboard re-polls), by
   * fragment key (latin1), least recently used first, within 1/16 of `readCacheBytes`. A fragment's value never
   * changes under its key: every write takes a new seq, and the one rewrite (a delete) empties this cache first.
   */
  protected readonly fragmentCache: ByteLru<string, BlockColumns>;
  /** transactions that change chunks or rollups and have not resolved yet: readers must not fill the caches */
  protected cacheHolds = 0;

  constructor(
    readonly env: StoreEnv,
    protected readonly dict: Dictionary,
    opts: StoreOptions = DEFAULT_STORE_OPTIONS,
  ) {
    this.windowMs = opts.windowMs;
    this.headWindowMs = opts.headWindowMs;
    this.stepBudgetMs = opts.stepBudgetMs ?? DEFAULTS.downsample.stepBudgetMs;
    this.commitDelayMs = opts.commitDelayMs ?? 0;
    this.pacer = opts.pacer;
    this.tiers = makeTiers(opts.tiersMs, opts.tierRetentionMs, opts.windowMs);
    const cacheBytes = opts.readCacheBytes ?? DEFAULTS.query.readCacheBytes;
    this.chunkCacheBytes = cacheBytes / 4;
    this.fragmentCache = new ByteLru<string, BlockColumns>(cacheBytes / 16, chunkBytes);
    this.rollups = new RollupStore(
      env,
      this.tiers,
      opts.windowMs,
      () => ({
        raw: this.rawHorizonTs,
        tiers: this.tiers.map((t) => this.tierHorizonTs(t.index)),
      }),
      cacheBytes - this.chunkCacheBytes - this.fragmentCache.budget,
      () => this.cacheHolds === 0,
    );
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
      // What was acknowledged from the log but is not in LMDB is taken back; store.ts applies it once constructed.
      const applied = (env.meta.get('walApplied') as number | undefined) ?? 0;
      const { wal, records } = Wal.open(opts.wal.fs, { segmentBytes: opts.wal.segmentBytes, appliedLsn: applied });
      this.wal = wal;
      this.replayed.records = records.length;
      for (const r of records) {
        const body = decodeRecord(r.payload);
        if (body.kind === 'sent') {
          for (const [lsn, entityId] of body.pairs) this.outbox?.replaySent(lsn, entityId);
          continue;
        }
        const points = body.points;
        const count = countPoints(points);
        this.replayed.points += count;
        this.logged.push({ points, lsn: r.lsn, count, durable: true, done: Promise.resolve() });
      }
    }
  }

  /** What the log held at open that LMDB did not (acknowledged, not yet applied): put in at start. */
  readonly replayed = { records: 0, points: 0 };

  /** Points put into LMDB since start, and points logged but not yet put: the write budget's cost per point. */
  get pointCounts(): { readonly put: number; readonly logged: number } {
    return { put: this.pointsPut, logged: this.loggedPoints };
  }

  /** What the log has cost since start (undefined without a log). */
  get walStats(): WalStats | undefined {
    return this.wal?.stats;
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

  protected nextSeq(): number {
    const s = this.seq++;
    if (this.seq > this.seqReserved) {
      // Queued before this write's puts, so it commits in the same or an earlier transaction.
      this.seqReserved = this.seq + SEQ_RESERVATION;
      void this.env.meta.put('headSeq', this.seqReserved);
    }
    return s;
  }

  /**
   * After a batch failed to commit (a full disk): what this store believed of it in memory goes. The newest ts
   * per series and overall are read again from `latest`, and the next batch reserves seqs again, since the
   * failed one may have held the reservation that the seqs handed out since rely on.
   */
  protected forgetUncommitted(): void {
    this.latestTs.clear();
    this.newest = undefined;
    this.seqReserved = this.seq;
  }

  /** Forgets what is kept in memory of entity `e` (its data has been purged). */
  forgetEntity(e: EntityIdx): void {
    this.latestTs.delete(e);
    this.headFirstTs.delete(e);
  }

  /** Lowers series (e, k)'s smallest known head firstTs to `firstTs`. */
  protected noteHeadFragment(e: EntityIdx, k: KeyIdx, firstTs: number): void {
    let byKey = this.headFirstTs.get(e);
    if (byKey === undefined) this.headFirstTs.set(e, (byKey = new Map()));
    const cur = byKey.get(k);
    if (cur === undefined || firstTs < cur) byKey.set(k, firstTs);
  }

  protected cachedLatestTs(e: EntityIdx, k: KeyIdx): number {
    const m = this.latestTs.get(e);
    const cached = m?.get(k);
    if (cached !== undefined) return cached;
    const raw = this.env.latest.get(seriesKey(e, k));
    const ts = raw === undefined ? -Infinity : decodeStamped(raw).ts;
    if (raw !== undefined) this.setLatestTs(e, k, ts);
    return ts;
  }

  protected setLatestTs(e: EntityIdx, k: KeyIdx, ts: number): void {
    let m = this.latestTs.get(e);
    if (m === undefined) this.latestTs.set(e, (m = new Map()));
    m.set(k, ts);
  }

  /** ms the batch filling may wait for others to share its commit: the write budget's, or the fixed delay */
  protected commitDelay(): number {
    return this.pacer?.commitDelayMs() ?? this.commitDelayMs;
  }

  /** how many times applyIntervalMs and applyMaxPoints an apply waits: larger, rarer applies while wear is paced */
  protected applyStretch(): number {
    return this.pacer?.applyStretch() ?? 1;
  }
}
