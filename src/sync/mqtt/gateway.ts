/**
 * Outpost as a TB gateway device upstream (`sync.url` `mqtt://`/`mqtts://`): the one session (session.ts), the
 * uplink transport over it (transport.ts), and what comes down it. The sync service keeps every uplink
 * decision (§9's guarantees are the service's, whatever the transport); this module only owns the session and
 * the downlink.
 */
import type { Config } from '../../config/index.js';
import type { Logger } from '../../context.js';
import type { RpcBroker } from '../../rpc/broker.js';
import type { EntityStore } from '../../store/entities.js';
import type { StoreEnv } from '../../store/env.js';
import { Announcer, type Candidate } from './announce.js';
import { gatewayToken } from './gateway-token.js';
import { GatewaySession, type SessionState } from './session.js';
import { MqttTransport } from './transport.js';

export interface SessionStatus {
  readonly state: SessionState;
  readonly since: number;
  readonly announcedDevices: number;
}

export interface MqttGatewayOptions {
  readonly env: StoreEnv;
  readonly entities: EntityStore;
  readonly rpc: RpcBroker;
  /** ids of the devices with points or attributes waiting to go up */
  readonly pending: () => Iterable<string>;
  readonly config: Readonly<Config['sync']>;
  readonly log: Logger;
  readonly now: () => number;
  /** the session is up: the uplink goes on at once */
  readonly up: () => void;
  /** the session went down, or could not be opened */
  readonly down: (why: string) => void;
}

export function isMqttUrl(url: string): boolean {
  return /^mqtts?:\/\//.test(url);
}

export class MqttGateway {
  readonly session: GatewaySession;
  readonly transport: MqttTransport;
  private readonly announcer: Announcer;
  /** device id → when it was last seen listening locally (a long-poll between two polls still counts) */
  private readonly listenedAt = new Map<string, number>();

  constructor(private readonly o: MqttGatewayOptions) {
    const cfg = o.config;
    this.session = new GatewaySession({
      url: cfg.url, inflight: cfg.inflight, timeoutMs: cfg.requestTimeoutMs, retryBaseMs: cfg.retryBaseMs, retryMaxMs: cfg.retryMaxMs,
      log: o.log, now: o.now,
      token: () => gatewayToken({ env: o.env, config: cfg, log: o.log, refused: (why) => o.down(why) }),
      onUp: () => this.up(),
      onDown: (why) => o.down(why),
      onMessage: (topic, payload) => this.message(topic, payload),
    });
    this.transport = new MqttTransport({ env: o.env, url: cfg.url, session: this.session, maxBatchBytes: cfg.maxBatchBytes });
    this.announcer = new Announcer({
      session: this.session, announceMs: cfg.announceMs, now: o.now,
      candidates: () => this.candidates(),
      announced: () => undefined,
    });
  }

  start(): void {
    this.session.start();
    this.announcer.start();
  }

  stop(): void {
    this.announcer.stop();
    this.session.stop();
  }

  status(): SessionStatus {
    return { state: this.session.state, since: this.session.since, announcedDevices: this.session.state === 'up' ? this.announcer.count : 0 };
  }

  private up(): void {
    this.announcer.sessionUp();
    this.o.up();
  }

  /** Devices with something to send, a local listener (seen within sync.announceMs), or a downlink in hand. */
  private *candidates(): IterableIterator<Candidate> {
    const now = this.o.now();
    for (const id of this.o.rpc.listeningDevices()) this.listenedAt.set(id, now);
    for (const [id, at] of this.listenedAt) {
      if (now - at > this.o.config.announceMs) {
        this.listenedAt.delete(id);
        continue;
      }
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

  private message(_topic: string, _payload: Buffer): Promise<void> {
    return Promise.resolve();
  }
}
