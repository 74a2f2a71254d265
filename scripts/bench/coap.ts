/**
 * CoAP benchmark (docs/coap.md), side by side in one run, medians over rounds:
 * 1. CON telemetry from N clients (one UDP socket each), each waiting for its 2.01 before the next post: msgs/s,
 *    answer p50/p99, the daemon's CPU µs per message (all threads, and its main thread) and the generator's own,
 *    against the same devices over HTTP keep-alive and MQTT QoS 1, and against a bare dgram echo process (the
 *    most the generator and loopback UDP give without a daemon); the order turns each round. The daemon runs with `store.commitDelayMs: 0` as bench:mqtt's does, so the figures measure the
 *    transports, not the write budget's pacing.
 * 2. N observing devices (default 10,000; sockets of 1,000 observations each): RssAnon per observation on top of
 *    the daemon before the registrations, and the delivery of one shared-attribute change to every device
 *    (REST posts, 32 at a time): p50/p99 from each post's start to its notification, and the time for all.
 *
 *   npm run bench:coap [-- --clients 100 --seconds 4 --rounds 3 --observers 10000] [--no-observers]
 *     [--coap-packet] [--only coap,http,mqtt,dgram] [--cpu-prof <dir>]
 */
import { type Socket, createSocket } from 'node:dgram';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type ParsedPacket, generate, parse } from 'coap-packet';
import {
  RawHttpConnection,
  clientAddress,
  cpuMs,
  encodeRequest,
  intArg,
  median,
  rssAnonBytes,
  stopDaemon,
} from './lib.js';
import { percentile, spawnUntil } from './mqtt-procs.js';
import { RawMqtt } from './raw-mqtt.js';

const argv = process.argv.slice(2);
const CLIENTS = intArg(argv, 'clients', 100);
const SECONDS = intArg(argv, 'seconds', 4);
const ROUNDS = intArg(argv, 'rounds', 3);
const OBSERVERS = intArg(argv, 'observers', 10_000);
/** the transport comparison only */
const NO_OBSERVERS = argv.includes('--no-observers');
/** these transports only, comma-separated (e.g. to profile the daemon under one, or compare CoAP with HTTP) */
const ONLY = argv.includes('--only') ? (argv[argv.indexOf('--only') + 1] ?? '').split(',') : undefined;
const PER_SOCKET = 1_000;
/** the daemon started with `node --cpu-prof`, its profile written into this dir at exit */
const CPU_PROF = argv.includes('--cpu-prof') ? argv[argv.indexOf('--cpu-prof') + 1] : undefined;
const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const CONFIG = {
  store: { commitDelayMs: 0 },
  coap: { maxObservations: OBSERVERS + 1000 },
  mqtt: { maxConnections: CLIENTS + 100 },
};
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** What the bench reads of an answer: the header and the token (RFC 7252 section 3). */
interface Reply {
  readonly confirmable: boolean;
  readonly code: string;
  readonly messageId: number;
  readonly token: Buffer;
}

/** The header and token of a datagram, as cheaply as the HTTP client reads a status line. */
function readReply(buf: Buffer): Reply {
  const c = buf[1] as number;
  return {
    confirmable: ((buf[0] as number) & 0x30) === 0,
    code: `${c >> 5}.${String(c & 0x1f).padStart(2, '0')}`,
    messageId: buf.readUInt16BE(2),
    token: buf.subarray(4, 4 + ((buf[0] as number) & 0x0f)),
  };
}

/**
 * One UDP socket: requests matched to answers by token, notifications handed to `onNotify` (and ACKed).
 * A request is a template made once per path by coap-packet with its message id and token patched in and the
 * payload appended, and only an answer's header and token are read: the load generator's CPU is taken from the
 * daemon on the 2 shared cores, so it costs about what RawHttpConnection and RawMqtt cost per message.
 * `--coap-packet` encodes and parses every datagram with coap-packet instead, to show that cost.
 */
