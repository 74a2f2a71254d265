/**
 * Websocket fan-out benchmark: 1,000 subscribers on 100 devices (10 per device, scope
 * LATEST_TELEMETRY), 1,000 telemetry writes/s through the device HTTP API for a bounded time. Each write
 * carries its send time as `ts`, so a subscriber measures write-to-delivery latency from the frame alone.
 * Reports delivered updates/s, p50/p99 latency (after a 1 s warm-up) and the server's RssAnon (peak,
 * sampled every 250 ms; targets: p99 < 50 ms, RssAnon < 150 MB).
 *
 * Baseline in the same run: the same clients, writes and fan-out through a bare uWS server (a child process
 * of this script) whose POST handler publishes the body to a per-device topic — no auth, no store, no
 * subscription logic — i.e. the floor set by uWS and the client itself. Rounds alternate baseline / Outpost;
 * medians are reported. Loopback only; bounded by --seconds and --rounds.
 *
 * All subscribers are one user: the daemon gets ws.maxSessionsPerUser and ws.maxSubscriptionsPerUser raised to
 * --subscribers, so the per-user accounting runs on every socket and subscription without refusing any.
 *
 * `--dir` puts Outpost's data dir elsewhere (e.g. /dev/shm, so the shared disk's fsync latency, which the ingest
 * benchmark measures, does not hide the fan-out cost).
 *
 *   npm run bench:ws [-- --subscribers 1000 --devices 100 --rate 1000 --seconds 8 --rounds 2 --dir /tmp]
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as uws from 'uWebSockets.js';
import WebSocket from 'ws';
import { hashPassword } from '../../src/auth/password.js';
import { EntityStore } from '../../src/store/entities.js';
import { openStoreEnv } from '../../src/store/env.js';
import { intArg, median, rssAnonBytes, spawnListening } from './lib.js';

interface Args {
  subscribers: number;
  devices: number;
  rate: number;
  seconds: number;
  rounds: number;
  dir: string;
}

function parseArgs(argv: string[]): Args {
  const get = (name: string, def: number): number => intArg(argv, name, def);
  const di = argv.indexOf('--dir');
  const a = {
    subscribers: get('subscribers', 1000),
    devices: get('devices', 100),
    rate: get('rate', 1000),
    seconds: get('seconds', 8),
    rounds: get('rounds', 2),
    dir: di >= 0 ? String(argv[di + 1]) : tmpdir(),
  };
  if (a.seconds > 60 || a.rounds > 5) throw new Error('bounded: --seconds ≤ 60, --rounds ≤ 5');
  return a;
}

const SELF = fileURLToPath(import.meta.url);
const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const MB = 1024 * 1024;
/** ms; the first second of writing warms both servers and the client; its latencies are not counted */
const WARMUP_MS = 1000;

