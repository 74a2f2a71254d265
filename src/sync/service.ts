/**
 * Store-and-forward sync to an upstream ThingsBoard (CONTRACT §9, issue 16).
 *
 * The backlog is the store: src/store/outbox.ts records, in each write's own transaction, which head
 * fragments a batch wrote per device; this service reads the points back from the store, posts them as TB
 * telemetry arrays and removes the records in one transaction per acknowledgement (a 2xx). What is in memory
 * is bounded by the devices and the requests in flight, never by the backlog: the outbox is scanned in key
 * order a bounded window at a time.
 *
 * Two lanes over the outbox, split at a batch seq: *live* (batches written since the link last came back) is
 * sent unpaced and first; *backlog* (everything older) is drained behind it, paced by `sync.maxPointsPerSec`,
 * in the slots live points leave free (each round fills live first, and a slot frees within one request). A
 * device has at most one request in flight per lane; its requests of a lane go in seq order.
 *
 * Faults: a network error, timeout or 5xx backs the whole upstream off (exponential, equal jitter, capped by
 * sync.retryMaxMs: backoffDelayMs); 429/503 with Retry-After wait that long, at most sync.retryMaxMs; 401/403/404 park that device only (re-provisioned once when a
 * provision key is set); a 400 sets the batch aside (recorded in the outbox, counted). Points the disk budget
 * or retention removed before they were sent are counted as dropped, with their time range.
 */
import type { Config } from '../config/index.js';
import type { Logger } from '../context.js';
import { fragKey } from '../store/chunks.js';
import type { Dictionary } from '../store/dict.js';
import type { EntityStore } from '../store/entities.js';
import type { StoreEnv } from '../store/env.js';
import {
  type FragmentRef, type OutboxRecorder, QUEUE_END, loggedKey, type QueueKey, decodeRefs, encodeRefs, queueKey, refsMinTs, refsPoints,
} from '../store/outbox.js';
import type { LmdbAttributeStore } from '../store/attributes.js';
import type { LmdbDepthStore } from '../store/depth.js';
import type { LmdbTimeseriesStore } from '../store/timeseries.js';
import type { SeriesColumn } from '../model/batch.js';
import type { EpochMs } from '../types.js';
import { MAX_AHEAD_MS, MIN_SENDABLE_TS, clockSynchronized } from './clock.js';
import { type UpstreamAnswer, UpstreamClient } from './client.js';
import { DepthSync, type DepthSyncStatus } from './depth.js';
import type { DeviceSyncStatus, SyncState, SyncStatus, SyncStatusSource } from './status.js';
import { SliceTurns } from './turns.js';
import type { HeldRecord } from './encode.js';
import { type ReadyGroup, SyncThread } from './thread.js';
import type { ThreadSetup } from './thread-worker.js';
import { type WirePoint, wireBodies, wirePoints, wireValue } from './wire.js';

/** CONTRACT §9 plus documented additions (README "Upstream sync"). */
export interface SyncStatusFull extends SyncStatus, DepthSyncStatus {
  readonly devices: ReadonlyArray<DeviceSyncStatus & { readonly depthBacklogPoints: number }>;
  /** whether the system clock is synchronized; null when this system cannot tell (clock.ts) */
  readonly clockSynchronized: boolean | null;
  /** points held back for their timestamp: before 2000-01-01, or more than a day ahead of the clock */
  readonly heldPoints: number;
  /** points of batches the upstream refused with 400, set aside (kept in the store, not retried) */
  readonly setAsidePoints: number;
  /** [first, last] ts of the points counted in droppedPoints; null when none */
  readonly droppedRange: readonly [EpochMs, EpochMs] | null;
  /** telemetry of entities that are not devices (assets): not synced (CONTRACT §9 syncs devices) */
  readonly notSyncedPoints: number;
}

interface Counters {
  sent: number;
  dropped: number;
  droppedFrom: number | null;
  droppedTo: number | null;
  setAside: number;
  notSynced: number;
  lastSuccessTs: number | null;
  lastError: string | null;
}

interface Dev {
  readonly id: string;
  /** undefined until the device's first points are in LMDB (entities are interned by the apply) */
  e: number | undefined;
  readonly name: string;
  parked: string | null;
  /** the token that was refused when parked for it (a different one set later unparks) */
  refusedToken: string | undefined;
  /** a request in flight in lane 0 (live) / 1 (backlog) */
  readonly busy: [boolean, boolean];
  /** a request in flight with points sent from the log */
  busyLog: boolean;
  /** its points in log records not applied and not sent yet (backlog counts what the outbox holds) */
  logged: number;
  backlog: number;
  /** the token in use was provisioned by this process: a refusal of it parks instead of provisioning again */
  freshlyProvisioned: boolean;
}

interface Lane {
  readonly index: 0 | 1;
  lo: number;
  hi: number;
  readonly paced: boolean;
  /** every outbox entry of this lane before `front` belongs to a device in `blocked` (parked) */
  front: QueueKey | ['q', number];
  blocked: Set<number>;
}

interface Entry {
  readonly key: QueueKey;
  readonly seq: number;
  readonly refs: FragmentRef[];
  /** only points at or after this ts are sent (a held entry released: the rest went before) */
  readonly fromTs: number;
  readonly points: number;
}

interface TokenRecord { token: string; provisioned: boolean }

/** what one acknowledgement transaction does */
interface AckOps {
  /** entries rewritten (partly sent): applied before `remove` */
  puts: Array<{ key: QueueKey; value: number[] }>;
  remove: Array<QueueKey>;
  held: Array<{ e: number; seq: number; value: HeldRecord }>;
  setAside: Array<{ key: QueueKey; value: unknown }>;
}

const COUNTERS_KEY = ['c'];
/**
 * points of the write-ahead log waiting to be sent from memory at most; past it (a slow upstream) new records
 * are left to the outbox, recorded when the store applies its log
 */
const LOG_LANE_MAX_POINTS = 20_000;

/** One device's points of one record of the write-ahead log, sent from memory (see sendFromLog). */
interface LoggedItem {
  readonly lsn: number;
  readonly entityId: string;
  readonly series: ReadonlyMap<string, readonly SeriesColumn[]>;
  readonly points: number;
}

/** outbox entries one scan reads at most before dispatching what it found */
const SCAN_LIMIT = 2000;
/** a job carries at most this many times sync.maxBatchBytes (estimated) of one device */
const JOB_BATCHES = 4;
const HOUR = 3_600_000;
const CHECK_PARKED_MS = 2_000;
const HELD_RECHECK_MS = 30_000;
/** the least time between two applies of the log for points held for their timestamp (applyForHeld) */
const HELD_APPLY_MS = 10_000;
const DROP_LOG_MS = 60_000;
/** ms an acknowledgement waits to share its transaction (see flushAcks) */
const ACK_DELAY_MS = 250;
/** how soon entries below the raw horizon whose fragments were still in the head are looked at again */
const DROP_RECHECK_MS = 2_000;

export interface SyncDeps {
  readonly env: StoreEnv;
  readonly dict: Dictionary;
  readonly entities: EntityStore;
  readonly timeseries: LmdbTimeseriesStore;
  readonly attributes: LmdbAttributeStore;
  readonly depth: LmdbDepthStore;
  /** the recorder the timeseries store was opened with (so the log's replay at start is recorded too) */
  readonly outbox: OutboxRecorder;
  readonly config: Readonly<Config['sync']>;
  /** what the sync thread opens: `env`'s data dir and map size (thread.ts) */
  readonly threadSetup: Pick<ThreadSetup, 'dataDir' | 'mapSizeBytes'>;
  readonly log: Logger;
  readonly now?: () => number;
}

