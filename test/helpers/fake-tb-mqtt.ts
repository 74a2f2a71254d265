/**
 * A fake ThingsBoard MQTT gateway endpoint (docs/sync.md "Downlink"), on mqtt-packet over node:net, that
 * behaves as TB's MQTT transport does for a gateway device:
 * - CONNECT with a known token (else CONNACK not authorized); sessionPresent echoes !clean (TB keeps nothing);
 *   MQTT 3.1.1 and 5 (or 3.1.1 only: a 5 CONNECT gets "unacceptable protocol version");
 * - implicit connect: any gateway message naming a device opens its sub-session; downlinks (shared attributes,
 *   RPC) go to connected sub-devices at QoS 1 without any SUBSCRIBE; a sub-device with no traffic for
 *   `inactivityMs` is dropped (its downlinks are lost, as TB's);
 * - pending RPCs are re-sent every time the device (re)connects, until replied or expired (duplicates!);
 * - `v1/gateway/attributes/request`'s quirks: one key → `value` without its name; `keys: []` → client and
 *   shared merged into `values`, or `value` alone when that holds one attribute; nothing → only id and device;
 * - the whole session is closed on a bad message (not JSON, empty map, missing name or id) or a packet over
 *   64 KiB; PUBACKs of uplinks can be delayed (`pubackDelayMs`) to watch the client's window.
 */
import type { Test } from 'tap';
import { type Server, type Socket, createServer } from 'node:net';
import mqttPacket, { type Packet } from 'mqtt-packet';
import { waitFor } from './wait.js';

export const TB_MAX_PACKET = 65_536;

export interface FakeTbMqttOptions {
  readonly tokens: readonly string[];
  /** answer an MQTT 5 CONNECT with "unacceptable protocol version" (an upstream that speaks 3.1.1 only) */
  readonly only311?: boolean;
  /** a sub-device silent this long loses its sub-session */
  readonly inactivityMs?: number;
  readonly port?: number;
}

export interface Message {
  readonly topic: string;
  readonly text: string;
  readonly bytes: number;
}

interface Rpc {
  device: string;
  id: number;
  method: string;
  params: unknown;
  resolve: (reply: string) => void;
  expiresAt: number;
}

interface Conn {
  readonly socket: Socket;
  version: number;
  readonly subDevices: Map<string, number>;
  nextId: number;
}

export class FakeTbMqtt {
  readonly received: Message[] = [];
  /** device name → telemetry points `ts|key` → value JSON */
  readonly points = new Map<string, Map<string, string>>();
  readonly client = new Map<string, Record<string, unknown>>();
  readonly shared = new Map<string, Record<string, unknown>>();
  readonly connects: string[] = [];
  readonly closes: string[] = [];
  /** most uplink publishes waiting for their PUBACK at once */
  maxUnacked = 0;
  pubackDelayMs = 0;
  /** false: pending RPCs are not re-sent when a device's sub-session opens again (to see what the gateway kept) */
  resendPending = true;
  /** telemetry naming this device gets MQTT 5's PUBACK 0x99 (payload format invalid), the session kept (TB, MQTT 5) */
  refuseDevice: string | undefined;
  /** the PUBACK reason `refuseDevice` gets: 0x99, or 0x87 (not authorized: TB, a device this gateway may not act for) */
  refuseCode = 0x99;
  /** this many RPC replies (`v1/gateway/rpc` from the gateway) end the session instead of a PUBACK (a session lost mid-reply) */
  dropRpcReplies = 0;
  /** plain TB: no depth series; MQTT 5 PUBACK 0x90 (topic name invalid) for `v1/gateway/depth/telemetry` */
  depthAbsent = false;
  /** downlinks the gateway acknowledged (PUBACK), by topic */
  readonly acked: string[] = [];
  port = 0;
  private server: Server | undefined;
  private conn: Conn | undefined;
  /** every accepted socket, a session or not yet one: a stopped server ends them all, as a TB going down does */
  private readonly sockets = new Set<Socket>();
  private unacked = 0;
  private readonly rpcs: Rpc[] = [];
  private readonly rpcSeq = new Map<string, number>();
  private readonly inflightDown = new Map<number, string>();

  constructor(private readonly o: FakeTbMqttOptions) {}

  get url(): string {
    return `mqtt://127.0.0.1:${this.port}`;
  }

  get connected(): boolean {
    return this.conn !== undefined;
  }

  async start(): Promise<void> {
    const server = createServer((s) => this.accept(s));
    this.server = server;
    await new Promise<void>((r) => server.listen(this.port !== 0 ? this.port : (this.o.port ?? 0), '127.0.0.1', r));
    this.port = (server.address() as { port: number }).port;
  }

