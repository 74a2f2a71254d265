/**
 * Ingest benchmark: 64 connections POSTing a 3-key telemetry body, side by side in the same run:
 *   (a) bare    — a uWS handler that only collects and JSON.parses the body, then answers 200 (the ceiling);
 *   (b) naive   — a durable handler written the obvious way: JSON.parse, one LMDB put per key (msgpack value,
 *                 string key), ack after that commit is flushed (`await put; await db.flushed`);
 *   (c) outpost — the real `outpost serve` (dist/src/main.js) with a device created through the CLI;
 *   (d) floor   — the least an LMDB-durable handler can do: JSON.parse, one put of the raw body, ack after
 *                 commit + flush. At a fixed connection count every durable variant waits for the same commit +
 *                 fsync cycle, so (d) is the req/s that cycle allows: what "ack only once on disk" costs here.
 *   (e) rules   — (c) with the device on a profile of three alarm rules (docs/api.md "Alarm rules": a SIMPLE, a
 *                 DURATION and a REPEATING rule, each with a clear rule) over the body's keys, none of them
 *                 met: what evaluating rules on every committed write costs (server CPU per request, (e) ÷ (c)).
 * Each variant is its own server process, started fresh per round on a fresh data dir (bare: none), so
 * RssAnon and /proc/<pid>/io are the server's alone. Rounds interleave a, b, c, d; the table shows medians.
 *
 * Load comes from wrk (Debian's, one thread) when it is installed, else autocannon (npm; `--client` picks).
 * Columns: req/s and points/s (3 per request); p50/p99 latency (ms); RssAnon of the server
 * (max of samples every 250 ms during the run); bytes written to storage per point (write_bytes delta of
 * /proc/<pid>/io over the measured run ÷ points acknowledged); server CPU per request (utime + stime delta of
 * /proc/<pid>/stat ÷ requests), which says whether a variant is CPU-bound or waiting on fsync.
 *
 *   npm run bench:ingest [-- --duration 10 --rounds 3 --connections 64 --client wrk|autocannon --only bare,outpost]
 *   npm run bench:ingest -- --only outpost,rules   (the alarm rules' cost: (e) beside (c), interleaved)
 *   npm run bench:ingest -- --only outpost --node-flags "--max-old-space-size=512"   (node's flags for (c), (e))
 */
import { type ChildProcess, execFile, execFileSync, fork } from 'node:child_process';
import {
  closeSync,
  fdatasyncSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { open } from 'lmdb';
import * as uws from 'uWebSockets.js';
import { profileDataWith, threeAlarmRules } from './alarm-rules.js';
import { argValue, median, spawnListening } from './lib.js';

const TOKEN = 'BENCH_TOKEN_0123456789';
const BODY = '{"temperature":21.5,"humidity":40,"pressure":1013.25}';
const POINTS_PER_REQUEST = 3;
const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));

type Variant = 'bare' | 'naive' | 'floor' | 'outpost' | 'rules';
type Baseline = Exclude<Variant, 'outpost' | 'rules'>;
const LABEL: Record<Variant, string> = {
  bare: '(a) bare uWS, JSON.parse only',
  naive: '(b) naive durable, 1 put per key',
  floor: '(d) durable floor, 1 put per request',
  outpost: '(c) outpost serve',
  rules: '(e) outpost serve, 3 alarm rules',
};

// ---------------------------------------------------------------------------------------------------------
// Baseline servers (run in a child: this file with `--serve <variant> <dataDir>`)

/** Collects a request body (copying uWS's neutered chunks), then calls `done`; nothing after an abort. */
function onBody(res: uws.HttpResponse, done: (body: Buffer) => void): void {
  const chunks: Buffer[] = [];
  res.onData((ab, isLast) => {
    chunks.push(Buffer.from(ab.slice(0)));
    if (isLast) done(Buffer.concat(chunks));
  });
}