class RawCoap {
  private mid = 0;
  private tok = 0;
  private readonly waiting = new Map<number, (p: Reply) => void>();
  private readonly templates = new Map<string, Buffer>();
  onNotify: ((p: Reply) => void) | undefined;

  private constructor(
    private readonly socket: Socket,
    private readonly port: number,
  ) {
    socket.on('message', (buf) => {
      const p = FULL_CODEC ? fromParsed(parse(buf)) : readReply(buf);
      if (p.confirmable) this.socket.send(ackFor(p.messageId), this.port, '127.0.0.1');
      if (p.code === '0.00') return;
      const key = p.token.length === 4 ? p.token.readUInt32BE(0) : -1;
      const w = this.waiting.get(key);
      if (w !== undefined) {
        this.waiting.delete(key);
        w(p);
      } else this.onNotify?.(p);
    });
  }

  static async open(port: number): Promise<RawCoap> {
    const s = createSocket('udp4');
    await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
    s.setRecvBufferSize(4 * 1024 * 1024);
    return new RawCoap(s, port);
  }

  request(method: 'GET' | 'POST', path: string[], payload: string, observe?: number): Promise<Reply> {
    this.mid = (this.mid + 1) & 0xffff;
    const tok = ++this.tok;
    let buf: Buffer;
    if (FULL_CODEC || observe !== undefined) {
      const token = Buffer.alloc(4);
      token.writeUInt32BE(tok);
      const options = path.map((seg) => ({ name: 'Uri-Path' as const, value: Buffer.from(seg) }));
      if (observe !== undefined) options.push({ name: 'Observe' as never, value: Buffer.alloc(0) });
      buf = generate({
        code: method,
        messageId: this.mid,
        token,
        confirmable: true,
        options,
        payload: Buffer.from(payload),
      });
    } else {
      const key = `${method} ${path.join('/')}`;
      let t = this.templates.get(key);
      if (t === undefined) {
        const options = path.map((seg) => ({ name: 'Uri-Path' as const, value: Buffer.from(seg) }));
        t = generate({ code: method, messageId: 0, token: Buffer.alloc(4), confirmable: true, options });
        this.templates.set(key, t);
      }
      const n = Buffer.byteLength(payload);
      buf = Buffer.allocUnsafe(t.length + (n > 0 ? 1 + n : 0));
      t.copy(buf);
      buf.writeUInt16BE(this.mid, 2);
      buf.writeUInt32BE(tok, 4);
      if (n > 0) {
        buf[t.length] = 0xff;
        buf.write(payload, t.length + 1, 'utf8');
      }
    }
    return new Promise((resolve) => {
      this.waiting.set(tok, resolve);
      this.socket.send(buf, this.port, '127.0.0.1');
    });
  }

  close(): void {
    this.socket.close();
  }
}

const FULL_CODEC = argv.includes('--coap-packet');
const fromParsed = (p: ParsedPacket): Reply => ({
  confirmable: p.confirmable,
  code: p.code,
  messageId: p.messageId,
  token: p.token,
});
/** an empty ACK (RFC 7252 section 4.2) */
function ackFor(messageId: number): Buffer {
  const b = Buffer.from([0x60, 0, 0, 0]);
  b.writeUInt16BE(messageId, 2);
  return b;
}

/**
 * The bare-dgram baseline: a process of its own answering every CON with a piggybacked 2.01 (its message id and
 * token), no store behind it: the most the generator and the loopback UDP path give on this machine.
 */
const ECHO_SERVER = `
const s = require('node:dgram').createSocket('udp4');
s.on('message', (b, r) => {
  const tkl = b[0] & 15;
  const a = Buffer.allocUnsafe(4 + tkl);
  a[0] = 0x60 | tkl; a[1] = 65; a[2] = b[2]; a[3] = b[3];
  b.copy(a, 4, 4, 4 + tkl);
  s.send(a, r.port, r.address);
});
s.bind(0, '127.0.0.1', () => console.log('echo on ' + s.address().port));
`;

