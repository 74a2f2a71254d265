/**
 * CSV download benchmark: GET /api/download/deviceSeriesData of ROWS rows × 3 keys over loopback,
 * against a baseline serving the very same bytes from a pre-built Buffer with a bare uWS handler
 * (`tryEnd` + `onWritable`, the fastest uWS can stream). Reported: rows/s, MB/s and the server's peak RssAnon
 * growth during the download (target: < 20 MB for outpost), sampled from /proc/<pid>/status every 5 ms.
 *
 * Both servers run as child processes, so the client (this process) is not measured. The data is seeded
 * in-process through the real TimeseriesStore (1 point per second per key, so it spans ~12 days of store
 * windows) and compacted into chunks before the daemon starts, so no background compaction runs during the
 * measurement. A first, unmeasured download is captured to a file: it warms the daemon and gives the baseline
 * its bytes. Then ROUNDS rounds alternate baseline/outpost; the table shows medians.
 *
 * `--tuned "<node flags>"` adds a second daemon on the same data dir started with those V8 flags (e.g.
 * "--max-semi-space-size=1"), to show how much of the RssAnon growth is V8's young-generation sizing.
 *
 *   npm run bench:csv [-- --rows 1000000 --rounds 3] [-- --tuned "--max-semi-space-size=1"]
 */
import type { ChildProcess } from 'node:child_process';
import { createWriteStream, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as uws from 'uWebSockets.js';
import { hashPassword } from '../../src/auth/password.js';
import type { TsRecord } from '../../src/model/record.js';
import { kvDouble, kvLong, kvString } from '../../src/model/kv.js';
import { Dictionary } from '../../src/store/encoding/dict.js';
import { EntityStore } from '../../src/store/entities.js';
import { openStoreEnv } from '../../src/store/env.js';
import { LmdbTimeseriesStore } from '../../src/store/series/store.js';
import { median, rssAnonBytes, spawnListening } from './lib.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const SELF = fileURLToPath(import.meta.url);
const MB = 1024 * 1024;

function arg(name: string, dflt: number): number {
  const i = process.argv.indexOf(name);
  const v = i >= 0 ? Number(process.argv[i + 1]) : NaN;
  return Number.isFinite(v) && v > 0 ? v : dflt;
}

/** Baseline server: the captured CSV from a pre-built Buffer, streamed with tryEnd/onWritable. */
function serveBaseline(file: string): void {
  const body = readFileSync(file);
  const total = body.length;
  const app = uws.App().get('/*', (res) => {
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
    });
    const sendFrom = (offset: number): boolean => {
      const [ok, done] = res.tryEnd(body.subarray(offset), total);
      return ok || done;
    };
    res.cork(() => {
      res.writeStatus('200 OK').writeHeader('Content-Type', 'text/csv');
      const start = res.getWriteOffset();
      if (sendFrom(start)) return;
      res.onWritable((offset) => (aborted ? true : sendFrom(offset)));
    });
  });
  app.listen('127.0.0.1', 0, (ls) => {
    if (!ls) throw new Error('baseline: cannot listen');
    process.stdout.write(`listening on http://127.0.0.1:${uws.us_socket_local_port(ls as unknown as uws.us_socket)}\n`);
  });
}

async function seed(dataDir: string, rows: number): Promise<{ deviceId: string; startTs: number; endTs: number }> {
  const env = openStoreEnv({ dataDir, mapSizeBytes: 4 * 1024 * MB });
  const entities = new EntityStore(env);
  await entities.ensureTenant();
  await entities.createUser({
    email: 'bench@example.com',
    passwordHash: await hashPassword('bench-pw'),
    authority: 'TENANT_ADMIN',
  });
  const device = await entities.createDevice({ name: 'bench-rig' });
  const store = new LmdbTimeseriesStore(env, new Dictionary(env));
  // Ends 3 hours ago (older than the head window: compactable) and starts ~12 days ago (inside raw retention).
  const endTs = Math.floor((Date.now() - 3 * 3_600_000) / 1000) * 1000;
  const startTs = endTs - (rows - 1) * 1000;
  const BATCH = 10_000;
  for (let from = 0; from < rows; from += BATCH) {
    const batch: TsRecord[] = [];
    for (let i = from; i < Math.min(rows, from + BATCH); i++) {
      // A long, a double and a string that needs RFC 4180 quoting every tenth row.
      batch.push({
        ts: startTs + i * 1000,
        values: [
          ['depth', kvLong(i)],
          ['rop', kvDouble(i / 4)],
          ['state', kvString(i % 10 === 0 ? 'tripping, "out"' : 'drilling')],
        ],
      });
    }
    await store.write(device.id, batch);
  }
  for (;;) {
    const r = await store.compactStep(Date.now(), 500);
    if (!r.more) break;
  }
  await env.flushed();
  await env.close();
  return { deviceId: device.id, startTs, endTs };
}

interface Server {
  proc: ChildProcess;
  port: number;
}

function startChild(args: string[], nodeFlags: string[] = []): Promise<Server> {
  return spawnListening([...nodeFlags, ...args], 'server');
}

interface Download {
  rows: number;
  bytes: number;
  seconds: number;
  peakGrowth: number;
}