const quantile = (sorted: number[], q: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;

// ---------------------------------------------------------------------------------------------------------
// Baseline server (child process): POST /pub/<topic> publishes the body to <topic>; ws /ws?topic=<topic>.

function runBaselineServer(): void {
  const app = uws.App();
  app.ws<{ topic: string }>('/ws', {
    maxPayloadLength: 32 * 1024,
    maxBackpressure: 1024 * 1024,
    closeOnBackpressureLimit: true,
    idleTimeout: 60,
    upgrade: (res, req, ctx) => {
      res.upgrade(
        { topic: req.getQuery('topic') ?? '' },
        req.getHeader('sec-websocket-key'),
        req.getHeader('sec-websocket-protocol'),
        req.getHeader('sec-websocket-extensions'),
        ctx,
      );
    },
    open: (ws) => {
      ws.subscribe(ws.getUserData().topic);
    },
  });
  app.post('/pub/:topic', (res, req) => {
    const topic = req.getParameter(0) ?? '';
    let aborted = false;
    const chunks: Buffer[] = [];
    res.onAborted(() => {
      aborted = true;
    });
    res.onData((ab, last) => {
      chunks.push(Buffer.from(ab.slice(0)));
      if (!last || aborted) return;
      app.publish(topic, Buffer.concat(chunks).toString('utf8'));
      res.cork(() => res.end());
    });
  });
  app.listen('127.0.0.1', 0, (ls) => {
    if (!ls) process.exit(1);
    process.stdout.write(`listening on http://127.0.0.1:${uws.us_socket_local_port(ls as unknown as uws.us_socket)}\n`);
  });
}

// ---------------------------------------------------------------------------------------------------------
// Driver

interface Target {
  readonly name: string;
  readonly proc: ChildProcess;
  readonly port: number;
  /** ws URL for subscriber i */
  wsUrl(i: number): string;
  /** the subscribe frame to send after open, if any */
  subscribe(i: number): string | undefined;
  /** POST path and body for a write to device d at send time ts */
  write(d: number, ts: number, seq: number): { path: string; body: string };
  /** send time of an update frame, or undefined for other frames (first replies) */
  sentAt(frame: string): number | undefined;
}

function startProcess(args: string[]): Promise<{ proc: ChildProcess; port: number }> {
  return spawnListening(args);
}

async function setupOutpost(dataDir: string, devices: number): Promise<Array<{ id: string; token: string }>> {
  const env = openStoreEnv({ dataDir, mapSizeBytes: 4 * 1024 * MB });
  const entities = new EntityStore(env);
  await entities.ensureTenant();
  await entities.createUser({
    email: 'bench@example.com',
    passwordHash: await hashPassword('bench-pw'),
    authority: 'TENANT_ADMIN',
  });
  const out: Array<{ id: string; token: string }> = [];
  for (let i = 0; i < devices; i++) {
    const d = await entities.createDevice({ name: `ws-${i}`, token: `ws-token-${i}` });
    out.push({ id: d.id, token: d.token });
  }
  await env.close();
  return out;
}

function httpPost(agent: Agent, port: number, path: string, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

async function startOutpost(
  dataDir: string,
  devs: Array<{ id: string; token: string }>,
  subscribers: number,
): Promise<Target> {
  // Every subscriber is the one bench user: its per-user limits are raised to the load, so each socket and
  // subscription is still counted against them (the cost measured) but none is refused.
  const config = join(dataDir, 'bench-config.json');
  writeFileSync(
    config,
    JSON.stringify({ ws: { maxSessionsPerUser: subscribers, maxSubscriptionsPerUser: subscribers } }),
  );
  const { proc, port } = await startProcess([
    MAIN,
    'serve',
    '--host',
    '127.0.0.1',
    '--port',
    '0',
    '--data-dir',
    dataDir,
    '--config',
    config,
  ]);
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const login = await new Promise<string>((resolve, reject) => {
    const body = JSON.stringify({ username: 'bench@example.com', password: 'bench-pw' });
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: '/api/auth/login',
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json' },
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => {
          text += c.toString();
        });
        res.on('end', () =>
          res.statusCode === 200
            ? resolve((JSON.parse(text) as { token: string }).token)
            : reject(new Error(`login ${res.statusCode} ${text}`)),
        );
      },
    );
    req.on('error', reject);
    req.end(body);
  });
  agent.destroy();
  return {
    name: 'Outpost',
    proc,
    port,
    wsUrl: () => `ws://127.0.0.1:${port}/api/ws/plugins/telemetry?token=${login}`,
    subscribe: (i) =>
      JSON.stringify({
        tsSubCmds: [
          { entityType: 'DEVICE', entityId: devs[i % devs.length]?.id, keys: 't', scope: 'LATEST_TELEMETRY', cmdId: 1 },
        ],
      }),
    write: (d, ts, seq) => ({
      path: `/api/v1/${devs[d]?.token}/telemetry`,
      body: `{"ts":${ts},"values":{"t":${seq}}}`,
    }),
    sentAt: (frame) => {
      const m = /"latestValues":\{"t":(\d+)\}/.exec(frame);
      return m ? Number(m[1]) : undefined;
    },
  };
}