interface Figures {
  msgsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  /** CPU µs per message of the process answering (the daemon, or the bare echo server) */
  serverUs: number;
  /** the same, of its main thread only (the rest: fdatasync and LMDB in the thread pool, V8's GC helpers) */
  serverMainUs: number;
  /** CPU µs per message of this process, the load generator */
  generatorUs: number;
}

async function closedLoop(
  serverPid: number,
  workers: number,
  seconds: number,
  send: (w: number, n: number) => Promise<void>,
): Promise<Figures> {
  const lat: number[] = [];
  const end = performance.now() + seconds * 1000;
  const server0 = cpuMs(serverPid);
  const gen0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      for (let n = 0; performance.now() < end; n++) {
        const s = performance.now();
        await send(w, n);
        lat.push(performance.now() - s);
      }
    }),
  );
  const secs = (performance.now() - t0) / 1000;
  const gen = process.cpuUsage(gen0);
  const server1 = cpuMs(serverPid);
  lat.sort((a, b) => a - b);
  return {
    msgsPerSec: lat.length / secs,
    p50Ms: percentile(lat, 50),
    p99Ms: percentile(lat, 99),
    serverUs: ((server1.all - server0.all) * 1000) / lat.length,
    serverMainUs: ((server1.main - server0.main) * 1000) / lat.length,
    generatorUs: (gen.user + gen.system) / lat.length,
  };
}

const payload = (n: number): string => `{"temperature":${20 + (n % 100) / 10},"seq":${n}}`;

async function restClient(
  httpPort: number,
): Promise<(method: string, path: string, body?: object) => Promise<unknown>> {
  const base = `http://127.0.0.1:${httpPort}`;
  const login = await fetch(`${base}/api/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'bench@example.com', password: 'bench-pw-1' }),
  });
  const headers = {
    'X-Authorization': `Bearer ${((await login.json()) as { token: string }).token}`,
    'content-type': 'application/json',
  };
  return async (method, path, body) => {
    const r = await fetch(`${base}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (r.status !== 200) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
    const text = await r.text();
    return text === '' ? undefined : JSON.parse(text);
  };
}

