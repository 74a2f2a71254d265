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
 *   jobs.ts           the slots, the pump's wake-up, the jobs stop() waits for
 *   sender.ts         the way upstream as the lanes see it: outcomes, bytes per point
 *   accounting.ts     the backlog's books (counts, each device's backlog, acknowledgements)
 *   relay.ts          what the stores tell the sync (given to them at construction)
 *   lanes/log.ts      live points straight from the write-ahead log
 *   lanes/outbox.ts   the live and backlog lanes over the outbox queue
 *   transport.ts      the way upstream (http-transport.ts, mqtt/) and the one classifier of its answers
 *   session/          the one MQTT session to the upstream (upstream-session.ts); downlink/ what comes down it
 *   depth.ts          depth series
 *   attribute-marks.ts  client attributes
 *   held.ts           points held back for their timestamp
 *   drops.ts          points dropped (retention, the disk budget) before they went up
 *
 * Slots: at most sync.concurrency requests in flight, live first (the log lane, then the live outbox lane), the
 * backlog in what is left, and while the backlog waits live keeps one slot free for it (with a single slot the
 * two take turns). A device has at most one request in flight per lane.
 */
import type { EventBus } from '../../bus/index.js';
import type { Config } from '../../config/index.js';
import type { Logger } from '../../log.js';
import { backfill } from './backfill.js';
import type { Dictionary } from '../../store/encoding/dict.js';
import type { EntityStore } from '../../store/entities.js';
import {
  type DownlinkStore,
  type FragmentRef,
  type Outbox,
  type OutboxListener,
  type OutboxRecorder,
  type QueueKey,
  QUEUE_START,
  queueEntryTotals,
  queueFrom,
} from '../../store/outbox.js';
import type { LmdbAttributeStore } from '../../store/attributes.js';
import type { LmdbTimeseriesStore } from '../../store/series/store.js';
import type { RpcBroker } from '../../rpc/broker.js';
import type { EpochMs } from '../../types.js';
import { Accounting } from './accounting.js';
import { Acks, noOps } from './acks.js';
import { AttributeSender, markedDevices } from './attribute-marks.js';
import { clockSynchronized } from './clock.js';
import { SyncCounts } from './counts.js';
import { DepthSync, type DepthSyncStatus, depthHost } from './depth.js';
import { Devices } from './devices.js';
import { DropSweep } from './drops.js';
import { HeldPoints } from './held.js';
import { HttpTransport } from './http-transport.js';
import { Jobs } from './jobs.js';
import { LogLane } from './lanes/log.js';
import { OutboxLanes, entryOf } from './lanes/outbox.js';
import { Link } from './link.js';
import {
  DOWNLINK_OFF,
  type DownlinkStatus,
  UpstreamSession,
  type SessionStatus,
  isMqttUrl,
} from '../session/upstream-session.js';
import type { SyncPorts } from './ports.js';
import type { SyncRelay } from './relay.js';
import { Sender } from './sender.js';
import type { DeviceSyncStatus, SyncState, SyncStatus, SyncStatusSource } from './status.js';
import type { ThreadSetup } from './thread-worker.js';
import type { Transport } from './transport.js';
import { SetAside } from './set-aside.js';

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
  /** the last error of the daemon's previous run (before this start): not this run's, shown apart */
  readonly previousRunError: { readonly message: string; readonly ts: EpochMs | null } | null;
}

const CHECK_PARKED_MS = 2_000;
const HELD_RECHECK_MS = 30_000;

export interface SyncDeps {
  /** the outbox the sync reads and writes (store/outbox.ts), and the downlink's state beside it */
  readonly outbox: Outbox;
  readonly downlinkStore: DownlinkStore;
  readonly dict: Dictionary;
  readonly entities: EntityStore;
  readonly timeseries: LmdbTimeseriesStore;
  readonly attributes: LmdbAttributeStore;
  /** local devices' listeners and RPC (the MQTT gateway session announces the devices listening, delivers RPC) */
  readonly rpc: RpcBroker;
  /** devices' connects and disconnects, told upstream by the MQTT gateway session */
  readonly bus: EventBus;
  /** the recorder the timeseries store was opened with (so the log's replay at start is recorded too) */
  readonly recorder: OutboxRecorder;
  /** what the recorder and the depth store were given at construction: the service attaches to it */
  readonly relay: SyncRelay;
  readonly config: Readonly<Config['sync']>;
  /** what the sync thread opens: the store's data dir and map size (thread.ts) */
  readonly threadSetup: Pick<ThreadSetup, 'dataDir' | 'mapSizeBytes'>;
  readonly log: Logger;
  readonly now?: () => number;
}

