/**
 * Outpost as a TB gateway device upstream (`sync.url` `mqtt://`/`mqtts://`): the one session (session.ts), the
 * uplink transport over it (transport.ts), and what comes down it. The sync service keeps every uplink
 * decision (§9's guarantees are the service's, whatever the transport); this module only owns the session and
 * the downlink.
 */
import type { Config } from '../../config/index.js';
import type { Logger } from '../../context.js';
import type { StoreEnv } from '../../store/env.js';
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
  }

  start(): void {
    this.session.start();
  }

  stop(): void {
    this.session.stop();
  }

  status(): SessionStatus {
    return { state: this.session.state, since: this.session.since, announcedDevices: 0 };
  }

  private up(): void {
    this.o.up();
  }

  private message(_topic: string, _payload: Buffer): Promise<void> {
    return Promise.resolve();
  }
}