async function startBaseline(devices: number): Promise<Target> {
  const { proc, port } = await startProcess([SELF, '--baseline-server']);
  return {
    name: 'bare uWS publish',
    proc,
    port,
    wsUrl: (i) => `ws://127.0.0.1:${port}/ws?topic=d${i % devices}`,
    subscribe: () => undefined,
    write: (d, ts, seq) => ({ path: `/pub/d${d}`, body: `{"ts":${ts},"values":{"t":${seq}}}` }),
    sentAt: (frame) => {
      const m = /^\{"ts":(\d+)/.exec(frame);
      return m ? Number(m[1]) : undefined;
    },
  };
}

interface RunResult {
  writes: number;
  writeErrors: number;
  expected: number;
  delivered: number;
  updatesPerSec: number;
  p50: number;
  p99: number;
  max: number;
  rssIdle: number;
  rssPeak: number;
  /** ms; HTTP round trip of a write (Outpost: durable commit, then fan-out, then 200) */
  writeP99: number;
}

async function runOnce(target: Target, a: Args): Promise<RunResult> {
  const latencies: number[] = [];
  let delivered = 0;
  let measuring = false;
  /** latencies of writes sent before this (the first WARMUP_MS of writing: JIT, connection pools) are not kept */
  let measureFrom = Infinity;
  let onDelivered = (): void => undefined;
  const sockets: WebSocket[] = [];
  // Connect and subscribe all, waiting for each first reply (Outpost) or open (baseline).
  for (let from = 0; from < a.subscribers; from += 100) {
    await Promise.all(
      Array.from(
        { length: Math.min(100, a.subscribers - from) },
        (_, k) =>
          new Promise<void>((resolve, reject) => {
            const i = from + k;
            const ws = new WebSocket(target.wsUrl(i));
            sockets.push(ws);
            const sub = target.subscribe(i);
            // Outpost answers the subscription first; that frame is not an update.
            let subscribed = sub === undefined;
            ws.once('error', reject);
            ws.on('message', (data) => {
              if (!subscribed) {
                subscribed = true;
                resolve();
                return;
              }
              const sent = target.sentAt(String(data));
              if (sent === undefined || !measuring) return;
              delivered++;
              if (sent >= measureFrom) latencies.push(Date.now() - sent);
              onDelivered();
            });
            ws.once('open', () => {
              if (sub === undefined) resolve();
              else ws.send(sub);
            });
          }),
      ),
    );
  }
  const pid = target.proc.pid as number;
  const rssIdle = rssAnonBytes(pid);
  let rssPeak = rssIdle;
  const sampler = setInterval(() => {
    rssPeak = Math.max(rssPeak, rssAnonBytes(pid));
  }, 250);

  // Paced writer: every 10 ms, the writes due by now, round-robin over devices, over 64 keep-alive sockets
  // (concurrent writes share one durable group commit in Outpost).
  const agent = new Agent({ keepAlive: true, maxSockets: 64 });
  measuring = true;
  let writes = 0;
  let writeErrors = 0;
  const writeRtts: number[] = [];
  const inflight = new Set<Promise<void>>();
  const start = Date.now();
  measureFrom = start + WARMUP_MS;
  const end = start + a.seconds * 1000;
  await new Promise<void>((resolve) => {
    const tick = setInterval(() => {
      const now = Date.now();
      if (now >= end) {
        clearInterval(tick);
        resolve();
        return;
      }
      const due = Math.floor(((now - start) / 1000) * a.rate);
      // Bounded: never more than 2,000 writes in flight, so an overloaded server slows the writer down.
      while (writes < due && inflight.size < 2000) {
        const seq = writes++;
        const sentAt = Date.now();
        const { path, body } = target.write(seq % a.devices, sentAt, seq);
        const p: Promise<void> = httpPost(agent, target.port, path, body)
          .then(
            (status) => {
              if (status !== 200) writeErrors++;
              if (sentAt >= measureFrom) writeRtts.push(Date.now() - sentAt);
            },
            () => {
              writeErrors++;
            },
          )
          .finally(() => inflight.delete(p));
        inflight.add(p);
      }
    }, 10);
  });
  await Promise.all(inflight);
  const subsPerDevice = a.subscribers / a.devices;
  const expected = writes * subsPerDevice;
  // Let the last frames arrive (bounded wait, event-driven by frame arrival).
  if (delivered < expected) {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 3000);
      onDelivered = () => {
        if (delivered >= expected) {
          clearTimeout(timer);
          resolve();
        }
      };
    });
  }
  const elapsed = (Date.now() - start) / 1000;
  clearInterval(sampler);
  rssPeak = Math.max(rssPeak, rssAnonBytes(pid));
  measuring = false;
  agent.destroy();
  for (const ws of sockets) ws.terminate();
  latencies.sort((x, y) => x - y);
  writeRtts.sort((x, y) => x - y);
  return {
    writeP99: quantile(writeRtts, 0.99),
    writes,
    writeErrors,
    expected,
    delivered,
    updatesPerSec: delivered / elapsed,
    p50: quantile(latencies, 0.5),
    p99: quantile(latencies, 0.99),
    max: latencies[latencies.length - 1] ?? NaN,
    rssIdle,
    rssPeak,
  };
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const dataDir = mkdtempSync(join(a.dir, 'outpost-bench-ws-'));
  const devs = await setupOutpost(dataDir, a.devices);
  const outpost = await startOutpost(dataDir, devs, a.subscribers);
  const baseline = await startBaseline(a.devices);
  // Interrupted (timeout, Ctrl-C): the children and the data dir go too.
  const cleanup = (signal: NodeJS.Signals): void => {
    outpost.proc.kill(signal);
    baseline.proc.kill(signal);
    rmSync(dataDir, { recursive: true, force: true });
  };
  for (const sig of ['SIGINT', 'SIGTERM'] as const)
    process.once(sig, () => {
      cleanup('SIGKILL');
      process.exit(130);
    });
  const results: Record<string, RunResult[]> = { [baseline.name]: [], [outpost.name]: [] };
  try {
    for (let r = 0; r < a.rounds; r++) {
      for (const target of [baseline, outpost]) {
        const res = await runOnce(target, a);
        (results[target.name] as RunResult[]).push(res);
        process.stderr.write(
          `round ${r + 1} ${target.name}: ${res.writes} writes, ${res.delivered}/${res.expected} delivered, ` +
            `p99 ${res.p99} ms, RssAnon peak ${(res.rssPeak / MB).toFixed(1)} MB\n`,
        );
      }
    }
  } finally {
    cleanup('SIGTERM');
  }
  const b = results[baseline.name] as RunResult[];
  const o = results[outpost.name] as RunResult[];
  const med = (rs: RunResult[], f: (r: RunResult) => number): number => median(rs.map(f));
  const rows: Array<[string, (r: RunResult) => number, (v: number) => string]> = [
    ['writes sent (HTTP 200)', (r) => r.writes - r.writeErrors, (v) => v.toLocaleString('en-US')],
    ['updates delivered / expected', (r) => r.delivered / r.expected, (v) => `${(v * 100).toFixed(2)} %`],
    ['delivered updates/s', (r) => r.updatesPerSec, (v) => Math.round(v).toLocaleString('en-US')],
    ['p50 write-to-delivery (ms)', (r) => r.p50, (v) => v.toFixed(0)],
    ['p99 write-to-delivery (ms)', (r) => r.p99, (v) => v.toFixed(0)],
    ['max write-to-delivery (ms)', (r) => r.max, (v) => v.toFixed(0)],
    ['p99 write HTTP round trip (ms)', (r) => r.writeP99, (v) => v.toFixed(0)],
    ['server RssAnon idle (MB)', (r) => r.rssIdle / MB, (v) => v.toFixed(1)],
    ['server RssAnon peak (MB)', (r) => r.rssPeak / MB, (v) => v.toFixed(1)],
  ];
  console.log(
    `${a.subscribers} subscribers on ${a.devices} devices, ${a.rate} writes/s for ${a.seconds} s, ${a.rounds} rounds (medians); ` +
      `data dir under ${a.dir}; Node ${process.version}\n`,
  );
  console.log(`| metric | ${baseline.name} (baseline) | Outpost | Outpost / baseline |`);
  console.log('|---|---:|---:|---:|');
  for (const [name, f, fmt] of rows) {
    const bv = med(b, f);
    const ov = med(o, f);
    console.log(`| ${name} | ${fmt(bv)} | ${fmt(ov)} | ${bv === 0 ? '–' : `${(ov / bv).toFixed(2)}×`} |`);
  }
}

if (process.argv.includes('--baseline-server')) runBaselineServer();
else await main();
