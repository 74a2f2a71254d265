/**
 * Downsampling benchmark (docs/design/downsampling.md). Loopback only, bounded in count and time.
 *
 * Outpost (the real server, `startServer`, in a child process so the load generator does not share its event
 * loop) and InfluxDB 1.x (Debian `influxdb`, when installed; skipped with a note otherwise) receive the same
 * month of 10-second data for 2 keys (a 2-decimal float and a counter: 518,400 points) as 1000-timestamp
 * batches (TB `[{ts, values}]` arrays / 1000-line line-protocol bodies), 4 requests in flight on the lean
 * keep-alive client of lib.ts (node:http's CPU per request is taken from the server on 2 cores); the month's
 * first 60 bodies warm the server up untimed, the other 200 are timed (WARM_UP_BODIES). Then:
 *   - ingest points/s, disk bytes per point (whole data dir ÷ points, after compaction; with the MiB of it that
 *     are the write-ahead log's segments and spares, a reserve bounded by the log, not by the points), RssAnon;
 *   - median latency of a month-range 2-hour-interval AVG (30 days to 23 min 20 s past an hour, so each bucket
 *     boundary needs raw points and both rollup tiers below 2 h: MONTH_QUERY_PAST_HOUR) and of a 1-hour 1-minute AVG
 *     (both keys), 20 runs after 20 untimed ones, each query alone, then the two alternating (timeQueries);
 *   - the ingest ceiling: the same bodies, client and concurrency against a bare uWS handler that only
 *     JSON.parses them (what this load generator and machine allow before anything is typed or stored);
 *   - Outpost only: the longest event-loop block in the server (perf_hooks.monitorEventLoopDelay) while it
 *     compacts, and the p99 of single-point posts while a week of backlog compacts vs with compaction paused
 *     (the server commits at once, `store.commitDelayMs` 0: with the write budget's pacing after the bench's
 *     uploads, both would read the pacing's 1 s; bench:wear measures the budget).
 *
 *   - Outpost only, after a restart on the same data dir (`outpost serve`, as systemd starts it, with
 *     `--node-flags`): RssAnon at rest, the first (cold) month query after the start, the warm median, RssAnon
 *     a minute after the last answer, and, restarted with no read-cache budget, the month query with its code
 *     warm but every block and chunk read and decoded again (what the first query costs besides V8 compiling
 *     the read path); with `--baseline DIR` the same for that checkout's build (built), the two alternated
 *     `--restarts` times (docs/design/memory-budget.md).
 *
 *   npm run build && npm run bench:downsample [-- --days 30 --restarts 3 --baseline DIR --baseline-flags "..."
 *     --baseline-env "K=V ..." --node-flags "..."]
 */