export class SyncService implements SyncStatusSource {
  private readonly env: StoreEnv;
  private readonly cfg: Readonly<Config['sync']>;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly client: UpstreamClient;
  private readonly recorder: OutboxRecorder;
  private readonly devs = new Map<string, Dev>();
  private readonly counters: Counters;
  private readonly lanes: [Lane, Lane];
  private readonly depthSync: DepthSync;
  private backlogTotal = 0;
  /** hour bucket → pending points whose batch's first ts falls in it, and the smallest such ts */
  private readonly oldest = new Map<number, { n: number; min: number }>();
  private heldTotal = 0;
  private inFlight = 0;
  private failures = 0;
  private backoffUntil = 0;
  private state: 'unknown' | 'connected' | 'backoff' = 'unknown';
  private stopped = false;
  private wakeUp: (() => void) | undefined;
  private pumping: Promise<void> | undefined;
  private ackChain: Promise<void> = Promise.resolve();
  private tokens: number;
  private tokensAt: number;
  private bytesPerPoint = 30;
  private lastHorizonChecked = Number.MIN_SAFE_INTEGER;
  private lastDropLog = -Infinity;
  private droppedSinceLog = 0;
  private attrBusy = false;
  /** one slice of sync CPU work per event-loop turn (turns.ts) */
  private readonly turns = new SliceTurns();
  /** reads the backlog back, encodes it and posts it in a thread of its own (thread.ts) */
  private readonly thread: SyncThread;
  private readonly timers: NodeJS.Timeout[] = [];
  private ready: Promise<void> | undefined;

  constructor(private readonly deps: SyncDeps) {
    this.env = deps.env;
    this.cfg = deps.config;
    this.log = deps.log;
    this.now = deps.now ?? Date.now;
    this.client = new UpstreamClient(this.cfg.url, this.cfg.concurrency, this.cfg.requestTimeoutMs);
    this.thread = new SyncThread({
      env: this.env, client: this.client, log: this.log, thread: this.cfg.encoderThread,
      setup: { ...deps.threadSetup, url: this.cfg.url, concurrency: this.cfg.concurrency, requestTimeoutMs: this.cfg.requestTimeoutMs },
    });
    const saved = this.env.outbox.get(COUNTERS_KEY) as Partial<Counters> | undefined;
    this.counters = {
      sent: 0, dropped: 0, droppedFrom: null, droppedTo: null, setAside: 0, notSynced: 0, lastSuccessTs: null, lastError: null, ...saved,
    };
    this.recorder = deps.outbox;
    // Batches already recorded are the backlog; everything written from now on is live (headSeq is reserved
    // past every seq used so far, see LmdbTimeseriesStore.nextSeq).
    const boundary = (this.env.meta.get('headSeq') as number | undefined) ?? 1;
    this.lanes = [
      { index: 0, lo: boundary, hi: Number.MAX_SAFE_INTEGER, paced: false, front: ['q', boundary], blocked: new Set() },
      { index: 1, lo: 0, hi: boundary, paced: this.cfg.maxPointsPerSec > 0, front: ['q', 0], blocked: new Set() },
    ];
    this.tokens = 0;
    this.tokensAt = this.now();
    // acknowledgements ride in the next ingest batch's transaction when one comes within ACK_DELAY_MS
    this.recorder.beforeCommit = () => { if (this.ackTimer !== undefined) this.flushAcks(); };
    this.recorder.onQueued = (seq, e, refs) => {
      this.noteQueued(e, refs);
      this.wake();
    };
    this.recorder.onLogged = (lsn, points) => this.queueLogged(lsn, points);
    this.recorder.onApplied = (lsn) => this.loggedApplied(lsn);
    this.deps.attributes.syncMark = (id) => this.env.outbox.put(['a', id], Math.random());
    this.depthSync = new DepthSync({
      env: this.env, dict: deps.dict, entities: deps.entities, client: this.client, maxBatchBytes: this.cfg.maxBatchBytes,
      probeMs: this.cfg.depthProbeMs, log: this.log, now: this.now,
      host: {
        token: async (id) => {
          const dev = this.devById(id);
          return dev === undefined ? undefined : this.tokenFor(dev);
        },
        parked: (id) => (this.devById(id)?.parked ?? null) !== null,
        stopped: () => this.stopped,
        succeeded: () => this.succeeded(),
        failed: (id, token, a) => {
          const dev = this.devById(id);
          if (dev !== undefined) this.failed(dev, token, a);
        },
        pace: (n) => this.pace(this.lanes[1], n),
        turn: () => this.turns.take(false),
        inFlight: (delta) => { this.inFlight += delta; },
        wake: () => this.wake(),
        error: (message) => { this.counters.lastError = message; },
      },
    });
    this.deps.depth.syncRecorder = this.depthSync;
  }

  /** Starts sending. */
  start(): void {
    this.log.info(`sync to ${this.client.url}: ${this.cfg.maxPointsPerSec > 0 ? `backlog paced at ${this.cfg.maxPointsPerSec} points/s` : 'unpaced'}, ${this.cfg.concurrency} devices at once`);
    this.ready = this.loadBacklog();
    this.depthSync.load().catch((err: unknown) => this.log.error(`sync: counting the depth backlog failed: ${(err as Error).message}`));
    const every = (ms: number, fn: () => void): void => {
      const t = setInterval(fn, ms);
      t.unref();
      this.timers.push(t);
    };
    every(CHECK_PARKED_MS, () => this.recheckParked());
    every(HELD_RECHECK_MS, () => { void this.releaseHeld(); });
    every(1000, () => this.wake());
    this.pumping = this.ready.then(() => this.pump());
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.turns.releaseAll();
    for (const t of this.timers) clearInterval(t);
    clearTimeout(this.heldApplyTimer);
    this.wake();
    await this.pumping;
    // requests in flight fail at once (their entries stay pending), then what was acknowledged is written
    this.client.close();
    this.thread.abortRequests();
    await Promise.all([...this.running]);
    this.flushAcks();
    await Promise.all([this.ackChain, this.thread.close()]);
  }

  // ---- bookkeeping -------------------------------------------------------------------------------------

  /** Counts what the outbox holds (in bounded steps, yielding), once at start. */
  private async loadBacklog(): Promise<void> {
    let n = 0;
    // summed straight from the flat arrays: no ref objects for a backlog of millions (RssAnon, BENCHMARKS.md)
    const perEntity = new Map<number, number>();
    for (const { key, value } of this.env.outbox.getRange({ start: ['q', 0], end: ['q', this.lanes[1].hi] })) {
      const e = (key as QueueKey)[2];
      const flat = value as number[];
      let points = 0;
      let minTs = Infinity;
      for (let i = flat.length % 4; i + 3 < flat.length; i += 4) {
        points += flat[i + 3] as number;
        minTs = Math.min(minTs, flat[i + 1] as number);
      }
      perEntity.set(e, (perEntity.get(e) ?? 0) + points);
      this.backlogTotal += points;
      const b = Math.floor(minTs / HOUR);
      const slot = this.oldest.get(b);
      if (slot === undefined) this.oldest.set(b, { n: points, min: minTs });
      else { slot.n += points; slot.min = Math.min(slot.min, minTs); }
      if (++n % 5000 === 0) await new Promise<void>((r) => setImmediate(r));
      if (this.stopped) return;
    }
    for (const [e, points] of perEntity) {
      const dev = this.devOf(e);
      if (dev !== undefined) dev.backlog += points;
    }
    for (const { value } of this.env.outbox.getRange({ start: ['h'], end: ['h', Number.MAX_SAFE_INTEGER] })) {
      this.heldTotal += (value as HeldRecord).held;
    }
  }

