/**
 * The one MQTT session to the upstream (TB's gateway API, docs/sync.md "Downlink"): connects, keeps it up
 * (reconnects with the sync's back-off), publishes at QoS 1 within a window of unacknowledged messages, and
 * hands inbound messages over one at a time, acknowledging each only once its handler resolved (the handler
 * makes it durable first).
 *
 * Invariants:
 * - clean session always: TB echoes sessionPresent for a persistent session it does not keep, which makes
 *   clients skip re-subscribing;
 * - at most `inflight` publishes wait for their PUBACK; a publish answers `retry` when the session is down or
 *   goes down before its PUBACK (the service backs off and re-sends from the store);
 * - an inbound QoS 1 message is PUBACKed only after `onMessage` resolved: MQTT.js sends the PUBACK when
 *   `handleMessage` calls back (for MQTT 3.1.1 and 5 alike), and processes inbound packets one at a time;
 * - MQTT 5 first; only an upstream that says it does not speak 5 (CONNACK 0x84 "unsupported protocol version",
 *   or 3.1.1's return code 1) is spoken to in 3.1.1 from then on, and `protocolReason` keeps what it said. A
 *   close without any CONNACK (an upstream down or restarting) changes nothing: the next try is MQTT 5 again;
 * - an MQTT 5 PUBACK 0x87 (not authorized) refuses the device the message names, not the session: `refused`.
 */
import { randomBytes } from 'node:crypto';
import type { IClientOptions, MqttClient, Packet } from 'mqtt';
import type { Logger } from '../../log.js';
import { backoffDelayMs } from '../uplink/link.js';
import type { Outcome } from '../uplink/transport.js';

type MqttJs = typeof import('mqtt');
let mqttJs: Promise<MqttJs> | undefined;

/**
 * MQTT.js, loaded when first needed: a gateway syncing over HTTP, or not at all, never loads it (~1.8 MB of
 * heap for the library, ~5 MB of RSS with the stream builders). It requires its stream builders (tcp, tls, ws
 * and the ws package) on the first connect(), in one task of tens of ms, so they are loaded with it; the daemon
 * loads both before it listens when the sync goes over MQTT (server.ts), so that opening the session does not
 * stall the event loop that answers devices.
 */
export function loadMqtt(): Promise<MqttJs> {
  mqttJs ??= import('mqtt').then(async (m) => {
    await Promise.all([import('mqtt/lib/connect/tcp'), import('mqtt/lib/connect/tls'), import('mqtt/lib/connect/ws')]);
    return m;
  });
  return mqttJs;
}

export type SessionState = 'connecting' | 'up' | 'down' | 'off';

export interface SessionOptions {
  readonly url: string;
  /** the gateway's access token upstream; undefined: none yet (the session waits and asks again) */
  readonly token: () => Promise<string | undefined>;
  readonly inflight: number;
  readonly timeoutMs: number;
  readonly retryBaseMs: number;
  readonly retryMaxMs: number;
  readonly log: Logger;
  readonly now: () => number;
  /** the session is up (after every CONNACK): announce, reconcile */
  readonly onUp: () => void;
  /** the session went down (or could not be opened): `why` for the status */
  readonly onDown: (why: string) => void;
  /** an inbound message; resolves once what it carries is durable (its PUBACK goes then) */
  readonly onMessage: (topic: string, payload: Buffer) => Promise<void>;
}

const SENT: Outcome = { kind: 'sent' };
/** MQTT 5 PUBACK reason: payload format invalid (TB: a message it could not convert) */
const PAYLOAD_FORMAT_INVALID = 0x99;
/** MQTT 5 PUBACK reason: topic name invalid (TB: a topic it does not serve, such as depth series) */
const TOPIC_NAME_INVALID = 0x90;
/** MQTT 5 PUBACK reason: not authorized (the upstream will not let this gateway act for the device it names) */
const NOT_AUTHORIZED = 0x87;
/** CONNACK codes of an upstream that does not speak MQTT 5: 3.1.1's 1, MQTT 5's 0x84 */
const UNSUPPORTED_VERSION = new Set([1, 0x84]);
/** the topics TB publishes to a gateway (it does without a SUBSCRIBE; subscribing costs nothing and some brokers need it) */
const SUBSCRIPTIONS = [
  'v1/gateway/attributes',
  'v1/gateway/attributes/response',
  'v1/gateway/rpc',
  'v1/devices/me/rpc/request/+',
];

