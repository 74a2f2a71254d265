/**
 * Store-and-forward sync to an upstream ThingsBoard (docs/sync.md).
 *
 * The backlog is the store: src/store/outbox.ts records, in each write's own transaction, which head
 * fragments a batch wrote per device; the sync reads the points back from the store, posts them as TB
 * telemetry arrays and removes the records in one transaction per acknowledgement. What is in memory is
 * bounded by the devices and the requests in flight, never by the backlog.
 *
 * This file is the lifecycle, the pump and the slot policy; the state lives where it is owned:
 *   devices.ts        tokens, provisioning, parking, each device's flags and counts
 *   link.ts           connected or backing off (equal jitter, Retry-After capped), the pace of the backlog
 *   counts.ts         the persisted counters, the backlog total and the oldest pending point
 *   acks.ts           acknowledgements, batched into one transaction
 *   lanes/log.ts      live points straight from the write-ahead log
 *   lanes/outbox.ts   the live and backlog lanes over the outbox queue
 *   transport.ts      the way upstream (http-transport.ts, mqtt/) and the one classifier of its answers
 *   mqtt/gateway.ts   the MQTT gateway session and what comes down it (announce, attributes, RPC)
 *   depth.ts          depth series
 *
 * Slots: at most sync.concurrency requests in flight, live first (the log lane, then the live outbox lane), the
 * backlog in what is left, and while the backlog waits live keeps one slot free for it (with a single slot the
 * two take turns). A device has at most one request in flight per lane.
 */
import type { Config } from '../config/index.js';
import type { Logger } from '../context.js';
import { fragKey } from '../store/series/chunks.js';
import type { Dictionary } from '../store/encoding/dict.js';
import type { EntityStore } from '../store/entities.js';
import type { StoreEnv } from '../store/env.js';
import {
  ATTRIBUTE_MARKS,
  type AttributeMarkKey,
  COUNTERS_KEY,
  type FragmentRef,
  HELD_RANGE,
  type HeldKey,
  type OutboxRecorder,
  QUEUE_END,
  type QueueKey,
  type QueuePos,
  attributeMarkKey,
  decodeRefs,
  queueFrom,
  queueKey,
  refsMinTs,
} from '../store/outbox.js';
import type { LmdbAttributeStore } from '../store/attributes.js';
import type { LmdbDepthStore } from '../store/depth.js';
import type { LmdbTimeseriesStore } from '../store/series/store.js';
import type { RpcBroker } from '../rpc/broker.js';
import type { EpochMs } from '../types.js';
import { Acks, noOps } from './acks.js';
import { MAX_AHEAD_MS, clockSynchronized } from './clock.js';
import { SyncCounts } from './counts.js';
import { DepthSync, type DepthSyncStatus } from './depth.js';
import { type Dev, Devices } from './devices.js';
import type { HeldRecord } from './encode.js';
import { HttpTransport } from './http-transport.js';
import type { LaneHost, Slots } from './lanes/host.js';
import { LogLane } from './lanes/log.js';
import { OutboxLanes, entryOf } from './lanes/outbox.js';
import { Link } from './link.js';
import { DOWNLINK_OFF, type DownlinkStatus, MqttGateway, type SessionStatus, isMqttUrl } from './mqtt/gateway.js';
import type { DeviceSyncStatus, SyncState, SyncStatus, SyncStatusSource } from './status.js';
import type { ThreadSetup } from './thread-worker.js';
import type { Outcome, Transport } from './transport.js';
import { SetAside } from './set-aside.js';
import { SliceTurns } from './turns.js';
import { wireValue } from './wire.js';

export { backoffDelayMs } from './link.js';

/** The sync status: the common fields plus Outpost's (docs/sync.md). */
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
  /** telemetry of entities that are not devices (assets): not synced (only devices are) */
  readonly notSyncedPoints: number;
  /** how the upstream is reached: TB's HTTP device API, or one MQTT gateway session */
  readonly transport: 'http' | 'mqtt';
  /** the MQTT gateway session; null over HTTP */
  readonly session: SessionStatus | null;
  /** what comes down the MQTT gateway session (disabled over HTTP) */
  readonly downlink: DownlinkStatus;
}

const CHECK_PARKED_MS = 2_000;
const HELD_RECHECK_MS = 30_000;
/** how soon entries below the raw horizon whose fragments were still in the head are looked at again */
const DROP_RECHECK_MS = 2_000;