import { type ChildProcess, execFileSync, fork, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import * as uws from 'uWebSockets.js';
import { hashPassword } from '../../src/auth/password.js';
import { loadConfig } from '../../src/config/index.js';
import { makeLogger } from '../../src/log.js';
import { startServer } from '../../src/server.js';
import type { DownsampleStats } from '../../src/store/background/downsample.js';
import { rng } from '../../test/helpers/prng.js';
import { RawHttpConnection, encodeRequest, intArg, loginJwt, median, spawnListening, stopDaemon } from './lib.js';

const STEP_MS = 10_000;
const BATCH = 1000;
const IN_FLIGHT = 4;
const QUERY_RUNS = 20;
/**
 * Runs of each query before the timed ones. With 3, the 1-hour query was still being optimized by the JIT
 * during its timed runs (median 1.7–2.2 ms; 0.6–0.7 ms after 23 runs), which flattered the month ÷ hour ratio.
 */
const QUERY_WARM_UP = 20;
/**
 * Every server gets the month once, in order: its first bodies untimed, the rest (200 bodies, 400,000 points)
 * timed. A gateway that has been running has its write path compiled; after 20 bodies (~10 commits) a fresh
 * process was still optimizing it during the timed run (20: 1.51-1.91 M points/s, 60: 1.83-2.06 M, same runs).
 * The warm-up bodies are sent once, untimed: re-sent inside the timed month they would count as same-value upserts.
 */
const WARM_UP_BODIES = 60;
const HOUR = 3_600_000;
/**
 * Where in the hour the month query ends, whenever the bench runs: 23 min 20 s past, so each of its 2-h bucket
 * boundaries needs raw points and both rollup tiers below 2 h, as a query made at most times of day does (one
 * ending a few minutes from the hour reads no ten-minute rollups; its first run after a start took 0.65-0.75×).
 */
const MONTH_QUERY_PAST_HOUR = 23 * 60_000 + 20_000;
const DAY = 24 * HOUR;

interface Ready {
  port: number;
  jwt: string;
  devices: Array<{ id: string; token: string }>;
}
interface ChildStats {
  stats: DownsampleStats;
  eldMaxMs: number;
  rssAnonKb: number;
}

function rssAnonKb(pid: number | 'self'): number {
  const m = /RssAnon:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}

// ---------------------------------------------------------------- the server side (child process)

async function serve(dataDir: string): Promise<void> {
  // Commits at once (a fixed delay of 0): the bench's own uploads spend the write budget's reserve, and the paced
  // commits that follow (1 s for a writer posting flat out) would be all the single-point probe measured, not
  // compaction. The budget's pacing has its own bench (bench:wear).
  const config = loadConfig(
    { dataDir, host: '127.0.0.1', port: 0 },
    {},
    { logLevel: 'silent', store: { commitDelayMs: 0 } },
  );
  const eld = monitorEventLoopDelay({ resolution: 5 });
  const server = await startServer(config, makeLogger('silent'));
  const s = server.services;
  const engine = s.downsample;
  if (engine === undefined) throw new Error('server has no downsampling engine');
  const user = await s.entities.createUser({
    email: 'bench@example.com',
    passwordHash: await hashPassword('bench-pw'),
    authority: 'TENANT_ADMIN',
  });
  const devices = [];
  for (const name of ['month', 'backlog', 'probe']) devices.push(await s.entities.createDevice({ name }));
  const { token } = s.auth.issue(user);
  process.on('message', (m: string) => {
    void (async () => {
      if (m === 'stats')
        process.send?.({
          stats: engine.stats(),
          eldMaxMs: eld.max / 1e6,
          rssAnonKb: rssAnonKb('self'),
        } satisfies ChildStats);
      else if (m === 'eld-start') {
        eld.reset();
        eld.enable();
        process.send?.('ok');
      } else if (m === 'payload') {
        // Bytes of stored values (keys and LMDB page overhead excluded), comparable to InfluxDB's TSM payload.
        let bytes = 0;
        for (const db of [s.env.head, s.env.chunks, s.env.rollups])
          for (const { value } of db.getRange({})) bytes += value.length;
        process.send?.(bytes);
      } else if (m === 'pause') {
        await engine.stop();
        process.send?.('ok');
      } else if (m === 'resume') {
        engine.start();
        process.send?.('ok');
      }
    })();
  });
  process.on('disconnect', () => {
    void server.close().then(() => process.exit(0));
  });
  process.send?.({
    port: server.port,
    jwt: token,
    devices: devices.map((d) => ({ id: d.id, token: d.token })),
  } satisfies Ready);
}

/**
 * The ingest ceiling: a bare uWS handler that collects the body, JSON.parses it and answers 200 (nothing
 * typed, nothing stored). What this load generator and machine allow for these bodies.
 */
function serveBare(): void {
  const app = uws.App();
  app.post('/*', (res) => {
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
    });
    const chunks: Buffer[] = [];
    res.onData((ab, isLast) => {
      chunks.push(Buffer.from(ab.slice(0)));
      if (!isLast) return;
      JSON.parse(Buffer.concat(chunks).toString('utf8'));
      if (!aborted) res.cork(() => res.end());
    });
  });
  app.listen('127.0.0.1', 0, (ls) => {
    if (!ls) throw new Error('cannot listen');
    process.send?.({ port: uws.us_socket_local_port(ls as unknown as uws.us_socket) });
  });
  process.on('disconnect', () => process.exit(0));
}

async function benchBare(month: readonly Sample[]): Promise<number> {
  const child = fork(fileURLToPath(import.meta.url), ['--bare'], { stdio: 'inherit' });
  try {
    const { port } = await new Promise<{ port: number }>((resolve, reject) => {
      child.once('message', (m) => resolve(m as { port: number }));
      child.once('exit', (code) => reject(new Error(`bare server exited with ${code}`)));
    });
    return await ingest(port, '/api/v1/bare/telemetry', tbBodies(month), month.length);
  } finally {
    child.disconnect();
    await new Promise((r) => child.once('exit', r));
  }
}

// ---------------------------------------------------------------- the load side

const agent = new http.Agent({ keepAlive: true, maxSockets: IN_FLIGHT * 2 });

function request(
  port: number,
  method: string,
  path: string,
  body?: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, method, path, agent, headers: { 'content-type': 'application/json', ...headers } },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (c: Buffer) => parts.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(parts).toString() }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * Posts every body with `IN_FLIGHT` requests outstanding, one per keep-alive connection of the lean client
 * (RawHttpConnection: the requests are encoded before the clock starts); throws on a non-2xx answer. Resolves
 * with elapsed ms.
 */
async function sendAll(port: number, path: string, bodies: readonly string[]): Promise<number> {
  const requests = bodies.map((body) => encodeRequest('POST', path, body, { 'Content-Type': 'application/json' }));
  const connections = await Promise.all(Array.from({ length: IN_FLIGHT }, () => RawHttpConnection.open(port)));
  try {
    let next = 0;
    const t0 = performance.now();
    const worker = async (c: RawHttpConnection): Promise<void> => {
      while (next < requests.length) {
        const r = await c.request(requests[next++] as Buffer);
        if (r.status < 200 || r.status > 204)
          throw new Error(`POST ${path}: ${r.status} ${r.body.toString().slice(0, 200)}`);
      }
    };
    await Promise.all(connections.map(worker));
    return performance.now() - t0;
  } finally {
    for (const c of connections) c.close();
  }
}

