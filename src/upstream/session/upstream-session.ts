/**
 * Outpost as a TB gateway device upstream (`sync.url` `mqtt://`/`mqtts://`): the one session (session.ts), the
 * uplink transport over it (transport.ts), and what comes down it. The sync service keeps every uplink
 * decision (what is sent, in which order, when it counts as delivered, whatever the transport); this module only
 * owns the session and the downlink.
 */
import type { EventBus } from '../../bus/index.js';
import type { Config } from '../../config/index.js';
import type { Logger } from '../../log.js';
import type { RpcBroker } from '../../rpc/broker.js';
import type { AttributeStore } from '../../store/attributes.js';
import type { EntityStore } from '../../store/entities.js';
import type { DownlinkStore, Outbox } from '../../store/outbox.js';
import type { ThreadSetup } from '../uplink/thread-worker.js';
import { SyncThread } from '../uplink/thread.js';
import { Announcer, type Candidate } from './announce.js';
import { SharedDownlink } from '../downlink/attributes.js';
import { DownlinkState } from '../downlink/state.js';
import { Lifecycle, type LifecycleEvent } from '../downlink/lifecycle.js';
import { RpcDownlink } from '../downlink/rpc.js';
import { gatewayToken } from './gateway-token.js';
import { UpstreamConnection, type SessionState } from './connection.js';
import { MqttTransport } from './transport.js';

export interface SessionStatus {
  readonly state: SessionState;
  readonly since: number;
  readonly announcedDevices: number;
  /** the MQTT version the session speaks (or tries first) */
  readonly protocol: '5' | '3.1.1';
  /** why 3.1.1 and not 5: what the upstream answered an MQTT 5 CONNECT; null while it speaks 5 */
  readonly protocolReason: string | null;
}

/** The downlink's part of the sync status (docs/sync.md "Downlink"). */
export interface DownlinkStatus {
  readonly enabled: boolean;
  readonly attributesApplied: number;
  readonly lastReconcileTs: number | null;
  readonly rpcReceived: number;
  readonly rpcDelivered: number;
  readonly rpcReplied: number;
  readonly rpcExpired: number;
  readonly rpcPending: number;
  /** devices the upstream deleted or renamed (the latest 20) */
  readonly deviceEvents: readonly LifecycleEvent[];
}

export const DOWNLINK_OFF: DownlinkStatus = Object.freeze({
  enabled: false,
  attributesApplied: 0,
  lastReconcileTs: null,
  rpcReceived: 0,
  rpcDelivered: 0,
  rpcReplied: 0,
  rpcExpired: 0,
  rpcPending: 0,
  deviceEvents: [],
});

export interface UpstreamSessionOptions {
  /** the uplink's outbox: the gateway's own token, the refs the sync thread's fallback reads */
  readonly outbox: Outbox;
  /** the downlink's state (downlink/state.ts) */
  readonly downlinkStore: DownlinkStore;
  readonly entities: EntityStore;
  readonly attributes: AttributeStore;
  readonly rpc: RpcBroker;
  /** its `deviceState` events: local devices' connects and disconnects are told upstream (announce.ts) */
  readonly bus: EventBus;
  /** what the sync thread opens, which reads the backlog back and encodes it (thread.ts) */
  readonly threadSetup: Pick<ThreadSetup, 'dataDir' | 'mapSizeBytes'>;
  /** ids of the devices with points or attributes waiting to go up */
  readonly pending: () => Iterable<string>;
  readonly config: Readonly<Config['sync']>;
  readonly log: Logger;
  readonly now: () => number;
  /** the session is up: the uplink goes on at once */
  readonly up: () => void;
  /** the session went down, or could not be opened */
  readonly down: (why: string) => void;
  /** the upstream acknowledged a message naming this device (a device parked for a refusal goes through again) */
  readonly accepted: (deviceId: string) => void;
}

export function isMqttUrl(url: string): boolean {
  return /^mqtts?:\/\//.test(url);
}

export class UpstreamSession {
  readonly session: UpstreamConnection;
  readonly transport: MqttTransport;
  private readonly announcer: Announcer;
  private readonly state: DownlinkState;
  private readonly shared: SharedDownlink;
  private readonly rpcDown: RpcDownlink;
  private readonly lifecycle: Lifecycle;
  /** device id → when it was last seen listening locally (a long-poll between two polls still counts) */
  private readonly listenedAt = new Map<string, number>();
  private readonly off: Array<() => void> = [];

