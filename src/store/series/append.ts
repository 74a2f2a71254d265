/**
 * Append and group commit: write() queues a request's points; flushPending() writes every request queued in
 * the turn (or within commitDelayMs) as one log record (log apply: apply.ts) or, without the log and for bulk
 * batches, as one LMDB transaction (head.ts puts the points); each request is acknowledged once its batch is on
 * disk. GroupCommit owns the batch filling and whether one is committing.
 */
import { performance } from 'node:perf_hooks';
import { type SeriesColumn, TelemetryBatch } from '../../model/batch.js';
import type { TsRecord } from '../../model/record.js';
import { type StoreEnv, writeFailure } from '../env.js';
import type { OutboxRecorder } from '../outbox.js';
import { type PendingPoints, encodePoints as encodeLogged } from '../wal.js';
import type { CommitPacer } from '../write-budget.js';
import type { LogApplier } from './apply.js';
import type { HeadWriter } from './head.js';

/** the least writes a batch holds before it may be written early (batchFull) */
const EARLY_FLUSH_WRITES = 8;
/** points in a batch that are written at once: ~4 KiB of log record, a page (msgpack ~16 bytes a point) */
const EARLY_FLUSH_POINTS = 256;
/**
 * points from which a batch bypasses the log for an LMDB commit of its own: ~50 KB of copied pages is then
 * ≤ 25 bytes a point, and the commit runs on lmdb-js' writer thread (bulk ingest: 1,000-timestamp bodies)
 */
const BULK_POINTS = 2000;
/** what an fdatasync of the log writes at least: a page */
const LOG_PAGE = 4096;

/**
 * A batch filling. Two lanes: `shared`, where every write goes while the write budget has room (and with a fixed
 * delay), and `light`, which only the writers the budget finds light use while it paces commits: their batches go
 * at once while the heavy writers' wait the delay in `shared` (write-budget.ts, writer-shares.ts).
 */
class Lane {
  /**
   * entity UUID → key → the columns written to it, in call order, waiting for this lane's flush. Bounded by
   * the requests in flight: each caller awaits the batch, and bodies are capped (http.maxBodyBytes).
   */
  pending = new Map<string, Map<string, SeriesColumn[]>>();
  done: Promise<void> | undefined;
  settle: { resolve: () => void; reject: (err: unknown) => void } | undefined;
  /** performance.now() of the first write of the batch filling */
  since = 0;
  /** points in `pending` */
  points = 0;
  /** write() calls in `pending`, and in the last batch flushed */
  writes = 0;
  lastWrites = 0;
  /** the delay the batch filling was given when it started (> 0 while paced: counted when it is written) */
  delay = 0;
  constructor(readonly light: boolean) {}
}

export class GroupCommit {
  private readonly shared = new Lane(false);
  private readonly light = new Lane(true);
  /** a flushed batch whose transaction has not committed yet */
  private committing = false;
  /** performance.now() of the latest write() call: background work yields to foreground writes */
  private lastWrite = 0;

  constructor(
    private readonly env: StoreEnv,
    private readonly head: Pick<HeadWriter, 'putPoints' | 'forgetUncommitted'>,
    /** the log writes are acknowledged from; absent: each batch is an LMDB commit */
    private readonly log: LogApplier | undefined,
    private readonly outbox: OutboxRecorder | undefined,
    /** ms a write may wait for others to share its commit, unless the pacer decides */
    private readonly commitDelayMs: number,
    private readonly pacer: CommitPacer | undefined,
  ) {}

  /** performance.now() of the latest write() call */
  get lastWriteAt(): number {
    return this.lastWrite;
  }