/** Bodies of `n` sent untimed before the timed rest (a shorter `--days` run keeps three quarters timed). */
const warmUpBodies = (n: number): number => Math.min(WARM_UP_BODIES, Math.floor(n / 4));

/**
 * Posts the month's bodies once, in order (`samples` timestamps of 2 keys, BATCH per body): the first
 * warmUpBodies untimed, the rest timed. Resolves with the timed bodies' points per second.
 */
async function ingest(port: number, path: string, bodies: readonly string[], samples: number): Promise<number> {
  const warm = warmUpBodies(bodies.length);
  await sendAll(port, path, bodies.slice(0, warm));
  const ms = await sendAll(port, path, bodies.slice(warm));
  return ((samples - warm * BATCH) * 2) / (ms / 1000);
}

interface Sample {
  ts: number;
  temperature: string;
  counter: number;
}

/** Regular 10-s data: a 2-decimal temperature random walk and a counter. */
function generate(start: number, count: number, seed: number): Sample[] {
  const rand = rng(seed);
  const out: Sample[] = [];
  let temp = 2150;
  let counter = 1_000_000;
  for (let i = 0; i < count; i++) {
    temp += Math.round((rand() - 0.5) * 20);
    counter += Math.floor(rand() * 4);
    // toFixed keeps a '.' so every value types as a DOUBLE (docs/api.md), as a real sensor's would.
    out.push({ ts: start + i * STEP_MS, temperature: (temp / 100).toFixed(2), counter });
  }
  return out;
}

const tbBodies = (data: readonly Sample[]): string[] => {
  const out: string[] = [];
  for (let i = 0; i < data.length; i += BATCH) {
    out.push(
      `[${data
        .slice(i, i + BATCH)
        .map((s) => `{"ts":${s.ts},"values":{"temperature":${s.temperature},"counter":${s.counter}}}`)
        .join(',')}]`,
    );
  }
  return out;
};

const lineBodies = (data: readonly Sample[]): string[] => {
  const out: string[] = [];
  for (let i = 0; i < data.length; i += BATCH) {
    out.push(
      data
        .slice(i, i + BATCH)
        .map((s) => `m temperature=${s.temperature},counter=${s.counter}i ${s.ts}`)
        .join('\n'),
    );
  }
  return out;
};

/** Bytes of files under `dir` whose name ends with `suffix`. */
function filesBytes(dir: string, suffix: string): number {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) total += filesBytes(p, suffix);
    else if (e.name.endsWith(suffix)) total += statSync(p).size;
  }
  return total;
}

function dirBytes(dir: string): number {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    total += e.isDirectory() ? dirBytes(p) : statSync(p).size;
  }
  return total;
}

const p99 = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * 0.99))] as number;
};
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Query {
  path: string;
  check: (text: string) => void;
}
interface QueryTimes {
  cold: number;
  median: number;
}

/**
 * Median latencies of `queries` two ways. `alone`: each query's QUERY_WARM_UP untimed and QUERY_RUNS timed runs
 * back to back, one query after the other (each in its steady state; a noisy stretch of the machine may land on
 * one query only). `mixed`: the same, in rounds that run every query once, so noise weighs on all alike; each
 * query then also runs right after the other (caches and heap as the other left them). Per query: the first
 * (cold) run, checked with `check`, and the median of the timed runs.
 */
async function timeQueries(
  port: number,
  queries: readonly Query[],
  headers: Record<string, string>,
): Promise<{ alone: QueryTimes[]; mixed: QueryTimes[] }> {
  const alone: QueryTimes[] = [];
  for (const q of queries) alone.push((await timeRounds(port, [q], headers))[0] as QueryTimes);
  return { alone, mixed: await timeRounds(port, queries, headers) };
}

async function timeRounds(
  port: number,
  queries: readonly Query[],
  headers: Record<string, string>,
): Promise<QueryTimes[]> {
  const cold: number[] = [];
  const times: number[][] = queries.map(() => []);
  for (let round = 0; round < QUERY_WARM_UP + QUERY_RUNS; round++) {
    for (const [i, q] of queries.entries()) {
      const t0 = performance.now();
      const r = await request(port, 'GET', q.path, undefined, headers);
      const dt = performance.now() - t0;
      if (r.status !== 200) throw new Error(`GET ${q.path}: ${r.status} ${r.text.slice(0, 200)}`);
      if (round === 0) {
        q.check(r.text);
        cold[i] = dt;
      }
      if (round >= QUERY_WARM_UP) (times[i] as number[]).push(dt);
    }
  }
  return queries.map((_, i) => ({ cold: cold[i] as number, median: median(times[i] as number[]) }));
}

function ask<T>(child: ChildProcess, msg: string): Promise<T> {
  return new Promise((resolve) => {
    child.once('message', (m) => resolve(m as T));
    child.send(msg);
  });
}

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