export class UpstreamConnection {
  private client: MqttClient | undefined;
  private version: 4 | 5 = 5;
  private stateNow: SessionState = 'off';
  private sinceTs: number;
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;
  private inFlight = 0;
  private readonly slotWaiters: Array<() => void> = [];
  /** publishes waiting for their PUBACK: each settles once (a close settles them all as retry) */
  private readonly pending = new Set<(o: Outcome) => void>();
  private stopping = false;
  private lastWhy = '';
  /** why the session speaks 3.1.1 (what the upstream answered an MQTT 5 CONNECT); null while it speaks 5 */
  private fallbackWhy: string | null = null;

  constructor(private readonly o: SessionOptions) {
    this.sinceTs = o.now();
  }

  get state(): SessionState {
    return this.stateNow;
  }

  /** when the state last changed */
  get since(): number {
    return this.sinceTs;
  }

  get protocolVersion(): 4 | 5 {
    return this.version;
  }

  /** why the session speaks MQTT 3.1.1 rather than 5, or null */
  get protocolReason(): string | null {
    return this.fallbackWhy;
  }

  start(): void {
    this.stopping = false;
    this.open();
  }

  /** Ends the session; publishes waiting answer retry. */
  stop(): void {
    this.stopping = true;
    clearTimeout(this.timer);
    this.setState('off');
    const c = this.client;
    this.client = undefined;
    this.settleAll('the sync is stopping');
    c?.end(true);
  }