export interface SyncDeps {
  readonly env: StoreEnv;
  readonly dict: Dictionary;
  readonly entities: EntityStore;
  readonly timeseries: LmdbTimeseriesStore;
  readonly attributes: LmdbAttributeStore;
  readonly depth: LmdbDepthStore;
  /** local devices' listeners and RPC (the MQTT gateway session announces the devices listening, delivers RPC) */
  readonly rpc: RpcBroker;
  /** the recorder the timeseries store was opened with (so the log's replay at start is recorded too) */
  readonly outbox: OutboxRecorder;
  readonly config: Readonly<Config['sync']>;
  /** what the sync thread opens: `env`'s data dir and map size (thread.ts) */
  readonly threadSetup: Pick<ThreadSetup, 'dataDir' | 'mapSizeBytes'>;
  readonly log: Logger;
  readonly now?: () => number;
}

export class SyncService implements SyncStatusSource, LaneHost {
  readonly env: StoreEnv;
  readonly cfg: Readonly<Config['sync']>;
  readonly log: Logger;
  readonly now: () => number;
  readonly dict: Dictionary;
  readonly timeseries: LmdbTimeseriesStore;
  readonly transport: Transport;
  /** the MQTT gateway session and its downlink; undefined over HTTP */
  readonly gateway: MqttGateway | undefined;
  readonly counts: SyncCounts;
  readonly link: Link;
  readonly devices: Devices;
  readonly acks: Acks;
  readonly setAside: SetAside;
  /** one slice of sync CPU work per event-loop turn (turns.ts) */
  readonly turns = new SliceTurns();
  readonly slots: Slots = { inFlight: 0, liveInFlight: 0 };
  bytesPerPoint = 30;
  private readonly recorder: OutboxRecorder;
  private readonly logLane: LogLane;
  private readonly lanes: OutboxLanes;
  private readonly depthSync: DepthSync;
  private isStopped = false;
  private wakeUp: (() => void) | undefined;
  private pumping: Promise<void> | undefined;
  /** With a single slot, whether the backlog goes next (pump). */
  private backlogTurn = false;
  private attrBusy = false;
  private lastHorizonChecked = Number.MIN_SAFE_INTEGER;
  private dropSweeping = false;
  private dropRetryAt = Infinity;
  /** jobs running, so stop() can wait for them */
  private readonly running = new Set<Promise<void>>();
  private readonly timers: NodeJS.Timeout[] = [];
  private ready: Promise<void> | undefined;