  private noteQueued(e: number, refs: readonly FragmentRef[], sign = 1): void {
    const n = refsPoints(refs) * sign;
    this.backlogTotal += n;
    const dev = this.devOf(e);
    if (dev !== undefined) dev.backlog += n;
    const b = Math.floor(refsMinTs(refs) / HOUR);
    const slot = this.oldest.get(b);
    if (sign > 0) {
      if (slot === undefined) this.oldest.set(b, { n, min: refsMinTs(refs) });
      else { slot.n += n; slot.min = Math.min(slot.min, refsMinTs(refs)); }
    } else if (slot !== undefined) {
      slot.n += n;
      if (slot.n <= 0) this.oldest.delete(b);
    }
  }

  private devOf(e: number): Dev | undefined {
    const id = this.deps.dict.entityUuid(e);
    if (id === undefined) return undefined;
    let dev = this.devs.get(id);
    if (dev === undefined) {
      const rec = this.deps.entities.device(id);
      if (rec === undefined) return undefined;
      dev = newDev(id, e, rec.name);
      this.devs.set(id, dev);
    }
    dev.e ??= e;
    return dev;
  }

  private devById(id: string): Dev | undefined {
    const dev = this.devs.get(id);
    if (dev !== undefined) return dev;
    const e = this.deps.dict.entityIdx(id);
    if (e !== undefined) return this.devOf(e);
    const rec = this.deps.entities.device(id);
    if (rec === undefined) return undefined;
    const made = newDev(id, undefined, rec.name);
    this.devs.set(id, made);
    return made;
  }

  // ---- the pump ----------------------------------------------------------------------------------------

