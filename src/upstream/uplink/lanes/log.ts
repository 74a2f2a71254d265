/**
 * Live points straight from the write-ahead log.
 *
 * With the log, a point reaches LMDB (and the outbox) only when the store applies its log, every
 * store.applyIntervalMs. Applying more often for sync's sake cost the card far more than the log saves (an LMDB
 * commit per send and per acknowledgement: BENCHMARKS.md, "SD-card wear"). So while the upstream answers, a
 * record's points are sent from memory as soon as the record is on disk, and what was sent is marked in the log
 * itself (LmdbTimeseriesStore.noteSent), riding on its next group commit: the apply then records nothing left to
 * send for them, and the link being up costs the card no LMDB commit at all. Everything else (a device without
 * a token, parked, points held for their timestamp, a record that came while backing off, a failed send) is left
 * to the outbox, exactly as without the log.
 *
 * Invariants: a device's items go in LSN order, one job of a device at a time (`Dev.busyLog`); at most
 * LOG_LANE_MAX_POINTS wait here (past it, new records are left to the outbox); `loggedTotal` (and each
 * `Dev.logged`) counts the points of records not applied and not sent: what the status adds to the backlog.
 */
import type { SeriesColumn } from '../../../model/batch.js';
import { type OutboxRecorder, type QueueKey, encodeRefs, loggedKey, queueKey } from '../../../store/outbox.js';
import { type AckOps, noOps } from '../acks.js';
import { MAX_AHEAD_MS, MIN_SENDABLE_TS } from '../clock.js';
import type { Dev } from '../devices.js';
import { type WirePoint, wireBodies, wireValue } from '../wire.js';
import { JOB_BATCHES, type LaneHost } from './host.js';
import { entryOf } from './outbox.js';

/**
 * points of the write-ahead log waiting to be sent from memory at most; past it (a slow upstream) new records
 * are left to the outbox, recorded when the store applies its log
 */
const LOG_LANE_MAX_POINTS = 20_000;
/** the least time between two applies of the log for points held for their timestamp (applyForHeld) */
const HELD_APPLY_MS = 10_000;

/** One device's points of one record of the write-ahead log, sent from memory. */
interface LoggedItem {
  readonly lsn: number;
  readonly entityId: string;
  readonly series: ReadonlyMap<string, readonly SeriesColumn[]>;
  readonly points: number;
}