function serveBaseline(variant: Baseline, dataDir: string): void {
  const app = uws.App();
  if (variant === 'bare') {
    app.post('/api/v1/:token/telemetry', (res) => {
      let aborted = false;
      res.onAborted(() => {
        aborted = true;
      });
      onBody(res, (body) => {
        JSON.parse(body.toString('utf8'));
        if (!aborted) res.cork(() => res.end());
      });
    });
  } else if (variant === 'floor') {
    // The least any LMDB-durable handler can do: validate, one put of the raw body under a sequence key,
    // ack after commit + flush. Its req/s is what the commit + fsync cycle allows at this concurrency.
    const db = open({ path: join(dataDir, 'floor.mdb') });
    let seq = 0;
    app.post('/api/v1/:token/telemetry', (res) => {
      let aborted = false;
      res.onAborted(() => {
        aborted = true;
      });
      onBody(res, (body) => {
        JSON.parse(body.toString('utf8'));
        const committed = db.put(seq++, body);
        const flushed = db.flushed;
        void Promise.all([committed, flushed]).then(() => {
          if (!aborted) res.cork(() => res.end());
        });
      });
    });
  } else {
    // lmdb-js defaults (overlappingSync on Linux): a put's promise resolves on commit, `flushed` after fsync.
    const db = open({ path: join(dataDir, 'naive.mdb') });
    app.post('/api/v1/:token/telemetry', (res, req) => {
      const token = req.getParameter(0) ?? '';
      let aborted = false;
      res.onAborted(() => {
        aborted = true;
      });
      onBody(res, (body) => {
        let values: Record<string, unknown>;
        try {
          values = JSON.parse(body.toString('utf8')) as Record<string, unknown>;
        } catch {
          if (!aborted) res.cork(() => res.writeStatus('400 Bad Request').end());
          return;
        }
        const ts = Date.now();
        let last: Promise<boolean> | undefined;
        for (const [k, v] of Object.entries(values)) last = db.put([token, k, ts], v);
        void Promise.resolve(last)
          .then(() => db.flushed)
          .then(() => {
            if (!aborted) res.cork(() => res.end());
          });
      });
    });
  }
  app.listen('127.0.0.1', 0, (ls) => {
    if (!ls) throw new Error('cannot listen');
    process.send?.({ port: uws.us_socket_local_port(ls as unknown as uws.us_socket) });
  });
  process.on('disconnect', () => process.exit(0));
}

// ---------------------------------------------------------------------------------------------------------
// Driver

interface Server {
  readonly pid: number;
  readonly port: number;
  stop(): Promise<void>;
}

async function startBaseline(variant: Baseline, dataDir: string): Promise<Server> {
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), ['--serve', variant, dataDir], { stdio: 'inherit' });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (m) => resolve((m as { port: number }).port));
    child.once('exit', (code) => reject(new Error(`${variant} server exited with ${code}`)));
  });
  return { pid: child.pid as number, port, stop: () => stopChild(child) };
}