  constructor(private readonly deps: SyncDeps) {
    this.env = deps.env;
    this.cfg = deps.config;
    this.log = deps.log;
    this.now = deps.now ?? Date.now;
    this.dict = deps.dict;
    this.timeseries = deps.timeseries;
    this.recorder = deps.outbox;
    this.gateway = isMqttUrl(this.cfg.url)
      ? new MqttGateway({
          env: this.env,
          config: this.cfg,
          log: this.log,
          now: this.now,
          entities: deps.entities,
          attributes: deps.attributes,
          rpc: deps.rpc,
          threadSetup: deps.threadSetup,
          pending: () => this.pendingDevices(),
          up: () => {
            this.link.resumed();
            this.wake();
          },
          down: (why) => {
            this.counts.counters.lastError = `${why} (${this.cfg.url})`;
          },
          accepted: (id) => {
            const dev = this.devices.byId(id);
            if (dev !== undefined) this.devices.accepted(dev);
          },
        })
      : undefined;
    this.transport =
      this.gateway?.transport ??
      new HttpTransport({
        env: this.env,
        url: this.cfg.url,
        concurrency: this.cfg.concurrency,
        requestTimeoutMs: this.cfg.requestTimeoutMs,
        encoderThread: this.cfg.encoderThread,
        threadSetup: deps.threadSetup,
        log: this.log,
        maxBatchBytes: this.cfg.maxBatchBytes,
      });
    this.counts = new SyncCounts(this.env, this.log, this.now, this.cfg.url, () => this.recorder.sentPointsUnapplied);
    // points sent from the log are counted on disk by the apply that puts their records into LMDB, in its transaction
    this.recorder.onSentApplied = () => {
      void this.env.outbox.put(COUNTERS_KEY, this.counts.persisted());
    };
    this.acks = new Acks(this.env, this.counts, this.log);
    this.link = new Link({
      config: this.cfg,
      url: this.transport.url,
      log: this.log,
      now: this.now,
      stopped: () => this.isStopped,
      onReconnect: () => {
        // Live first: what was written during the outage becomes backlog, drained behind what comes now.
        // Points still in the write-ahead log were written during it too: recorded now, before the boundary.
        this.timeseries.applyLogged();
        this.lanes.reconnected(this.recorder.lastSeq);
      },
    });
    this.devices = new Devices({
      env: this.env,
      dict: deps.dict,
      entities: deps.entities,
      transport: this.transport,
      config: this.cfg,
      counts: this.counts,
      log: this.log,
      now: this.now,
      succeeded: () => this.succeeded(),
      retry: (what, afterMs) => this.failed(undefined, '', { kind: 'retry', what, afterMs }),
      resumed: (dev) => {
        this.lanes.resumed(dev.e);
        // its posts since it was parked wait in the write-ahead log for the next apply (store.applyIntervalMs, 5 min
        // by default): recorded in the outbox now, so they go at once (one commit per resume)
        this.timeseries.applyLogged();
        this.wake();
      },
    });
    // Batches already recorded are the backlog; everything written from now on is live (headSeq is reserved
    // past every seq used so far, see LmdbTimeseriesStore.nextSeq).
    const boundary = (this.env.meta.get('headSeq') as number | undefined) ?? 1;
    this.lanes = new OutboxLanes(this, this.recorder, boundary, (key, value) => this.discardNotDevice(key, value));
    this.logLane = new LogLane(this, this.recorder);
    // acknowledgements ride in the next ingest batch's transaction when one comes soon enough (acks.ts)
    this.recorder.beforeCommit = () => {
      if (this.acks.waiting) this.acks.flush();
    };
    this.recorder.onQueued = (_seq, e, refs) => {
      this.noteQueued(e, refs, 1);
      this.wake();
    };
    this.recorder.onLogged = (lsn, points) => this.logLane.logged(lsn, points);
    this.recorder.onApplied = (lsn) => this.logLane.applied(lsn);
    this.deps.attributes.syncMark = (id) => this.env.outbox.put(attributeMarkKey(id), Math.random());
    this.depthSync = new DepthSync({
      env: this.env,
      dict: deps.dict,
      entities: deps.entities,
      transport: this.transport,
      maxBatchBytes: this.gateway?.transport.depthBodyLimit ?? this.cfg.maxBatchBytes,
      probeMs: this.cfg.depthProbeMs,
      log: this.log,
      now: this.now,
      host: {
        token: async (id) => {
          const dev = this.devices.byId(id);
          return dev === undefined ? undefined : this.devices.tokenFor(dev);
        },
        parked: (id) => (this.devices.byId(id)?.parked ?? null) !== null,
        stopped: () => this.isStopped,
        succeeded: () => this.succeeded(),
        failed: (id, token, o) => {
          const dev = this.devices.byId(id);
          if (dev !== undefined) this.failed(dev, token, o);
        },
        pace: (n) => this.link.pace(this.cfg.maxPointsPerSec > 0, n),
        turn: () => this.turns.take(false),
        inFlight: (delta) => {
          this.slots.inFlight += delta;
        },
        wake: () => this.wake(),
        error: (message) => {
          this.counts.counters.lastError = message;
        },
      },
    });
    this.deps.depth.syncRecorder = this.depthSync;
    this.setAside = new SetAside({
      env: this.env,
      dict: deps.dict,
      entities: deps.entities,
      counts: this.counts,
      depth: this.depthSync,
      requeued: (items) => {
        for (const { e, refs } of items) this.noteQueued(e, refs, 1);
        this.lanes.rescanBacklog();
        this.wake();
      },
    });
  }

  /** Starts sending. */
  start(): void {
    this.log.info(
      `sync to ${this.transport.url}: ${this.cfg.maxPointsPerSec > 0 ? `backlog paced at ${this.cfg.maxPointsPerSec} points/s` : 'unpaced'}, ${this.cfg.concurrency} devices at once`,
    );
    this.ready = this.loadBacklog();
    this.depthSync
      .load()
      .catch((err: unknown) => this.log.error(`sync: counting the depth backlog failed: ${(err as Error).message}`));
    const every = (ms: number, fn: () => void): void => {
      const t = setInterval(fn, ms);
      t.unref();
      this.timers.push(t);
    };
    every(CHECK_PARKED_MS, () => this.devices.recheckParked());
    every(HELD_RECHECK_MS, () => {
      void this.releaseHeld();
    });
    every(1000, () => this.wake());
    this.pumping = this.ready.then(() => this.pump());
    this.gateway?.start();
  }