export class LogLane {
  private queue: LoggedItem[] = [];
  private queuePoints = 0;
  /** per device, its points in each log record not applied and not sent yet: what the status counts as pending */
  private readonly pending = new Map<string, { readonly dev: Dev; readonly n: number; readonly lsn: number }>();
  /** points of `pending`, all devices */
  loggedTotal = 0;
  private heldApplyAt = -Infinity;
  private heldApplyTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly h: LaneHost,
    private readonly recorder: OutboxRecorder,
  ) {}

  /** A record of the log is on disk (OutboxListener.logged). */
  logged(lsn: number, points: ReadonlyMap<string, ReadonlyMap<string, readonly SeriesColumn[]>>): void {
    let queue = !this.h.jobs.stopped() && !this.h.sender.link.backingOff;
    for (const [entityId, series] of points) {
      const dev = this.h.accounting.devices.byId(entityId);
      if (dev === undefined) continue;
      let n = 0;
      for (const cols of series.values()) for (const c of cols) n += c.ts.length;
      this.pending.set(loggedKey(lsn, entityId), { dev, n, lsn });
      dev.logged += n;
      this.loggedTotal += n;
      if (queue && this.queuePoints + n > LOG_LANE_MAX_POINTS) queue = false;
      if (!queue) continue;
      this.queue.push({ lsn, entityId, series, points: n });
      this.queuePoints += n;
    }
    this.h.jobs.wake();
  }

  /** A device's points of a log record went upstream, or were recorded in the outbox by an apply. */
  private done(lsn: number, entityId: string): void {
    const key = loggedKey(lsn, entityId);
    const p = this.pending.get(key);
    if (p === undefined) return;
    this.pending.delete(key);
    p.dev.logged -= p.n;
    this.loggedTotal -= p.n;
  }

  /** The records up to `lsn` are in LMDB (OutboxListener.applied): the outbox counts what is left of them. */
  applied(lsn: number): void {
    // in insertion order, which is LSN order
    for (const [key, p] of this.pending) {
      if (p.lsn > lsn) break;
      this.pending.delete(key);
      p.dev.logged -= p.n;
      this.loggedTotal -= p.n;
    }
  }

  /** Starts a job per device with queued log items, in the free slots (at most `liveCap` live); returns jobs started. */
  dispatch(liveCap: number): number {
    if (this.queue.length === 0) return 0;
    if (this.h.sender.link.backingOff) {
      this.queue = [];
      this.queuePoints = 0;
      return 0;
    }
    const { slots } = this.h.jobs;
    const free = Math.min(this.h.cfg.concurrency - slots.inFlight, liveCap - slots.liveInFlight);
    if (free <= 0) return 0;
    const jobs = new Map<Dev, LoggedItem[]>();
    const jobPoints = new Map<Dev, number>();
    const maxPoints = Math.max(1, Math.floor((this.h.cfg.maxBatchBytes * JOB_BATCHES) / this.h.sender.bytesPerPoint));
    const minTs = MIN_SENDABLE_TS;
    const maxTs = this.h.now() + MAX_AHEAD_MS;
    const rest: LoggedItem[] = [];
    const waiting = new Set<Dev>();
    let held = false;
    for (const item of this.queue) {
      const dev = this.h.accounting.devices.byId(item.entityId);
      // parked: the outbox's way, when the store applies its log (no hurry, no extra commit)
      if (dev === undefined || dev.parked !== null) continue;
      // a point held for its timestamp: the outbox's way at once (it holds them, and sends the rest)
      if (!sendable(item, minTs, maxTs)) {
        held = true;
        continue;
      }
      const n = jobPoints.get(dev) ?? 0;
      // a device's items go in LSN order: once one waits, the later ones wait too (a later value wins upstream)
      if (
        dev.busyLog ||
        waiting.has(dev) ||
        (!jobs.has(dev) && jobs.size >= free) ||
        (n > 0 && n + item.points > maxPoints)
      ) {
        waiting.add(dev);
        rest.push(item);
        continue;
      }
      let job = jobs.get(dev);
      if (job === undefined) jobs.set(dev, (job = []));
      job.push(item);
      jobPoints.set(dev, n + item.points);
    }
    this.queue = rest;
    this.queuePoints = rest.reduce((s, i) => s + i.points, 0);
    if (held) this.applyForHeld();
    for (const [dev, items] of jobs) this.h.jobs.track(this.run(dev, items));
    return jobs.size;
  }

  /**
   * Puts the log into LMDB for items with held timestamps (the outbox holds those points and sends the rest):
   * at once, then at most every HELD_APPLY_MS, so a device whose clock is off costs no LMDB commit per post.
   */
  private applyForHeld(): void {
    const wait = this.heldApplyAt + HELD_APPLY_MS - this.h.now();
    if (wait <= 0) {
      this.heldApplyAt = this.h.now();
      this.h.store.timeseries.applyLogged();
    } else {
      this.heldApplyTimer ??= setTimeout(() => {
        this.heldApplyTimer = undefined;
        this.heldApplyAt = this.h.now();
        this.h.store.timeseries.applyLogged();
      }, wait);
      this.heldApplyTimer.unref();
    }
  }

  stop(): void {
    clearTimeout(this.heldApplyTimer);
  }

  private async run(dev: Dev, items: readonly LoggedItem[]): Promise<void> {
    const { slots } = this.h.jobs;
    dev.busyLog = true;
    slots.inFlight++;
    slots.liveInFlight++;
    // a record applied since it was queued is in the outbox: sent from there
    const taken = items.filter((i) => this.recorder.sendingFromLog(i.lsn, i.entityId));
    let ok = false;
    try {
      if (taken.length === 0) return;
      const token = await this.h.accounting.devices.tokenFor(dev);
      if (token === undefined) return;
      await this.h.jobs.turns.take(true);
      if (this.h.jobs.stopped()) return;
      const points: WirePoint[] = [];
      for (const item of taken) {
        for (const [key, cols] of item.series) {
          const keyJson = JSON.stringify(key);
          // columns in write order: wireBodies keeps the later value of a key at one ts
          for (const c of cols)
            for (let i = 0; i < c.ts.length; i++)
              points.push({ ts: c.ts[i] as number, key: keyJson, value: wireValue(c.value(i)) });
        }
      }
      let sent = 0;
      let bytes = 0;
      const bodies = wireBodies(points, this.h.sender.transport.bodyLimit(token), Infinity);
      for (let r = bodies.next(); !r.done; await this.h.jobs.turns.take(true), r = bodies.next()) {
        const { body, points: n } = r.value;
        await this.h.sender.link.pace(false, n);
        if (this.h.jobs.stopped()) return;
        const o = await this.h.sender.transport.telemetry(token, body);
        if (o.kind === 'sent') {
          sent += n;
          bytes += body.length;
          this.h.sender.succeeded();
          if (sent === points.length) break;
          continue;
        }
        if (o.kind === 'setAside') this.setAside(dev, taken, o.error);
        else this.h.sender.failed(dev, token, o);
        return;
      }
      ok = true;
      this.h.sender.sent(sent, bytes);
    } finally {
      this.sent(taken, ok);
      // what did not go is left to the outbox: recorded now, so the retries (and the back-off) have it
      if (!ok && taken.length > 0) this.h.store.timeseries.applyLogged();
      dev.busyLog = false;
      slots.inFlight--;
      slots.liveInFlight--;
      this.h.jobs.wake();
    }
  }

  /**
   * The upstream refused log items with 400: they are put into LMDB now (recorded in the outbox under seqs the
   * recorder notes, as they are being sent) and set aside there, as a batch of the outbox lane is: never retried.
   */
  private setAside(dev: Dev, items: readonly LoggedItem[], error: string): void {
    this.h.store.timeseries.applyLogged();
    const ops: AckOps = noOps();
    let n = 0;
    for (const item of items) {
      const recorded = this.recorder.sentFromLog(item.lsn, item.entityId, false);
      if (recorded === undefined) continue;
      const { seq, e } = recorded;
      const key = queueKey(seq, e);
      const value = this.h.store.outbox.queue.get(key);
      if (value === undefined) continue;
      const entry = entryOf(key, value);
      ops.remove.push(key);
      ops.setAside.push({ key, value: { refs: encodeRefs(entry.refs), status: 400, error } });
      this.h.accounting.noteQueued(e, entry.refs, -1);
      n += entry.points;
    }
    const counters = this.h.accounting.counts.counters;
    counters.setAside += n;
    this.h.accounting.counts.error(
      `HTTP 400 from ${this.h.sender.transport.url} for a batch of ${dev.name}: ${error.slice(0, 200)}`,
    );
    this.h.log.warn(
      `sync: the upstream refused a batch of ${dev.name} (${n} points) with 400; set aside: ${error.slice(0, 200)}`,
    );
    this.h.accounting.acks.queue(ops);
  }

  /** Marks what went (in the log, or by removing the outbox entry an apply recorded meanwhile). */
  private sent(items: readonly LoggedItem[], ok: boolean): void {
    const marks: Array<[number, string]> = [];
    const remove: QueueKey[] = [];
    for (const item of items) {
      const recorded = this.recorder.sentFromLog(item.lsn, item.entityId, ok, item.points);
      if (!ok) continue;
      this.done(item.lsn, item.entityId);
      if (recorded === undefined) {
        marks.push([item.lsn, item.entityId]);
        continue;
      }
      const key = queueKey(recorded.seq, recorded.e);
      const value = this.h.store.outbox.queue.get(key);
      if (value === undefined) continue;
      this.h.accounting.noteQueued(recorded.e, entryOf(key, value).refs, -1);
      remove.push(key);
    }
    this.h.store.timeseries.noteSent(marks);
    if (remove.length > 0) this.h.accounting.acks.queue({ ...noOps(), remove });
  }
}

/** Whether every point of a log item may be sent now (else the outbox holds the ones it may not). */
function sendable(item: LoggedItem, minTs: number, maxTs: number): boolean {
  for (const cols of item.series.values()) {
    for (const c of cols) for (const ts of c.ts) if (ts < minTs || ts > maxTs) return false;
  }
  return true;
}
