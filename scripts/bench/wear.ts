/**
 * SD-card wear benchmark (docs/design/write-path.md): bytes the daemon writes per point when devices post one at a time, per
 * write policy, side by side in one run. Each policy runs the real `outpost serve` (dist/src/main.js) on a fresh
 * data dir with its config file; the devices are created beforehand in the data dir.
 *
 * Before the load each device posts its last 100 minutes in one request (the head then holds what it holds on a
 * gateway in steady state, within store.headWindowMs). Load: N devices, each on its own keep-alive connection (lib.ts RawHttpConnection), posts K keys every P ms at
 * its own offset, one post at a time (the next waits for the answer), as LAN sensors do.
 *   warm-up: one period, then a read (GET values/timeseries as a tenant admin) so everything logged is in LMDB
 *   window:  W seconds of load; bytes = /proc/<pid>/io write_bytes delta
 *   end:     the same read, which puts whatever the log holds into LMDB (a synchronous, flushed commit), so the
 *            window's LMDB cost is counted even though store.applyIntervalMs (300 s) is longer than the window:
 *            one apply per W seconds, ten times the default's rate. The "per day" column counts that; the last
 *            column spreads the same apply over the default interval's points instead (an apply touches every
 *            series written since the last one, once, however many points each got).
 * Split by source: "log" is what the window wrote before the final read (with the log on: its appends; the
 * LMDB applies otherwise wait for that read), "LMDB" what the read wrote. Without the log every byte is an
 * LMDB commit. Compaction does not run within the window (store.headWindowMs is 2 h); the "other" column is
 * nothing here, said so rather than guessed.
 * write_bytes is charged when a clean page cache page is dirtied (kernel: folio_account_dirtied), not at
 * writeback: a page rewritten before writeback is charged once, one cleaned by an fdatasync and written again
 * is charged again. So the count covers every writeback of the daemon's pages and needs no wait for the
 * kernel's dirty_expire. ext4's own journal writes (jbd2) are not charged to the daemon: the log never changes a
 * file's size and its segments are written with zeros first, so its fdatasyncs need no journal commit.
 *
 * The "+ sync" rows add upstream sync to a sink in this process that answers 200 at once (the link is up): what
 * sending costs the card on top of the write path, in steady state (the window starts once the history is up).
 *
 *   npm run bench:wear [-- --window 30 --only ref|big --history <minutes, default 100; 0: a fresh store> --policy <substrings of policy names, comma-separated>]
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { argValue, encodeRequest, RawHttpConnection, rssAnonBytes, spawnListening } from './lib.js';
import { openStoreEnv } from '../../src/store/env.js';
import { EntityStore } from '../../src/store/entities.js';
import { hashPassword } from '../../src/auth/password.js';
import { DEFAULTS } from '../../src/config/index.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const EMAIL = 'bench@example.com';
const PASSWORD = 'bench-password';
/**
 * minutes of history posted before the load (`--history`, 0 for a fresh store): within store.headWindowMs (2 h),
 * so no compaction runs during the window
 */
const HISTORY_MS = (process.argv.includes('--history') ? Number(process.argv[process.argv.indexOf('--history') + 1]) : 100) * 60_000;
/** a 32 GB consumer card rated for 16 TB written */
const CARD_TBW = 16e12;

interface Workload { readonly name: string; readonly devices: number; readonly keys: number; readonly periodMs: number }
const WORKLOADS: readonly Workload[] = [
  { name: 'ref', devices: 50, keys: 5, periodMs: 5000 },
  { name: 'big', devices: 200, keys: 10, periodMs: 10_000 },
];

interface Policy {
  readonly name: string;
  readonly store: Record<string, unknown>;
  readonly workloads: readonly string[];
  /** sync to an upstream that answers 200 at once (a sink in this process) */
  readonly sync?: boolean;
}
const POLICIES: readonly Policy[] = [
  { name: 'no log, commitDelayMs 0 (main)', store: { wal: false, commitDelayMs: 0 }, workloads: ['ref', 'big'] },
  { name: 'no log, commitDelayMs 250', store: { wal: false, commitDelayMs: 250 }, workloads: ['ref'] },
  { name: 'log, commitDelayMs 0 (low latency)', store: { wal: true, commitDelayMs: 0 }, workloads: ['ref', 'big'] },
  { name: 'log, commitDelayMs 250 (default)', store: { wal: true, commitDelayMs: 250 }, workloads: ['ref', 'big'] },
  { name: 'log, commitDelayMs 400', store: { wal: true, commitDelayMs: 400 }, workloads: ['ref'] },
  { name: 'no log, 0 + sync (main + sync)', store: { wal: false, commitDelayMs: 0 }, workloads: ['ref'], sync: true },
  { name: 'log, 250 + sync (default + sync)', store: { wal: true, commitDelayMs: 250 }, workloads: ['ref'], sync: true },
];

