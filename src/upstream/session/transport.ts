/**
 * The MQTT transport: the sync's uplink over TB's gateway API (`v1/gateway/telemetry`, `.../attributes`,
 * `.../depth/telemetry`), one session for every device (session.ts), a device addressed by its name. "Sent" is
 * the PUBACK. The backlog is read back and encoded in the sync thread (thread.ts, as for HTTP: the ingest path
 * keeps the main thread), which hands the bodies over; the main thread wraps each in the device's name,
 * validates it and publishes it (MQTT.js and the session live here).
 *
 * Invariants:
 * - every message is within sync.maxBatchBytes counting the whole MQTT packet (TB closes the session above
 *   64 KiB): bodyLimit gives the lanes the room a device's name and the topic leave;
 * - a message is validated before it goes (TB closes the whole session on one bad message: an empty map, a
 *   missing name, a value that is not an array): one that is not valid is set aside, never published.
 */
import type { EncodeRequest } from '../uplink/encode.js';
import { type ReadyGroup, type SyncThread, localBody } from '../uplink/thread.js';
import type { Outcome, ProvisionResult, Transport } from '../uplink/transport.js';
import type { UpstreamConnection } from './connection.js';

export const TELEMETRY_TOPIC = 'v1/gateway/telemetry';
export const ATTRIBUTES_TOPIC = 'v1/gateway/attributes';
export const DEPTH_TOPIC = 'v1/gateway/depth/telemetry';

/**
 * Bytes of a QoS 1 PUBLISH besides its payload and topic: the fixed header (1 + up to 4 of remaining length),
 * the topic's length (2), the packet id (2), MQTT 5's property length (1).
 */
const PACKET_BYTES = 10;
/** the longest device name the depth lane plans for (its bodies are cut before the device is known) */
const DEPTH_NAME_BYTES = 256;

const utf8 = new TextEncoder();

/** The bytes a message for `name` on `topic` adds around its body: `{"<name>":` + body + `}` and the packet. */
export function messageOverhead(topic: string, name: string): number {
  return PACKET_BYTES + Buffer.byteLength(topic) + Buffer.byteLength(JSON.stringify(name)) + 3;
}

export interface MqttTransportOptions {
  readonly url: string;
  readonly session: UpstreamConnection;
  readonly maxBatchBytes: number;
  /** reads the backlog back and encodes it (in a thread of its own unless sync.encoderThread is false) */
  readonly thread: SyncThread;
  /** a message naming the device was acknowledged: TB connected it implicitly (announce.ts) */
  readonly carried: (name: string) => void;
  /**
   * a message naming the device is about to go: it is announced with its type first if it was not yet in
   * this session, or TB's implicit connect would create it upstream as type `default` (announce.ts)
   */
  readonly announce?: (name: string) => void;
}

export class MqttTransport implements Transport {
  readonly kind = 'mqtt';
  readonly addressing = 'name';
  readonly url: string;

  constructor(private readonly o: MqttTransportOptions) {
    this.url = o.url;
  }

  get threaded(): boolean {
    return this.o.thread.threaded;
  }

  bodyLimit(name: string): number {
    return Math.max(64, this.o.maxBatchBytes - messageOverhead(DEPTH_TOPIC, name));
  }

  /** the body limit of depth series, whose bodies are cut before the device's name is known */
  get depthBodyLimit(): number {
    return Math.max(64, this.o.maxBatchBytes - PACKET_BYTES - DEPTH_TOPIC.length - DEPTH_NAME_BYTES - 3);
  }

  telemetry(name: string, body: string): Promise<Outcome> {
    return this.send(TELEMETRY_TOPIC, name, utf8.encode(body), '[');
  }

  groupBody(name: string, group: ReadyGroup, i: number): Promise<Outcome> {
    const body = localBody(group, i);
    if (body === undefined) return Promise.resolve({ kind: 'setAside', error: 'a batch encoded elsewhere' });
    return this.send(TELEMETRY_TOPIC, name, body, '[');
  }

  encode(req: EncodeRequest): Promise<ReadyGroup> {
    return this.o.thread.encodeHandedOver(req);
  }

  release(): void {
    // the bodies were handed over: garbage once unreferenced
  }

  attributes(name: string, body: string): Promise<Outcome> {
    // nothing to say: TB closes the session on an empty map
    if (body === '{}') return Promise.resolve({ kind: 'sent' });
    return this.send(ATTRIBUTES_TOPIC, name, utf8.encode(body), '{');
  }

  depth(name: string, body: string): Promise<Outcome> {
    return this.send(DEPTH_TOPIC, name, utf8.encode(body), '[');
  }

  provision(): Promise<ProvisionResult> {
    // devices need no credentials of their own: the gateway session carries them by name
    return Promise.resolve({ kind: 'denied', reason: 'not used over MQTT' });
  }

  abort(): void {
    this.o.session.stop();
  }

  close(): Promise<void> {
    this.o.session.stop();
    return this.o.thread.close();
  }

  private async send(topic: string, name: string, body: Uint8Array, open: '[' | '{'): Promise<Outcome> {
    const invalid = invalidMessage(name, body, open);
    if (invalid !== undefined) return { kind: 'setAside', error: invalid };
    const head = Buffer.from(`{${JSON.stringify(name)}:`);
    const payload = Buffer.concat([head, body, CLOSE]);
    const size = payload.length + PACKET_BYTES + Buffer.byteLength(topic);
    if (size > this.o.maxBatchBytes) {
      return {
        kind: 'setAside',
        error: `a message of ${size} bytes is over sync.maxBatchBytes (${this.o.maxBatchBytes})`,
      };
    }
    this.o.announce?.(name);
    const out = await this.o.session.publish(topic, payload);
    if (out.kind === 'sent') this.o.carried(name);
    return out;
  }
}

const CLOSE = Buffer.from('}');

/**
 * Why a gateway message would make TB close the session, or undefined: a name that is empty, a body that is
 * not a non-empty JSON array (telemetry, depth) or object (attributes). The bodies come from the sync's own
 * encoder, so the check looks at their shape, not at every value.
 */
export function invalidMessage(name: string, body: Uint8Array, open: '[' | '{'): string | undefined {
  if (name.trim() === '') return 'a device without a name';
  const close = open === '[' ? 0x5d : 0x7d;
  if (body.length < 3 || body[0] !== open.charCodeAt(0) || body[body.length - 1] !== close) {
    return `a body that is not a non-empty JSON ${open === '[' ? 'array' : 'object'}`;
  }
  return undefined;
}