interface Result {
  ingestPps: number;
  bytesPerPoint: number;
  rssMb: number;
  monthMs: number;
  hourMs: number;
  note?: string;
  /** InfluxDB: TSM files only (its series file preallocates 8 × 4 MiB segments) */
  dataBytesPerPoint?: number;
  /** the first (cold) month query */
  monthColdMs?: number;
  /** month and hour timed in alternation (see timeQueries) */
  monthMixedMs?: number;
  hourMixedMs?: number;
}

/** glibc's malloc settings systemd/outpost.service and `npm start` give the daemon (docs/design/memory-budget.md) */
const MALLOC_ENV: Readonly<Record<string, string>> = { MALLOC_ARENA_MAX: '2', MALLOC_TRIM_THRESHOLD_: '131072' };

interface Restarts {
  /** builds to restart on the month's data dir: dist/src/main.js, node's flags and environment */
  readonly builds: ReadonlyArray<{
    readonly name: string;
    readonly main: string;
    readonly flags: readonly string[];
    readonly env: Readonly<Record<string, string>>;
  }>;
  readonly rounds: number;
}

async function benchOutpost(
  month: readonly Sample[],
  backlog: readonly Sample[],
  probeStart: number,
  restarts: Restarts,
): Promise<
  Result & {
    eldMax: number;
    p99Idle: number;
    p99Busy: number;
    busySamples: number;
    compactS: number;
    live: number;
    maxStepMs: number;
    stepsOver20: number;
    steps: number;
    /** the write-ahead log's files when the whole data dir was measured, MiB */
    walMb: number;
    /** RssAnon right after the month's last query answer and a minute later, MiB */
    queriedMb: number;
    queriedMinuteMb: number;
    restarted: Map<string, Restart[]>;
  }