  async stop(): Promise<void> {
    // not only the session: server.close() waits for every connection, and one the gateway opened a moment
    // ago (its CONNECT not handled yet) would hold the stop until the gateway itself went away
    for (const s of this.sockets) s.destroy();
    this.conn = undefined;
    const s = this.server;
    this.server = undefined;
    if (s !== undefined) await new Promise<void>((r) => s.close(() => r()));
  }

  /** Points of a device as `ts → {key: value}`. */
  pointCount(device: string): number {
    return this.points.get(device)?.size ?? 0;
  }

  /** Sets shared attributes (pushed now to a connected sub-device, else lost for it, as TB). */
  setShared(device: string, kv: Record<string, unknown>): void {
    this.shared.set(device, { ...this.shared.get(device), ...kv });
    this.pushTo(device, 'v1/gateway/attributes', JSON.stringify({ device, data: kv }));
  }

  deleteShared(device: string, keys: string[]): void {
    const cur = { ...this.shared.get(device) };
    for (const k of keys) delete cur[k];
    this.shared.set(device, cur);
    this.pushTo(device, 'v1/gateway/attributes', JSON.stringify({ device, data: { deleted: keys } }));
  }

  /** A server-side RPC; resolves with the gateway's reply `data` (JSON text). Pending until `ttlMs`. */
  rpc(device: string, method: string, params: unknown, ttlMs = 60_000): { id: number; reply: Promise<string> } {
    const id = (this.rpcSeq.get(device) ?? 0) + 1;
    this.rpcSeq.set(device, id);
    let resolve: (r: string) => void = () => undefined;
    const reply = new Promise<string>((r) => {
      resolve = r;
    });
    const rpc: Rpc = { device, id, method, params, resolve, expiresAt: Date.now() + ttlMs };
    this.rpcs.push(rpc);
    this.sendRpc(rpc);
    return { id, reply };
  }

  /** How many times RPC `id` of `device` was published to the gateway. */
  rpcSends(device: string, id: number): number {
    return this.sentDown.filter((x) => x === `${device}:${id}`).length;
  }

  /** Whether `device` has a live sub-session now. */
  isConnected(device: string): boolean {
    const at = this.conn?.subDevices.get(device);
    return at !== undefined && (this.o.inactivityMs === undefined || Date.now() - at <= this.o.inactivityMs);
  }

  /** A message to the gateway's own device topic (gateway_device_deleted / renamed). */
  gatewayRpc(method: string, params: unknown): void {
    const c = this.conn;
    if (c === undefined) return;
    const id = c.nextId++;
    this.write(c, {
      cmd: 'publish',
      topic: `v1/devices/me/rpc/request/${id}`,
      payload: JSON.stringify({ method, params }),
      qos: 1,
      messageId: id,
      retain: false,
      dup: false,
    });
  }

  /** Closes the gateway's session (the server restarted, a network cut). */
  dropSession(): void {
    this.conn?.socket.destroy();
  }