async function inBatches<T>(n: number, width: number, f: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < n; i += width)
    out.push(...(await Promise.all(Array.from({ length: Math.min(width, n - i) }, (_, k) => f(i + k)))));
  return out;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-bench-coap-'));
  const { execFileSync } = await import('node:child_process');
  const { writeFileSync } = await import('node:fs');
  const dataDir = join(dir, 'data');
  execFileSync(process.execPath, [
    MAIN,
    'user',
    'add',
    '--data-dir',
    dataDir,
    '--email',
    'bench@example.com',
    '--password',
    'bench-pw-1',
    '--authority',
    'TENANT_ADMIN',
  ]);
  writeFileSync(join(dir, 'outpost.json'), JSON.stringify(CONFIG));
  const d = await spawnUntil(
    process.execPath,
    [
      ...(CPU_PROF === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${CPU_PROF}`]),
      MAIN,
      'serve',
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--data-dir',
      dataDir,
      '--config',
      join(dir, 'outpost.json'),
    ],
    /listening on http:\/\/127\.0\.0\.1:(\d+), mqtt:\/\/127\.0\.0\.1:(\d+), coap:\/\/127\.0\.0\.1:(\d+)/,
  );
  const [httpPort, mqttPort, coapPort] = [Number(d.m[1]), Number(d.m[2]), Number(d.m[3])];
  const pid = d.proc.pid as number;
  try {
    const rest = await restClient(httpPort);
    await inBatches(CLIENTS, 50, (i) =>
      rest('POST', `/api/device?accessToken=bench-token-${i}`, { name: `bench-${i}` }),
    );
    const coap = await Promise.all(Array.from({ length: CLIENTS }, () => RawCoap.open(coapPort)));
    const mqtt = await Promise.all(
      Array.from({ length: CLIENTS }, (_, i) => RawMqtt.open(mqttPort, `bench-token-${i}`, clientAddress(i))),
    );
    const echo = await spawnUntil(process.execPath, ['-e', ECHO_SERVER], /echo on (\d+)/);
    const echoPort = Number(echo.m[1]);
    const echoClients = await Promise.all(Array.from({ length: CLIENTS }, () => RawCoap.open(echoPort)));
    const phases: Record<string, (secs: number) => Promise<Figures>> = {
      dgram: (secs) =>
        closedLoop(echo.proc.pid as number, CLIENTS, secs, async (w, n) => {
          const r = await (echoClients[w] as RawCoap).request(
            'POST',
            ['api', 'v1', `bench-token-${w}`, 'telemetry'],
            payload(n),
          );
          if (r.code !== '2.01') throw new Error(`echo ${r.code}`);
        }),
      coap: (secs) =>
        closedLoop(pid, CLIENTS, secs, async (w, n) => {
          const r = await (coap[w] as RawCoap).request(
            'POST',
            ['api', 'v1', `bench-token-${w}`, 'telemetry'],
            payload(n),
          );
          if (r.code !== '2.01') throw new Error(`CoAP ${r.code}`);
        }),
      http: async (secs) => {
        const conns = await Promise.all(Array.from({ length: CLIENTS }, () => RawHttpConnection.open(httpPort)));
        const f = await closedLoop(pid, CLIENTS, secs, async (w, n) => {
          const res = await (conns[w] as RawHttpConnection).request(
            encodeRequest('POST', `/api/v1/bench-token-${w}/telemetry`, payload(n)),
          );
          if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
        });
        for (const c of conns) c.close();
        return f;
      },
      mqtt: (secs) =>
        closedLoop(pid, CLIENTS, secs, async (w, n) => {
          const rc = await (mqtt[w] as RawMqtt).publish('v1/devices/me/telemetry', Buffer.from(payload(n)));
          if (rc !== 0) throw new Error(`PUBACK ${rc}`);
        }),
    };
    for (const name of Object.keys(phases)) if (ONLY === undefined || ONLY.includes(name)) await phases[name]?.(1); // warm-up, not counted
    const results: Record<string, Figures[]> = { coap: [], http: [], mqtt: [], dgram: [] };
    const orders = [
      ['coap', 'http', 'mqtt', 'dgram'],
      ['mqtt', 'dgram', 'coap', 'http'],
      ['http', 'mqtt', 'coap', 'dgram'],
      ['dgram', 'coap', 'http', 'mqtt'],
    ];
    for (let r = 0; r < ROUNDS; r++) {
      for (const name of orders[r % orders.length] as string[]) {
        if (ONLY !== undefined && !ONLY.includes(name)) continue;
        await sleep(300);
        results[name]?.push(await (phases[name] as (s: number) => Promise<Figures>)(SECONDS));
      }
    }
    for (const c of [...coap, ...echoClients]) c.close();
    for (const m of mqtt) m.close();
    await stopDaemon(echo);
    printTransports(results);
    if (NO_OBSERVERS) return;

    // observers
    const obsIds = await inBatches(OBSERVERS, 100, async (i) => {
      const r = (await rest('POST', `/api/device?accessToken=obs-token-${i}`, { name: `obs-${i}` })) as {
        id: { id: string };
      };
      return r.id.id;
    });
    await sleep(2000);
    const rss0 = median(await rssSamples(pid));
    const sockets = await Promise.all(
      Array.from({ length: Math.ceil(OBSERVERS / PER_SOCKET) }, () => RawCoap.open(coapPort)),
    );
    const arrived = new Float64Array(OBSERVERS);
    for (const [s, sock] of sockets.entries()) {
      sock.onNotify = (p) => {
        const i = s * PER_SOCKET + (p.token.readUInt32BE(0) - 1);
        if (i < OBSERVERS && arrived[i] === 0) arrived[i] = performance.now();
      };
    }
    await inBatches(OBSERVERS, 200, async (i) => {
      const r = await (sockets[Math.floor(i / PER_SOCKET)] as RawCoap).request(
        'GET',
        ['api', 'v1', `obs-token-${i}`, 'attributes'],
        '',
        0,
      );
      if (r.code !== '2.05') throw new Error(`observe ${r.code}`);
    });
    await sleep(2000);
    const rss1 = median(await rssSamples(pid));
    const perObs = (rss1 - rss0) / OBSERVERS;
    const started = new Float64Array(OBSERVERS);
    const t0 = performance.now();
    await inBatches(OBSERVERS, 32, async (i) => {
      started[i] = performance.now();
      await rest('POST', `/api/plugins/telemetry/DEVICE/${obsIds[i]}/attributes/SHARED_SCOPE`, { setpoint: 21.5 });
    });
    for (let k = 0; k < 100 && arrived.some((x) => x === 0); k++) await sleep(100);
    const delivered = Array.from(arrived).filter((x) => x > 0).length;
    const lat = Array.from(arrived, (a, i) => (a > 0 ? a - (started[i] as number) : Number.NaN)).filter(
      (x) => !Number.isNaN(x),
    );
    lat.sort((a, b) => a - b);
    const allMs = Math.max(...Array.from(arrived)) - t0;
    for (const s of sockets) s.close();

    console.log(`\n${OBSERVERS} devices observing their shared attributes (CON), one change each`);
    console.log('| RssAnon per observation | delivered | delivery p50 ms | delivery p99 ms | all delivered in ms |');
    console.log('|---|---|---|---|---|');
    console.log(
      `| ${(perObs / 1024).toFixed(2)} KB | ${delivered}/${OBSERVERS} | ${percentile(lat, 50).toFixed(1)} | ${percentile(lat, 99).toFixed(1)} | ${allMs.toFixed(0)} |`,
    );
  } finally {
    await stopDaemon(d);
    rmSync(dir, { recursive: true, force: true });
  }
}

function printTransports(results: Record<string, Figures[]>): void {
  const med = (name: string, f: (x: Figures) => number, digits: number): string =>
    (results[name] as Figures[]).length === 0 ? '–' : median((results[name] as Figures[]).map(f)).toFixed(digits);
  const row = (name: string, label: string): string =>
    `| ${label} | ${med(name, (x) => x.msgsPerSec, 0)} | ${med(name, (x) => x.p50Ms, 2)} | ${med(name, (x) => x.p99Ms, 2)} | ${med(name, (x) => x.serverUs, 0)} | ${med(name, (x) => x.serverMainUs, 0)} | ${med(name, (x) => x.generatorUs, 0)} |`;
  console.log(
    `\n${CLIENTS} clients, one message in flight each, ${SECONDS} s × ${ROUNDS} rounds (medians), store.commitDelayMs 0, CoAP client ${FULL_CODEC ? 'coap-packet' : 'templates'}`,
  );
  console.log(
    '| transport | msgs/s | answer p50 ms | answer p99 ms | server CPU µs/msg | of it main thread | generator CPU µs/msg |',
  );
  console.log('|---|---|---|---|---|---|---|');
  console.log(row('coap', 'CoAP CON POST → 2.01'));
  console.log(row('http', 'HTTP keep-alive POST → 200'));
  console.log(row('mqtt', 'MQTT QoS 1 → PUBACK'));
  console.log(row('dgram', 'bare dgram echo (no daemon), same CoAP client'));
}

async function rssSamples(pid: number): Promise<number[]> {
  const xs: number[] = [];
  for (let i = 0; i < 5; i++) {
    if (i > 0) await sleep(500);
    xs.push(rssAnonBytes(pid));
  }
  return xs;
}

await main();