  /**
   * Group commit: write() only queues the points; every request of the current event-loop turn (or
   * of the next `commitDelayMs`, when set) is written by one `flushPending()`, merged per series, so 64
   * concurrent 3-key posts to a device cost 3 fragment puts and 3 latest puts in one transaction instead of 384
   * puts. All of a batch's puts share one LMDB transaction, so each request is still all-or-nothing, and each is
   * acknowledged once that transaction is committed and flushed. Points are kept in call order, so on an equal
   * ts the later request wins, exactly as sequential upserts (a device's writes stay in the lane that holds its
   * pending ones).
   */
  write(entityId: string, points: TelemetryBatch | readonly TsRecord[]): Promise<void> {
    this.lastWrite = performance.now();
    const batch = points instanceof TelemetryBatch ? points : TelemetryBatch.fromRecords(points);
    const lane = this.laneFor(entityId);
    let queued = false;
    for (const [key, col] of batch.series) {
      if (col.length === 0) continue;
      let bySeries = lane.pending.get(entityId);
      if (bySeries === undefined) lane.pending.set(entityId, (bySeries = new Map()));
      const queuedCols = bySeries.get(key);
      if (queuedCols === undefined) bySeries.set(key, [col]);
      else queuedCols.push(col);
      lane.points += col.length;
      queued = true;
    }
    if (!queued) return Promise.resolve();
    if (lane.done === undefined) {
      lane.done = new Promise<void>((resolve, reject) => {
        lane.settle = { resolve, reject };
      });
      lane.since = performance.now();
      lane.delay = this.commitDelay(lane);
      // While a batch is committing, the next one keeps filling; it is written when that commit lands (flushNext).
      if (!this.committing) {
        if (lane.delay > 0) setTimeout(() => this.flushLane(lane), lane.delay);
        else setImmediate(() => this.flushLane(lane));
      }
    }
    lane.writes++;
    const done = lane.done;
    if (!this.committing && this.batchFull(lane)) {
      this.flushLane(lane);
      return done;
    }
    // A bulk upload does not become one huge log record (and a segment of its size)
    if (this.log !== undefined && lane.points >= this.log.applyMaxPoints) this.flushLane(lane);
    return done;
  }

  /**
   * Writes every queued point of both lanes: with the log, as one log record each (acknowledged once on disk;
   * LMDB gets it at the next apply), else in one synchronous pass of puts (one LMDB transaction). Idempotent
   * when nothing is queued.
   */
  flushPending(): void {
    this.flushLane(this.light);
    this.flushLane(this.shared);
  }

  /**
   * The lane a writer's points go to: the one already holding its pending points (call order), else the light
   * lane while the budget paces commits and finds this writer light.
   */
  private laneFor(entityId: string): Lane {
    if (this.light.pending.has(entityId)) return this.light;
    if (this.shared.pending.has(entityId)) return this.shared;
    return this.pacer?.pacing() === true && !this.pacer.heavy(entityId) ? this.light : this.shared;
  }