async function startOutpost(dataDir: string, withRules: boolean): Promise<Server> {
  const cli = (args: string[]): void => {
    execFileSync(process.execPath, [MAIN, ...args, '--data-dir', dataDir], { stdio: 'ignore' });
  };
  cli(['device', 'add', '--name', 'bench', '--token', TOKEN]);
  if (withRules) cli(['user', 'add', '--email', ADMIN, '--password', ADMIN_PASSWORD, '--authority', 'TENANT_ADMIN']);
  const { proc, port } = await spawnListening(
    [...NODE_FLAGS, MAIN, 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', dataDir],
    'outpost',
  );
  const server = { pid: proc.pid as number, port, stop: () => stopChild(proc) };
  if (withRules) await putOnRulesProfile(`http://127.0.0.1:${port}`);
  return server;
}

/**
 * `--node-flags "..."`: node's flags for (c) and (e), as systemd/outpost.service starts the daemon (V8 takes some of
 * them only on the command line, not from NODE_OPTIONS).
 */
const NODE_FLAGS = ((): string[] => {
  const i = process.argv.indexOf('--node-flags');
  return i < 0 ? [] : (process.argv[i + 1] ?? '').split(/\s+/).filter((x) => x !== '');
})();

const ADMIN = 'bench@example.com';
const ADMIN_PASSWORD = 'bench-secret';

/** Thresholds the bench body (21.5, 40, 1013.25) never meets: every write is evaluated, no alarm is raised. */
const BENCH_ALARMS = threeAlarmRules({
  high: { key: 'temperature', over: 30, clearBelow: 25 },
  held: { key: 'humidity', over: 80, minutes: 5, clearBelow: 70 },
  low: { key: 'pressure', under: 900, times: 3, clearAbove: 950 },
});

/** Over REST, as an operator would: a profile with the rules, and the bench device moved onto it. */
async function putOnRulesProfile(base: string): Promise<void> {
  const call = async (method: string, path: string, body?: object, token?: string): Promise<unknown> => {
    const r = await fetch(`${base}${path}`, {
      method,
      headers: { 'content-type': 'application/json', ...(token ? { 'x-authorization': `Bearer ${token}` } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
    return r.json();
  };
  const { token } = (await call('POST', '/api/auth/login', { username: ADMIN, password: ADMIN_PASSWORD })) as {
    token: string;
  };
  const profile = (await call(
    'POST',
    '/api/deviceProfile',
    {
      name: 'bench-rules',
      type: 'DEFAULT',
      transportType: 'DEFAULT',
      profileData: profileDataWith(BENCH_ALARMS),
    },
    token,
  )) as { id: { id: string } };
  const device = (await call('GET', '/api/tenant/devices?deviceName=bench', undefined, token)) as Record<
    string,
    unknown
  >;
  await call(
    'POST',
    '/api/device',
    { ...device, deviceProfileId: { entityType: 'DEVICE_PROFILE', id: profile.id.id } },
    token,
  );
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

/** kB → MB of one /proc/<pid>/status field. */
function statusMb(pid: number, field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** CPU time (user + system, all threads) the process has used, in µs. */
function cpuMicros(pid: number): number {
  // /proc/<pid>/stat: fields after the ")" of the command name; utime and stime are the 12th and 13th of them
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return (ticks / CLOCK_TICKS) * 1e6;
}
// USER_HZ; 100 on every Linux this runs on (getconf CLK_TCK)
const CLOCK_TICKS = 100;

function writeBytes(pid: number): number {
  const m = /^write_bytes:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}

// autocannon ships no types; this is the part of its result we read.
interface CannonResult {
  requests: { average: number };
  latency: { p50: number; p99: number };
  non2xx: number;
  errors: number;
  timeouts: number;
  '2xx': number;
}
type Cannon = (opts: Record<string, unknown>) => Promise<CannonResult>;
// Loaded through require so no ambient module declaration is needed (autocannon has no types).
const autocannon = createRequire(import.meta.url)('autocannon') as Cannon;

/** What one load run tells: the same fields from either client. */
interface LoadResult {
  rps: number;
  ok: number;
  p50: number;
  p99: number;
  failed: number;
}
type LoadClient = 'wrk' | 'autocannon';

function hasWrk(): boolean {
  try {
    execFileSync('wrk', ['--version'], { stdio: 'ignore' });
    return true;
  } catch (err) {
    // wrk --version exits 1 after printing its version; only a missing binary is ENOENT
    return (err as NodeJS.ErrnoException).code !== 'ENOENT';
  }
}

/**
 * wrk (C, one thread) costs the shared 2 cores far less CPU per request than autocannon (JS), so the
 * servers keep more of the machine; autocannon is the fallback where Debian's wrk is not installed.
 */
async function load(client: LoadClient, url: string, connections: number, duration: number): Promise<LoadResult> {
  if (client === 'autocannon') {
    const r = await autocannon({
      url,
      method: 'POST',
      body: BODY,
      headers: { 'content-type': 'application/json' },
      connections,
      pipelining: 1,
      duration,
    });
    return {
      rps: r.requests.average,
      ok: r['2xx'],
      p50: r.latency.p50,
      p99: r.latency.p99,
      failed: r.non2xx + r.errors + r.timeouts,
    };
  }
  const script = join(tmpdir(), `outpost-bench-wrk-${process.pid}.lua`);
  writeFileSync(
    script,
    `wrk.method = "POST"\nwrk.body = '${BODY}'\nwrk.headers["Content-Type"] = "application/json"\n`,
  );
  try {
    const out = await new Promise<string>((resolve, reject) => {
      execFile('wrk', ['-t1', `-c${connections}`, `-d${duration}s`, '--latency', '-s', script, url], (err, stdout) => {
        if (err) reject(err);
        else resolve(stdout);
      });
    });
    const num = (re: RegExp): number => {
      const m = re.exec(out);
      return m ? Number(m[1]) : 0;
    };
    const ms = (q: string): number => {
      const m = new RegExp(`^\\s+${q}%\\s+([\\d.]+)(us|ms|s)`, 'm').exec(out);
      if (!m) return NaN;
      const f = m[2] === 'us' ? 1e-3 : m[2] === 's' ? 1e3 : 1;
      return Number(m[1]) * f;
    };
    const total = num(/(\d+) requests in/);
    const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
    const failed =
      num(/Non-2xx or 3xx responses: (\d+)/) + (sock ? sock.slice(1).reduce((a, x) => a + Number(x), 0) : 0);
    return { rps: num(/Requests\/sec:\s+([\d.]+)/), ok: total - failed, p50: ms('50'), p99: ms('99'), failed };
  } finally {
    rmSync(script, { force: true });
  }
}

interface Sample {
  rps: number;
  p50: number;
  p99: number;
  rssAnonMb: number;
  bytesPerPoint: number;
  cpuPerReqUs: number;
  failed: number;
}

async function measure(client: LoadClient, variant: Variant, connections: number, duration: number): Promise<Sample> {
  const dataDir = mkdtempSync(join(tmpdir(), `outpost-bench-ingest-${variant}-`));
  const server =
    variant === 'outpost' || variant === 'rules'
      ? await startOutpost(dataDir, variant === 'rules')
      : await startBaseline(variant, dataDir);
  try {
    const url = `http://127.0.0.1:${server.port}/api/v1/${TOKEN}/telemetry`;
    await load(client, url, connections, 1); // warm-up: JIT, LMDB file growth; not recorded
    const written0 = writeBytes(server.pid);
    const cpu0 = cpuMicros(server.pid);
    let rssMax = statusMb(server.pid, 'RssAnon');
    const sampler = setInterval(() => {
      rssMax = Math.max(rssMax, statusMb(server.pid, 'RssAnon'));
    }, 250);
    const r = await load(client, url, connections, duration);
    clearInterval(sampler);
    rssMax = Math.max(rssMax, statusMb(server.pid, 'RssAnon'));
    const points = r.ok * POINTS_PER_REQUEST;
    return {
      rps: r.rps,
      p50: r.p50,
      p99: r.p99,
      rssAnonMb: rssMax,
      bytesPerPoint: points > 0 ? (writeBytes(server.pid) - written0) / points : NaN,
      cpuPerReqUs: r.ok > 0 ? (cpuMicros(server.pid) - cpu0) / r.ok : NaN,
      failed: r.failed,
    };
  } finally {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/**
 * fdatasync latency of the filesystem the stores live on (4 KiB rewrite + fdatasync, 200 times), ms p50/p90:
 * a durable ack cannot come sooner than one of these (LMDB's flush writes more than one page, so it is a floor).
 */
function fsyncLatency(): { p50: number; p90: number } {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-bench-fsync-'));
  const file = join(dir, 'probe');
  const fd = openSync(file, 'w');
  const page = Buffer.alloc(4096, 1);
  const lat: number[] = [];
  try {
    for (let i = 0; i < 200; i++) {
      writeSync(fd, page, 0, page.length, (i % 16) * page.length);
      const t0 = process.hrtime.bigint();
      fdatasyncSync(fd);
      lat.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  } finally {
    closeSync(fd);
    unlinkSync(file);
    rmSync(dir, { recursive: true, force: true });
  }
  lat.sort((a, b) => a - b);
  return { p50: lat[100] as number, p90: lat[180] as number };
}

async function main(): Promise<void> {
  const duration = argValue('--duration', 10);
  const rounds = argValue('--rounds', 3);
  const connections = argValue('--connections', 64);
  const clientFlag = process.argv.indexOf('--client');
  const client = clientFlag >= 0 ? process.argv[clientFlag + 1] : hasWrk() ? 'wrk' : 'autocannon';
  if (client !== 'wrk' && client !== 'autocannon') throw new Error(`--client: wrk or autocannon, not ${client}`);
  const only = process.argv.indexOf('--only');
  const variants: Variant[] =
    only >= 0 ? ((process.argv[only + 1] ?? '').split(',') as Variant[]) : ['bare', 'naive', 'outpost', 'floor'];
  const samples: Record<Variant, Sample[]> = { bare: [], naive: [], floor: [], outpost: [], rules: [] };
  const fsyncs: Array<{ p50: number; p90: number }> = [];
  for (let round = 0; round < rounds; round++) {
    fsyncs.push(fsyncLatency());
    for (const v of variants) {
      const s = await measure(client, v, connections, duration);
      if (s.failed > 0) throw new Error(`${v}: ${s.failed} failed requests`);
      samples[v].push(s);
      process.stderr.write(
        `round ${round + 1}/${rounds} ${v}: ${s.rps.toFixed(0)} req/s, p50 ${s.p50} ms, p99 ${s.p99} ms, ` +
          `RssAnon ${s.rssAnonMb.toFixed(1)} MB, ${s.bytesPerPoint.toFixed(1)} B/point, ${s.cpuPerReqUs.toFixed(0)} µs CPU/req\n`,
      );
    }
  }
  const med = (v: Variant, f: (s: Sample) => number): number => median(samples[v].map(f));
  const naiveRps = samples.naive.length > 0 ? med('naive', (s) => s.rps) : NaN;
  console.log(
    `ingest bench: ${connections} connections, 3-key body, ${rounds} interleaved rounds × ${duration} s per variant ` +
      `(fresh server process each), medians; load and latency ms from ${client}; RssAnon max during the run`,
  );
  const fp50 = median(fsyncs.map((f) => f.p50));
  console.log(
    `fdatasync of one 4 KiB page on the stores' filesystem (median of rounds): p50 ${fp50.toFixed(2)} ms, ` +
      `p90 ${median(fsyncs.map((f) => f.p90)).toFixed(2)} ms; every ack of (b), (c) and (d) waits for at least one LMDB commit + fsync`,
  );
  console.log(
    '| variant | req/s | points/s | vs (b) | p50 / p99 ms | RssAnon MB | bytes written / point | server CPU µs / req |',
  );
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const v of variants) {
    const rps = med(v, (s) => s.rps);
    const bpp = med(v, (s) => s.bytesPerPoint);
    console.log(
      `| ${LABEL[v]} | ${rps.toFixed(0)} | ${(rps * POINTS_PER_REQUEST).toFixed(0)} | ${(rps / naiveRps).toFixed(2)}× | ` +
        `${med(v, (s) => s.p50)} / ${med(v, (s) => s.p99)} | ${med(v, (s) => s.rssAnonMb).toFixed(1)} | ${Number.isNaN(bpp) || v === 'bare' ? '–' : bpp.toFixed(1)} | ${med(v, (s) => s.cpuPerReqUs).toFixed(0)} |`,
    );
  }
  if (samples.rules.length > 0 && samples.outpost.length > 0) {
    // per round, so both sides of a ratio saw the same machine
    const cpu = median(samples.rules.map((s, i) => s.cpuPerReqUs / (samples.outpost[i] as Sample).cpuPerReqUs));
    const bytes = median(samples.rules.map((s, i) => s.bytesPerPoint / (samples.outpost[i] as Sample).bytesPerPoint));
    console.log(
      `alarm rules (e) ÷ (c), median of per-round ratios: server CPU per request ${cpu.toFixed(2)}×, bytes written per point ${bytes.toFixed(2)}×`,
    );
  }
}

if (process.argv[2] === '--serve') {
  serveBaseline(process.argv[3] as Baseline, process.argv[4] as string);
} else {
  await main();
}
