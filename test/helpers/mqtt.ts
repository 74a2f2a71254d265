/**
 * MQTT test helpers: the daemon's MQTT ports from its listening line, MQTT.js clients (3.1.1 and 5) that
 * never reconnect, a message inbox, raw sockets for malformed input, and a REST reader for what was stored.
 */
import { spawn, spawnSync } from 'node:child_process';
import { type Socket, connect as netConnect } from 'node:net';
import { type IClientOptions, type MqttClient, connectAsync } from 'mqtt';
import mqttPacket from 'mqtt-packet';
import { type Gateway, http } from './server.js';
import { addUser, authHeaders, login } from './users.js';

/** The plain and TLS MQTT ports named in the daemon's listening line (0 = not listening). */
export function mqttPorts(gw: Gateway): { port: number; tlsPort: number } {
  const line = gw.logs.find((l) => l.includes('listening on')) ?? '';
  const p = /mqtt:\/\/[^:]+:(\d+)/.exec(line);
  const tp = /mqtts:\/\/[^:]+:(\d+)/.exec(line);
  return { port: p ? Number(p[1]) : 0, tlsPort: tp ? Number(tp[1]) : 0 };
}

export interface Teardown {
  teardown(fn: () => void | Promise<void>): void;
}

/** A connected MQTT.js client (no reconnects), ended in teardown. */
export async function mqttClient(
  t: Teardown,
  gw: Gateway,
  token: string,
  opts: IClientOptions = {},
): Promise<MqttClient> {
  const { port } = mqttPorts(gw);
  const c = await connectAsync(`mqtt://127.0.0.1:${port}`, {
    username: token,
    reconnectPeriod: 0,
    connectTimeout: 5_000,
    protocolVersion: 4,
    ...opts,
  });
  t.teardown(() => {
    c.end(true);
  });
  return c;
}

export interface Received {
  topic: string;
  text: string;
  qos: number;
}

/** Collects every message a client receives; `next` waits for the next one matching `pred`. */
export class Inbox {
  readonly all: Received[] = [];
  private waiters: Array<{ pred: (m: Received) => boolean; resolve: (m: Received) => void }> = [];

  constructor(client: MqttClient) {
    client.on('message', (topic, payload, packet) => {
      const m = { topic, text: payload.toString(), qos: packet.qos };
      this.all.push(m);
      const w = this.waiters.find((x) => x.pred(m));
      if (w) {
        this.waiters = this.waiters.filter((x) => x !== w);
        w.resolve(m);
      }
    });
  }

  /** The first message (already received or coming) matching `pred`; rejects after `ms`. */
  next(pred: (m: Received) => boolean = () => true, ms = 5_000, from = 0): Promise<Received> {
    const have = this.all.slice(from).find(pred);
    if (have) return Promise.resolve(have);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no matching message within ${ms} ms; got ${JSON.stringify(this.all)}`)),
        ms,
      );
      this.waiters.push({
        pred,
        resolve: (m) => {
          clearTimeout(timer);
          resolve(m);
        },
      });
    });
  }
}

/** Resolves when the client's connection closes (the daemon closed it); rejects after `ms`. */
export function closed(client: MqttClient, ms = 5_000): Promise<void> {
  return new Promise((resolve, reject) => {
    if (!client.connected) {
      resolve();
      return;
    }
    const timer = setTimeout(() => reject(new Error(`connection still open after ${ms} ms`)), ms);
    client.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/** A raw TCP socket to the MQTT port, for bytes no client library would send. */
export function rawSocket(t: Teardown, port: number): Promise<Socket & { received: Buffer[]; ended: Promise<void> }> {
  return new Promise((resolve, reject) => {
    const s = netConnect(port, '127.0.0.1') as Socket & { received: Buffer[]; ended: Promise<void> };
    s.received = [];
    s.ended = new Promise((r) => s.once('close', () => r()));
    s.on('data', (b: Buffer) => s.received.push(b));
    s.on('error', () => undefined);
    s.once('connect', () => resolve(s));
    s.once('error', reject);
    t.teardown(() => {
      s.destroy();
    });
  });
}

/**
 * One CONNECT over a fresh socket from `localAddress` (Linux's loopback answers from any 127/8 address): the
 * CONNACK's code (3.1.1 return code, MQTT 5 reason code), or undefined when the socket closed without one.
 */
export function connackFrom(
  port: number,
  localAddress: string,
  connect: { clientId?: string; username?: string; password?: string; protocolVersion?: 4 | 5 },
): Promise<number | undefined> {
  const protocolVersion = connect.protocolVersion ?? 4;
  return new Promise((resolve, reject) => {
    const s = netConnect({ port, host: '127.0.0.1', localAddress });
    const parser = mqttPacket.parser({ protocolVersion });
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`no CONNACK from ${localAddress} within 5 s`));
    }, 5_000);
    const done = (code: number | undefined): void => {
      clearTimeout(timer);
      s.destroy();
      resolve(code);
    };
    parser.on('packet', (p) => {
      if (p.cmd === 'connack') done(protocolVersion === 5 ? (p.reasonCode ?? 0) : p.returnCode);
    });
    s.on('data', (b: Buffer) => parser.parse(b));
    s.on('error', () => undefined);
    s.once('close', () => done(undefined));
    s.once('connect', () =>
      s.write(
        mqttPacket.generate({
          cmd: 'connect',
          keepalive: 0,
          clientId: connect.clientId ?? '',
          protocolVersion,
          ...(connect.username === undefined ? {} : { username: connect.username }),
          ...(connect.password === undefined ? {} : { password: Buffer.from(connect.password) }),
        }),
      ),
    );
  });
}

/** A tenant admin's JWT headers, for reading stored data over REST. */
export async function adminHeaders(gw: Gateway): Promise<{ 'X-Authorization': string }> {
  await addUser(gw.dataDir, 'mqtt-admin@example.com', 'secret-pass-1', 'TENANT_ADMIN');
  return authHeaders((await login(gw, 'mqtt-admin@example.com', 'secret-pass-1')).token);
}

/** Latest telemetry of a device over REST: key → [{ts, value}]. */
export async function latest(
  gw: Gateway,
  headers: Record<string, string>,
  deviceId: string,
  keys?: string,
): Promise<Record<string, Array<{ ts: number; value: unknown }>>> {
  const q = keys === undefined ? '' : `?keys=${keys}`;
  const r = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${deviceId}/values/timeseries${q}`,
    undefined,
    headers,
  );
  if (r.status !== 200) throw new Error(`latest ${deviceId}: ${r.status} ${r.text}`);
  return r.json();
}

export const hasBinary = (name: string): boolean => spawnSync('sh', ['-c', `command -v ${name}`]).status === 0;

/** Runs a command to its end: exit code and output. */
export function run(cmd: string, args: string[], timeoutMs = 10_000): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (b: Buffer) => {
      out += b.toString();
    });
    p.stderr.on('data', (b: Buffer) => {
      out += b.toString();
    });
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** SUBSCRIBE and the granted codes, refusals (0x80) included (MQTT.js rejects when any filter is refused). */
export async function granted(client: MqttClient, filters: Record<string, { qos: 0 | 1 | 2 }>): Promise<number[]> {
  try {
    return (await client.subscribeAsync(filters)).map((g) => g.qos);
  } catch (err) {
    const packet = (err as { packet?: { granted?: Array<number | { qos: number }> } }).packet;
    if (packet?.granted === undefined) throw err;
    return packet.granted.map((g) => (typeof g === 'number' ? g : g.qos));
  }
}