> {
  const dataDir = mkdtempSync(join(tmpdir(), 'outpost-bench-ds-'));
  const child = fork(fileURLToPath(import.meta.url), ['--serve', dataDir], { stdio: 'inherit' });
  try {
    const ready = await new Promise<Ready>((resolve, reject) => {
      child.once('message', (m) => resolve(m as Ready));
      child.once('exit', (code) => reject(new Error(`bench server exited with ${code}`)));
    });
    const [dev, backlogDev, probe] = ready.devices as [Ready['devices'][0], Ready['devices'][0], Ready['devices'][0]];
    await ask(child, 'eld-start');
    const ingestPps = await ingest(ready.port, `/api/v1/${dev.token}/telemetry`, tbBodies(month), month.length);
    // Wait until the compaction backlog is gone: no window compacted for two idle sweeps.
    const t0 = performance.now();
    let last = -1;
    let st = await ask<ChildStats>(child, 'stats');
    for (;;) {
      await sleep(1200);
      st = await ask<ChildStats>(child, 'stats');
      if (st.stats.compactedWindows === last) break;
      last = st.stats.compactedWindows;
    }
    // The backlog left once the last ingest request was answered (0 = compaction kept up; resolution 1.2 s).
    const compactS = Math.max(0, (performance.now() - t0 - 2400) / 1000);
    const bytesPerPoint = dirBytes(dataDir) / (month.length * 2);
    // the write-ahead log's segments and spares: a reserve bounded by the log (wal.ts), not by the points
    const walMb = dirBytes(join(dataDir, 'wal')) / 2 ** 20;
    const live = st.stats.liveBytes;
    const dataBytesPerPoint = (await ask<number>(child, 'payload')) / (month.length * 2);
    const rssMb = st.rssAnonKb / 1024;

    const headers = { 'X-Authorization': `Bearer ${ready.jwt}` };
    const end = (month[month.length - 1] as Sample).ts + STEP_MS;
    // the month query: 30 days ending at the month's last MONTH_QUERY_PAST_HOUR, every bucket holding points
    const monthEnd = Math.floor((end - MONTH_QUERY_PAST_HOUR) / HOUR) * HOUR + MONTH_QUERY_PAST_HOUR;
    const monthStart = monthEnd - month.length * STEP_MS;
    const p = `/api/plugins/telemetry/DEVICE/${dev.id}/values/timeseries?keys=temperature,counter&agg=AVG`;
    const expectBuckets =
      (n: number) =>
      (text: string): void => {
        const j = JSON.parse(text) as Record<string, unknown[]>;
        if (j['temperature']?.length !== n || j['counter']?.length !== n)
          throw new Error(`expected ${n} buckets per key, got ${text.slice(0, 200)}`);
      };
    const {
      alone: [monthQuery, hourQuery],
      mixed: [monthMixed, hourMixed],
    } = await timeQueries(
      ready.port,
      [
        {
          path: `${p}&startTs=${monthStart}&endTs=${monthEnd}&interval=${2 * HOUR}`,
          check: expectBuckets((month.length * STEP_MS) / (2 * HOUR)),
        },
        { path: `${p}&startTs=${end - HOUR}&endTs=${end}&interval=60000`, check: expectBuckets(60) },
      ],
      headers,
    );
    const monthMs = monthQuery?.median ?? NaN;
    const monthColdMs = monthQuery?.cold ?? NaN;
    const hourMs = hourQuery?.median ?? NaN;
    const monthMixedMs = monthMixed?.median ?? NaN;
    const hourMixedMs = hourMixed?.median ?? NaN;
    const queriedMb = (await ask<ChildStats>(child, 'stats')).rssAnonKb / 1024;
    await sleep(60_000);
    const queriedMinuteMb = (await ask<ChildStats>(child, 'stats')).rssAnonKb / 1024;

    // Ingest latency while a backlog compacts, vs with compaction paused (same backlog waiting).
    await ask(child, 'pause');
    await sendAll(ready.port, `/api/v1/${backlogDev.token}/telemetry`, tbBodies(backlog));
    let probeTs = probeStart;
    const probePost = async (): Promise<number> => {
      const t = performance.now();
      const r = await request(
        ready.port,
        'POST',
        `/api/v1/${probe.token}/telemetry`,
        `{"ts":${probeTs},"values":{"x":${(probeTs % 1000) / 10 + 0.5}}}`,
      );
      probeTs += 1000;
      if (r.status !== 200) throw new Error(`probe post: ${r.status}`);
      return performance.now() - t;
    };
    const idle: number[] = [];
    for (let i = 0; i < 400; i++) idle.push(await probePost());
    const before = (await ask<ChildStats>(child, 'stats')).stats;
    await ask(child, 'eld-start');
    await ask(child, 'resume');
    const busy: number[] = [];
    let seen = before.compactedWindows;
    for (;;) {
      busy.push(await probePost());
      if (busy.length % 50 === 0) {
        // Done when a whole round of 50 posts saw no window compacted (the backlog is gone).
        const now = (await ask<ChildStats>(child, 'stats')).stats;
        if ((now.compactedWindows === seen && busy.length >= 200) || busy.length >= 20_000) break;
        seen = now.compactedWindows;
      }
    }
    const after = await ask<ChildStats>(child, 'stats');
    // Event-loop delay while the backlog compacts under light load (the bulk-ingest phase saturates the loop
    // with request work, which says nothing about background steps).
    const eldMax = after.eldMaxMs;
    if (after.stats.compactedWindows <= before.compactedWindows) throw new Error('backlog was not compacted');
    child.disconnect();
    await new Promise((r) => child.once('exit', r));
    const restarted = new Map<string, Restart[]>(restarts.builds.map((b) => [b.name, []]));
    const monthPath = `${p}&startTs=${monthStart}&endTs=${monthEnd}&interval=${2 * HOUR}`;
    // a budget of one byte: no block or chunk stays cached from one query to the next
    const noCacheConfig = noReadCacheConfig(dataDir);
    writeFileSync(noCacheConfig, JSON.stringify({ query: { readCacheBytes: 1 } }));
    for (let round = 0; round < restarts.rounds; round++)
      for (const b of restarts.builds) {
        const r = await restartOnce(b.main, b.flags, b.env, dataDir, monthPath, noCacheConfig);
        console.error(`restart ${round + 1}/${restarts.rounds} ${b.name}: ${JSON.stringify(r)}`);
        restarted.get(b.name)?.push(r);
      }
    return {
      queriedMb,
      queriedMinuteMb,
      restarted,
      ingestPps,
      bytesPerPoint,
      walMb,
      dataBytesPerPoint,
      rssMb,
      monthMs,
      monthColdMs,
      hourMs,
      monthMixedMs,
      hourMixedMs,
      eldMax,
      p99Idle: p99(idle),
      p99Busy: p99(busy),
      busySamples: busy.length,
      compactS,
      live,
      maxStepMs: after.stats.maxStepMs,
      stepsOver20: after.stats.stepsOver20Ms,
      steps: after.stats.steps,
    };
  } finally {
    if (child.connected) {
      child.disconnect();
      await new Promise((r) => child.once('exit', r));
    }
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(noReadCacheConfig(dataDir), { force: true });
  }
}

/** The config file (beside the month's data dir) of a daemon that keeps nothing in its read caches. */
const noReadCacheConfig = (dataDir: string): string => `${dataDir}-no-read-cache.json`;

interface Restart {
  /** RssAnon 2 s after the start, before any query, MiB */
  restMb: number;
  coldMs: number;
  warmMs: number;
  /** RssAnon right after the last answer and a minute later, MiB */
  afterMb: number;
  minuteMb: number;
  /**
   * the month query with its code warm and the read caches cold: a daemon started with no read-cache budget, the
   * median of QUERY_RUNS queries after QUERY_RUNS that warm the code (each query reads every block and chunk
   * again, as the first after a start does)
   */
  cacheColdMs: number;
}

/** `main serve` on the month's data dir as systemd starts it (node's `flags` and `env`), with `args` added. */
async function startBuild(
  main: string,
  flags: readonly string[],
  env: Readonly<Record<string, string>>,
  dataDir: string,
  args: readonly string[] = [],
): Promise<Awaited<ReturnType<typeof spawnListening>>> {
  const saved = { ...process.env };
  for (const k of Object.keys(MALLOC_ENV)) delete process.env[k];
  Object.assign(process.env, env);
  const started = spawnListening([
    ...flags,
    main,
    'serve',
    '--host',
    '127.0.0.1',
    '--port',
    '0',
    '--data-dir',
    dataDir,
    ...args,
  ]);
  process.env = saved;
  return started;
}

