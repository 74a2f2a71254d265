/**
 * Log apply: group commits acknowledged from the write-ahead log (wal.ts) are put into LMDB here, in bounded
 * synchronous transactions that record the last LSN applied (meta `walApplied`), at least every applyIntervalMs
 * and at once when a reader needs them. `putPoints` is the one place a group commit's points become head
 * fragments and latest values: the log apply and the bulk path of append.ts both go through it.
 */
import { performance } from 'node:perf_hooks';
import { SeriesColumn } from '../../model/batch.js';
import { encodeStamped, seriesKey } from '../encoding/codec.js';
import { encodeColumn } from '../encoding/gorilla.js';
import { writeFailure } from '../env.js';
import { type PendingPoints, encodeSentMark } from '../wal.js';
import { fragKey, windowStart } from './chunks.js';
import { type Logged, SeriesState } from './state.js';

/** how long applies wait after one failed (the free-space check reads the filesystem once a second) */
const APPLY_HOLD_MS = 2000;

export abstract class SeriesLogApply extends SeriesState {
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
    while (this.applyStep()) {
      /* until every durable record is in */
    }
  }

  /**
   * One transaction of applyLogged, of at most applyMaxPoints points (one record at least). Returns whether
   * more durable records wait.
   */
  protected applyStep(): boolean {
    let n = 0;
    let points = 0;
    const max = (this.logOpts?.applyMaxPoints ?? Infinity) * this.applyStretch();
    while (
      n < this.logged.length &&
      (this.logged[n] as Logged).durable &&
      (n === 0 || points + (this.logged[n] as Logged).count <= max)
    ) {
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
    this.env.root.flushed.then(
      () => wal.markApplied(lsn),
      () => undefined,
    );
    if (this.logged.length > 0) this.scheduleApply();
    return this.logged.length > 0 && (this.logged[0] as Logged).durable;
  }

  /** Resolves once every group commit logged so far has its record on disk (or failed). */
  async logIdle(): Promise<void> {
    await Promise.all(this.logged.map((l) => l.done.catch(() => undefined)));
  }

  protected scheduleApply(): void {
    if (this.applyTimer !== undefined || this.logOpts === undefined) return;
    this.applyTimer = setTimeout(() => this.applyLogged(), this.logOpts.applyIntervalMs * this.applyStretch());
    this.applyTimer.unref();
  }

  /**
   * Puts a group commit's points in the current transaction (the turn's lmdb-js batch, or a synchronous
   * transaction around it), merged per series under one head seq. Returns the last put's promise.
   */
  protected putPoints(batch: PendingPoints, lsn?: number): Promise<boolean> | undefined {
    let last: Promise<boolean> | undefined;
    const seq = this.nextSeq();
    const outbox = this.outbox;
    for (const [entityId, bySeries] of batch) {
      const e = this.dict.internEntity(entityId);
      // what sync already sent from the log is not left to send
      // biome-ignore lint/complexity/useOptionalChain: `record` is a boolean that narrows `outbox` where it is read below
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
        this.pointsPut += col.length;
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
}
