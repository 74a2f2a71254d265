/**
 * Shared by the benchmarks: process memory and CPU readings, medians and p99, numeric command-line flags, a lean
 * HTTP client, and the pieces of bench:sync's drain measurement that bench:downlink reuses (the ingest probe in
 * a process of its own, the receiving daemon at idle priority, the floor's busy loops).
 */
import { type ChildProcess, execFileSync, fork, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { type Socket, connect } from 'node:net';
import { availableParallelism, setPriority } from 'node:os';
import { performance } from 'node:perf_hooks';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Anonymous resident memory of a process (heap, stacks, buffers; not mapped files such as LMDB's). Linux only. */
export function rssAnonBytes(pid: number): number {
  const m = /RssAnon:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error('RssAnon not found in /proc/<pid>/status (Linux only)');
  return Number(m[1]) * 1024;
}

/** The process's threads now (Linux): a worker thread that ends takes one or more with it. */
export function threadCount(pid: number): number {
  return readdirSync(`/proc/${pid}/task`).length;
}

/** VmHWM: the process's peak resident set so far (Linux). */
export function peakRssBytes(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error('VmHWM not found in /proc/<pid>/status (Linux only)');
  return Number(m[1]) * 1024;
}

export const p99 = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * 0.99))] as number;
};

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

/** `--name <positive number>` from argv, or the fallback. */
export function argValue(name: string, fallback: number): number {
  const i = process.argv.indexOf(name);
  const v = i >= 0 ? Number(process.argv[i + 1]) : NaN;
  return Number.isFinite(v) && v > 0 ? v : fallback;
}

/**
 * Spawns `node <args>` and resolves with its port once it logs "listening on http(s)://host:port", and the port of
 * its MQTT listener when the line names one (`, mqtt://host:port`; else 0).
 */
/**
 * `main serve` on loopback, an ephemeral port, `<dir>/data` and the config file `config`, with `nodeArgs` for
 * node (a CPU profile, say): resolves once it listens.
 */
export function serveDaemon(
  main: string,
  dir: string,
  config: string,
  nodeArgs: readonly string[] = [],
): Promise<{ proc: ChildProcess; port: number; mqttPort: number }> {
  return spawnListening(
    [
      ...nodeArgs,
      main,
      'serve',
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--data-dir',
      join(dir, 'data'),
      '--config',
      config,
    ],
    `outpost ${dir}`,
  );
}

export function spawnListening(
  args: readonly string[],
  label = args.join(' '),
): Promise<{ proc: ChildProcess; port: number; mqttPort: number }> {
  const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let buf = '';
    const onData = (c: Buffer): void => {
      buf += c.toString();
      const m = /listening on https?:\/\/[^:]+:(\d+)(?:, mqtt:\/\/[^:]+:(\d+))?/.exec(buf);
      if (m) resolve({ proc, port: Number(m[1]), mqttPort: Number(m[2] ?? 0) });
    };
    proc.stderr?.on('data', onData);
    proc.stdout?.on('data', onData);
    proc.once('exit', (code) => reject(new Error(`${label} exited with ${code}: ${buf}`)));
  });
}

/** SIGTERM, then waits for the exit (the daemon flushes its store first). */
export async function stopDaemon(d: { proc: ChildProcess }): Promise<void> {
  if (d.proc.exitCode !== null) return;
  const exited = new Promise<void>((r) => d.proc.once('exit', () => r()));
  d.proc.kill('SIGTERM');
  await exited;
}

/**
 * A loopback source address of its own for bench client `i` (Linux's loopback answers from any 127/8 address):
 * on a LAN each device has its own, and the daemon caps MQTT connections per address
 * (`mqtt.maxConnectionsPerAddress`), so clients all from 127.0.0.1 would measure that cap, not the transport.
 */
export function clientAddress(i: number): string {
  return `127.1.${Math.floor(i / 250) % 256}.${1 + (i % 250)}`;
}

/** `--name <positive integer>` from argv, `def` when absent; anything else is an error (no silent fallback). */
export function intArg(argv: readonly string[], name: string, def: number): number {
  const i = argv.indexOf(`--${name}`);
  const v = i >= 0 ? Number(argv[i + 1]) : def;
  if (!Number.isInteger(v) || v <= 0) throw new Error(`--${name} must be a positive integer`);
  return v;
}