/** Downloads `path`, counting records; samples the server's RssAnon meanwhile. `sink` optionally keeps the bytes. */
function download(
  port: number,
  path: string,
  headers: Record<string, string>,
  pid: number,
  sink?: NodeJS.WritableStream,
): Promise<Download> {
  const before = rssAnonBytes(pid);
  let peak = before;
  const sampler = setInterval(() => {
    peak = Math.max(peak, rssAnonBytes(pid));
  }, 5);
  const t0 = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    get({ host: '127.0.0.1', port, path, headers }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`GET ${path} → ${res.statusCode}`));
      let bytes = 0;
      let newlines = 0;
      res.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
        for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, i + 1)) newlines++;
        sink?.write(chunk);
      });
      res.on('end', () => {
        clearInterval(sampler);
        peak = Math.max(peak, rssAnonBytes(pid));
        const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
        // Rows are records minus the header; quoted newlines never occur in this data set.
        resolve({ rows: newlines - 1, bytes, seconds, peakGrowth: peak - before });
      });
      res.on('error', reject);
    }).on('error', reject);
  });
}

async function main(): Promise<void> {
  const rows = arg('--rows', 1_000_000);
  const rounds = arg('--rounds', 3);
  const dir = mkdtempSync(join(tmpdir(), 'outpost-bench-csv-'));
  const children: ChildProcess[] = [];
  try {
    const t0 = Date.now();
    const { deviceId, startTs, endTs } = await seed(join(dir, 'data'), rows);
    process.stderr.write(`seeded ${rows} rows × 3 keys in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);

    const daemon = await startChild([
      MAIN,
      'serve',
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--data-dir',
      join(dir, 'data'),
    ]);
    children.push(daemon.proc);
    const login = await fetch(`http://127.0.0.1:${daemon.port}/api/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: 'bench@example.com', password: 'bench-pw' }),
    });
    const { token } = (await login.json()) as { token: string };
    const path = `/api/download/deviceSeriesData?deviceId=${deviceId}&type=ts&startValue=${startTs}&endValue=${endTs}`;
    const auth = { Authorization: `Bearer ${token}` };

    const captured = join(dir, 'captured.csv');
    const file = createWriteStream(captured);
    const cold = await download(daemon.port, path, auth, daemon.proc.pid as number, file);
    await new Promise<void>((resolve) => file.end(resolve));
    if (cold.rows !== rows) throw new Error(`expected ${rows} rows, got ${cold.rows}`);

    const baseline = await startChild([SELF, '--baseline-serve', captured]);
    children.push(baseline.proc);

    const tunedIdx = process.argv.indexOf('--tuned');
    const tunedFlags = tunedIdx >= 0 ? (process.argv[tunedIdx + 1] ?? '').split(' ').filter((f) => f !== '') : [];
    let tuned: Server | undefined;
    let tunedCold: Download | undefined;
    if (tunedFlags.length > 0) {
      tuned = await startChild(
        [MAIN, 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', join(dir, 'data')],
        tunedFlags,
      );
      children.push(tuned.proc);
      tunedCold = await download(tuned.port, path, auth, tuned.proc.pid as number);
    }

    const runs: { base: Download[]; outpost: Download[]; tuned: Download[] } = { base: [], outpost: [], tuned: [] };
    for (let r = 0; r < rounds; r++) {
      runs.base.push(await download(baseline.port, '/', {}, baseline.proc.pid as number));
      runs.outpost.push(await download(daemon.port, path, auth, daemon.proc.pid as number));
      if (tuned) runs.tuned.push(await download(tuned.port, path, auth, tuned.proc.pid as number));
    }
    for (const d of [...runs.base, ...runs.outpost, ...runs.tuned]) {
      if (d.bytes !== cold.bytes) throw new Error(`byte count differs: ${d.bytes} vs ${cold.bytes}`);
    }

    const row = (name: string, ds: Download[]): string[] => {
      const secs = median(ds.map((d) => d.seconds));
      return [
        name,
        String(rows),
        (cold.bytes / MB).toFixed(1),
        secs.toFixed(2),
        Math.round(rows / secs).toLocaleString('en-US'),
        (cold.bytes / MB / secs).toFixed(1),
        (median(ds.map((d) => d.peakGrowth)) / MB).toFixed(1),
        (Math.max(...ds.map((d) => d.peakGrowth)) / MB).toFixed(1),
      ];
    };
    const b = row('baseline: bare uWS, pre-built buffer', runs.base);
    const o = row('outpost deviceSeriesData (LMDB, streamed)', runs.outpost);
    const ratio = median(runs.base.map((d) => d.seconds)) / median(runs.outpost.map((d) => d.seconds));
    const lines = [
      '| server | rows | MB | median s | rows/s (median) | MB/s | peak RssAnon growth, median MB | max MB |',
      '|---|---|---|---|---|---|---|---|',
      `| ${b.join(' | ')} |`,
      `| ${o.join(' | ')} |`,
      ...(tuned ? [`| ${row(`outpost, node ${tunedFlags.join(' ')}`, runs.tuned).join(' | ')} |`] : []),
      `| outpost / baseline | | | | ${ratio.toFixed(2)}× | | | |`,
      '',
      `First (cold, unmeasured-in-median) outpost download: ${cold.seconds.toFixed(2)} s, RssAnon growth ${(cold.peakGrowth / MB).toFixed(1)} MB. ` +
        (tunedCold
          ? `First download with ${tunedFlags.join(' ')}: RssAnon growth ${(tunedCold.peakGrowth / MB).toFixed(1)} MB. `
          : '') +
        `${rounds} rounds; ${rows.toLocaleString('en-US')} rows × 3 keys (long, double, string with quoting every 10th row).`,
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    for (const c of children) c.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--baseline-serve') {
  serveBaseline(process.argv[3] as string);
} else {
  await main();
}