  private wake(): void {
    const w = this.wakeUp;
    this.wakeUp = undefined;
    w?.();
  }

  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const t = setTimeout(() => { this.wakeUp = undefined; resolve(); }, ms);
      t.unref();
      this.wakeUp = () => { clearTimeout(t); resolve(); };
    });
  }

  private async pump(): Promise<void> {
    while (!this.stopped) {
      const now = this.now();
      this.checkHorizon();
      if (now < this.backoffUntil) {
        await this.sleep(this.backoffUntil - now);
        continue;
      }
      // Live first: its devices take the free slots, the backlog what is left (a slot frees within one request).
      // But while the backlog waits, live keeps one slot free for it, or with a single slot the two take turns:
      // else devices posting faster than the upstream answers would hold every slot and the drain would starve.
      const backlogWaits = this.laneWaits(this.lanes[1]);
      let liveCap = this.cfg.concurrency;
      if (backlogWaits) liveCap = this.cfg.concurrency > 1 ? this.cfg.concurrency - 1 : this.backlogTurn ? 0 : 1;
      let started = this.sendFromLog(liveCap);
      started += this.fill(this.lanes[0], this.cfg.concurrency, liveCap);
      // depth series: at most one slot, after live telemetry and beside the backlog (src/sync/depth.ts)
      const depthJob = this.depthSync.dispatch(this.cfg.concurrency - this.inFlight);
      if (depthJob !== undefined) {
        this.track(depthJob);
        started++;
      }
      const backlogStarted = this.fill(this.lanes[1], this.cfg.concurrency);
      started += backlogStarted;
      if (this.cfg.concurrency === 1) {
        // the backlog's turn passes once it took it, or when it could not use it (nothing it can start): live goes on
        if (this.backlogTurn && backlogStarted === 0 && this.inFlight === 0) {
          this.backlogTurn = false;
          continue;
        }
        if (backlogStarted > 0) this.backlogTurn = false;
        else if (started > 0 && backlogWaits) this.backlogTurn = true;
      }
      if (!this.attrBusy && this.inFlight < this.cfg.concurrency) started += this.sendAttributes();
      if (started === 0 || this.inFlight >= this.cfg.concurrency) await this.sleep(1000);
      // ingest keeps priority: a dispatch round is a slice of its own (turns.ts)
      else await this.turns.take(false);
    }
  }

  /** With a single slot, whether the backlog goes next (pump). */
  private backlogTurn = false;
  /** live jobs in flight (from the log, and of lane 0): at most the pump's `liveCap` */
  private liveInFlight = 0;

  /** Whether `lane` has an entry past its front (one seek). */
  private laneWaits(lane: Lane): boolean {
    for (const _ of this.env.outbox.getKeys({ start: lane.front, end: ['q', lane.hi], limit: 1 })) return true;
    return false;
  }

  /**
   * Scans lane from its front and starts jobs for up to `slots` devices in flight, of which at most `liveCap` live;
   * returns jobs started.
   */
  private fill(lane: Lane, slots: number, liveCap = Infinity): number {
    const free = Math.min(slots - this.inFlight, lane.index === 0 ? liveCap - this.liveInFlight : Infinity);
    if (free <= 0) return 0;
    const jobs = new Map<Dev, Entry[]>();
    const jobBytes = new Map<Dev, number>();
    let full = 0;
    let scanned = 0;
    let allBlocked = true;
    const maxBytes = this.cfg.maxBatchBytes * JOB_BATCHES;
    // keys only: the values of entries skipped (busy or parked devices) are never decoded, which keeps the
    // garbage of a scan, and with it RssAnon, independent of the backlog
    for (const key of this.env.outbox.getKeys({ start: lane.front, end: ['q', lane.hi] })) {
      const qk = key as QueueKey;
      const e = qk[2];
      scanned++;
      const dev = this.devOf(e);
      if (dev === undefined) {
        // counted once: a scan before the acknowledgement commits finds the entry again
        if (!this.acking.has(`${qk[1]}:${e}`)) this.discardNotDevice(qk, this.env.outbox.get(qk));
        continue;
      }
      if (dev.parked !== null) {
        if (allBlocked) {
          lane.front = ['q', qk[1], e + 1];
          lane.blocked.add(e);
        }
        continue;
      }
      allBlocked = false;
      const seqE = `${qk[1]}:${e}`;
      if (dev.busy[lane.index] || this.acking.has(seqE) || this.recorder.sendingEntries.has(seqE)) continue;
      let job = jobs.get(dev);
      if (job === undefined) {
        if (jobs.size >= free) continue;
        jobs.set(dev, (job = []));
      }
      const bytes = jobBytes.get(dev) ?? 0;
      if (bytes >= maxBytes) continue;
      const value = this.env.outbox.get(qk);
      if (value === undefined) continue;
      const entry = entryOf(qk, value);
      job.push(entry);
      const nb = bytes + entry.points * this.bytesPerPoint;
      jobBytes.set(dev, nb);
      if (nb >= maxBytes) full++;
      if (scanned >= SCAN_LIMIT || (full >= free && jobs.size >= free)) break;
    }
    for (const [dev, entries] of jobs) this.track(this.runJob(lane, dev, entries));
    return jobs.size;
  }

  /** jobs running, so stop() can wait for them */
  private readonly running = new Set<Promise<void>>();

  private track(p: Promise<void>): void {
    this.running.add(p);
    void p.finally(() => this.running.delete(p));
  }

  private discardNotDevice(key: QueueKey, value: unknown): void {
    const refs = entryOf(key, value).refs;
    this.counters.notSynced += refsPoints(refs);
    // the backlog total and the hour buckets behind oldestPendingTs together (noteQueued)
    this.noteQueued(key[2], refs, -1);
    this.queueAck({ puts: [], remove: [key], held: [], setAside: [] });
  }

  // ---- live points straight from the write-ahead log ----------------------------------------------------
  //
  // With the log, a point reaches LMDB (and the outbox) only when the store applies its log, every
  // store.applyIntervalMs. Applying more often for sync's sake cost the card far more than the log saves
  // (an LMDB commit per send and per acknowledgement: BENCHMARKS.md, "SD-card wear"). So while the upstream
  // answers, a record's points are sent from memory as soon as the record is on disk, and what was sent is
  // marked in the log itself (LmdbTimeseriesStore.noteSent), riding on its next group commit: the apply then
  // records nothing left to send for them, and the link being up costs the card no LMDB commit at all.
  // Everything else (a device without a token, parked, points held for their timestamp, a record that came
  // while backing off, a failed send) is left to the outbox, exactly as without the log.

  private logQueue: LoggedItem[] = [];
  private logQueuePoints = 0;
  /** per device, its points in each log record not applied and not sent yet: what the status counts as pending */
  private readonly loggedPending = new Map<string, { readonly dev: Dev; readonly n: number; readonly lsn: number }>();
  private loggedTotal = 0;

  private queueLogged(lsn: number, points: ReadonlyMap<string, ReadonlyMap<string, readonly SeriesColumn[]>>): void {
    let queue = !this.stopped && this.state !== 'backoff';
    for (const [entityId, series] of points) {
      const dev = this.devById(entityId);
      if (dev === undefined) continue;
      let n = 0;
      for (const cols of series.values()) for (const c of cols) n += c.ts.length;
      this.loggedPending.set(loggedKey(lsn, entityId), { dev, n, lsn });
      dev.logged += n;
      this.loggedTotal += n;
      if (queue && this.logQueuePoints + n > LOG_LANE_MAX_POINTS) queue = false;
      if (!queue) continue;
      this.logQueue.push({ lsn, entityId, series, points: n });
      this.logQueuePoints += n;
    }
    this.wake();
  }

  /** A device's points of a log record went upstream, or were recorded in the outbox by an apply. */
  private loggedDone(lsn: number, entityId: string): void {
    const key = loggedKey(lsn, entityId);
    const p = this.loggedPending.get(key);
    if (p === undefined) return;
    this.loggedPending.delete(key);
    p.dev.logged -= p.n;
    this.loggedTotal -= p.n;
  }

  private loggedApplied(lsn: number): void {
    // in insertion order, which is LSN order
    for (const [key, p] of this.loggedPending) {
      if (p.lsn > lsn) break;
      this.loggedPending.delete(key);
      p.dev.logged -= p.n;
      this.loggedTotal -= p.n;
    }
  }

  /** Starts a job per device with queued log items, in the free slots (at most `liveCap` live); returns jobs started. */
  private sendFromLog(liveCap: number): number {
    if (this.logQueue.length === 0) return 0;
    if (this.state === 'backoff') {
      this.logQueue = [];
      this.logQueuePoints = 0;
      return 0;
    }
    const free = Math.min(this.cfg.concurrency - this.inFlight, liveCap - this.liveInFlight);
    if (free <= 0) return 0;
    const jobs = new Map<Dev, LoggedItem[]>();
    const jobPoints = new Map<Dev, number>();
    const maxPoints = Math.max(1, Math.floor((this.cfg.maxBatchBytes * JOB_BATCHES) / this.bytesPerPoint));
    const minTs = MIN_SENDABLE_TS;
    const maxTs = this.now() + MAX_AHEAD_MS;
    const rest: LoggedItem[] = [];
    const waiting = new Set<Dev>();
    let held = false;
    for (const item of this.logQueue) {
      const dev = this.devById(item.entityId);
      // parked: the outbox's way, when the store applies its log (no hurry, no extra commit)
      if (dev === undefined || dev.parked !== null) continue;
      // a point held for its timestamp: the outbox's way at once (it holds them, and sends the rest)
      if (!sendable(item, minTs, maxTs)) {
        held = true;
        continue;
      }
      const n = jobPoints.get(dev) ?? 0;
      // a device's items go in LSN order: once one waits, the later ones wait too (a later value wins upstream)
      if (dev.busyLog || waiting.has(dev) || (!jobs.has(dev) && jobs.size >= free) || (n > 0 && n + item.points > maxPoints)) {
        waiting.add(dev);
        rest.push(item);
        continue;
      }
      let job = jobs.get(dev);
      if (job === undefined) jobs.set(dev, (job = []));
      job.push(item);
      jobPoints.set(dev, n + item.points);
    }
    this.logQueue = rest;
    this.logQueuePoints = rest.reduce((s, i) => s + i.points, 0);
    if (held) this.applyForHeld();
    for (const [dev, items] of jobs) this.track(this.runLogJob(dev, items));
    return jobs.size;
  }

  private heldApplyAt = -Infinity;
  private heldApplyTimer: NodeJS.Timeout | undefined;

  /**
   * Puts the log into LMDB for items with held timestamps (the outbox holds those points and sends the rest):
   * at once, then at most every HELD_APPLY_MS, so a device whose clock is off costs no LMDB commit per post.
   */
  private applyForHeld(): void {
    const wait = this.heldApplyAt + HELD_APPLY_MS - this.now();
    if (wait <= 0) {
      this.heldApplyAt = this.now();
      this.deps.timeseries.applyLogged();
    } else {
      this.heldApplyTimer ??= setTimeout(() => {
        this.heldApplyTimer = undefined;
        this.heldApplyAt = this.now();
        this.deps.timeseries.applyLogged();
      }, wait);
      this.heldApplyTimer.unref();
    }
  }

  private async runLogJob(dev: Dev, items: readonly LoggedItem[]): Promise<void> {
    dev.busyLog = true;
    this.inFlight++;
    this.liveInFlight++;
    // a record applied since it was queued is in the outbox: sent from there
    const taken = items.filter((i) => this.recorder.sendingFromLog(i.lsn, i.entityId));
    let ok = false;
    try {
      if (taken.length === 0) return;
      const token = await this.tokenFor(dev);
      if (token === undefined) return;
      await this.turns.take(true);
      if (this.stopped) return;
      const points: WirePoint[] = [];
      for (const item of taken) {
        for (const [key, cols] of item.series) {
          const keyJson = JSON.stringify(key);
          // columns in write order: wireBodies keeps the later value of a key at one ts
          for (const c of cols) for (let i = 0; i < c.ts.length; i++) points.push({ ts: c.ts[i] as number, key: keyJson, value: wireValue(c.value(i)) });
        }
      }
      let sent = 0;
      let bytes = 0;
      const bodies = wireBodies(points, this.cfg.maxBatchBytes, Infinity);
      for (let r = bodies.next(); !r.done; await this.turns.take(true), r = bodies.next()) {
        const { body, points: n } = r.value;
        await this.pace(this.lanes[0], n);
        if (this.stopped) return;
        const a = await this.thread.post(`api/v1/${encodeURIComponent(token)}/telemetry`, body);
        if (a.status >= 200 && a.status < 300) {
          sent += n;
          bytes += body.length;
          this.succeeded();
          if (sent === points.length) break;
          continue;
        }
        if (a.status === 400) this.setAsideLogged(dev, taken, a.body.slice(0, 500));
        else this.failed(dev, token, a);
        return;
      }
      ok = true;
      this.counters.sent += sent;
      if (sent > 0) this.bytesPerPoint = 0.8 * this.bytesPerPoint + 0.2 * Math.max(8, bytes / sent);
    } finally {
      this.loggedSent(taken, ok);
      // what did not go is left to the outbox: recorded now, so the retries (and the back-off) have it
      if (!ok && taken.length > 0) this.deps.timeseries.applyLogged();
      dev.busyLog = false;
      this.inFlight--;
      this.liveInFlight--;
      this.wake();
    }
  }

  /**
   * The upstream refused log items with 400: they are put into LMDB now (recorded in the outbox under seqs the
   * recorder notes, as they are being sent) and set aside there, as sendGroup sets a batch aside: never retried.
   */
  private setAsideLogged(dev: Dev, items: readonly LoggedItem[], error: string): void {
    this.deps.timeseries.applyLogged();
    const ops: AckOps = { puts: [], remove: [], held: [], setAside: [] };
    let n = 0;
    for (const item of items) {
      const recorded = this.recorder.sentFromLog(item.lsn, item.entityId, false);
      if (recorded === undefined) continue;
      const { seq, e } = recorded;
      const key = queueKey(seq, e);
      const value = this.env.outbox.get(key);
      if (value === undefined) continue;
      const entry = entryOf(key, value);
      ops.remove.push(key);
      ops.setAside.push({ key, value: { refs: encodeRefs(entry.refs), status: 400, error } });
      this.noteQueued(e, entry.refs, -1);
      n += entry.points;
    }
    this.counters.setAside += n;
    this.counters.lastError = `HTTP 400 from ${this.client.url} for a batch of ${dev.name}: ${error.slice(0, 200)}`;
    this.log.warn(`sync: the upstream refused a batch of ${dev.name} (${n} points) with 400; set aside: ${error.slice(0, 200)}`);
    this.queueAck(ops);
  }

  /** Marks what went (in the log, or by removing the outbox entry an apply recorded meanwhile). */
  private loggedSent(items: readonly LoggedItem[], ok: boolean): void {
    const marks: Array<[number, string]> = [];
    const remove: QueueKey[] = [];
    for (const item of items) {
      const recorded = this.recorder.sentFromLog(item.lsn, item.entityId, ok);
      if (!ok) continue;
      this.loggedDone(item.lsn, item.entityId);
      if (recorded === undefined) {
        marks.push([item.lsn, item.entityId]);
        continue;
      }
      const key = queueKey(recorded.seq, recorded.e);
      const value = this.env.outbox.get(key);
      if (value === undefined) continue;
      this.noteQueued(recorded.e, entryOf(key, value).refs, -1);
      remove.push(key);
    }
    this.deps.timeseries.noteSent(marks);
    if (remove.length > 0) this.queueAck({ puts: [], remove, held: [], setAside: [] });
  }

  // ---- one device's job --------------------------------------------------------------------------------

  private async runJob(lane: Lane, dev: Dev, entries: Entry[]): Promise<void> {
    dev.busy[lane.index] = true;
    this.inFlight++;
    if (lane.index === 0) this.liveInFlight++;
    try {
      const token = await this.tokenFor(dev);
      if (token === undefined) return;
      const maxBody = this.cfg.maxBatchBytes;
      const maxPoints = lane.paced ? Math.max(1, Math.ceil(this.cfg.maxPointsPerSec / 10)) : Infinity;
      let group: Entry[] = [];
      let groupBytes = 0;
      const flushGroup = async (): Promise<boolean> => {
        const g = group;
        group = [];
        groupBytes = 0;
        return g.length === 0 ? true : this.sendGroup(lane, dev, token, g, maxBody, maxPoints);
      };
      for (const entry of entries) {
        if (this.stopped) return;
        const bytes = entry.points * this.bytesPerPoint;
        // an entry bigger than a body goes in a group of its own, acknowledged body by body (see sendGroup)
        if (bytes >= maxBody && group.length > 0 && !(await flushGroup())) return;
        group.push(entry);
        groupBytes += bytes;
        if (groupBytes >= maxBody && !(await flushGroup())) return;
      }
      await flushGroup();
    } finally {
      dev.busy[lane.index] = false;
      this.inFlight--;
      if (lane.index === 0) this.liveInFlight--;
      this.wake();
    }
  }

  /**
   * Sends the points of `entries` (read back from the store) in bodies of at most maxBody bytes, then
   * acknowledges the entries in one transaction. False when the device or the upstream failed (stop the job).
   */
  private async sendGroup(lane: Lane, dev: Dev, token: string, entries: Entry[], maxBody: number, maxPoints: number): Promise<boolean> {
    const live = lane.index === 0;
    const e = dev.e as number;
    const keyNames = new Map<number, string>();
    for (const entry of entries) {
      for (const r of entry.refs) {
        const name = keyNames.has(r.k) ? undefined : this.deps.dict.keyName(r.k);
        if (name !== undefined) keyNames.set(r.k, name);
      }
    }
    // a slice of its own (turns.ts): the read-back when the main thread does it, else the requests after the
    // thread's answer
    const threaded = this.thread.threaded;
    if (!threaded) {
      await this.turns.take(live);
      if (this.stopped) return false;
    }
    let group: ReadyGroup;
    try {
      group = await this.thread.encode({
        e, entries: entries.map((x) => ({ seq: x.seq, refs: x.refs, fromTs: x.fromTs })), keyNames,
        windowMs: this.deps.timeseries.windowMs, maxTs: this.now() + MAX_AHEAD_MS,
        maxBodyBytes: maxBody, maxBodyPoints: maxPoints,
      });
    } catch (err) {
      // a block that cannot be decoded: retrying cannot help; the points stay in the store, the entries are shown
      const error = `unreadable: ${(err as Error).message}`;
      const n = entries.reduce((s, x) => s + x.points, 0);
      this.counters.setAside += n;
      this.counters.lastError = `sync: a batch of ${dev.name} could not be read back (${error})`;
      this.log.error(`sync: a batch of ${dev.name} (${n} points) could not be read back; set aside: ${error}`);
      for (const entry of entries) this.noteQueued(e, entry.refs, -1);
      this.queueAck({ puts: [], remove: entries.map((x) => x.key), held: [], setAside: entries.map((x) => ({ key: x.key, value: { refs: encodeRefs(x.refs), status: 0, error } })) });
      return true;
    }
    try {
      if (threaded) await this.turns.take(live);
      if (this.stopped) return false;
      return await this.sendBodies(lane, dev, token, entries, group);
    } finally {
      // bodies a failure left unsent: the thread forgets them (the entries stay pending)
      this.thread.release(group);
    }
  }

  /** sendGroup's requests, body by body, and what their answers mean; false as sendGroup. */
  private async sendBodies(lane: Lane, dev: Dev, token: string, entries: Entry[], group: ReadyGroup): Promise<boolean> {
    const live = lane.index === 0;
    const e = dev.e as number;
    const ops: AckOps = { puts: [], remove: entries.map((x) => x.key), held: group.held.map((h) => ({ e, seq: h.seq, value: h.value })), setAside: [] };
    let sent = 0;
    let bytes = 0;
    const only = entries.length === 1 ? entries[0] : undefined;
    for (const [i, { bytes: size, points: n, lastTs }] of group.bodies.entries()) {
      if (i > 0) await this.turns.take(live);
      await this.pace(lane, n);
      if (this.stopped) return false;
      const a = await this.thread.postBody(group, i, `api/v1/${encodeURIComponent(token)}/telemetry`);
      if (a.status >= 200 && a.status < 300) {
        sent += n;
        bytes += size;
        this.succeeded();
        // One entry over several bodies: each body holds every point up to its last ts (bodies are cut between
        // timestamps), so the entry is acknowledged that far and a restart re-sends at most one body of it.
        if (only !== undefined && sent < group.points) {
          this.queueAck({ puts: [{ key: only.key, value: [lastTs + 1, ...encodeRefs(only.refs)] }], remove: [], held: [], setAside: [] });
        }
        continue;
      }
      if (a.status === 400) {
        // the whole group is set aside: kept in the store and recorded, never retried on its own
        const error = a.body.slice(0, 500);
        this.counters.setAside += group.points - sent;
        this.counters.lastError = `HTTP 400 from ${this.client.url} for a batch of ${dev.name}: ${error.slice(0, 200)}`;
        this.log.warn(`sync: the upstream refused a batch of ${dev.name} (${group.points - sent} points) with 400; set aside: ${error.slice(0, 200)}`);
        for (const entry of entries) ops.setAside.push({ key: entry.key, value: { refs: encodeRefs(entry.refs), status: 400, error } });
        break;
      }
      this.failed(dev, token, a);
      return false;
    }
    if (sent > 0) this.bytesPerPoint = 0.8 * this.bytesPerPoint + 0.2 * Math.max(8, bytes / sent);
    this.counters.sent += sent;
    if (group.dropped > 0) this.noteDropped(group.dropped, group.droppedFrom, group.droppedTo);
    for (const entry of entries) this.noteQueued(e, entry.refs, -1);
    for (const h of ops.held) this.heldTotal += h.value.held;
    this.queueAck(ops);
    return true;
  }

  private noteDropped(n: number, from: number, to: number): void {
    const c = this.counters;
    c.dropped += n;
    c.droppedFrom = c.droppedFrom === null ? from : Math.min(c.droppedFrom, from);
    c.droppedTo = c.droppedTo === null ? to : Math.max(c.droppedTo, to);
    this.droppedSinceLog += n;
    const now = this.now();
    if (now - this.lastDropLog >= DROP_LOG_MS) {
      this.log.warn(`sync: ${this.droppedSinceLog} points removed by retention or the disk budget before they were sent ` +
        `(${new Date(from).toISOString()} .. ${new Date(to).toISOString()}; ${c.dropped} in all)`);
      this.lastDropLog = now;
      this.droppedSinceLog = 0;
    }
  }

  /**
   * Acknowledgements are written with the next ingest batch (OutboxRecorder.beforeCommit: in its turn, so in
   * its transaction), or ACK_DELAY_MS after the first of them when no batch comes, all at once in one
   * event-loop turn (one transaction): sync adds next to no commits of its own (bytes written per point,
   * BENCHMARKS.md). Meanwhile the
   * entries they remove are skipped by the scans (`acking`). A kill -9 re-sends what was acknowledged in that
   * last interval: with the requests in flight, the only duplicates (CONTRACT §9 allows them after a restart).
   */
  private pendingOps: AckOps = { puts: [], remove: [], held: [], setAside: [] };
  private ackTimer: NodeJS.Timeout | undefined;
  /** outbox entries removed by acknowledgements not committed yet: `${seq}:${e}` */
  private readonly acking = new Set<string>();

  private queueAck(ops: AckOps): void {
    this.pendingOps.puts.push(...ops.puts);
    this.pendingOps.remove.push(...ops.remove);
    this.pendingOps.held.push(...ops.held);
    this.pendingOps.setAside.push(...ops.setAside);
    for (const k of ops.remove) this.acking.add(`${k[1]}:${k[2]}`);
    this.ackTimer ??= setTimeout(() => this.flushAcks(), ACK_DELAY_MS);
  }

  private flushAcks(): void {
    clearTimeout(this.ackTimer);
    this.ackTimer = undefined;
    const o = this.pendingOps;
    this.pendingOps = { puts: [], remove: [], held: [], setAside: [] };
    const ob = this.env.outbox;
    // one synchronous turn: one transaction
    for (const p of o.puts) void ob.put(p.key, p.value);
    for (const k of o.remove) void ob.remove(k);
    for (const h of o.held) void ob.put(['h', h.e, h.seq], h.value);
    for (const x of o.setAside) void ob.put(['x', x.key[1], x.key[2]], x.value);
    const last = ob.put(COUNTERS_KEY, { ...this.counters });
    const done = last.then(() => undefined, (err: unknown) => {
      this.log.error(`sync: recording an acknowledgement failed: ${(err as Error).message}`);
    }).finally(() => {
      for (const k of o.remove) this.acking.delete(`${k[1]}:${k[2]}`);
    });
    this.ackChain = this.ackChain.then(() => done);
  }

  // ---- pacing, faults, state ---------------------------------------------------------------------------

  /**
   * Token bucket over points: the backlog lane waits for tokens, the live lane takes them without waiting (so
   * live points count against the rate but are never held back). Bodies are cut to a tenth of the rate; the
   * bucket holds half a second, so a sender slowed by the upstream catches up that much and no more, and it
   * starts empty when the link comes back (no burst after an outage).
   */
  private async pace(lane: Lane, n: number): Promise<void> {
    const rate = this.cfg.maxPointsPerSec;
    if (rate <= 0) return;
    const cap = Math.max(1, Math.ceil(rate / 2));
    for (;;) {
      const now = this.now();
      this.tokens = Math.min(cap, this.tokens + ((now - this.tokensAt) * rate) / 1000);
      this.tokensAt = now;
      const need = Math.min(n, cap);
      if (!lane.paced || this.tokens >= need) {
        this.tokens = Math.max(-rate, this.tokens - n);
        return;
      }
      await new Promise<void>((r) => { setTimeout(r, Math.ceil(((need - this.tokens) * 1000) / rate)).unref(); });
      if (this.stopped) return;
    }
  }

  private succeeded(): void {
    this.counters.lastSuccessTs = this.now();
    this.failures = 0;
    if (this.state !== 'connected') {
      if (this.state === 'backoff') {
        // Live first: what was written during the outage becomes backlog, drained behind what comes now.
        // Points still in the write-ahead log were written during it too: recorded now, before the boundary.
        this.deps.timeseries.applyLogged();
        const boundary = Math.max(this.lanes[0].lo, this.recorder.lastSeq + 1);
        this.lanes[1].hi = boundary;
        this.lanes[0].lo = boundary;
        this.lanes[0].front = ['q', boundary];
        this.lanes[0].blocked = new Set();
      }
      this.log.info(`sync: connected to ${this.client.url}`);
      this.state = 'connected';
      this.tokens = 0;
      this.tokensAt = this.now();
    }
  }

  private failed(dev: Dev, token: string, a: UpstreamAnswer): void {
    // requests cut by stop() are not the upstream's fault: no back-off, no log line
    if (this.stopped) return;
    const what = a.status === 0 ? (a.error ?? 'network error') : `HTTP ${a.status}`;
    if (a.status === 401 || a.status === 403 || a.status === 404) {
      void this.refused(dev, token, what);
      return;
    }
    this.counters.lastError = `${what} from ${this.client.url}`;
    let delay: number;
    if ((a.status === 429 || a.status === 503) && a.retryAfterMs !== undefined) {
      delay = Math.min(a.retryAfterMs, this.cfg.retryMaxMs);
    } else {
      this.failures++;
      delay = backoffDelayMs(this.failures, this.cfg.retryBaseMs, this.cfg.retryMaxMs);
    }
    const until = this.now() + delay;
    if (until > this.backoffUntil) this.backoffUntil = until;
    if (this.state !== 'backoff') {
      this.log.warn(`sync: ${what} from ${this.client.url}; backing off (retry in ${Math.round(delay)} ms, then with growing delays up to ${this.cfg.retryMaxMs} ms)`);
      this.state = 'backoff';
    }
  }

  private async refused(dev: Dev, token: string, what: string): Promise<void> {
    if (this.cfg.provisionKey !== '' && !dev.freshlyProvisioned) {
      // the stored token is no longer valid upstream: provision again (once) before parking
      const cur = this.env.outbox.get(['t', dev.id]) as TokenRecord | undefined;
      if (cur?.token === token) await this.env.outbox.remove(['t', dev.id]);
      this.log.info(`sync: upstream refused the token of ${dev.name} (${what}); provisioning it again`);
      return;
    }
    this.park(dev, `upstream refused its token (${what})`, token);
  }

  private park(dev: Dev, reason: string, refusedToken?: string): void {
    if (dev.parked === reason) return;
    dev.parked = reason;
    dev.refusedToken = refusedToken;
    this.counters.lastError = `device ${dev.name} parked: ${reason}`;
    this.log.warn(`sync: device ${dev.name} parked: ${reason}`);
  }

  private unpark(dev: Dev): void {
    dev.parked = null;
    dev.refusedToken = undefined;
    dev.freshlyProvisioned = false;
    for (const lane of this.lanes) {
      if (dev.e !== undefined && lane.blocked.has(dev.e)) {
        lane.front = ['q', lane.lo];
        lane.blocked = new Set();
      }
    }
    // its posts since it was parked wait in the write-ahead log for the next apply (store.applyIntervalMs, 5 min
    // by default): recorded in the outbox now, so they go at once (one commit per resume)
    this.deps.timeseries.applyLogged();
    this.log.info(`sync: device ${dev.name} resumed`);
    this.wake();
  }

  /** Parked devices whose token changed since (the CLI set one) go on. */
  private recheckParked(): void {
    for (const dev of this.devs.values()) {
      if (dev.parked === null) continue;
      const rec = this.env.outbox.get(['t', dev.id]) as TokenRecord | undefined;
      if (rec !== undefined && rec.token !== dev.refusedToken) this.unpark(dev);
      else if (rec === undefined && dev.refusedToken !== undefined && this.cfg.provisionKey !== '') this.unpark(dev);
    }
  }

  /** The device's upstream token: set with the CLI, or provisioned (stored durably before use); else parked. */
  private async tokenFor(dev: Dev): Promise<string | undefined> {
    const rec = this.env.outbox.get(['t', dev.id]) as TokenRecord | undefined;
    if (rec !== undefined) return rec.token;
    if (this.cfg.provisionKey === '') {
      this.park(dev, 'no upstream token (outpost device upstream <device> --token T, or sync.provisionKey)');
      return undefined;
    }
    // One provisioning per device at a time: a device's lanes (live, backlog, the log, attributes, depth) can each
    // ask at once, and a second request for the same name is refused upstream ("already exists"), parking it.
    let pending = this.provisioning.get(dev.id);
    if (pending === undefined) {
      pending = this.provision(dev).finally(() => this.provisioning.delete(dev.id));
      this.provisioning.set(dev.id, pending);
    }
    return pending;
  }

  /** device id → its provisioning under way (tokenFor) */
  private readonly provisioning = new Map<string, Promise<string | undefined>>();

  private async provision(dev: Dev): Promise<string | undefined> {
    const a = await this.client.post('api/v1/provision', JSON.stringify({
      deviceName: dev.name, provisionDeviceKey: this.cfg.provisionKey, provisionDeviceSecret: this.cfg.provisionSecret,
    }));
    if (a.status < 200 || a.status >= 300) {
      this.failed(dev, '', a.status === 401 || a.status === 403 || a.status === 404 ? { ...a, status: 500 } : a);
      return undefined;
    }
    let ans: { status?: unknown; credentialsValue?: unknown; errorMsg?: unknown };
    try {
      ans = JSON.parse(a.body) as typeof ans;
    } catch {
      ans = {};
    }
    if (ans.status !== 'SUCCESS' || typeof ans.credentialsValue !== 'string' || ans.credentialsValue === '') {
      this.park(dev, `provisioning refused: ${String(ans.status ?? 'no status')}${typeof ans.errorMsg === 'string' ? ` (${ans.errorMsg})` : ''}`);
      return undefined;
    }
    this.succeeded();
    await this.env.outbox.put(['t', dev.id], { token: ans.credentialsValue, provisioned: true } satisfies TokenRecord);
    await this.env.flushed();
    dev.freshlyProvisioned = true;
    this.log.info(`sync: provisioned ${dev.name} upstream`);
    return ans.credentialsValue;
  }

  // ---- client attributes -------------------------------------------------------------------------------

  /** Posts the latest client attributes of one marked device (markers: ['a', uuid]); returns jobs started. */
  private sendAttributes(): number {
    for (const { key, value } of this.env.outbox.getRange({ start: ['a'], end: ['a\u0000'], limit: 64 })) {
      const id = (key as [string, string])[1];
      const rec = this.deps.entities.device(id);
      const e = this.deps.dict.entityIdx(id);
      const dev = e === undefined ? undefined : this.devOf(e);
      if (rec === undefined || dev === undefined) {
        void this.env.outbox.remove(key as [string, string]);
        continue;
      }
      if (dev.parked !== null) continue;
      this.attrBusy = true;
      this.inFlight++;
      this.track((async () => {
        try {
          const token = await this.tokenFor(dev);
          if (token === undefined) return;
          const attrs = this.deps.attributes.get(id, 'CLIENT_SCOPE');
          const body = `{${attrs.map((a) => `${JSON.stringify(a.key)}:${wireValue(a.value)}`).join(',')}}`;
          const a = await this.client.post(`api/v1/${encodeURIComponent(token)}/attributes`, body);
          if (a.status >= 200 && a.status < 300) {
            this.succeeded();
            // removed only if no change came meanwhile (the marker is rewritten by every change)
            await this.env.root.transaction(() => {
              if (this.env.outbox.get(key as [string, string]) === value) void this.env.outbox.remove(key as [string, string]);
            });
          } else if (a.status === 400) {
            this.counters.lastError = `400 from upstream for the attributes of ${dev.name}`;
            await this.env.outbox.remove(key as [string, string]);
          } else {
            this.failed(dev, token, a);
          }
        } finally {
          this.attrBusy = false;
          this.inFlight--;
          this.wake();
        }
      })());
      return 1;
    }
    return 0;
  }

  // ---- held points and drops while the link is down ----------------------------------------------------

  /** Held entries whose future points the clock has reached go back to the queue (only those points are sent). */
  private async releaseHeld(): Promise<void> {
    const maxTs = this.now() + MAX_AHEAD_MS;
    const moves: Array<{ key: [string, number, number]; h: HeldRecord }> = [];
    for (const { key, value } of this.env.outbox.getRange({ start: ['h'], end: ['h', Number.MAX_SAFE_INTEGER] })) {
      const h = value as HeldRecord;
      if (h.futureMin !== null && h.futureMin <= maxTs) moves.push({ key: key as [string, number, number], h });
      if (moves.length >= 256) break;
    }
    if (moves.length === 0) return;
    await this.env.root.transaction(() => {
      for (const { key, h } of moves) {
        const [, e, seq] = key;
        void this.env.outbox.remove(key);
        void this.env.outbox.put(queueKey(seq, e), [h.above, ...h.refs]);
        if (h.pre2000 > 0) void this.env.outbox.put(key, { ...h, futureMin: null, held: h.pre2000 });
      }
    });
    for (const { key, h } of moves) {
      this.heldTotal -= h.held - h.pre2000;
      this.noteQueued(key[1], decodeRefs(h.refs));
    }
    // released entries are older than the live boundary: the backlog lane starts over to find them
    this.lanes[1].front = ['q', this.lanes[1].lo];
    this.lanes[1].blocked = new Set();
    this.wake();
  }

  /**
   * When retention or the disk budget moved the raw horizon, entries pointing below it are counted as
   * dropped now (also while the link is down), in bounded steps.
   */
  private checkHorizon(): void {
    const horizon = this.deps.timeseries.rawHorizonTs;
    if (this.dropSweeping || (horizon <= this.lastHorizonChecked && !(this.dropRetryAt <= this.now()))) return;
    this.dropSweeping = true;
    void this.dropSweep(horizon).then((settled) => {
      // fragments below the horizon not compacted yet: their windows' fate is known once compaction ran
      this.dropRetryAt = settled ? Infinity : this.now() + DROP_RECHECK_MS;
    }, (err: unknown) => {
      this.log.error(`sync: counting dropped points failed: ${(err as Error).message}`);
      this.dropRetryAt = this.now() + DROP_RECHECK_MS;
    }).finally(() => { this.dropSweeping = false; });
  }

  private dropSweeping = false;
  private dropRetryAt = Infinity;

  /** Resolves true when every entry below the horizon was settled (dropped or kept), false to look again later. */
  private async dropSweep(horizon: number): Promise<boolean> {
    let settled = true;
    const windowMs = this.deps.timeseries.windowMs;
    let start: QueueKey | ['q', number] = ['q', 0];
    for (;;) {
      const rewrites: Array<{ key: QueueKey; keep: number[] | null }> = [];
      let last: QueueKey | undefined;
      let n = 0;
      for (const { key, value } of this.env.outbox.getRange({ start, end: QUEUE_END, limit: 1000 })) {
        const qk = key as QueueKey;
        last = qk;
        n++;
        const entry = entryOf(qk, value);
        if (refsMinTs(entry.refs) >= horizon) continue;
        const dev = this.devOf(qk[2]);
        // a job has it in hand, or one has just counted it and its acknowledgement is not committed yet (counted
        // twice, the backlog went below what was pending)
        if ((dev !== undefined && (dev.busy[0] || dev.busy[1])) || this.acking.has(`${qk[1]}:${qk[2]}`)) {
          settled = false;
          continue;
        }
        const keep: number[] = [];
        let dropped = 0;
        let from = Infinity;
        let to = -Infinity;
        for (const r of entry.refs) {
          const below = Math.floor(r.lastTs / windowMs) * windowMs < horizon;
          const gone = below && this.env.head.getBinary(fragKey(qk[2], r.k, r.firstTs, qk[1])) === undefined;
          if (below && !gone) settled = false;
          if (gone) {
            dropped += r.n;
            from = Math.min(from, r.firstTs);
            to = Math.max(to, r.lastTs);
          } else keep.push(r.k, r.firstTs, r.lastTs, r.n);
        }
        if (dropped === 0) continue;
        this.noteDropped(dropped, from, to);
        this.noteQueued(qk[2], entry.refs, -1);
        if (keep.length > 0) this.noteQueued(qk[2], decodeRefs(keep));
        rewrites.push({ key: qk, keep: keep.length > 0 ? (entry.fromTs > Number.MIN_SAFE_INTEGER ? [entry.fromTs, ...keep] : keep) : null });
      }
      if (rewrites.length > 0) {
        const counters = { ...this.counters };
        await this.env.root.transaction(() => {
          for (const r of rewrites) {
            if (r.keep === null) void this.env.outbox.remove(r.key);
            else void this.env.outbox.put(r.key, r.keep);
          }
          void this.env.outbox.put(COUNTERS_KEY, counters);
        });
      }
      if (last === undefined || n < 1000 || this.stopped) break;
      start = ['q', last[1], last[2] + 1];
      await new Promise<void>((r) => setImmediate(r));
    }
    this.lastHorizonChecked = horizon;
    return settled;
  }

  // ---- status ------------------------------------------------------------------------------------------

  status(): SyncStatusFull {
    let oldest: number | null = null;
    for (const s of this.oldest.values()) if (s.n > 0 && (oldest === null || s.min < oldest)) oldest = s.min;
    const state: SyncState = this.now() < this.backoffUntil ? 'backoff' : this.inFlight > 0 ? 'sending' : 'idle';
    for (const id of this.depthSync.pendingDevices()) this.devById(id);
    const devices: Array<DeviceSyncStatus & { depthBacklogPoints: number }> = [];
    for (const d of this.devs.values()) {
      devices.push({
        id: d.id, name: d.name, state: d.parked === null ? 'ok' : 'parked', reason: d.parked, backlogPoints: Math.max(0, d.backlog) + d.logged,
        depthBacklogPoints: this.depthSync.pendingOf(d.id),
      });
    }
    const c = this.counters;
    return {
      // points still in the write-ahead log are pending too (recorded in the outbox when put into LMDB)
      enabled: true, state, url: this.client.url, backlogPoints: Math.max(0, this.backlogTotal) + this.loggedTotal, oldestPendingTs: oldest,
      sentPoints: c.sent, droppedPoints: c.dropped, lastSuccessTs: c.lastSuccessTs, lastError: c.lastError, devices,
      clockSynchronized: clockSynchronized(), heldPoints: this.heldTotal, setAsidePoints: c.setAside,
      droppedRange: c.droppedFrom === null || c.droppedTo === null ? null : [c.droppedFrom, c.droppedTo],
      notSyncedPoints: c.notSynced, ...this.depthSync.status(),
    };
  }

  /** Resolves once the backlog counts are loaded (tests, status right after start). */
  loaded(): Promise<void> {
    return this.ready ?? Promise.resolve();
  }
}

