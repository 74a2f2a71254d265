/**
 * Log apply: group commits acknowledged from the write-ahead log (wal.ts) are put into LMDB here, in bounded
 * synchronous transactions that record the last LSN applied (meta `walApplied`), at least every applyIntervalMs
 * and at once when a reader needs them. The applier owns the log and what it holds that LMDB does not: opened at
 * start, it takes back what was acknowledged from the log but never applied.
 */
import { performance } from 'node:perf_hooks';
import type { OutpostError } from '../../errors.js';
import { SeriesColumn } from '../../model/batch.js';
import { type StoreEnv, writeFailure } from '../env.js';
import type { OutboxRecorder } from '../outbox.js';
import { type PendingPoints, Wal, type WalStats, decodeRecord, encodeSentMark } from '../wal.js';
import type { CommitPacer } from '../write-budget.js';
import type { HeadWriter } from './head.js';
import type { LogOptions } from './options.js';

/** A logged group commit not yet in LMDB. */
export interface Logged {
  readonly points: PendingPoints;
  readonly lsn: number;
  readonly count: number;
  /** its record is on disk (only durable ones are applied: their LSN must never be reused) */
  durable: boolean;
  readonly done: Promise<void>;
}

/** One entity's points of a record (0 without the record). */
function entityPoints(points: PendingPoints | undefined, entityId: string): number {
  let n = 0;
  for (const cols of points?.get(entityId)?.values() ?? []) for (const c of cols) n += c.ts.length;
  return n;
}

export function countPoints(points: PendingPoints): number {
  let n = 0;
  for (const bySeries of points.values()) for (const cols of bySeries.values()) for (const c of cols) n += c.length;
  return n;
}

/** how long applies wait after one failed (the free-space check reads the filesystem once a second) */
const APPLY_HOLD_MS = 2000;

export class LogApplier {
  /** the write-ahead log writes are acknowledged from */
  private readonly wal: Wal;
  /** logged group commits not yet put into LMDB, in LSN order; bounded by applyMaxPoints (an apply empties it) */
  private readonly logged: Logged[] = [];
  private loggedPoints = 0;
  private applyTimer: NodeJS.Timeout | undefined;
  /** performance.now() before which no apply is tried, after one failed */
  private applyHeldUntil = 0;
  /** logged points not yet in LMDB that make an apply happen before applyIntervalMs (config store.applyMaxPoints) */
  get applyMaxPoints(): number {
    return this.opts.applyMaxPoints;
  }

  /** What the log held at open that LMDB did not (acknowledged, not yet applied): put in at start. */
  readonly replayed = { records: 0, points: 0 };

  /** why the last apply failed (a full disk), until one succeeds */
  private applyFailure: OutpostError | undefined;

  constructor(
    private readonly env: StoreEnv,
    private readonly opts: LogOptions,
    private readonly outbox: OutboxRecorder | undefined,
    private readonly head: Pick<HeadWriter, 'putPoints' | 'forgetUncommitted'>,
    private readonly pacer: CommitPacer | undefined,
    /** whether a write transaction of the store's is open (a compaction step): no apply may run inside it */
    private readonly inWriteTransaction: () => boolean,
  ) {
    // What was acknowledged from the log but is not in LMDB is taken back; the store applies it once constructed.
    const applied = (env.meta.get('walApplied') as number | undefined) ?? 0;
    const { wal, records } = Wal.open(opts.fs, { segmentBytes: opts.segmentBytes, appliedLsn: applied });
    this.wal = wal;
    this.replayed.records = records.length;
    const pointsOf = new Map<number, PendingPoints>();
    for (const r of records) {
      const body = decodeRecord(r.payload);
      if (body.kind === 'sent') {
        // a mark follows its record in the log: its points are known (none when the record was applied)
        for (const [lsn, entityId] of body.pairs)
          this.outbox?.replaySent(lsn, entityId, entityPoints(pointsOf.get(lsn), entityId));
        continue;
      }
      const points = body.points;
      pointsOf.set(r.lsn, points);
      const count = countPoints(points);
      this.replayed.points += count;
      this.logged.push({ points, lsn: r.lsn, count, durable: true, done: Promise.resolve() });
    }
  }

  /** What the log has cost since start. */
  get stats(): WalStats {
    return this.wal.stats;
  }

  /** points logged and not yet put into LMDB */
  get pointsLogged(): number {
    return this.loggedPoints;
  }

  /** why the last apply failed (a full disk), until one succeeds */
  get failure(): OutpostError | undefined {
    return this.applyFailure;
  }

  /** Appends a group commit's record to the log; it is applied once `markDurable` says its record is on disk. */
  append(payload: Buffer, points: PendingPoints): Logged {
    const { lsn, durable } = this.wal.append(payload);
    const entry: Logged = { points, lsn, count: countPoints(points), durable: false, done: durable };
    this.logged.push(entry);
    this.loggedPoints += entry.count;
    return entry;
  }

  markDurable(entry: Logged): void {
    entry.durable = true;
  }

  /** A record that never reached the disk: not acknowledged, and its LSN will be reused, so it must never reach LMDB. */
  drop(entry: Logged): void {
    const i = this.logged.indexOf(entry);
    if (i >= 0) this.logged.splice(i, 1);
    this.loggedPoints -= entry.count;
  }

  /** After a group commit's record landed or failed: past applyMaxPoints, one bounded apply, else one scheduled. */
  afterGroupCommit(): void {
    // one bounded transaction per landed commit, so a bulk upload never holds the loop long
    if (this.loggedPoints >= this.opts.applyMaxPoints * this.applyStretch()) this.applyStep();
    else this.scheduleApply();
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
    if (this.inWriteTransaction()) return;
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
  private applyStep(): boolean {
    let n = 0;
    let points = 0;
    const max = this.opts.applyMaxPoints * this.applyStretch();
    while (
      n < this.logged.length &&
      (this.logged[n] as Logged).durable &&
      (n === 0 || points + (this.logged[n] as Logged).count <= max)
    ) {
      points += (this.logged[n] as Logged).count;
      n++;
    }
    if (n === 0) return false;
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
        for (const g of groups) this.head.putPoints(g.points, g.lsn, g.record);
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
      this.head.forgetUncommitted();
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

  private scheduleApply(): void {
    if (this.applyTimer !== undefined) return;
    this.applyTimer = setTimeout(() => this.applyLogged(), this.opts.applyIntervalMs * this.applyStretch());
    this.applyTimer.unref();
  }

  /** how many times applyIntervalMs and applyMaxPoints an apply waits: larger, rarer applies while wear is paced */
  private applyStretch(): number {
    return this.pacer?.applyStretch() ?? 1;
  }

  /**
   * Sync sent these devices' points of these log records upstream: the mark goes into the log with its next
   * group commit (no sync of its own), so after a crash the replay leaves them out of what is left to send.
   * A crash before that commit re-sends them (at-least-once).
   */
  noteSent(pairs: ReadonlyArray<readonly [lsn: number, entityId: string]>): void {
    if (pairs.length > 0) this.wal.appendLazy(encodeSentMark(pairs));
  }

  /** Stops the apply timer and closes the log, once what LMDB committed is flushed. */
  async close(): Promise<void> {
    clearTimeout(this.applyTimer);
    this.applyTimer = undefined;
    await this.env.flushed();
    await this.wal.close();
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