  /**
   * Publishes at QoS 1 and answers once the PUBACK came (`sent`), or why not. `first`: ahead of every publish
   * waiting for a slot (a downlink's answer, which someone upstream waits for, goes before the uplink's backlog).
   */
  async publish(topic: string, payload: Buffer | string, first = false): Promise<Outcome> {
    if (this.stateNow !== 'up') return { kind: 'retry', what: `MQTT session ${this.stateNow}`, afterMs: undefined };
    // a slot of the window: taken now, or handed over by a publish that ended (never one more than the window)
    if (this.inFlight < this.o.inflight) this.inFlight++;
    else
      await new Promise<void>((r) => {
        if (first) this.slotWaiters.unshift(r);
        else this.slotWaiters.push(r);
      });
    const client = this.client;
    if (this.stateNow !== 'up' || client === undefined) {
      this.releaseSlot();
      return { kind: 'retry', what: `MQTT session ${this.stateNow}`, afterMs: undefined };
    }
    return new Promise<Outcome>((resolve) => {
      let done = false;
      const timer = setTimeout(() => {
        settle({ kind: 'retry', what: `no PUBACK within ${this.o.timeoutMs} ms`, afterMs: undefined });
        // a session that stopped acknowledging is not trusted further: a new one starts clean
        this.drop(client, 'no PUBACK');
      }, this.o.timeoutMs);
      const settle = (out: Outcome): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        this.pending.delete(settle);
        this.releaseSlot();
        resolve(out);
      };
      this.pending.add(settle);
      client.publish(topic, payload, { qos: 1 }, (err) => {
        if (err === undefined || err === null) {
          settle(SENT);
          return;
        }
        const code = (err as { code?: unknown }).code;
        if (code === PAYLOAD_FORMAT_INVALID)
          settle({ kind: 'setAside', error: `PUBACK 0x99 (payload format invalid) for ${topic}` });
        // as HTTP's 404 for a path: the depth lane then asks whether the upstream has that endpoint at all
        else if (code === TOPIC_NAME_INVALID)
          settle({ kind: 'refused', what: `PUBACK 0x90 (topic name invalid) for ${topic}`, missing: true });
        // the upstream refuses the device this message names; the session and every other device go on
        else if (code === NOT_AUTHORIZED)
          settle({ kind: 'refused', what: `PUBACK 0x87 (not authorized) on ${topic}`, missing: false });
        else settle({ kind: 'retry', what: `${topic}: ${err.message}`, afterMs: undefined });
      });
    });
  }

  /** Publishes at QoS 1 without waiting (announce): false when the session is not up. */
  publishQuietly(topic: string, payload: string): boolean {
    if (this.stateNow !== 'up') return false;
    void this.publish(topic, payload);
    return true;
  }

  /** The slot goes to the next publish waiting for one, else back to the window. */
  private releaseSlot(): void {
    const next = this.slotWaiters.shift();
    if (next !== undefined) next();
    else this.inFlight--;
  }

  private settleAll(why: string): void {
    for (const s of [...this.pending]) s({ kind: 'retry', what: why, afterMs: undefined });
    // publishes waiting for a slot get one, find the session down, answer retry and hand it on
    for (const w of this.slotWaiters.splice(0)) {
      this.inFlight++;
      w();
    }
  }

  private setState(s: SessionState): void {
    if (this.stateNow === s) return;
    this.stateNow = s;
    this.sinceTs = this.o.now();
  }

  private open(): void {
    if (this.stopping) return;
    this.setState('connecting');
    void Promise.all([this.o.token(), loadMqtt()]).then(
      ([token, mqtt]) => {
        if (this.stopping) return;
        if (token === undefined) {
          this.retryLater('no gateway token upstream (sync.gatewayToken, or sync.provisionKey/Secret)');
          return;
        }
        this.connectWith(token, mqtt.connect);
      },
      (err: unknown) => this.retryLater(`the gateway token: ${(err as Error).message}`),
    );
  }

  private connectWith(token: string, connect: MqttJs['connect']): void {
    const opts: IClientOptions = {
      username: token,
      clean: true,
      protocolVersion: this.version,
      reconnectPeriod: 0,
      resubscribe: false,
      connectTimeout: this.o.timeoutMs,
      keepalive: 60,
      clientId: `outpost-${randomBytes(6).toString('hex')}`,
      queueQoSZero: false,
      // MQTT.js's default fills a cache of 65,536 two-byte Buffers on the first packet (one task of ~20 ms and
      // the GC after it, some MB kept for good); a packet id's two bytes are cheap to make as they are written
      writeCache: false,
    };
    const client = connect(this.o.url, opts);
    this.client = client;
    let connacked = false;
    let refusal: string | undefined;
    // PUBACK of an inbound message only after its handler made it durable (see the invariants above)
    client.handleMessage = (packet: Packet, callback: (err?: Error) => void): void => {
      if (packet.cmd !== 'publish') {
        callback();
        return;
      }
      const payload = Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload);
      this.o.onMessage(packet.topic, payload).then(
        () => callback(),
        (err: unknown) => {
          this.o.log.error(
            `sync: a message from upstream on ${packet.topic} could not be stored: ${(err as Error).message}`,
          );
          // no PUBACK for what is not stored: the session ends (TB re-sends pending RPCs to the next one)
          this.drop(client, 'a downlink could not be stored');
        },
      );
    };
    client.on('connect', () => {
      if (this.client !== client) return;
      connacked = true;
      this.failures = 0;
      // a PUBACK followed at once by a reply would wait for the upstream's delayed ACK (40 ms) under Nagle
      (client.stream as { setNoDelay?: (on: boolean) => void }).setNoDelay?.(true);
      this.setState('up');
      this.o.log.info(
        `sync: MQTT gateway session to ${this.o.url} up (MQTT ${this.version === 5 ? '5' : `3.1.1: ${this.fallbackWhy ?? ''}`})`,
      );
      client.subscribe(SUBSCRIPTIONS, { qos: 1 }, () => undefined);
      this.o.onUp();
    });
    client.on('error', (err) => {
      const code = (err as { code?: unknown }).code;
      if (!connacked && typeof code === 'number') {
        if (this.version === 5 && UNSUPPORTED_VERSION.has(code)) {
          this.version = 4;
          this.fallbackWhy = `the upstream refused MQTT 5 (CONNACK ${code === 1 ? '1' : '0x84'}: ${err.message})`;
          refusal = `${this.fallbackWhy}; MQTT 3.1.1 next`;
        } else {
          refusal = `CONNACK refused (code ${code}: ${err.message})`;
        }
      }
    });
    client.on('close', () => {
      if (this.client !== client) return;
      this.client = undefined;
      client.end(true);
      this.settleAll('the MQTT session closed');
      if (this.stopping) return;
      this.retryLater(refusal ?? (connacked ? 'the MQTT session closed' : `no CONNACK from ${this.o.url}`));
    });
  }

  /** Ends a session that misbehaved; its close handler reconnects. */
  private drop(client: MqttClient, why: string): void {
    if (this.client !== client) return;
    this.lastWhy = why;
    client.end(true);
  }

  private retryLater(why: string): void {
    const wasUp = this.stateNow === 'up';
    this.setState('down');
    this.failures++;
    const delay = backoffDelayMs(this.failures, this.o.retryBaseMs, this.o.retryMaxMs);
    const reason = this.lastWhy !== '' ? `${why} (${this.lastWhy})` : why;
    this.lastWhy = '';
    if (wasUp || this.failures === 1)
      this.o.log.warn(
        `sync: MQTT gateway session to ${this.o.url}: ${reason}; reconnecting in ${Math.round(delay)} ms`,
      );
    this.o.onDown(reason);
    this.timer = setTimeout(() => this.open(), delay);
    this.timer.unref();
  }
}
