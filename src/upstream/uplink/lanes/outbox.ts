/**
 * The two lanes over the outbox queue, split at a batch seq: *live* (batches written since the link last came
 * back) is sent unpaced and first; *backlog* (everything older) is drained behind it, paced by
 * sync.maxPointsPerSec. Points are read back from the store (the sync thread encodes them), posted as TB
 * telemetry arrays, and the entries acknowledged (acks.ts) once their bodies went.
 *
 * Invariants: a device has at most one job in flight per lane (`Dev.busy`), its entries of a lane go in seq
 * order; every entry of a lane before its `front` belongs to a device in its `blocked` set (parked), so a scan
 * starts past them; what is in memory is bounded by the devices and the requests in flight, never by the
 * backlog (a scan reads at most SCAN_LIMIT keys, and no value of an entry it skips).
 */
import {
  type FragmentRef,
  type OutboxRecorder,
  type QueueKey,
  type QueuePos,
  QUEUE_START,
  decodeQueueEntry,
  encodeQueueEntry,
  encodeRefs,
  queueFrom,
  refsPoints,
} from '../../../store/outbox.js';
import { type AckOps, noOps } from '../acks.js';
import { MAX_AHEAD_MS } from '../clock.js';
import type { Dev } from '../devices.js';
import type { ReadyGroup } from '../thread.js';
import { JOB_BATCHES, type LaneHost } from './host.js';

/** outbox entries one scan reads at most before dispatching what it found */
const SCAN_LIMIT = 2000;

export interface Lane {
  readonly index: 0 | 1;
  lo: number;
  hi: number;
  readonly paced: boolean;
  front: QueuePos;
  blocked: Set<number>;
}

export interface Entry {
  readonly key: QueueKey;
  readonly seq: number;
  readonly refs: FragmentRef[];
  /** only points at or after this ts are sent (a held entry released: the rest went before) */
  readonly fromTs: number;
  readonly points: number;
}

export function entryOf(key: QueueKey, value: unknown): Entry {
  const { fromTs, refs } = decodeQueueEntry(value);
  return { key, seq: key[1], refs, fromTs, points: refsPoints(refs) };
}

export class OutboxLanes {
  /** [live, backlog] */
  private readonly lanes: [Lane, Lane];

  /**
   * `boundary`: the first seq of the live lane. Batches already recorded are the backlog; everything written
   * from now on is live.
   */
  constructor(
    private readonly h: LaneHost,
    private readonly recorder: OutboxRecorder,
    boundary: number,
    /** an entry of an entity that is not a device (an asset): not synced */
    private readonly discard: (key: QueueKey, value: unknown) => void,
  ) {
    this.lanes = [
      {
        index: 0,
        lo: boundary,
        hi: Number.MAX_SAFE_INTEGER,
        paced: false,
        front: queueFrom(boundary),
        blocked: new Set(),
      },
      {
        index: 1,
        lo: QUEUE_START[1],
        hi: boundary,
        paced: h.cfg.maxPointsPerSec > 0,
        front: QUEUE_START,
        blocked: new Set(),
      },
    ];
  }

  /** the first seq of the live lane: the backlog is below it */
  get boundary(): number {
    return this.lanes[1].hi;
  }

  /** What was written during the outage becomes backlog, drained behind what comes now. */
  reconnected(lastSeq: number): void {
    const boundary = Math.max(this.lanes[0].lo, lastSeq + 1);
    this.lanes[1].hi = boundary;
    this.lanes[0].lo = boundary;
    this.lanes[0].front = queueFrom(boundary);
    this.lanes[0].blocked = new Set();
  }

  /** A parked device goes on: lanes that skipped its entries scan from their start again. */
  resumed(e: number | undefined): void {
    for (const lane of this.lanes) {
      if (e !== undefined && lane.blocked.has(e)) {
        lane.front = queueFrom(lane.lo);
        lane.blocked = new Set();
      }
    }
  }

  /** Entries were put back below the live boundary (held ones released): the backlog lane starts over. */
  rescanBacklog(): void {
    this.lanes[1].front = queueFrom(this.lanes[1].lo);
    this.lanes[1].blocked = new Set();
  }

  /** Whether the backlog lane has an entry past its front (one seek). */
  backlogWaits(): boolean {
    const lane = this.lanes[1];
    for (const _ of this.h.store.outbox.queue.keys({ start: lane.front, end: queueFrom(lane.hi), limit: 1 }))
      return true;
    return false;
  }