  constructor(private readonly o: UpstreamSessionOptions) {
    const cfg = o.config;
    this.session = new UpstreamConnection({
      url: cfg.url,
      inflight: cfg.inflight,
      timeoutMs: cfg.requestTimeoutMs,
      retryBaseMs: cfg.retryBaseMs,
      retryMaxMs: cfg.retryMaxMs,
      log: o.log,
      now: o.now,
      token: () => gatewayToken({ outbox: o.outbox, config: cfg, log: o.log, refused: (why) => o.down(why) }),
      onUp: () => this.up(),
      onDown: (why) => {
        this.shared.sessionDown();
        o.down(why);
      },
      onMessage: (topic, payload) => this.message(topic, payload),
    });
    this.transport = new MqttTransport({
      url: cfg.url,
      thread: new SyncThread({
        refs: o.outbox.refs,
        log: o.log,
        thread: cfg.encoderThread,
        setup: {
          ...o.threadSetup,
          url: cfg.url,
          concurrency: cfg.concurrency,
          requestTimeoutMs: cfg.requestTimeoutMs,
        },
      }),
      session: this.session,
      maxBatchBytes: cfg.maxBatchBytes,
      carried: (name) => {
        const rec = o.entities.byName('DEVICE', name);
        if (rec !== undefined && rec.entityType === 'DEVICE') {
          this.announcer.carried({ id: rec.id, name, type: rec.type });
          o.accepted(rec.id);
        }
      },
      announce: (name) => {
        const rec = o.entities.byName('DEVICE', name);
        if (rec !== undefined && rec.entityType === 'DEVICE')
          this.announcer.ensure({ id: rec.id, name, type: rec.type });
      },
    });
    this.state = new DownlinkState(o.downlinkStore);
    this.shared = new SharedDownlink({
      store: o.downlinkStore,
      session: this.session,
      entities: o.entities,
      attributes: o.attributes,
      state: this.state,
      timeoutMs: cfg.requestTimeoutMs,
      log: o.log,
      now: o.now,
    });
    this.rpcDown = new RpcDownlink({
      store: o.downlinkStore,
      session: this.session,
      entities: o.entities,
      rpc: o.rpc,
      state: this.state,
      ttlMs: cfg.rpcTtlMs,
      log: o.log,
      now: o.now,
    });
    this.lifecycle = new Lifecycle(o.downlinkStore, this.session, o.log, o.now);
    this.announcer = new Announcer({
      session: this.session,
      announceMs: cfg.announceMs,
      now: o.now,
      candidates: () => this.candidates(),
      announced: (c) => this.shared.reconcile(c),
    });
    // from construction, before the device transports listen: a device connecting at once is not missed
    this.off.push(
      o.bus.on('deviceState', (ev) => {
        if (ev.kind !== 'CONNECT' && ev.kind !== 'DISCONNECT') return;
        const c = this.candidate(ev.deviceId);
        if (c === undefined) return;
        if (ev.kind === 'CONNECT') this.announcer.connected(c);
        else this.announcer.disconnected(c);
      }),
      o.bus.on('entityDeleted', (ev) => {
        if (ev.entityType === 'DEVICE') this.announcer.forget(ev.entityId);
      }),
    );
  }

  start(): void {
    this.rpcDown.start();
    this.session.start();
    this.announcer.start();
  }

  stop(): void {
    for (const off of this.off.splice(0)) off();
    this.announcer.stop();
    this.rpcDown.stop();
    this.session.stop();
  }

  status(): SessionStatus {
    return {
      state: this.session.state,
      since: this.session.since,
      announcedDevices: this.session.state === 'up' ? this.announcer.count : 0,
      protocol: this.session.protocolVersion === 5 ? '5' : '3.1.1',
      protocolReason: this.session.protocolReason,
    };
  }

  private up(): void {
    // replies waiting go first: the first packets of the session, before announces and the uplink (rpc.ts)
    this.rpcDown.sessionUp();
    this.announcer.sessionUp();
    this.o.up();
  }

  /**
   * Devices with a local session open, something to send, a local listener (seen within sync.announceMs), or a
   * downlink in hand; one whose local sessions all closed only for what it has to send (announce.ts).
   */
  private *candidates(): IterableIterator<Candidate> {
    const now = this.o.now();
    for (const id of this.announcer.onlineDevices()) {
      const c = this.candidate(id);
      if (c !== undefined) yield c;
    }
    for (const id of this.o.rpc.listeningDevices()) this.listenedAt.set(id, now);
    for (const [id, at] of this.listenedAt) {
      if (now - at > this.o.config.announceMs || this.announcer.isOffline(id)) {
        this.listenedAt.delete(id);
        continue;
      }
      const c = this.candidate(id);
      if (c !== undefined) yield c;
    }
    for (const id of this.rpcDown.devices()) {
      if (this.announcer.isOffline(id)) continue;
      const c = this.candidate(id);
      if (c !== undefined) yield c;
    }
    for (const id of this.o.pending()) {
      const c = this.candidate(id);
      if (c !== undefined) yield c;
    }
  }

  private candidate(id: string): Candidate | undefined {
    const rec = this.o.entities.device(id);
    return rec === undefined ? undefined : { id, name: rec.name, type: rec.type };
  }

  downlinkStatus(): DownlinkStatus {
    const c = this.state.counters;
    return { enabled: true, ...c, rpcPending: this.rpcDown.pending, deviceEvents: this.lifecycle.recent };
  }

  /** A message from upstream; resolves once what it carries is durable (its PUBACK goes then). */
  private async message(topic: string, payload: Buffer): Promise<void> {
    try {
      switch (topic) {
        case 'v1/gateway/attributes':
          await this.shared.pushed(payload);
          return;
        case 'v1/gateway/rpc':
          await this.rpcDown.received(payload);
          return;
        case 'v1/gateway/attributes/response':
          this.shared.answered(payload);
          return;
        default:
          if (topic.startsWith('v1/devices/me/rpc/request/')) await this.lifecycle.request(topic, payload);
          return;
      }
    } catch (err) {
      // a message that cannot be understood is acknowledged and dropped: refusing it would only end the session
      if ((err as { code?: unknown }).code === 'BAD_JSON' || (err as { code?: unknown }).code === 'BAD_PAYLOAD') {
        this.o.log.warn(`sync: a message from upstream on ${topic} could not be read: ${(err as Error).message}`);
        return;
      }
      throw err;
    }
  }
}