/**
 * One keep-alive HTTP/1.1 connection for bulk loads: a request goes out as one pre-encoded buffer (`encodeRequest`:
 * head and body) and only the status line, Content-Length and body of the answer are read, one request at a
 * time. On the 2 shared cores the load generator's CPU is taken from the server under test: for a 65 KB body
 * this costs 0.10–0.14 ms of CPU per request where node:http costs 0.31–0.36 ms (docs/benchmarks-history.md,
 * "Downsampling"). Answers must carry a Content-Length or have no body (204, 304); a chunked answer is an error.
 */
export class RawHttpConnection {
  private buf: Buffer = Buffer.alloc(0);
  private pending: { resolve: (r: { status: number; body: Buffer }) => void; reject: (e: Error) => void } | undefined;
  private failure: Error | undefined;

  private constructor(private readonly socket: Socket) {
    socket.setNoDelay(true);
    socket.on('data', (d: Buffer) => {
      this.buf = this.buf.length === 0 ? d : Buffer.concat([this.buf, d]);
      this.deliver();
    });
    const fail = (e: Error): void => {
      this.failure ??= e;
      this.pending?.reject(this.failure);
      this.pending = undefined;
    };
    socket.on('error', fail);
    socket.on('close', () => fail(new Error('connection closed by the server')));
  }

  static open(port: number, host = '127.0.0.1'): Promise<RawHttpConnection> {
    return new Promise((resolve, reject) => {
      const socket = connect(port, host);
      socket.once('error', reject);
      socket.once('connect', () => {
        socket.off('error', reject);
        resolve(new RawHttpConnection(socket));
      });
    });
  }

  /** Sends one encoded request and resolves with its answer (one at a time per connection). */
  request(bytes: Buffer): Promise<{ status: number; body: Buffer }> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.pending !== undefined)
      return Promise.reject(new Error('a request is already in flight on this connection'));
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject };
      this.socket.write(bytes);
    });
  }

  close(): void {
    this.socket.destroy();
  }

  private deliver(): void {
    if (this.pending === undefined) return;
    const headEnd = this.buf.indexOf('\r\n\r\n');
    if (headEnd < 0) return;
    const head = this.buf.toString('latin1', 0, headEnd);
    const status = Number(head.slice(9, 12));
    if (/\r\ntransfer-encoding:/i.test(head)) {
      this.pending.reject(new Error(`chunked answers are not supported: ${head.split('\r\n')[0] ?? ''}`));
      this.pending = undefined;
      return;
    }
    const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    const length = m ? Number(m[1]) : 0;
    const end = headEnd + 4 + length;
    if (this.buf.length < end) return;
    const body = this.buf.subarray(headEnd + 4, end);
    this.buf = this.buf.subarray(end);
    const { resolve } = this.pending;
    this.pending = undefined;
    resolve({ status, body });
  }
}

/** A complete HTTP/1.1 request as one buffer, for RawHttpConnection. */
export function encodeRequest(
  method: string,
  path: string,
  body: string,
  headers: Record<string, string> = {},
): Buffer {
  const payload = Buffer.from(body);
  let head = `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${payload.length}\r\n`;
  for (const [name, value] of Object.entries(headers)) head += `${name}: ${value}\r\n`;
  return Buffer.concat([Buffer.from(`${head}\r\n`, 'latin1'), payload]);
}