/**
 * The back-off after the `failures`-th failure in a row: equal jitter, a delay drawn uniformly from
 * [ceiling / 2, ceiling] where ceiling = min(maxMs, baseMs * 2^(failures - 1)). Half the ceiling is a floor: a
 * gateway never retries a failing upstream sooner than that (full jitter can draw ~0 ms at any ceiling), and the
 * other half still spreads a fleet of gateways that lost the same upstream at once.
 */
export function backoffDelayMs(failures: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(30, Math.max(0, failures - 1)));
  return ceiling / 2 + (random() * ceiling) / 2;
}

function newDev(id: string, e: number | undefined, name: string): Dev {
  return { id, e, name, parked: null, refusedToken: undefined, busy: [false, false], busyLog: false, logged: 0, backlog: 0, freshlyProvisioned: false };
}

/** Whether every point of a log item may be sent now (else the outbox holds the ones it may not). */
function sendable(item: LoggedItem, minTs: number, maxTs: number): boolean {
  for (const cols of item.series.values()) {
    for (const c of cols) for (const ts of c.ts) if (ts < minTs || ts > maxTs) return false;
  }
  return true;
}

function entryOf(key: QueueKey, value: unknown): Entry {
  const flat = value as number[];
  const fromTs = flat.length % 4 === 1 ? (flat[0] as number) : Number.MIN_SAFE_INTEGER;
  const refs = decodeRefs(flat.length % 4 === 1 ? flat.slice(1) : flat);
  return { key, seq: key[1], refs, fromTs, points: refsPoints(refs) };
}