function writeBytes(pid: number): number {
  const m = /^write_bytes:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'));
  if (!m) throw new Error('write_bytes not found in /proc/<pid>/io');
  return Number(m[1]);
}

function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
}

/** Creates the tenant, the devices (token `dev<i>`) and a tenant admin in `dataDir`; returns the device ids. */
async function provision(dataDir: string, devices: number, upstream: boolean): Promise<string[]> {
  const env = openStoreEnv({ dataDir, mapSizeBytes: DEFAULTS.store.mapSizeBytes });
  try {
    const entities = new EntityStore(env);
    await entities.ensureTenant();
    const ids: string[] = [];
    for (let i = 0; i < devices; i++) ids.push((await entities.createDevice({ name: `dev${i}`, token: `dev${i}` })).id);
    // the upstream token of each device, as `outpost device upstream` stores it
    if (upstream) for (const [i, id] of ids.entries()) await env.outbox.put(['t', id], { token: `up${i}`, provisioned: false });
    await entities.createUser({ email: EMAIL, passwordHash: await hashPassword(PASSWORD), authority: 'TENANT_ADMIN' });
    return ids;
  } finally {
    await env.close();
  }
}

/** An upstream that answers every request 200 at once and counts the points it got. */
async function startSink(): Promise<{ url: string; points: () => number; close: () => Promise<void> }> {
  let points = 0;
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => { body += c; });
    req.on('end', () => {
      points += (body.match(/"k\d+":/g) ?? []).length;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`, points: () => points,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

interface Result { bytesLog: number; bytesLmdb: number; points: number; p50: number; p99: number; rssMb: number; windowS: number; failed: number; upstreamPoints: number | undefined }

async function run(policy: Policy, w: Workload, windowS: number): Promise<Result> {
  const dataDir = mkdtempSync(join(tmpdir(), 'outpost-wear-'));
  /** [0]: the admin's; [i + 1]: device i's */
  const conns: Array<RawHttpConnection | undefined> = [];
  let proc: ChildProcess | undefined;
  const sink = policy.sync === true ? await startSink() : undefined;
  try {
    const ids = await provision(dataDir, w.devices, sink !== undefined);
    const configFile = join(dataDir, 'config.json');
    writeFileSync(configFile, JSON.stringify({ store: policy.store, ...(sink === undefined ? {} : { sync: { url: sink.url } }) }));
    const started = await spawnListening([MAIN, 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', dataDir, '--config', configFile], 'outpost');
    proc = started.proc;
    const pid = started.proc.pid as number;
    const port = started.port;
    // uWS closes a keep-alive connection idle for 10 s: a device posting every 10 s reconnects when it finds its closed
    const request = async (i: number, bytes: Buffer): Promise<{ status: number; body: Buffer }> => {
      let conn = conns[i];
      if (conn !== undefined) {
        try {
          return await conn.request(bytes);
        } catch {
          conn.close();
        }
      }
      conn = await RawHttpConnection.open(port);
      conns[i] = conn;
      return conn.request(bytes);
    };
    const login = await request(0, encodeRequest('POST', '/api/auth/login', JSON.stringify({ username: EMAIL, password: PASSWORD }), { 'content-type': 'application/json' }));
    const jwt = (JSON.parse(login.body.toString()) as { token: string }).token;
    // a read of one device's latest values: the store puts everything logged into LMDB first
    const read = async (): Promise<void> => {
      const r = await request(0, encodeRequest('GET', `/api/plugins/telemetry/DEVICE/${ids[0] as string}/values/timeseries`, '', { 'x-authorization': `Bearer ${jwt}` }));
      if (r.status !== 200) throw new Error(`read: ${r.status} ${r.body.toString()}`);
    };

    let measuring = false;
    let stop = false;
    const lat: number[] = [];
    let points = 0;
    let failed = 0;
    let rssMax = 0;
    const device = async (i: number): Promise<void> => {
      const t0 = performance.now() + (i * w.periodMs) / w.devices;
      for (let n = 0; !stop; n++) {
        const due = t0 + n * w.periodMs;
        const wait = due - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        if (stop) return;
        const values: Record<string, number> = {};
        for (let k = 0; k < w.keys; k++) values[`k${k}`] = Math.round(Math.sin(n / 10 + k) * 1000) / 10;
        const body = JSON.stringify({ ts: Date.now(), values });
        const sent = performance.now();
        const r = await request(i + 1, encodeRequest('POST', `/api/v1/dev${i}/telemetry`, body, { 'content-type': 'application/json' }));
        if (r.status !== 200) failed++;
        if (measuring) {
          lat.push(performance.now() - sent);
          points += w.keys;
        }
      }
    };
    // History first: each device's last HISTORY_MS in one post, so the head holds what it holds in steady state
    // (a fresh store's small B-trees would make every commit look cheaper than on a gateway running for days).
    if (HISTORY_MS > 0) await Promise.all(Array.from({ length: w.devices }, async (_, i) => {
      const now = Date.now();
      const records: string[] = [];
      for (let ts = now - HISTORY_MS; ts < now - w.periodMs; ts += w.periodMs) {
        const values: string[] = [];
        for (let k = 0; k < w.keys; k++) values.push(`"k${k}":${Math.round(Math.sin(ts / 1e5 + k) * 1000) / 10}`);
        records.push(`{"ts":${ts},"values":{${values.join(',')}}}`);
      }
      const r = await request(i + 1, encodeRequest('POST', `/api/v1/dev${i}/telemetry`, `[${records.join(',')}]`, { 'content-type': 'application/json' }));
      if (r.status !== 200) throw new Error(`history of dev${i}: ${r.status}`);
    }));
    if (sink !== undefined) {
      // steady state: the history is sent before the window (its drain is not what a day of posts costs)
      const historyPoints = w.devices * w.keys * Math.ceil((HISTORY_MS - w.periodMs) / w.periodMs);
      while (sink.points() < historyPoints) await new Promise((r) => setTimeout(r, 250));
    }
    const sampler = setInterval(() => { rssMax = Math.max(rssMax, rssAnonBytes(pid)); }, 250);
    const load = Promise.all(Array.from({ length: w.devices }, (_, i) => device(i)));
    await new Promise((r) => setTimeout(r, w.periodMs));
    await read();
    measuring = true;
    const b0 = writeBytes(pid);
    await new Promise((r) => setTimeout(r, windowS * 1000));
    measuring = false;
    const b1 = writeBytes(pid);
    await read();
    const b2 = writeBytes(pid);
    stop = true;
    clearInterval(sampler);
    await load;
    lat.sort((a, b) => a - b);
    return {
      bytesLog: b1 - b0, bytesLmdb: b2 - b1, points, p50: quantile(lat, 0.5), p99: quantile(lat, 0.99),
      rssMb: rssMax / 2 ** 20, windowS, failed, upstreamPoints: sink?.points(),
    };
  } finally {
    await sink?.close();
    for (const c of conns) c?.close();
    const p = proc;
    if (p !== undefined && p.exitCode === null) await new Promise<void>((resolve) => { p.once('exit', () => resolve()); p.kill('SIGTERM'); });
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const windowS = argValue('--window', 30);
  const onlyIdx = process.argv.indexOf('--only');
  const only = onlyIdx >= 0 ? (process.argv[onlyIdx + 1] ?? '').split(',') : undefined;
  const policyIdx = process.argv.indexOf('--policy');
  const policyFilter = policyIdx >= 0 ? (process.argv[policyIdx + 1] ?? '').split(',') : undefined;
  const rows: string[] = [];
  for (const w of WORKLOADS) {
    if (only !== undefined && !only.includes(w.name)) continue;
    for (const p of POLICIES) {
      if (!p.workloads.includes(w.name)) continue;
      if (policyFilter !== undefined && !policyFilter.some((f) => p.name.includes(f))) continue;
      const r = await run(p, w, windowS);
      const total = r.bytesLog + r.bytesLmdb;
      const perPoint = total / r.points;
      const pointsPerDay = (w.devices * w.keys * 86_400_000) / w.periodMs;
      const perDay = perPoint * pointsPerDay;
      const applyS = DEFAULTS.store.applyIntervalMs / 1000;
      const atDefault = p.store['wal'] === true ? (r.bytesLog + (r.bytesLmdb * windowS) / applyS) / r.points * pointsPerDay : perDay;
      const f = (x: number, d = 0): string => x.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });
      rows.push(`| ${w.devices}×${w.keys} / ${w.periodMs / 1000} s | ${p.name} | ${f(r.bytesLog / r.points)} | ${f(r.bytesLmdb / r.points)} | ${f(perPoint)} | ${f(perDay / 1e9, 2)} GB | ${f(r.p50, 1)} / ${f(r.p99, 1)} ms | ${f(r.rssMb, 1)} MB | ${f(CARD_TBW / perDay / 365, 1)} | ${f(atDefault / 1e9, 2)} GB, ${f(CARD_TBW / atDefault / 365, 1)} years |${r.failed > 0 ? ` ${r.failed} failed |` : ''}${r.upstreamPoints === undefined ? '' : ` ${f(r.upstreamPoints)} points upstream |`}`);
      console.error(rows[rows.length - 1]);
    }
  }
  console.log(`\nwear: devices post one at a time after ${HISTORY_MS / 60_000} min of history each; ${windowS} s window per row, fresh daemon and data dir each; bytes/point from the daemon's write_bytes`);
  console.log('| workload | policy | bytes/point: log (or LMDB commits without it) | bytes/point: LMDB apply | bytes/point total | per day | ack p50 / p99 | RssAnon max | 32 GB card (16 TBW) life, years | per day and card life with one apply per applyIntervalMs |');
  console.log('|---|---|---|---|---|---|---|---|---|---|');
  for (const r of rows) console.log(r);
}

await main();