export function settle(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** CPU time (ms) of a process's main thread and of all its threads, from /proc (Linux; clock ticks of 10 ms). */
export function cpuMs(pid: number): { main: number; all: number } {
  const ticks = (stat: string): number => {
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) * 10;
  };
  return {
    main: ticks(readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8')),
    all: ticks(readFileSync(`/proc/${pid}/stat`, 'utf8')),
  };
}

const PROBE = fileURLToPath(new URL('./probe.js', import.meta.url));

/**
 * Single-point posts of one device (probe.ts, a process of its own), one at a time, until `until()` and at least
 * `minCount`; latencies in ms.
 */
export async function probe(port: number, token: string, until: () => boolean, minCount: number): Promise<number[]> {
  const child = fork(PROBE, [String(port), token, String(minCount)], { stdio: 'inherit' });
  const result = new Promise<number[]>((resolve, reject) => {
    child.once('message', (m) => resolve(m as number[]));
    child.once('exit', (code) => reject(new Error(`probe exited with ${code}`)));
  });
  while (!until()) await settle(10);
  child.send('stop');
  return result;
}

/**
 * A receiving daemon stands in for a server elsewhere, so it should take only the CPU the gateway leaves idle:
 * SCHED_IDLE for all its threads (chrt), else (`nice` given, or no chrt) that nice value. Returns which.
 */
export function background(pid: number, nice?: number): string {
  if (nice === undefined) {
    try {
      execFileSync('chrt', ['-a', '-i', '-p', '0', String(pid)], { stdio: 'ignore' });
      return 'SCHED_IDLE';
    } catch {
      // no chrt: a nice value instead
    }
  }
  setPriority(pid, nice ?? 15);
  return `nice ${nice ?? 15}`;
}

/**
 * One busy loop per core at the lowest priority the machine offers (SCHED_IDLE, else nice 19): CPU work that
 * yields to everything else, as the receiving daemon does. What it alone does to the probe is this machine's
 * floor for any drain that keeps the cores busy (the scheduler's wake-up latency, not the gateway's work).
 * The caller kills them (SIGKILL).
 */
export function spinners(): ChildProcess[] {
  const loop = ['sh', '-c', 'while :; do :; done'];
  return Array.from({ length: availableParallelism() }, () => {
    const idle = spawn('chrt', ['-i', '0', ...loop], { stdio: 'ignore' });
    idle.on('error', () => undefined);
    return idle.pid !== undefined ? idle : spawn('nice', ['-n', '19', ...loop], { stdio: 'ignore' });
  });
}

export async function request(
  c: RawHttpConnection,
  method: string,
  path: string,
  body: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; text: string }> {
  const r = await c.request(encodeRequest(method, path, body, { 'Content-Type': 'application/json', ...headers }));
  return { status: r.status, text: r.body.toString('utf8') };
}

/** A JWT of `user` (password "secret" unless given), made with `outpost user add`. */
export async function loginJwt(port: number, user = 'bench@sync', password = 'secret'): Promise<string> {
  const c = await RawHttpConnection.open(port);
  const r = await request(c, 'POST', '/api/auth/login', JSON.stringify({ username: user, password }));
  c.close();
  return (JSON.parse(r.text) as { token: string }).token;
}

export interface SyncStatusSeen {
  backlogPoints: number;
  sentPoints: number;
  state: string;
  devices: Array<{ name: string; backlogPoints: number }>;
}

export async function syncStatus(port: number, jwt: string): Promise<SyncStatusSeen> {
  const c = await RawHttpConnection.open(port);
  const r = await request(c, 'GET', '/api/outpost/sync', '', { 'X-Authorization': `Bearer ${jwt}` });
  c.close();
  return JSON.parse(r.text) as SyncStatusSeen;
}

/**
 * Pending points other than the probe's: the probe posts one point after another and each is pending until it
 * went up (tens of ms), so the whole backlog is rarely 0 at the moment of a poll while it runs.
 */
export const backlogBesidesProbe = (s: SyncStatusSeen): number =>
  s.backlogPoints - s.devices.filter((d) => d.name.startsWith('probe-')).reduce((n, d) => n + d.backlogPoints, 0);

/** The gateway's own event-loop delay over the last minute (GET /api/outpost/status), e.g. "p99 3 ms, max 12 ms". */
export async function loopDelay(port: number, jwt: string): Promise<string> {
  const c = await RawHttpConnection.open(port);
  const r = await request(c, 'GET', '/api/outpost/status', '', { 'X-Authorization': `Bearer ${jwt}` });
  c.close();
  const l = (JSON.parse(r.text) as { eventLoop: { p99Ms: number; maxMs: number } | null }).eventLoop;
  return l === null ? 'n/a' : `p99 ${l.p99Ms.toFixed(1)} ms, max ${l.maxMs.toFixed(1)} ms`;
}

export async function createDevices(port: number, jwt: string, n: number, prefix: string): Promise<string[]> {
  const c = await RawHttpConnection.open(port);
  const tokens: string[] = [];
  for (let i = 0; i < n; i++) {
    const token = `${prefix}${String(i).padStart(4, '0')}`;
    const r = await request(c, 'POST', `/api/device?accessToken=${token}`, JSON.stringify({ name: `${prefix}-${i}` }), {
      'X-Authorization': `Bearer ${jwt}`,
    });
    if (r.status !== 200) throw new Error(`device create ${r.status}: ${r.text}`);
    tokens.push(token);
  }
  c.close();
  return tokens;
}

/** Runs `bodies` (path, body) on `inFlight` keep-alive connections. */
export async function load(port: number, bodies: Iterable<[string, string]>, inFlight: number): Promise<void> {
  const it = bodies[Symbol.iterator]();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      const c = await RawHttpConnection.open(port);
      for (let n = it.next(); !n.done; n = it.next()) {
        const r = await c.request(
          encodeRequest('POST', n.value[0], n.value[1], { 'Content-Type': 'application/json' }),
        );
        if (r.status !== 200) throw new Error(`post ${r.status}: ${r.body.toString()}`);
      }
      c.close();
    }),
  );
}