  private flushLane(lane: Lane): void {
    const batch = lane.pending;
    const settle = lane.settle;
    if (settle === undefined) return;
    lane.pending = new Map();
    lane.lastWrites = lane.writes;
    lane.writes = 0;
    const points = lane.points;
    lane.points = 0;
    lane.done = undefined;
    lane.settle = undefined;
    if (this.pacer !== undefined && lane.light) this.pacer.noteCommit('light');
    else if (this.pacer !== undefined && lane.delay > 0) this.pacer.noteCommit('paced');
    const bulk = points >= BULK_POINTS;
    if (this.log !== undefined && !bulk) {
      this.logPending(this.log, batch, points, lane.light, settle);
      return;
    }
    this.charge(batch, points, 0, lane.light);
    let last: Promise<boolean> | undefined;
    try {
      // A bulk batch is an LMDB commit of its own, acknowledged once flushed: at this size a commit costs a few
      // bytes per point, and lmdb-js commits on its writer thread while this one parses the next bodies. What
      // the log holds goes in first, so a later write still wins on an equal ts.
      if (this.log !== undefined) {
        this.log.applyLogged();
        // what the log holds must go in first; if it cannot (a full disk), neither can this
        const failure = this.log.failure;
        if (failure !== undefined) throw failure;
      }
      last = this.head.putPoints(batch);
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
    const flushed = new Promise<void>((resolve, reject) => {
      this.env.root.flushed.then(() => resolve(), reject);
    });
    // the commit's own error first: it names the cause (507 for a full disk); lmdb-js' flush error does not
    flushed.catch(() => undefined);
    last
      .then(() => flushed)
      .then(
        () => settle.resolve(),
        (err: unknown) => settle.reject(writeFailure(err)),
      );
    this.committing = true;
    const next = (): void => {
      this.committing = false;
      this.flushNext();
    };
    last.then(next, () => {
      this.head.forgetUncommitted();
      next();
    });
  }

  /**
   * Charges each writer of a batch its part of the commit (the write budget paces the writers whose bytes
   * drained its reserve): the log's pages shared by points, and each point at its estimated apply cost.
   */
  private charge(batch: PendingPoints, points: number, logBytes: number, light: boolean): void {
    if (this.pacer === undefined || points === 0) return;
    for (const [entityId, bySeries] of batch) {
      let n = 0;
      for (const cols of bySeries.values()) for (const col of cols) n += col.length;
      this.pacer.charge(entityId, (logBytes * n) / points, n, light);
    }
  }

  /**
   * After a commit lands: a light batch that filled meanwhile is written at once; a shared one once its first
   * write has waited commitDelayMs, not at once. Written at once, it would take a commit (an fdatasync, a page of
   * log or an LMDB commit's pages) of its own for the few posts of one fsync's time; with the wait, each post
   * still waits at most commitDelayMs plus one commit (docs/design/write-path.md: at 10 posts/s and 250 ms, ~4.3
   * commits/s became ~2.9).
   */
  private flushNext(): void {
    if (this.light.settle !== undefined) {
      this.flushLane(this.light);
      // one commit at a time: the shared lane's batch follows when this one lands
      if (this.committing) return;
    }
    const lane = this.shared;
    if (lane.settle === undefined) return;
    if (this.batchFull(lane)) {
      this.flushLane(lane);
      return;
    }
    const wait = lane.since + this.commitDelay(lane) - performance.now();
    if (wait <= 0) this.flushLane(lane);
    else setTimeout(() => this.flushLane(lane), wait);
  }

  /**
   * Whether the batch filling is written before its delay is out, because waiting buys nothing (docs/design/write-path.md: an
   * adaptive delay): it holds as many writes as the last batch did, at least EARLY_FLUSH_WRITES. Where many
   * clients each wait for their answer before posting again (a bulk load on 64 connections), they are all back
   * within a millisecond of a commit, and no more come until it is answered; holding them the full delay would
   * cap them at (connections ÷ delay) posts/s. Devices posting one at a time on their own schedules never fill
   * that many within the delay, so they share commits as the delay intends. A batch of EARLY_FLUSH_POINTS or
   * more goes at once too, unless the budget paces it: it fills a page of log by itself, but its writers are the
   * heavy ones, whose bytes the delay is there to slow.
   */
  private batchFull(lane: Lane): boolean {
    if (this.commitDelay(lane) === 0) return false;
    // paced by the write budget, saving commits and slowing the heavy writers is the point
    if (this.pacer?.pacing() === true) return false;
    // a page of log or more already: waiting would save no page (a bulk upload, 1,000 timestamps a body)
    if (lane.points >= EARLY_FLUSH_POINTS) return true;
    return lane.writes >= Math.max(EARLY_FLUSH_WRITES, lane.lastWrites);
  }

  /** Appends a group commit to the log; its callers are answered once the record is on disk. */
  private logPending(
    log: LogApplier,
    batch: PendingPoints,
    points: number,
    light: boolean,
    settle: { resolve: () => void; reject: (err: unknown) => void },
  ): void {
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
    // a commit costs the log its pages: a post alone, a whole 4-KiB page
    this.charge(batch, points, Math.max(1, Math.ceil(payload.length / LOG_PAGE)) * LOG_PAGE, light);
    const entry = log.append(payload, batch);
    const lsn = entry.lsn;
    this.committing = true;
    entry.done
      .then(
        () => {
          log.markDurable(entry);
          settle.resolve();
          this.outbox?.logged(lsn, batch);
        },
        (err: unknown) => {
          log.drop(entry);
          settle.reject(writeFailure(err));
        },
      )
      .finally(() => {
        this.committing = false;
        log.afterGroupCommit();
        this.flushNext();
      });
  }

  /** ms a lane's batch may wait for others to share its commit: the write budget's, or the fixed delay */
  private commitDelay(lane: Lane): number {
    if (lane.light) return 0;
    return this.pacer?.commitDelayMs() ?? this.commitDelayMs;
  }
}
