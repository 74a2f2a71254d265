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
import type { OutboxRecorder } from '../outbox.js';
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
      const groups = applyGroups(batch, this.outbox);
      this.env.root.transactionSync(() => {
        for (const g of groups) this.putPoints(g.points, g.lsn, g.record);
        // what sync sent of these records from the log is counted in this transaction (store/outbox.ts)
        this.outbox?.applyingThrough(lsn);
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
   * Puts a group commit's points (or an apply's group of them, see applyGroups) in the current transaction (the
   * turn's lmdb-js batch, or a synchronous transaction around it), merged per series under one head seq.
   * `lsn`: the one log record they come from, whose sends from the log the outbox follows; `record` false: sync
   * already sent them all. Returns the last put's promise.
   */
  protected putPoints(batch: PendingPoints, lsn?: number, record = true): Promise<boolean> | undefined {
    let last: Promise<boolean> | undefined;
    const seq = this.nextSeq();
    const outbox = this.outbox;
    for (const [entityId, bySeries] of batch) {
      const e = this.dict.internEntity(entityId);
      // what sync already sent from the log is not left to send
      // biome-ignore lint/complexity/useOptionalChain: `recorded` is a boolean that narrows `outbox` where it is read below
      const recorded = record && outbox !== undefined && outbox.recordsLogged(lsn, entityId);
      if (recorded) outbox.recordedLogged(lsn, entityId, e, seq);
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
          if (recorded) outbox.fragment(e, k, ts[from] as number, ts[to - 1] as number, to - from);
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

/** One putPoints call of an apply: points of several log records under one head seq. */
export interface ApplyGroup {
  readonly points: PendingPoints;
  /** the log record of a group that is one record's devices being sent upstream from the log right now */
  readonly lsn?: number;
  /** false: sync sent all of these from the log already, the outbox records nothing for them */
  readonly record: boolean;
}

/**
 * The points of an apply's log records as few putPoints calls: every record's points of a series go into one
 * head fragment per window instead of one per record. A fragment costs its key and an LMDB node besides its
 * points, and compaction deletes each: with one per group commit (a commit every few hundred ms, a point or two of
 * each series in it) the reference load's applies wrote ~2.7 times, and its compaction ~2.5 times, what they do
 * merged (docs/design/write-path.md).
 *
 * Sync's outbox is why there can be more than one group: what it already sent from the log is recorded nowhere
 * (`record` false), and a device's points of a record whose send is under way are recorded alone, under that
 * record's LSN, because the sender removes exactly that entry once the send succeeds. Groups get different
 * seqs in an order that need not be the records' order, so a ts written in two groups is kept only in the group
 * of the last record that wrote it; within a group putPoints keeps the last (columns in record order).
 */
export function applyGroups(batch: readonly Logged[], outbox: OutboxRecorder | undefined): ApplyGroup[] {
  if (batch.length === 1) {
    const l = batch[0] as Logged;
    return [{ points: l.points, lsn: l.lsn, record: true }];
  }
  // group index: 0 left to send, 1 sent, 2.. one per record with sends under way
  const groups: Array<{ points: PendingPoints; lsn?: number; record: boolean }> = [
    { points: new Map(), record: true },
    { points: new Map(), record: false },
  ];
  const sending = new Map<number, number>();
  /** per entity and key: [group, column] in record order */
  const bySeries = new Map<string, Map<string, Array<[number, SeriesColumn]>>>();
  for (const l of batch) {
    for (const [entityId, series] of l.points) {
      let g = 0;
      if (outbox !== undefined) {
        if (!outbox.recordsLogged(l.lsn, entityId)) g = 1;
        else if (outbox.isSendingLogged(l.lsn, entityId)) {
          g = sending.get(l.lsn) ?? groups.length;
          if (g === groups.length) {
            sending.set(l.lsn, g);
            groups.push({ points: new Map(), lsn: l.lsn, record: true });
          }
        }
      }
      let keys = bySeries.get(entityId);
      if (keys === undefined) bySeries.set(entityId, (keys = new Map()));
      for (const [key, cols] of series) {
        let list = keys.get(key);
        if (list === undefined) keys.set(key, (list = []));
        for (const c of cols) list.push([g, c]);
      }
    }
  }
  for (const [entityId, keys] of bySeries) {
    for (const [key, list] of keys) {
      const first = (list[0] as [number, SeriesColumn])[0];
      const mixed = list.some(([g]) => g !== first);
      const winner = mixed ? lastWriters(list) : undefined;
      for (const [g, col] of list) {
        const kept = winner === undefined ? col : keepWon(col, g, winner);
        if (kept.length === 0) continue;
        const points = (groups[g] as ApplyGroup).points;
        let series = points.get(entityId);
        if (series === undefined) points.set(entityId, (series = new Map()));
        const cols = series.get(key);
        if (cols === undefined) series.set(key, [kept]);
        else cols.push(kept);
      }
    }
  }
  return groups.filter((g) => g.points.size > 0);
}

/** ts → the group of the last column (in record order) that wrote it */
function lastWriters(list: ReadonlyArray<readonly [number, SeriesColumn]>): Map<number, number> {
  const winner = new Map<number, number>();
  for (const [g, col] of list) for (const ts of col.ts) winner.set(ts, g);
  return winner;
}

/** The points of `col` whose ts group `g` keeps. */
function keepWon(col: SeriesColumn, g: number, winner: ReadonlyMap<number, number>): SeriesColumn {
  const out = new SeriesColumn();
  for (let i = 0; i < col.length; i++) if (winner.get(col.ts[i] as number) === g) out.append(col, i, i + 1);
  return out;
}