/** `runs` timings of GET `path` on one connection after a login, ms. */
async function timeGets(port: number, path: string, runs: number): Promise<number[]> {
  const headers = { 'X-Authorization': `Bearer ${await loginJwt(port, 'bench@example.com', 'bench-pw')}` };
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    const r = await request(port, 'GET', path, undefined, headers);
    times.push(performance.now() - t0);
    if (r.status !== 200) throw new Error(`GET ${path}: ${r.status} ${r.text.slice(0, 200)}`);
  }
  return times;
}

/**
 * A daemon started on the month's data dir as systemd starts it (`main serve`, node's `flags`, HTTP, MQTT and
 * CoAP listening), the month query once (cold) and QUERY_RUNS times more (warm), then a minute of rest; then
 * the same build again with no read-cache budget (`noCacheConfig`), for the query with its code warm and every
 * block and chunk read and decoded again.
 */
async function restartOnce(
  main: string,
  flags: readonly string[],
  env: Readonly<Record<string, string>>,
  dataDir: string,
  path: string,
  noCacheConfig: string,
): Promise<Restart> {
  const d = await startBuild(main, flags, env, dataDir);
  let r: Omit<Restart, 'cacheColdMs'>;
  try {
    const pid = d.proc.pid as number;
    await sleep(2000);
    const restMb = rssAnonKb(pid) / 1024;
    const times = await timeGets(d.port, path, 1 + QUERY_RUNS);
    const afterMb = rssAnonKb(pid) / 1024;
    await sleep(60_000);
    r = {
      restMb,
      coldMs: times[0] as number,
      warmMs: median(times.slice(1)),
      afterMb,
      minuteMb: rssAnonKb(pid) / 1024,
    };
  } finally {
    await stopDaemon(d);
  }
  const nc = await startBuild(main, flags, env, dataDir, ['--config', noCacheConfig]);
  try {
    const times = await timeGets(nc.port, path, 2 * QUERY_RUNS);
    return { ...r, cacheColdMs: median(times.slice(QUERY_RUNS)) };
  } finally {
    await stopDaemon(nc);
  }
}