  async stop(): Promise<void> {
    this.isStopped = true;
    this.turns.releaseAll();
    for (const t of this.timers) clearInterval(t);
    this.logLane.stop();
    this.wake();
    await this.pumping;
    // requests in flight fail at once (their entries stay pending), then what was acknowledged is written
    this.transport.abort();
    await Promise.all([...this.running]);
    await Promise.all([this.acks.close(), this.transport.close()]);
  }

  stopped(): boolean {
    return this.isStopped;
  }

  /** Devices with points or attributes waiting to go up. */
  private *pendingDevices(): IterableIterator<string> {
    for (const d of this.devices.all()) if (d.backlog > 0 || d.logged > 0) yield d.id;
    for (const { key } of this.env.outbox.getRange({ ...ATTRIBUTE_MARKS, limit: 1000 }))
      yield (key as AttributeMarkKey)[1];
  }

  // ---- bookkeeping -------------------------------------------------------------------------------------

  /** Counts what the outbox holds (in bounded steps, yielding), once at start. */
  private async loadBacklog(): Promise<void> {
    let n = 0;
    // summed straight from the flat arrays: no ref objects for a backlog of millions (RssAnon, BENCHMARKS.md)
    const perEntity = new Map<number, number>();
    for (const { key, value } of this.env.outbox.getRange({
      start: queueFrom(0),
      end: queueFrom(this.lanes.boundary),
    })) {
      const e = (key as QueueKey)[2];
      const flat = value as number[];
      let points = 0;
      let minTs = Infinity;
      for (let i = flat.length % 4; i + 3 < flat.length; i += 4) {
        points += flat[i + 3] as number;
        minTs = Math.min(minTs, flat[i + 1] as number);
      }
      perEntity.set(e, (perEntity.get(e) ?? 0) + points);
      this.counts.queuedFlat(points, minTs, 1);
      if (++n % 5000 === 0) await new Promise<void>((r) => setImmediate(r));
      if (this.isStopped) return;
    }
    for (const [e, points] of perEntity) {
      const dev = this.devices.ofEntity(e);
      if (dev !== undefined) dev.backlog += points;
    }
    for (const { value } of this.env.outbox.getRange(HELD_RANGE)) this.counts.heldTotal += (value as HeldRecord).held;
  }

  noteQueued(e: number, refs: readonly FragmentRef[], sign: 1 | -1): void {
    const n = this.counts.queued(refs, sign);
    const dev = this.devices.ofEntity(e);
    if (dev !== undefined) dev.backlog += n * sign;
  }

  noteSent(points: number, bytes: number): void {
    this.counts.counters.sent += points;
    if (points > 0) this.bytesPerPoint = 0.8 * this.bytesPerPoint + 0.2 * Math.max(8, bytes / points);
  }

  /** An entry of an entity that is not a device (an asset): counted as not synced, and gone from the backlog. */
  private discardNotDevice(key: QueueKey, value: unknown): void {
    const refs = entryOf(key, value).refs;
    this.counts.counters.notSynced += this.counts.queued(refs, -1);
    this.acks.queue({ ...noOps(), remove: [key] });
  }

  // ---- the pump ----------------------------------------------------------------------------------------