  /**
   * Scans lane `index` from its front and starts jobs for up to `slots` devices in flight, of which at most
   * `liveCap` live; returns jobs started.
   */
  fill(index: 0 | 1, slots: number, liveCap = Infinity): number {
    const lane = this.lanes[index];
    const h = this.h;
    const free = Math.min(
      slots - h.jobs.slots.inFlight,
      lane.index === 0 ? liveCap - h.jobs.slots.liveInFlight : Infinity,
    );
    if (free <= 0) return 0;
    const jobs = new Map<Dev, Entry[]>();
    const jobBytes = new Map<Dev, number>();
    let full = 0;
    let scanned = 0;
    let allBlocked = true;
    const maxBytes = h.cfg.maxBatchBytes * JOB_BATCHES;
    // keys only: the values of entries skipped (busy or parked devices) are never decoded, which keeps the
    // garbage of a scan, and with it RssAnon, independent of the backlog
    for (const qk of h.store.outbox.queue.keys({ start: lane.front, end: queueFrom(lane.hi) })) {
      const e = qk[2];
      scanned++;
      const dev = h.accounting.devices.ofEntity(e);
      if (dev === undefined) {
        // counted once: a scan before the acknowledgement commits finds the entry again
        if (!h.accounting.acks.has(qk[1], e)) this.discard(qk, h.store.outbox.queue.get(qk));
        continue;
      }
      if (dev.parked !== null) {
        if (allBlocked) {
          lane.front = queueFrom(qk[1], e + 1);
          lane.blocked.add(e);
        }
        continue;
      }
      allBlocked = false;
      if (dev.busy[lane.index] || h.accounting.acks.has(qk[1], e) || this.recorder.sendingEntries.has(`${qk[1]}:${e}`))
        continue;
      let job = jobs.get(dev);
      if (job === undefined) {
        if (jobs.size >= free) continue;
        jobs.set(dev, (job = []));
      }
      const bytes = jobBytes.get(dev) ?? 0;
      if (bytes >= maxBytes) continue;
      const value = h.store.outbox.queue.get(qk);
      if (value === undefined) continue;
      const entry = entryOf(qk, value);
      job.push(entry);
      const nb = bytes + entry.points * h.sender.bytesPerPoint;
      jobBytes.set(dev, nb);
      if (nb >= maxBytes) full++;
      if (scanned >= SCAN_LIMIT || (full >= free && jobs.size >= free)) break;
    }
    for (const [dev, entries] of jobs) h.jobs.track(this.run(lane, dev, entries));
    return jobs.size;
  }

  private async run(lane: Lane, dev: Dev, entries: Entry[]): Promise<void> {
    const { slots } = this.h.jobs;
    dev.busy[lane.index] = true;
    slots.inFlight++;
    if (lane.index === 0) slots.liveInFlight++;
    try {
      const token = await this.h.accounting.devices.tokenFor(dev);
      if (token === undefined) return;
      const maxBody = this.h.sender.transport.bodyLimit(token);
      const maxPoints = lane.paced ? Math.max(1, Math.ceil(this.h.cfg.maxPointsPerSec / 10)) : Infinity;
      let group: Entry[] = [];
      let groupBytes = 0;
      const flushGroup = async (): Promise<boolean> => {
        const g = group;
        group = [];
        groupBytes = 0;
        return g.length === 0 ? true : this.sendGroup(lane, dev, token, g, maxBody, maxPoints);
      };
      for (const entry of entries) {
        if (this.h.jobs.stopped()) return;
        const bytes = entry.points * this.h.sender.bytesPerPoint;
        // an entry bigger than a body goes in a group of its own, acknowledged body by body (see sendGroup)
        if (bytes >= maxBody && group.length > 0 && !(await flushGroup())) return;
        group.push(entry);
        groupBytes += bytes;
        if (groupBytes >= maxBody && !(await flushGroup())) return;
      }
      await flushGroup();
    } finally {
      dev.busy[lane.index] = false;
      slots.inFlight--;
      if (lane.index === 0) slots.liveInFlight--;
      this.h.jobs.wake();
    }
  }