/** keys per record of a drain backlog (backlogBodies) */
export const BACKLOG_KEYS = 10;
const RECORDS_PER_POST = 100;

/**
 * bench:sync's backlog: for each device (`tokens`) `timestamps` records of 10 keys, 1 s apart from `base`,
 * posted 100 records at a time, round-robin over the devices (integers and decimals alternating).
 */
export function* backlogBodies(
  tokens: readonly string[],
  timestamps: number,
  base: number,
): Generator<[string, string]> {
  for (let r = 0; r < timestamps / RECORDS_PER_POST; r++) {
    for (const [d, token] of tokens.entries()) {
      const recs: string[] = [];
      for (let i = 0; i < RECORDS_PER_POST; i++) {
        const n = r * RECORDS_PER_POST + i;
        const vals: string[] = [];
        for (let k = 0; k < BACKLOG_KEYS; k++)
          vals.push(`"k${k}":${k % 2 === 0 ? `${(d + n) % 1000}.5` : `${d * 1000 + n}`}`);
        recs.push(`{"ts":${base + n * 1000},"values":{${vals.join(',')}}}`);
      }
      yield [`/api/v1/${token}/telemetry`, `[${recs.join(',')}]`];
    }
  }
}

/**
 * A gateway draining its backlog, just started: the ingest probe (a device named `probe-*`, `probeToken`) posts
 * until every point but the probe's went up (`total` sent); the drain's seconds from now (`login`, a JWT on its
 * way, is part of them, as the status polls are), the probe's latencies
 * and the gateway's CPU time meanwhile.
 */
export async function drainWithProbe(
  g: { proc: ChildProcess; port: number },
  login: Promise<string>,
  probeToken: string,
  total: number,
): Promise<{ s: number; lat: number[]; cpu: { main: number; all: number } }> {
  const pid = g.proc.pid as number;
  const d0 = performance.now();
  const c0 = cpuMs(pid);
  const jwt = await login;
  let drained = false;
  let s = 0;
  let cpu = { main: 0, all: 0 };
  const probing = probe(g.port, probeToken, () => drained, 200);
  while (!drained) {
    const st = await syncStatus(g.port, jwt);
    if (backlogBesidesProbe(st) === 0 && st.sentPoints >= total) {
      drained = true;
      s = (performance.now() - d0) / 1000;
      const c1 = cpuMs(pid);
      cpu = { main: c1.main - c0.main, all: c1.all - c0.all };
    } else await settle(20);
  }
  return { s, lat: await probing, cpu };
}

/**
 * The probe against a gateway with sync off, for `seconds` (the drain's time) and at least `minCount` posts; then
 * again with every core kept busy by idle-priority loops (the floor: what busy cores alone cost the probe here).
 * `loop` is the gateway's event-loop delay after the first.
 */
export async function offAndFloor(
  port: number,
  jwt: string,
  probeToken: string,
  seconds: number,
  minCount: number,
): Promise<{ off: number[]; floor: number[]; loop: string }> {
  const offEnd = performance.now() + seconds * 1000;
  const off = await probe(port, probeToken, () => performance.now() >= offEnd, minCount);
  const loop = await loopDelay(port, jwt);
  const spin = spinners();
  try {
    const floorEnd = performance.now() + seconds * 1000;
    return { off, loop, floor: await probe(port, probeToken, () => performance.now() >= floorEnd, minCount) };
  } finally {
    for (const p of spin) p.kill('SIGKILL');
  }
}