  private accept(socket: Socket): void {
    const parser = mqttPacket.parser();
    const c: Conn = { socket, version: 4, subDevices: new Map(), nextId: 1 };
    let pending = 0;
    socket.on('data', (chunk) => {
      parser.parse(chunk);
      pending = (parser as unknown as { packet: { length: number } }).packet.length;
      if (pending > TB_MAX_PACKET) this.close(c, 'over 64 KiB');
    });
    this.sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => {
      this.sockets.delete(socket);
      if (this.conn === c) this.conn = undefined;
    });
    parser.on('error', () => this.close(c, 'malformed'));
    parser.on('packet', (p: Packet) => {
      void this.onPacket(c, p);
    });
  }

  private close(c: Conn, why: string): void {
    this.closes.push(why);
    c.socket.destroy();
    if (this.conn === c) this.conn = undefined;
  }

  private write(c: Conn, p: Record<string, unknown>): void {
    if (!c.socket.destroyed)
      c.socket.write(mqttPacket.generate(p as unknown as Packet, { protocolVersion: c.version }));
  }

  private async onPacket(c: Conn, p: Packet): Promise<void> {
    switch (p.cmd) {
      case 'connect': {
        c.version = p.protocolVersion ?? 4;
        if (c.version === 5 && this.o.only311 === true) {
          c.version = 4;
          this.write(c, { cmd: 'connack', returnCode: 1, sessionPresent: false });
          c.socket.end();
          return;
        }
        const ok = typeof p.username === 'string' && this.o.tokens.includes(p.username);
        if (!ok) {
          this.write(
            c,
            c.version === 5
              ? { cmd: 'connack', reasonCode: 0x86, sessionPresent: false }
              : { cmd: 'connack', returnCode: 5, sessionPresent: false },
          );
          c.socket.end();
          return;
        }
        this.conn?.socket.destroy();
        this.conn = c;
        this.connects.push(c.version === 5 ? 'v5' : 'v3.1.1');
        // TB echoes !clean although it keeps nothing
        this.write(c, { cmd: 'connack', returnCode: 0, reasonCode: 0, sessionPresent: !p.clean });
        return;
      }
      case 'pingreq':
        this.write(c, { cmd: 'pingresp' });
        return;
      case 'subscribe':
        this.write(c, {
          cmd: 'suback',
          messageId: p.messageId,
          granted: p.subscriptions.map((s) => Math.min(s.qos, 1)),
        });
        return;
      case 'puback': {
        const topic = this.inflightDown.get(p.messageId ?? -1);
        if (topic !== undefined) this.acked.push(topic);
        return;
      }
      case 'disconnect':
        c.socket.end();
        return;
      case 'publish':
        break;
      default:
        return;
    }
    const payload = Buffer.isBuffer(p.payload) ? p.payload : Buffer.from(p.payload);
    const text = payload.toString();
    if (p.topic === 'v1/gateway/rpc' && this.dropRpcReplies > 0) {
      this.dropRpcReplies--;
      this.closes.push('dropped on an RPC reply');
      c.socket.destroy();
      if (this.conn === c) this.conn = undefined;
      return;
    }
    this.received.push({ topic: p.topic, text, bytes: payload.length + p.topic.length + 10 });
    let bad: string | undefined;
    // MQTT 3.1.1 has no reason code: a refused device's message ends the whole session (TB, Outpost)
    if (
      this.refuseDevice !== undefined &&
      p.topic === 'v1/gateway/telemetry' &&
      c.version !== 5 &&
      text.includes(JSON.stringify(this.refuseDevice))
    ) {
      this.close(c, `refused ${this.refuseDevice} (3.1.1)`);
      return;
    }
    const refusedNow =
      (this.refuseDevice !== undefined &&
        p.topic === 'v1/gateway/telemetry' &&
        c.version === 5 &&
        text.includes(JSON.stringify(this.refuseDevice))) ||
      (this.depthAbsent && p.topic === 'v1/gateway/depth/telemetry' && c.version === 5);
    try {
      if (refusedNow) throw new Error('refused');
      bad = this.handle(c, p.topic, JSON.parse(text) as unknown);
    } catch (err) {
      if (!refusedNow) bad = `not JSON: ${(err as Error).message}`;
    }
    if (p.qos === 1) {
      this.unacked++;
      this.maxUnacked = Math.max(this.maxUnacked, this.unacked);
      if (this.pubackDelayMs > 0) await new Promise((r) => setTimeout(r, this.pubackDelayMs));
      this.unacked--;
      const refused =
        this.refuseDevice !== undefined &&
        p.topic === 'v1/gateway/telemetry' &&
        c.version === 5 &&
        text.includes(JSON.stringify(this.refuseDevice));
      const noDepth = this.depthAbsent && p.topic === 'v1/gateway/depth/telemetry' && c.version === 5;
      this.write(c, {
        cmd: 'puback',
        messageId: p.messageId,
        reasonCode: refused ? this.refuseCode : noDepth ? 0x90 : 0,
      });
      if (refused || noDepth) return;
    }
    // TB: PUBACK, then the whole session is closed
    if (bad !== undefined) this.close(c, bad);
  }

  /** A gateway message; returns why TB would close the session, or undefined. */
  private handle(c: Conn, topic: string, body: unknown): string | undefined {
    const obj =
      typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : undefined;
    if (obj === undefined) return 'not a JSON object';
    switch (topic) {
      case 'v1/gateway/connect':
        if (typeof obj['device'] !== 'string' || obj['device'] === '') return 'connect without device';
        this.connectDevice(c, obj['device']);
        return undefined;
      case 'v1/gateway/disconnect':
        if (typeof obj['device'] === 'string') c.subDevices.delete(obj['device']);
        return undefined;
      case 'v1/gateway/telemetry':
      case 'v1/gateway/depth/telemetry': {
        let any = false;
        for (const [name, arr] of Object.entries(obj)) {
          if (!Array.isArray(arr)) continue;
          any = true;
          this.connectDevice(c, name);
          const pts = this.points.get(name) ?? new Map<string, string>();
          this.points.set(name, pts);
          for (const rec of arr as Array<Record<string, unknown>>) {
            const ts = rec['ts'] ?? rec['ds'];
            const values = (rec['values'] ?? rec) as Record<string, unknown>;
            for (const [k, v] of Object.entries(values)) pts.set(`${String(ts)}|${k}`, JSON.stringify(v));
          }
        }
        return any ? undefined : 'no telemetry arrays';
      }
      case 'v1/gateway/attributes': {
        const entries = Object.entries(obj);
        if (entries.length === 0) return 'empty attributes map';
        for (const [name, kv] of entries) {
          if (typeof kv !== 'object' || kv === null) return 'attributes not an object';
          this.connectDevice(c, name);
          this.client.set(name, { ...this.client.get(name), ...(kv as Record<string, unknown>) });
        }
        return undefined;
      }
      case 'v1/gateway/attributes/request': {
        const device = obj['device'];
        if (typeof device !== 'string' || obj['id'] === undefined || obj['client'] === undefined)
          return 'attribute request without id/device/client';
        this.connectDevice(c, device);
        const keys =
          typeof obj['key'] === 'string' ? [obj['key']] : Array.isArray(obj['keys']) ? (obj['keys'] as string[]) : [];
        const merged: Record<string, unknown> =
          keys.length === 0
            ? { ...this.client.get(device), ...this.shared.get(device) }
            : obj['client'] === true
              ? { ...this.client.get(device) }
              : { ...this.shared.get(device) };
        const found =
          keys.length === 0 ? merged : Object.fromEntries(keys.filter((k) => k in merged).map((k) => [k, merged[k]]));
        const n = Object.keys(found).length;
        const answer: Record<string, unknown> = { id: obj['id'], device };
        if (n === 1 && (keys.length === 1 || keys.length === 0)) answer['value'] = Object.values(found)[0];
        else if (n > 0) answer['values'] = found;
        this.publishTo(c, 'v1/gateway/attributes/response', JSON.stringify(answer));
        return undefined;
      }
      case 'v1/gateway/rpc': {
        const device = obj['device'];
        if (typeof device !== 'string' || obj['id'] === undefined) return 'rpc reply without device/id';
        this.connectDevice(c, device);
        const i = this.rpcs.findIndex((r) => r.device === device && r.id === obj['id']);
        if (i >= 0) {
          const [r] = this.rpcs.splice(i, 1);
          r?.resolve(JSON.stringify(obj['data']));
        }
        return undefined;
      }
      default:
        return undefined;
    }
  }

  private connectDevice(c: Conn, name: string): void {
    const was = c.subDevices.get(name);
    const alive = was !== undefined && (this.o.inactivityMs === undefined || Date.now() - was <= this.o.inactivityMs);
    c.subDevices.set(name, Date.now());
    // a new sub-session subscribes to RPC: TB (re)sends every pending RPC of the device
    if (!alive && this.resendPending) for (const r of this.rpcs) if (r.device === name) this.sendRpc(r);
  }

  private readonly sentDown: string[] = [];

  private sendRpc(r: Rpc): void {
    if (r.expiresAt < Date.now()) return;
    if (this.isConnected(r.device)) this.sentDown.push(`${r.device}:${r.id}`);
    this.pushTo(
      r.device,
      'v1/gateway/rpc',
      JSON.stringify({ device: r.device, data: { id: r.id, method: r.method, params: r.params } }),
    );
  }

  private pushTo(device: string, topic: string, payload: string): void {
    const c = this.conn;
    if (c === undefined || !this.isConnected(device)) return;
    this.publishTo(c, topic, payload);
  }

  private publishTo(c: Conn, topic: string, payload: string): void {
    const id = c.nextId++;
    if (c.nextId > 65_000) c.nextId = 1;
    this.inflightDown.set(id, topic);
    this.write(c, { cmd: 'publish', topic, payload, qos: 1, messageId: id, retain: false, dup: false });
  }
}

/** A fake upstream started for one test (stopped at its teardown), knowing the gateway's `token`. */
export async function startFakeTbMqtt(
  t: Test,
  token: string,
  opts: Partial<FakeTbMqttOptions> = {},
): Promise<FakeTbMqtt> {
  const tb = new FakeTbMqtt({ tokens: [token], ...opts });
  await tb.start();
  t.teardown(() => tb.stop());
  return tb;
}

/** waitFor a predicate, checked every 50 ms, that `label` names. */
export async function until(pred: () => boolean | Promise<boolean>, label: string, ms = 20_000): Promise<void> {
  await waitFor(pred, { timeout: ms, interval: 50, message: label });
}