async function benchInflux(month: readonly Sample[]): Promise<Result> {
  try {
    execFileSync('influxd', ['version'], { stdio: 'ignore' });
  } catch {
    return {
      ingestPps: NaN,
      bytesPerPoint: NaN,
      rssMb: NaN,
      monthMs: NaN,
      hourMs: NaN,
      note: 'influxd not installed (apt-get install influxdb): skipped',
    };
  }
  const dir = mkdtempSync(join(tmpdir(), 'outpost-bench-influx-'));
  const [httpPort, rpcPort] = [await freePort(), await freePort()];
  for (const d of ['meta', 'data', 'wal']) mkdirSync(join(dir, d));
  const proc = spawn('influxd', ['run'], {
    stdio: 'ignore',
    env: {
      ...process.env,
      INFLUXDB_META_DIR: join(dir, 'meta'),
      INFLUXDB_DATA_DIR: join(dir, 'data'),
      INFLUXDB_DATA_WAL_DIR: join(dir, 'wal'),
      INFLUXDB_HTTP_BIND_ADDRESS: `127.0.0.1:${httpPort}`,
      INFLUXDB_BIND_ADDRESS: `127.0.0.1:${rpcPort}`,
      INFLUXDB_REPORTING_DISABLED: 'true',
      INFLUXDB_MONITOR_STORE_ENABLED: 'false',
      INFLUXDB_HTTP_LOG_ENABLED: 'false',
      INFLUXDB_DATA_QUERY_LOG_ENABLED: 'false',
      INFLUXDB_DATA_CACHE_SNAPSHOT_WRITE_COLD_DURATION: '1s',
      INFLUXDB_DATA_COMPACT_FULL_WRITE_COLD_DURATION: '5s',
      INFLUXDB_CONTINUOUS_QUERIES_ENABLED: 'false',
    },
  });
  try {
    for (let i = 0; ; i++) {
      try {
        if ((await request(httpPort, 'GET', '/ping')).status === 204) break;
      } catch {
        /* not up yet */
      }
      if (i > 100) throw new Error('influxd did not start');
      await sleep(100);
    }
    await request(httpPort, 'POST', `/query?q=${encodeURIComponent('CREATE DATABASE bench')}`);
    const ingestPps = await ingest(httpPort, '/write?db=bench&precision=ms', lineBodies(month), month.length);
    // Let the cache snapshot to TSM and compact (cold after 1 s / 5 s), then measure the whole dir.
    let prev = -1;
    for (let i = 0; i < 60; i++) {
      await sleep(1000);
      const size = dirBytes(dir);
      if (size === prev && dirBytes(join(dir, 'wal')) < 64 * 1024) break;
      prev = size;
    }
    const bytesPerPoint = dirBytes(dir) / (month.length * 2);
    const dataBytesPerPoint = filesBytes(dir, '.tsm') / (month.length * 2);
    const end = (month[month.length - 1] as Sample).ts + STEP_MS;
    const q = (from: number, group: string): string =>
      `/query?db=bench&epoch=ms&q=${encodeURIComponent(
        `SELECT mean(temperature), mean(counter) FROM m WHERE time >= ${from}ms AND time < ${end}ms GROUP BY time(${group})`,
      )}`;
    const ok = (text: string): void => {
      if (!text.includes('"values"')) throw new Error(`influx answered ${text.slice(0, 200)}`);
    };
    const {
      alone: [monthQuery, hourQuery],
      mixed: [monthMixed, hourMixed],
    } = await timeQueries(
      httpPort,
      [
        { path: q(end - month.length * STEP_MS, '2h'), check: ok },
        { path: q(end - HOUR, '1m'), check: ok },
      ],
      {},
    );
    const monthMs = monthQuery?.median ?? NaN;
    const hourMs = hourQuery?.median ?? NaN;
    const monthMixedMs = monthMixed?.median ?? NaN;
    const hourMixedMs = hourMixed?.median ?? NaN;
    const version = execFileSync('influxd', ['version']).toString().trim();
    return {
      ingestPps,
      bytesPerPoint,
      dataBytesPerPoint,
      rssMb: rssAnonKb(proc.pid as number) / 1024,
      monthMs,
      hourMs,
      monthMixedMs,
      hourMixedMs,
      note: version,
    };
  } finally {
    proc.kill('SIGTERM');
    await new Promise((r) => proc.once('exit', r));
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const i = process.argv.indexOf('--days');
  const days = i > 0 ? Math.max(2, Number(process.argv[i + 1])) : 30;
  const end = Math.floor(Date.now() / STEP_MS) * STEP_MS;
  const month = generate(end - days * DAY, (days * DAY) / STEP_MS, 42);
  const backlog = generate(end - 60 * DAY, (7 * DAY) / STEP_MS, 7);
  const argv = process.argv.slice(2);
  const b = argv.indexOf('--baseline');
  const nf = argv.indexOf('--node-flags');
  const here = fileURLToPath(new URL('../../src/main.js', import.meta.url));
  const flags = nf >= 0 ? (argv[nf + 1] ?? '').split(/\s+/).filter((x) => x !== '') : [];
  const builds = [
    {
      name: `this build${flags.length > 0 ? ` (${flags.join(' ')}, MALLOC_ARENA_MAX=2 MALLOC_TRIM_THRESHOLD_=131072)` : ''}`,
      main: here,
      flags,
      env: flags.length > 0 ? MALLOC_ENV : {},
    },
  ];
  // --baseline-flags "...": the baseline as its own unit started it
  const bf = argv.indexOf('--baseline-flags');
  const baseFlags = bf >= 0 ? (argv[bf + 1] ?? '').split(/\s+/).filter((x) => x !== '') : [];
  // --baseline-env "K=V ...": its unit's environment (default: the arena cap alone, for a unit that set no trim
  // threshold)
  const be = argv.indexOf('--baseline-env');
  const baseEnv: Record<string, string> =
    be >= 0
      ? Object.fromEntries(
          (argv[be + 1] ?? '')
            .split(/\s+/)
            .filter((x) => x.includes('='))
            .map((x) => [x.slice(0, x.indexOf('=')), x.slice(x.indexOf('=') + 1)]),
        )
      : baseFlags.length > 0
        ? { MALLOC_ARENA_MAX: '2' }
        : {};
  const envText = Object.entries(baseEnv)
    .map(([k, v]) => `${k}=${v}`)
    .join(' ');
  if (b >= 0)
    builds.push({
      name: `${argv[b + 1]} (${baseFlags.length > 0 || envText !== '' ? [...baseFlags, envText].join(' ') : 'as started before'})`,
      main: resolve(argv[b + 1] as string, 'dist/src/main.js'),
      flags: baseFlags,
      env: baseEnv,
    });
  // the restarted daemons listen on ports of their own, as a gateway's daemon listens on HTTP, MQTT and CoAP
  process.env['OUTPOST_MQTT_PORT'] = 'ephemeral';
  process.env['OUTPOST_COAP_PORT'] = 'ephemeral';
  const restarts: Restarts = { builds, rounds: intArg(argv, 'restarts', 3) };
  const o = await benchOutpost(month, backlog, end - 10 * DAY, restarts);
  const x = await benchInflux(month);
  const barePps = await benchBare(month);
  const f = (n: number, d = 1): string =>
    Number.isFinite(n) ? n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d }) : 'n/a';
  console.log(
    `downsample bench: ${days} days × 8,640 ts × 2 keys = ${(month.length * 2).toLocaleString('en-US')} points, ${BATCH}-timestamp batches (the first ${warmUpBodies(Math.ceil(month.length / BATCH))} untimed), ${IN_FLIGHT} in flight; query medians of ${QUERY_RUNS} after ${QUERY_WARM_UP} untimed runs; Node ${process.version}; baseline: ${x.note ?? 'InfluxDB'}`,
  );
  console.log('| metric | Outpost | InfluxDB (baseline) | Outpost ÷ InfluxDB | target |');
  console.log('|---|---:|---:|---:|---|');
  console.log(
    `| ingest, points/s | ${f(o.ingestPps, 0)} | ${f(x.ingestPps, 0)} | ${f(o.ingestPps / x.ingestPps, 2)}× | ≥ 1,500,000 |`,
  );
  console.log(
    `| ingest ceiling: bare uWS + JSON.parse, same bodies and client, points/s (Outpost ÷ it) | ${f(barePps, 0)} (${f(o.ingestPps / barePps, 2)}×) | | | |`,
  );
  console.log(
    `| disk, bytes/point (whole data dir; Outpost: of which the write-ahead log's segments and spares, MiB) | ${f(o.bytesPerPoint, 2)} (${f(o.walMb, 1)} MiB) | ${f(x.bytesPerPoint, 2)} | ${f(o.bytesPerPoint / x.bytesPerPoint, 2)}× | ≤ 6 |`,
  );
  console.log(
    `| disk, bytes/point (Outpost: chunks + rollups + head values; InfluxDB: TSM files) | ${f(o.dataBytesPerPoint ?? NaN, 2)} | ${f(x.dataBytesPerPoint ?? NaN, 2)} | ${f((o.dataBytesPerPoint ?? NaN) / (x.dataBytesPerPoint ?? NaN), 2)}× | |`,
  );
  console.log(`| RssAnon after ingest, MiB | ${f(o.rssMb)} | ${f(x.rssMb)} | ${f(o.rssMb / x.rssMb, 2)}× | |`);
  console.log(
    `| month, 2-h AVG (360 buckets × 2 keys), ms | ${f(o.monthMs, 2)} | ${f(x.monthMs, 2)} | ${f(o.monthMs / x.monthMs, 2)}× | < 15 |`,
  );
  console.log(`| Outpost: first (cold) month query, ms | ${f(o.monthColdMs ?? NaN, 2)} | | | |`);
  console.log(
    `| hour, 1-min AVG (60 buckets × 2 keys), ms | ${f(o.hourMs, 2)} | ${f(x.hourMs, 2)} | ${f(o.hourMs / x.hourMs, 2)}× | |`,
  );
  console.log(`| month ÷ hour latency | ${f(o.monthMs / o.hourMs, 2)} | ${f(x.monthMs / x.hourMs, 2)} | | < 5 |`);
  const mixed = (r: Result): string =>
    `${f(r.monthMixedMs ?? NaN, 2)} / ${f(r.hourMixedMs ?? NaN, 2)} = ${f((r.monthMixedMs ?? NaN) / (r.hourMixedMs ?? NaN), 2)}`;
  console.log(`| month / hour, the two alternating, ms | ${mixed(o)} | ${mixed(x)} | | |`);
  console.log(`| Outpost: live LMDB pages, bytes/point | ${f(o.live / (month.length * 2), 2)} | | | |`);
  console.log(
    `| Outpost: compaction still running after the last ingest answer, s (0 = kept up) | ${f(o.compactS, 1)} | | | |`,
  );
  console.log(
    `| Outpost: longest background step (wall), ms; steps > 20 ms of ${o.steps} | ${f(o.maxStepMs, 1)}; ${o.stepsOver20} | | | ≤ 20 |`,
  );
  console.log(`| Outpost: event-loop delay max while the backlog compacts, ms | ${f(o.eldMax, 1)} | | | |`);
  console.log(
    `| Outpost: single-point post p99, compaction paused / running (${o.busySamples} samples), ms | ${f(o.p99Idle, 2)} / ${f(o.p99Busy, 2)} (${f(o.p99Busy / o.p99Idle, 2)}×) | | | ≤ 2× |`,
  );
  console.log(
    `| Outpost: RssAnon after the month's last query answer / a minute later, MiB | ${f(o.queriedMb)} / ${f(o.queriedMinuteMb)} | | | ≤ 30 |`,
  );
  console.log(
    `restarted on the month's data dir (\`outpost serve\`), medians of ${restarts.rounds} alternated restarts`,
  );
  console.log(
    '| build | RssAnon at rest, MiB | first month query after the start, ms | warm median, ms | RssAnon after the last answer / a minute later, MiB | code warm, read caches cold, ms |',
  );
  console.log('|---|---:|---:|---:|---:|---:|');
  for (const [name, rs] of o.restarted) {
    const m = (k: keyof Restart): string => f(median(rs.map((r) => r[k])), k.endsWith('Ms') ? 2 : 1);
    console.log(
      `| ${name} | ${m('restMb')} | ${m('coldMs')} | ${m('warmMs')} | ${m('afterMb')} / ${m('minuteMb')} | ${m('cacheColdMs')} |`,
    );
  }
  agent.destroy();
}

if (process.argv[2] === '--serve') {
  await serve(process.argv[3] as string);
} else if (process.argv[2] === '--bare') {
  serveBare();
} else {
  await main();
}