  /**
   * Sends the points of `entries` (read back from the store) in bodies of at most maxBody bytes, then
   * acknowledges the entries in one transaction. False when the device or the upstream failed (stop the job).
   */
  private async sendGroup(
    lane: Lane,
    dev: Dev,
    token: string,
    entries: Entry[],
    maxBody: number,
    maxPoints: number,
  ): Promise<boolean> {
    const h = this.h;
    const live = lane.index === 0;
    const e = dev.e as number;
    const keyNames = new Map<number, string>();
    for (const entry of entries) {
      for (const r of entry.refs) {
        const name = keyNames.has(r.k) ? undefined : h.store.dict.keyName(r.k);
        if (name !== undefined) keyNames.set(r.k, name);
      }
    }
    // a slice of its own (turns.ts): the read-back when the main thread does it, else the requests after the
    // thread's answer
    const threaded = h.sender.transport.threaded;
    if (!threaded) {
      await h.jobs.turns.take(live);
      if (h.jobs.stopped()) return false;
    }
    let group: ReadyGroup;
    try {
      group = await h.sender.transport.encode({
        e,
        entries: entries.map((x) => ({ seq: x.seq, refs: x.refs, fromTs: x.fromTs })),
        keyNames,
        windowMs: h.store.timeseries.windowMs,
        maxTs: h.now() + MAX_AHEAD_MS,
        maxBodyBytes: maxBody,
        maxBodyPoints: maxPoints,
      });
    } catch (err) {
      // a block that cannot be decoded: retrying cannot help; the points stay in the store, the entries are shown
      const error = `unreadable: ${(err as Error).message}`;
      const n = entries.reduce((s, x) => s + x.points, 0);
      h.accounting.counts.counters.setAside += n;
      h.accounting.counts.error(`sync: a batch of ${dev.name} could not be read back (${error})`);
      h.log.error(`sync: a batch of ${dev.name} (${n} points) could not be read back; set aside: ${error}`);
      for (const entry of entries) h.accounting.noteQueued(e, entry.refs, -1);
      h.accounting.acks.queue({
        ...noOps(),
        remove: entries.map((x) => x.key),
        setAside: entries.map((x) => ({ key: x.key, value: { refs: encodeRefs(x.refs), status: 0, error } })),
      });
      return true;
    }
    try {
      if (threaded) await h.jobs.turns.take(live);
      if (h.jobs.stopped()) return false;
      return await this.sendBodies(lane, dev, token, entries, group);
    } finally {
      // bodies a failure left unsent: the transport forgets them (the entries stay pending)
      h.sender.transport.release(group);
    }
  }

  /** sendGroup's requests, body by body, and what their outcomes mean; false as sendGroup. */
  private async sendBodies(lane: Lane, dev: Dev, token: string, entries: Entry[], group: ReadyGroup): Promise<boolean> {
    const h = this.h;
    const live = lane.index === 0;
    const e = dev.e as number;
    const ops: AckOps = {
      ...noOps(),
      remove: entries.map((x) => x.key),
      held: group.held.map((x) => ({ e, seq: x.seq, value: x.value })),
    };
    let sent = 0;
    let bytes = 0;
    const only = entries.length === 1 ? entries[0] : undefined;
    for (const [i, { bytes: size, points: n, lastTs }] of group.bodies.entries()) {
      if (i > 0) await h.jobs.turns.take(live);
      await h.sender.link.pace(lane.paced, n);
      if (h.jobs.stopped()) return false;
      const o = await h.sender.transport.groupBody(token, group, i);
      if (o.kind === 'sent') {
        sent += n;
        bytes += size;
        h.sender.succeeded();
        // One entry over several bodies: each body holds every point up to its last ts (bodies are cut between
        // timestamps), so the entry is acknowledged that far and a restart re-sends at most one body of it.
        if (only !== undefined && sent < group.points) {
          h.accounting.acks.queue({
            ...noOps(),
            puts: [{ key: only.key, value: encodeQueueEntry(lastTs + 1, encodeRefs(only.refs)) }],
          });
          // With one slot live and backlog take turns job by job, so a job of one big entry (an apply records a
          // device's points of several minutes as one) would keep live waiting for all of its bodies: it ends after
          // JOB_BATCHES, as a job of several entries does, and the next one goes on from the ts acknowledged,
          // committed now so that the next scan reads it. Held and dropped points are counted once the whole
          // entry has gone, so an entry with any goes in one job.
          if (h.cfg.concurrency === 1 && i + 1 >= JOB_BATCHES && group.held.length === 0 && group.dropped === 0) {
            h.accounting.acks.flush();
            h.sender.sent(sent, bytes);
            return false;
          }
        }
        continue;
      }
      if (o.kind === 'setAside') {
        // the whole group is set aside: kept in the store and recorded, never retried on its own
        const { error } = o;
        h.accounting.counts.counters.setAside += group.points - sent;
        h.accounting.counts.error(
          `HTTP 400 from ${h.sender.transport.url} for a batch of ${dev.name}: ${error.slice(0, 200)}`,
        );
        h.log.warn(
          `sync: the upstream refused a batch of ${dev.name} (${group.points - sent} points) with 400; set aside: ${error.slice(0, 200)}`,
        );
        for (const entry of entries)
          ops.setAside.push({ key: entry.key, value: { refs: encodeRefs(entry.refs), status: 400, error } });
        break;
      }
      h.sender.failed(dev, token, o);
      return false;
    }
    h.sender.sent(sent, bytes);
    if (group.dropped > 0) h.accounting.counts.dropped(group.dropped, group.droppedFrom, group.droppedTo);
    for (const entry of entries) h.accounting.noteQueued(e, entry.refs, -1);
    for (const x of ops.held) h.accounting.counts.heldTotal += x.value.held;
    h.accounting.acks.queue(ops);
    return true;
  }
}