  wake(): void {
    const w = this.wakeUp;
    this.wakeUp = undefined;
    w?.();
  }

  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        this.wakeUp = undefined;
        resolve();
      }, ms);
      t.unref();
      this.wakeUp = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }

  track(p: Promise<void>): void {
    this.running.add(p);
    void p.finally(() => this.running.delete(p));
  }

  private async pump(): Promise<void> {
    const slots = this.cfg.concurrency;
    while (!this.isStopped) {
      this.checkHorizon();
      const wait = this.link.waitMs();
      if (wait > 0) {
        await this.sleep(wait);
        continue;
      }
      // Live first: its devices take the free slots, the backlog what is left (a slot frees within one request).
      // But while the backlog waits, live keeps one slot free for it, or with a single slot the two take turns:
      // else devices posting faster than the upstream answers would hold every slot and the drain would starve.
      const backlogWaits = this.lanes.backlogWaits();
      let liveCap = slots;
      if (backlogWaits) liveCap = slots > 1 ? slots - 1 : this.backlogTurn ? 0 : 1;
      let started = this.logLane.dispatch(liveCap);
      started += this.lanes.fill(0, slots, liveCap);
      // depth series: at most one slot, after live telemetry and beside the backlog (src/sync/depth.ts)
      const depthJob = this.depthSync.dispatch(slots - this.slots.inFlight);
      if (depthJob !== undefined) {
        this.track(depthJob);
        started++;
      }
      const backlogStarted = this.lanes.fill(1, slots);
      started += backlogStarted;
      if (slots === 1) {
        // the backlog's turn passes once it took it, or when it could not use it (nothing it can start): live goes on
        if (this.backlogTurn && backlogStarted === 0 && this.slots.inFlight === 0) {
          this.backlogTurn = false;
          continue;
        }
        if (backlogStarted > 0) this.backlogTurn = false;
        else if (started > 0 && backlogWaits) this.backlogTurn = true;
      }
      if (!this.attrBusy && this.slots.inFlight < slots) started += this.sendAttributes();
      if (started === 0 || this.slots.inFlight >= slots) await this.sleep(1000);
      // ingest keeps priority: a dispatch round is a slice of its own (turns.ts)
      else await this.turns.take(false);
    }
  }

  // ---- outcomes ----------------------------------------------------------------------------------------

  succeeded(): void {
    this.counts.counters.lastSuccessTs = this.now();
    this.link.succeeded();
  }

  /** A send failed: a refused token parks its device (or provisions it again), anything else backs the link off. */
  failed(dev: Dev | undefined, token: string, o: Exclude<Outcome, { kind: 'sent' } | { kind: 'setAside' }>): void {
    // requests cut by stop() are not the upstream's fault: no back-off, no log line
    if (this.isStopped) return;
    if (o.kind === 'refused' && dev !== undefined) {
      void this.devices.refused(dev, token, o.what);
      return;
    }
    this.counts.counters.lastError = `${o.what} from ${this.transport.url}`;
    this.link.failed(o.what, o.kind === 'retry' ? o.afterMs : undefined);
  }

  // ---- client attributes -------------------------------------------------------------------------------

  /** Posts the latest client attributes of one marked device (attributeMarkKey); returns jobs started. */
  private sendAttributes(): number {
    for (const { key, value } of this.env.outbox.getRange({ ...ATTRIBUTE_MARKS, limit: 64 })) {
      const mark = key as AttributeMarkKey;
      const id = mark[1];
      const rec = this.deps.entities.device(id);
      const e = this.dict.entityIdx(id);
      const dev = e === undefined ? undefined : this.devices.ofEntity(e);
      if (rec === undefined || dev === undefined) {
        void this.env.outbox.remove(mark);
        continue;
      }
      if (dev.parked !== null) continue;
      this.attrBusy = true;
      this.slots.inFlight++;
      this.track(
        (async () => {
          try {
            const token = await this.devices.tokenFor(dev);
            if (token === undefined) return;
            const attrs = this.deps.attributes.get(id, 'CLIENT_SCOPE');
            const body = `{${attrs.map((a) => `${JSON.stringify(a.key)}:${wireValue(a.value)}`).join(',')}}`;
            const o = await this.transport.attributes(token, body);
            if (o.kind === 'sent') {
              this.succeeded();
              // removed only if no change came meanwhile (the marker is rewritten by every change)
              await this.env.root.transaction(() => {
                if (this.env.outbox.get(mark) === value) void this.env.outbox.remove(mark);
              });
            } else if (o.kind === 'setAside') {
              this.counts.counters.lastError = `400 from upstream for the attributes of ${dev.name}`;
              await this.env.outbox.remove(mark);
            } else {
              this.failed(dev, token, o);
            }
          } finally {
            this.attrBusy = false;
            this.slots.inFlight--;
            this.wake();
          }
        })(),
      );
      return 1;
    }
    return 0;
  }

  // ---- held points and drops while the link is down ----------------------------------------------------

  /** Held entries whose future points the clock has reached go back to the queue (only those points are sent). */
  private async releaseHeld(): Promise<void> {
    const maxTs = this.now() + MAX_AHEAD_MS;
    const moves: Array<{ key: HeldKey; h: HeldRecord }> = [];
    for (const { key, value } of this.env.outbox.getRange(HELD_RANGE)) {
      const h = value as HeldRecord;
      if (h.futureMin !== null && h.futureMin <= maxTs) moves.push({ key: key as HeldKey, h });
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
      this.counts.heldTotal -= h.held - h.pre2000;
      this.noteQueued(key[1], decodeRefs(h.refs), 1);
    }
    // released entries are older than the live boundary: the backlog lane starts over to find them
    this.lanes.rescanBacklog();
    this.wake();
  }

  /**
   * When retention or the disk budget moved the raw horizon, entries pointing below it are counted as
   * dropped now (also while the link is down), in bounded steps.
   */
  private checkHorizon(): void {
    const horizon = this.timeseries.rawHorizonTs;
    if (this.dropSweeping || (horizon <= this.lastHorizonChecked && !(this.dropRetryAt <= this.now()))) return;
    this.dropSweeping = true;
    void this.dropSweep(horizon)
      .then(
        (settled) => {
          // fragments below the horizon not compacted yet: their windows' fate is known once compaction ran
          this.dropRetryAt = settled ? Infinity : this.now() + DROP_RECHECK_MS;
        },
        (err: unknown) => {
          this.log.error(`sync: counting dropped points failed: ${(err as Error).message}`);
          this.dropRetryAt = this.now() + DROP_RECHECK_MS;
        },
      )
      .finally(() => {
        this.dropSweeping = false;
      });
  }

  /** Resolves true when every entry below the horizon was settled (dropped or kept), false to look again later. */
  private async dropSweep(horizon: number): Promise<boolean> {
    let settled = true;
    const windowMs = this.timeseries.windowMs;
    let start: QueuePos = queueFrom(0);
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
        const dev = this.devices.ofEntity(qk[2]);
        // a job has it in hand, or one has just counted it and its acknowledgement is not committed yet (counted
        // twice, the backlog went below what was pending)
        if ((dev !== undefined && (dev.busy[0] || dev.busy[1])) || this.acks.has(qk[1], qk[2])) {
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
        this.counts.dropped(dropped, from, to);
        this.noteQueued(qk[2], entry.refs, -1);
        if (keep.length > 0) this.noteQueued(qk[2], decodeRefs(keep), 1);
        rewrites.push({
          key: qk,
          keep: keep.length > 0 ? (entry.fromTs > Number.MIN_SAFE_INTEGER ? [entry.fromTs, ...keep] : keep) : null,
        });
      }
      if (rewrites.length > 0) {
        const counters = this.counts.persisted();
        await this.env.root.transaction(() => {
          for (const r of rewrites) {
            if (r.keep === null) void this.env.outbox.remove(r.key);
            else void this.env.outbox.put(r.key, r.keep);
          }
          void this.env.outbox.put(COUNTERS_KEY, counters);
        });
      }
      if (last === undefined || n < 1000 || this.isStopped) break;
      start = queueFrom(last[1], last[2] + 1);
      await new Promise<void>((r) => setImmediate(r));
    }
    this.lastHorizonChecked = horizon;
    return settled;
  }

  // ---- status ------------------------------------------------------------------------------------------

  status(): SyncStatusFull {
    const state: SyncState = this.link.waitMs() > 0 ? 'backoff' : this.slots.inFlight > 0 ? 'sending' : 'idle';
    for (const id of this.depthSync.pendingDevices()) this.devices.byId(id);
    const devices: Array<DeviceSyncStatus & { depthBacklogPoints: number }> = [];
    for (const d of this.devices.all()) {
      devices.push({
        id: d.id,
        name: d.name,
        state: d.parked === null ? 'ok' : 'parked',
        reason: d.parked,
        backlogPoints: Math.max(0, d.backlog) + d.logged,
        depthBacklogPoints: this.depthSync.pendingOf(d.id),
      });
    }
    const c = this.counts.counters;
    return {
      // points still in the write-ahead log are pending too (recorded in the outbox when put into LMDB)
      enabled: true,
      state,
      url: this.transport.url,
      backlogPoints: this.counts.backlog + this.logLane.loggedTotal,
      oldestPendingTs: this.counts.oldestPendingTs,
      sentPoints: c.sent,
      droppedPoints: c.dropped,
      lastSuccessTs: c.lastSuccessTs,
      lastError: c.lastError,
      devices,
      clockSynchronized: clockSynchronized(),
      heldPoints: this.counts.heldTotal,
      setAsidePoints: c.setAside,
      droppedRange: c.droppedFrom === null || c.droppedTo === null ? null : [c.droppedFrom, c.droppedTo],
      notSyncedPoints: c.notSynced,
      ...this.depthSync.status(),
      transport: this.transport.kind,
      session: this.gateway?.status() ?? null,
      downlink: this.gateway?.downlinkStatus() ?? DOWNLINK_OFF,
    };
  }

  /** Resolves once the backlog counts are loaded (tests, status right after start). */
  loaded(): Promise<void> {
    return this.ready ?? Promise.resolve();
  }
}