export class SyncService implements SyncStatusSource {
  readonly outbox: Outbox;
  readonly cfg: Readonly<Config['sync']>;
  readonly log: Logger;
  readonly now: () => number;
  readonly timeseries: LmdbTimeseriesStore;
  readonly transport: Transport;
  /** the MQTT gateway session and its downlink; undefined over HTTP */
  readonly gateway: UpstreamSession | undefined;
  readonly counts: SyncCounts;
  readonly link: Link;
  readonly devices: Devices;
  readonly acks: Acks;
  readonly setAside: SetAside;
  readonly jobs = new Jobs();
  private readonly sender: Sender;
  private readonly accounting: Accounting;
  private readonly recorder: OutboxRecorder;
  private readonly logLane: LogLane;
  private readonly lanes: OutboxLanes;
  private readonly depthSync: DepthSync;
  private readonly attributeSender: AttributeSender;
  private readonly held: HeldPoints;
  private readonly drops: DropSweep;
  private pumping: Promise<void> | undefined;
  /** With a single slot, whether the backlog goes next (pump). */
  private backlogTurn = false;
  private readonly timers: NodeJS.Timeout[] = [];
  private ready: Promise<void> | undefined;

  constructor(deps: SyncDeps) {
    this.outbox = deps.outbox;
    this.cfg = deps.config;
    this.log = deps.log;
    this.now = deps.now ?? Date.now;
    this.timeseries = deps.timeseries;
    this.recorder = deps.recorder;
    this.gateway = isMqttUrl(this.cfg.url)
      ? new UpstreamSession({
          outbox: this.outbox,
          downlinkStore: deps.downlinkStore,
          config: this.cfg,
          log: this.log,
          now: this.now,
          entities: deps.entities,
          attributes: deps.attributes,
          rpc: deps.rpc,
          bus: deps.bus,
          threadSetup: deps.threadSetup,
          pending: () => this.pendingDevices(),
          up: () => {
            this.link.resumed();
            this.jobs.wake();
          },
          down: (why) => {
            this.counts.error(`${why} (${this.cfg.url})`);
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
        refs: this.outbox.refs,
        url: this.cfg.url,
        concurrency: this.cfg.concurrency,
        requestTimeoutMs: this.cfg.requestTimeoutMs,
        encoderThread: this.cfg.encoderThread,
        threadSetup: deps.threadSetup,
        log: this.log,
        maxBatchBytes: this.cfg.maxBatchBytes,
      });
    this.counts = new SyncCounts(
      this.outbox,
      this.log,
      this.now,
      this.cfg.url,
      () => this.recorder.sentPointsUnapplied,
    );
    this.acks = new Acks(this.outbox, this.counts, this.log);
    this.link = new Link({
      config: this.cfg,
      url: this.transport.url,
      log: this.log,
      now: this.now,
      stopped: () => this.jobs.stopped(),
      onReconnect: () => {
        // Live first: what was written during the outage becomes backlog, drained behind what comes now.
        // Points still in the write-ahead log were written during it too: recorded now, before the boundary.
        this.timeseries.applyLogged();
        this.lanes.reconnected(this.recorder.lastSeq);
      },
    });
    this.sender = new Sender({
      transport: this.transport,
      link: this.link,
      counts: this.counts,
      now: this.now,
      stopped: () => this.jobs.stopped(),
      refused: (dev, token, what) => void this.devices.refused(dev, token, what),
    });
    this.devices = new Devices({
      outbox: this.outbox,
      dict: deps.dict,
      entities: deps.entities,
      transport: this.transport,
      config: this.cfg,
      counts: this.counts,
      log: this.log,
      now: this.now,
      succeeded: () => this.sender.succeeded(),
      retry: (what, afterMs) => this.sender.failed(undefined, '', { kind: 'retry', what, afterMs }),
      resumed: (dev) => {
        this.lanes.resumed(dev.e);
        // its posts since it was parked wait in the write-ahead log for the next apply (store.applyIntervalMs, 5 min
        // by default): recorded in the outbox now, so they go at once (one commit per resume)
        this.timeseries.applyLogged();
        this.jobs.wake();
      },
    });
    this.accounting = new Accounting(this.counts, this.devices, this.acks);
    // Batches already recorded are the backlog; everything written from now on is live (headSeq is reserved
    // past every seq used so far, see LmdbTimeseriesStore.nextSeq).
    const boundary = this.outbox.nextSeq();
    const ports: SyncPorts = {
      cfg: this.cfg,
      log: this.log,
      now: this.now,
      store: { outbox: this.outbox, dict: deps.dict, timeseries: this.timeseries },
      jobs: this.jobs,
      sender: this.sender,
      accounting: this.accounting,
    };
    this.lanes = new OutboxLanes(ports, this.recorder, boundary, (key, value) => this.discardNotDevice(key, value));
    this.logLane = new LogLane(ports, this.recorder);
    this.depthSync = new DepthSync({
      outbox: this.outbox,
      dict: deps.dict,
      entities: deps.entities,
      transport: this.transport,
      maxBatchBytes: this.gateway?.transport.depthBodyLimit ?? this.cfg.maxBatchBytes,
      probeMs: this.cfg.depthProbeMs,
      log: this.log,
      now: this.now,
      host: depthHost(ports),
    });
    deps.relay.attach(this.outboxListener(), this.depthSync);
    this.setAside = new SetAside({
      outbox: this.outbox,
      dict: deps.dict,
      entities: deps.entities,
      counts: this.counts,
      depth: this.depthSync,
      requeued: (items) => {
        for (const { e, refs } of items) this.accounting.noteQueued(e, refs, 1);
        this.lanes.rescanBacklog();
        this.jobs.wake();
      },
    });
    this.attributeSender = new AttributeSender(ports, deps.entities, deps.attributes);
    this.held = new HeldPoints(ports, () => {
      this.lanes.rescanBacklog();
      this.jobs.wake();
    });
    this.drops = new DropSweep(ports);
  }

  /** What the recorder tells the service (through the relay). */
  private outboxListener(): OutboxListener {
    const queued = (_seq: number, e: number, refs: FragmentRef[]): void => {
      this.accounting.noteQueued(e, refs, 1);
      this.jobs.wake();
    };
    return {
      committing: () => {
        // acknowledgements ride in the next ingest batch's transaction when one comes soon enough (acks.ts)
        if (this.acks.waiting) this.acks.flush();
        return queued;
      },
      logged: (lsn, points) => this.logLane.logged(lsn, points),
      applied: (lsn) => this.logLane.applied(lsn),
      // points sent from the log are counted on disk by the apply that puts their records into LMDB, in its
      // transaction
      sentApplied: () => {
        void this.outbox.write({ counters: this.counts.persisted() });
        return true;
      },
    };
  }

  /** Starts sending. */
  start(): void {
    this.log.info(
      `sync to ${this.transport.url}: ${this.cfg.maxPointsPerSec > 0 ? `backlog paced at ${this.cfg.maxPointsPerSec} points/s` : 'unpaced'}, ${this.cfg.concurrency} devices at once`,
    );
    this.ready = this.historyForNewUpstream().then(() => this.loadBacklog());
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
      void this.held.release();
    });
    every(1000, () => this.jobs.wake());
    this.pumping = this.ready.then(() => this.pump());
    this.gateway?.start();
  }

  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    this.logLane.stop();
    this.jobs.stop();
    await this.pumping;
    // requests in flight fail at once (their entries stay pending), then what was acknowledged is written
    this.transport.abort();
    await this.jobs.settled();
    await Promise.all([this.acks.close(), this.transport.close()]);
  }

  stopped(): boolean {
    return this.jobs.stopped();
  }

  /** Devices with points or attributes waiting to go up. */
  private *pendingDevices(): IterableIterator<string> {
    for (const d of this.devices.all()) if (d.backlog > 0 || d.logged > 0) yield d.id;
    yield* markedDevices(this.outbox, 1000);
  }

  // ---- bookkeeping -------------------------------------------------------------------------------------

  /**
   * A new upstream gets what the store holds, behind live data (backfill.ts, docs/sync.md "History from before
   * sync"); once queued, the counters are written with its url, so a restart does not queue it again (a stop
   * before that queues it again whole: the same entries).
   */
  private async historyForNewUpstream(): Promise<void> {
    if (!this.counts.newUpstream) return;
    try {
      if (this.cfg.backfill) {
        // the log's points replayed at open are in LMDB before the store is read
        await this.outbox.flushed();
        const r = await backfill(
          this.outbox,
          this.timeseries.windowMs,
          this.lanes.boundary,
          (e) => this.devices.ofEntity(e) !== undefined,
          () => this.jobs.stopped(),
        );
        if (this.jobs.stopped()) return;
        if (r.points > 0)
          this.log.info(
            `sync: a new upstream: the ${r.points} points the store holds go up behind live data, oldest first`,
          );
      }
      // with sync.backfill false too: the upstream is this data dir's from now on, whatever the switch says later
      await this.outbox.write({ counters: this.counts.persisted() });
    } catch (err) {
      // the sync goes on with what was queued; the next start queues the history again
      this.log.error(`sync: queueing the stored history for ${this.cfg.url} failed: ${(err as Error).message}`);
    }
  }

  /** Counts what the outbox holds (in bounded steps, yielding), once at start. */
  private async loadBacklog(): Promise<void> {
    let n = 0;
    // summed straight from the flat arrays: no ref objects for a backlog of millions (RssAnon, BENCHMARKS.md)
    const perEntity = new Map<number, number>();
    for (const { key, value } of this.outbox.queue.entries({
      start: QUEUE_START,
      end: queueFrom(this.lanes.boundary),
    })) {
      const e = key[2];
      const { points, minTs } = queueEntryTotals(value);
      perEntity.set(e, (perEntity.get(e) ?? 0) + points);
      this.counts.queuedFlat(points, minTs, 1);
      if (++n % 5000 === 0) await new Promise<void>((r) => setImmediate(r));
      if (this.jobs.stopped()) return;
    }
    for (const [e, points] of perEntity) {
      const dev = this.devices.ofEntity(e);
      if (dev !== undefined) dev.backlog += points;
    }
    this.held.load();
  }

  /** An entry of an entity that is not a device (an asset): counted as not synced, and gone from the backlog. */
  private discardNotDevice(key: QueueKey, value: unknown): void {
    const refs = entryOf(key, value).refs;
    this.counts.counters.notSynced += this.counts.queued(refs, -1);
    this.acks.queue({ ...noOps(), remove: [key] });
  }

  // ---- the pump ----------------------------------------------------------------------------------------

  private async pump(): Promise<void> {
    const slots = this.cfg.concurrency;
    const { jobs } = this;
    while (!jobs.stopped()) {
      this.drops.check();
      const wait = this.link.waitMs();
      if (wait > 0) {
        await jobs.sleep(wait);
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
      // depth series: at most one slot, after live telemetry and beside the backlog (src/upstream/uplink/depth.ts)
      const depthJob = this.depthSync.dispatch(slots - jobs.slots.inFlight);
      if (depthJob !== undefined) {
        jobs.track(depthJob);
        started++;
      }
      const backlogStarted = this.lanes.fill(1, slots);
      started += backlogStarted;
      if (slots === 1) {
        // the backlog's turn passes once it took it, or when it could not use it (nothing it can start): live goes on
        if (this.backlogTurn && backlogStarted === 0 && jobs.slots.inFlight === 0) {
          this.backlogTurn = false;
          continue;
        }
        if (backlogStarted > 0) this.backlogTurn = false;
        else if (started > 0 && backlogWaits) this.backlogTurn = true;
      }
      if (jobs.slots.inFlight < slots) started += this.attributeSender.send();
      if (started === 0 || jobs.slots.inFlight >= slots) await jobs.sleep(1000);
      // ingest keeps priority: a dispatch round is a slice of its own (turns.ts)
      else await jobs.turns.take(false);
    }
  }

  // ---- status ------------------------------------------------------------------------------------------

  status(): SyncStatusFull {
    const state: SyncState = this.link.waitMs() > 0 ? 'backoff' : this.jobs.slots.inFlight > 0 ? 'sending' : 'idle';
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
      lastErrorTs: c.lastError === null ? null : (c.lastErrorTs ?? null),
      previousRunError: this.counts.previousRunError,
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
