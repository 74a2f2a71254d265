/**
 * SD-card wear benchmark: bytes the daemon writes per point and how fast it answers, per write policy, side by
 * side in one run (the write budget of store/write-budget.ts against the fixed commit delay it replaced). Each
 * row runs the real `outpost serve` (dist/src/main.js) on a fresh data dir with its config file; the devices are
 * created beforehand in the data dir.
 *
 * Rows:
 *   quiet: one device posts `--quiet-posts` readings (1,000) one at a time, each as soon as the last is
 *          answered, on an otherwise idle daemon: posts/s and p99 are what a TB SDK or a firmware loop gets.
 *   ref, big: N devices, each on its own keep-alive connection (lib.ts RawHttpConnection), post K keys every P ms
 *          at their own offsets, one post at a time (the next waits for the answer), as LAN sensors do.
 *          warm-up `--warmup` s (300: the budget's reserve is spent and it has settled), then a read (GET
 *          values/timeseries as a tenant admin) so everything logged is in LMDB; the window `--window` s (600),
 *          then the same read, which puts the rest of the window's points into LMDB, so the window's applies
 *          are counted. Bytes = /proc/<pid>/io write_bytes over the window; "of which the log" is the daemon's
 *          own count of its log pages and segment fills (GET /api/outpost/status).
 *   fresh: README's walkthrough on a fresh data dir with the daemon running (`outpost user add`, `outpost device
 *          add`, two posts, `outpost latest`, a login and one REST read), then 300 single posts at 20 Hz (an
 *          SDK's publish worker, each sent on time whether or not the last was answered) and a device posting
 *          every 2 s for 40 s: every answer's p50 / p99 and the slowest, and the reserve left at the end
 *          (docs/write-budget.md: a fresh store answers at fsync speed from its first request). Beside it, over
 *          the same window and schedule, fsync-floor.ts times the disk alone (a 4-KiB write and an fdatasync per
 *          group of due slots, in a process of its own): the floor under the daemon's answers.
 *   bulk:  5 devices × 5 keys every 5 s (light), and one more device uploading a month of history (BULK) as the
 *          window opens: the light devices' acks while it uploads and after it, and what the window wrote with it.
 *   catch-up: after the reference window, while its load goes on, one more device posts `--catchup` stored
 *          readings (2,000) one at a time: how long it takes, and what was written meanwhile.
 * The quiet rows run alone, one after another; the loaded rows' daemons run at once (`--serial`: one after
 * another), so their latencies share the machine's noise. Per-workload durations: `--ref-warmup`, `--big-window`...
 *
 * write_bytes is charged when a clean page cache folio is dirtied (kernel: folio_account_dirtied), not at
 * writeback: a page rewritten before writeback is charged once, one cleaned by an fdatasync and written again is
 * charged again. On kernels whose ext4 caches files in large folios (Linux >= 6.16) a 4-KiB write into a large
 * folio is charged the whole folio: LMDB's applies are charged several times what reaches the disk there
 * (BENCHMARKS.md); the log's segments are written a page at a time to stay in 4-KiB folios. ext4's journal
 * writes (jbd2) are not charged to the daemon.
 *
 * `--card` (root only): each daemon's data dir is a filesystem of its own, ext4 as mkfs makes it (with its journal,
 * mounted noatime as Raspberry Pi OS mounts its root) on a loop device, and the "card" figure under the table is
 * what that device was given to write over the window: the log, LMDB, the journal and the inodes, without the
 * page cache's charges (write_bytes' large folios) and without any other process's writes. It is the closest this
 * machine comes to the card itself. The daemon finds the journal there and counts it against its budget.
 *
 *   npm run bench:wear [-- --only fresh,quiet,ref,big,bulk --warmup 300 --window 600 --catchup 2000 --quiet-posts 1000
 *     --history <minutes of history per device first, default 0: a fresh store> --policy <name substrings> --serial
 *     --card [--card-mount <mount options, default noatime>]]
 */
import { type ChildProcess, execFileSync } from 'node:child_process';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { argValue, encodeRequest, RawHttpConnection, rssAnonBytes, spawnListening } from './lib.js';
import { openStoreEnv } from '../../src/store/env.js';
import { EntityStore } from '../../src/store/entities.js';
import { DeviceProfileStore } from '../../src/store/profiles.js';
import { profileDataWith, threeAlarmRules } from './alarm-rules.js';
import { hashPassword } from '../../src/auth/password.js';
import { DEFAULTS } from '../../src/config/index.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const FLOOR = fileURLToPath(new URL('./fsync-floor.js', import.meta.url));
const EMAIL = 'bench@example.com';
const PASSWORD = 'bench-password';
/**
 * minutes of history posted before the load (`--history`, 0 for a fresh store): within store.headWindowMs (2 h),
 * so no compaction runs during the window
 */
const HISTORY_MS =
  (process.argv.includes('--history') ? Number(process.argv[process.argv.indexOf('--history') + 1]) : 0) * 60_000;
/** each daemon on a loop device of its own, its bytes counted there (see the header) */
const CARD = process.argv.includes('--card');
/** the mount options of each daemon's filesystem with `--card` (`--card-mount noatime,lazytime`) */
const CARD_MOUNT = process.argv.includes('--card-mount')
  ? (process.argv[process.argv.indexOf('--card-mount') + 1] ?? 'noatime')
  : 'noatime';
/** a 32 GB consumer card rated for 16 TB written */
const CARD_TBW = 16e12;

interface Workload {
  readonly name: string;
  readonly devices: number;
  readonly keys: number;
  readonly periodMs: number;
  /** one more device uploads a month of history while the load runs (the `bulk` row) */
  readonly bulk?: boolean;
}
const WORKLOADS: readonly Workload[] = [
  { name: 'ref', devices: 50, keys: 5, periodMs: 5000 },
  { name: 'big', devices: 200, keys: 10, periodMs: 10_000 },
  // a tenth of the reference load: light devices, together well within the light share of the budget's refill
  { name: 'bulk', devices: 5, keys: 5, periodMs: 5000, bulk: true },
];

/**
 * The bulk writer of the `bulk` row: a month of 10-s readings of 2 keys (bench:downsample's upload), 1000
 * timestamps a request, 4 requests in flight, started when the window opens. The light devices' acks are
 * split into those answered while it uploads and those after: the device that wrote the bytes pays for them
 * (docs/write-budget.md), a light device keeps fsync-speed acks during and after.
 */
const BULK = { days: 30, stepMs: 10_000, perRequest: 1000, inFlight: 4 } as const;

interface Policy {
  readonly name: string;
  readonly store: Record<string, unknown>;
  /** the config's `alarms` section, where a policy sets it */
  readonly alarms?: Record<string, unknown>;
  /** the workloads it runs in by default (`--policy` selects others too) */
  readonly workloads: readonly string[];
  /** sync to an upstream that answers 200 at once (a sink in this process) */
  readonly sync?: boolean;
  /** in the default run (the write budget against the fixed delay it replaces) */
  readonly byDefault?: boolean;
  /** every device on a profile of three alarm rules (alarm-rules.ts): crossed now and then, or never */
  readonly rules?: 'crossed' | 'never';
}
const POLICIES: readonly Policy[] = [
  {
    name: 'write budget 1.5 GB/day (default)',
    store: {},
    workloads: ['fresh', 'quiet', 'ref', 'big', 'bulk'],
    byDefault: true,
  },
  {
    name: 'fixed commitDelayMs 250 (before)',
    store: { commitDelayMs: 250 },
    workloads: ['quiet', 'ref', 'big'],
    byDefault: true,
  },
  { name: 'fixed commitDelayMs 0', store: { commitDelayMs: 0 }, workloads: ['quiet'], byDefault: true },
  { name: 'no log, commitDelayMs 0', store: { wal: false, commitDelayMs: 0 }, workloads: ['ref', 'big'] },
  { name: 'no log, commitDelayMs 250', store: { wal: false, commitDelayMs: 250 }, workloads: ['ref'] },
  { name: 'log, commitDelayMs 400', store: { commitDelayMs: 400 }, workloads: ['ref'] },
  { name: 'no log, 0 + sync', store: { wal: false, commitDelayMs: 0 }, workloads: ['ref'], sync: true },
  { name: 'budget + sync', store: {}, workloads: ['ref'], sync: true },
  // `--policy default,alarm`: the default beside it in the same run, the ratio of their bytes per day
  { name: 'budget + 3 alarm rules, never met', store: {}, workloads: ['ref'], rules: 'never' },
  { name: 'budget + 3 alarm rules, an alarm storm', store: {}, workloads: ['ref'], rules: 'crossed' },
  {
    name: 'budget + 3 alarm rules, an alarm storm, progress gathered 5 s',
    store: {},
    alarms: { progressFlushMs: 5000 },
    workloads: ['ref'],
    rules: 'crossed',
  },
];

/**
 * The reference load's readings are sin(n/10 + k)·100. The storm: k0 goes over 90 (and back under 50) once a period
 * of ~63 posts (5 min), k2 under -90 likewise, k1 over 95 for ~30 s, never the minute its rule needs: every device
 * raises and clears two alarms every 5 minutes (1,200 alarm changes an hour), and its DURATION and REPEATING
 * progress moves as often. Never met: the same rules beyond the readings' range, bench:ingest's case.
 */
const WEAR_ALARMS = {
  crossed: threeAlarmRules({
    high: { key: 'k0', over: 90, clearBelow: 50 },
    held: { key: 'k1', over: 95, minutes: 1, clearBelow: 50 },
    low: { key: 'k2', under: -90, times: 3, clearAbove: -50 },
  }),
  never: threeAlarmRules({
    high: { key: 'k0', over: 1000, clearBelow: 500 },
    held: { key: 'k1', over: 1000, minutes: 1, clearBelow: 500 },
    low: { key: 'k2', under: -1000, times: 3, clearAbove: -500 },
  }),
};

function writeBytes(pid: number): number {
  const m = /^write_bytes:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'));
  if (!m) throw new Error('write_bytes not found in /proc/<pid>/io');
  return Number(m[1]);
}

/**
 * write_bytes of `pid`'s main thread (LMDB's synchronous transactions: the log's applies; the log's segment
 * fills) and of its other live threads (the log's appends and fdatasyncs on libuv's pool, lmdb-js' own commits)
 */
function threadWriteBytes(pid: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const m = /^write_bytes:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/task/${tid}/io`, 'utf8'));
      const name = Number(tid) === pid ? 'main thread' : 'other threads';
      if (m) out.set(name, (out.get(name) ?? 0) + Number(m[1]));
    } catch {
      // the thread ended meanwhile
    }
  }
  return out;
}

/**
 * sectors (512 B) written to the data dir's block device, all processes' (the machine is shared: only a quiet
 * moment says what the daemon's writes cost the device); undefined where it is not found
 */
function deviceSectorsWritten(): number | undefined {
  try {
    const dev = /^\/dev\/(\S+) \/ /m.exec(readFileSync('/proc/mounts', 'utf8'))?.[1];
    if (dev === undefined) return undefined;
    const f = readFileSync(`/sys/block/${dev}/stat`, 'utf8').trim().split(/\s+/);
    return Number(f[6]);
  } catch {
    return undefined;
  }
}

/** A filesystem of its own for a daemon's data dir (`--card`): an ext4 image on a loop device, mounted at `dir`. */
interface Card {
  readonly dir: string;
  /** bytes the loop device has been given to write since it was set up */
  written(): number;
  remove(): void;
}

function makeCard(base: string): Card {
  const image = join(base, 'card.img');
  const dir = join(base, 'mnt');
  mkdirSync(dir);
  execFileSync('truncate', ['-s', '4G', image]);
  // the inode tables and the journal initialized now: left lazy, the kernel zeroes them over the first minutes
  // after mount, on the device being measured
  execFileSync('mkfs.ext4', ['-q', '-F', '-E', 'lazy_itable_init=0,lazy_journal_init=0', image]);
  const loop = execFileSync('losetup', ['--find', '--show', image], { encoding: 'utf8' }).trim();
  execFileSync('mount', ['-o', CARD_MOUNT, loop, dir]);
  const stat = `/sys/block/${loop.replace('/dev/', '')}/stat`;
  return {
    dir,
    written: () => Number(readFileSync(stat, 'utf8').trim().split(/\s+/)[6]) * 512,
    remove: () => {
      // lazily: this process may still map the store it provisioned (lmdb-js keeps an environment it opened);
      // the device is released when the last user goes
      execFileSync('umount', ['-l', dir]);
      execFileSync('losetup', ['-d', loop]);
    },
  };
}

function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
}

/** Creates the tenant, the devices (token `dev<i>`) and a tenant admin in `dataDir`; returns the device ids. */
async function provision(
  dataDir: string,
  devices: number,
  upstream: boolean,
  rules?: 'crossed' | 'never',
): Promise<string[]> {
  const env = openStoreEnv({ dataDir, mapSizeBytes: DEFAULTS.store.mapSizeBytes });
  try {
    const entities = new EntityStore(env);
    await entities.ensureTenant();
    const ids: string[] = [];
    for (let i = 0; i < devices; i++) ids.push((await entities.createDevice({ name: `dev${i}`, token: `dev${i}` })).id);
    if (rules !== undefined) {
      const profile = await new DeviceProfileStore(entities, env).save({
        name: 'bench-rules',
        profileData: profileDataWith(WEAR_ALARMS[rules]),
      });
      for (const id of ids) await entities.updateNamed('DEVICE', id, { deviceProfileId: profile.id });
    }
    // the upstream token of each device, as `outpost device upstream` stores it
    if (upstream)
      for (const [i, id] of ids.entries()) await env.outbox.put(['t', id], { token: `up${i}`, provisioned: false });
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
    req.on('data', (c: string) => {
      body += c;
    });
    req.on('end', () => {
      points += (body.match(/"k\d+":/g) ?? []).length;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    points: () => points,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

interface Result {
  /** bytes written over the window (with its applies) */
  bytes: number;
  /** of which the log's commits (the daemon's own count, /api/outpost/status) */
  logBytes: number;
  /** what the write budget counted meanwhile (GET /api/outpost/status sinceStartBytes) */
  countedBytes: number;
  points: number;
  posts: number;
  p50: number;
  p99: number;
  rssMb: number;
  windowS: number;
  failed: number;
  upstreamPoints: number | undefined;
  /** the write budget's state at the end of the window (GET /api/outpost/status) */
  delayMs: number | undefined;
  reserveLeftMb: number | undefined;
  catchup: { posts: number; seconds: number; bytes: number; p99: number } | undefined;
  /** the slowest answer (the fresh row), ms */
  maxMs?: number;
  /** the disk alone beside the fresh row: one 4-KiB write and fdatasync per slot of its schedule (fsync-floor.ts), ms */
  disk?: { p50: number; p99: number; max: number };
  /** the most the daemon's event loop ran late over the last minute (the fresh row), ms */
  loopLateMs?: number;
  /** the budget's commit delay every 5 s over the window, ms, sorted */
  delays: number[];
  /** the window's write_bytes by thread (threadWriteBytes), and what the block device wrote meanwhile (all processes) */
  byThread: Map<string, number>;
  deviceBytes: number;
  /** what the daemon's own loop device was given to write over the window (`--card`), else NaN */
  cardBytes: number;
  /** the `bulk` row: the upload, and the light devices' acks while it ran and after it */
  bulk?: { points: number; seconds: number; during: number[]; after: number[] };
}

interface RunOptions {
  readonly warmupS: number;
  readonly windowS: number;
  /** posts of one more device, one at a time, after the window while the load goes on; 0: none */
  readonly catchup: number;
}

/** A quiet gateway: one device posting `posts` readings one at a time as fast as it is answered. */
const QUIET: Workload = { name: 'quiet', devices: 1, keys: 5, periodMs: 0 };
/** README's walkthrough on a fresh data dir, then a burst of single posts and a quiet device (see the header) */
const FRESH: Workload = { name: 'fresh', devices: 1, keys: 2, periodMs: -1 };

const execFileAsync = promisify(execFile);

/** The fresh row: everything README's walkthrough does, through the running daemon, then the load. */
async function runFresh(): Promise<Result> {
  const base = mkdtempSync(join(tmpdir(), 'outpost-wear-'));
  const card = CARD ? makeCard(base) : undefined;
  const dataDir = card?.dir ?? base;
  let proc: ChildProcess | undefined;
  const conns: RawHttpConnection[] = [];
  try {
    const started = await spawnListening(
      [MAIN, 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', dataDir],
      'outpost',
    );
    proc = started.proc;
    const pid = started.proc.pid as number;
    const port = started.port;
    const outpost = (...args: string[]): Promise<{ stdout: string }> =>
      execFileAsync(process.execPath, [MAIN, ...args, '--data-dir', dataDir]);
    await outpost('user', 'add', '--email', EMAIL, '--password', PASSWORD, '--authority', 'TENANT_ADMIN');
    const device = JSON.parse(
      (await outpost('device', 'add', '--name', 'thermo-1', '--token', 'THERMO_TOKEN')).stdout,
    ) as { id: string };
    const admin = await RawHttpConnection.open(port);
    conns.push(admin);
    const json = { 'content-type': 'application/json' };
    const post = async (conn: RawHttpConnection, n: number): Promise<number> => {
      const t0 = performance.now();
      const body = JSON.stringify({ temperature: 20 + (n % 10) / 10, humidity: 40 + (n % 7) });
      const r = await conn.request(encodeRequest('POST', '/api/v1/THERMO_TOKEN/telemetry', body, json));
      if (r.status !== 200) throw new Error(`post ${n}: ${r.status} ${r.body.toString()}`);
      return performance.now() - t0;
    };
    await post(admin, 0);
    await post(admin, 1);
    await outpost('latest', 'thermo-1');
    const login = await admin.request(
      encodeRequest('POST', '/api/auth/login', JSON.stringify({ username: EMAIL, password: PASSWORD }), json),
    );
    const auth = { 'x-authorization': `Bearer ${(JSON.parse(login.body.toString()) as { token: string }).token}` };
    const readPath = `/api/plugins/telemetry/DEVICE/${device.id}/values/timeseries?keys=temperature,humidity`;
    const read = await admin.request(encodeRequest('GET', readPath, '', auth));
    if (read.status !== 200) throw new Error(`read: ${read.status}`);
    const b0 = writeBytes(pid);
    const card0 = card?.written() ?? NaN;
    const t0 = performance.now();
    // posts sent on time, each on a connection of its own while the last is unanswered (an SDK's worker pool)
    const idle: RawHttpConnection[] = [];
    const timed = async (n: number): Promise<number> => {
      // uWS closes a keep-alive connection idle for 10 s: one found closed is replaced (its post sent again)
      for (;;) {
        const conn = idle.pop() ?? (await RawHttpConnection.open(port));
        if (!conns.includes(conn)) conns.push(conn);
        let ms: number;
        try {
          ms = await post(conn, n);
        } catch (err) {
          if (String(err).includes('connection closed')) continue;
          throw err;
        }
        idle.push(conn);
        return ms;
      }
    };
    const paced = async (count: number, everyMs: number): Promise<number[]> => {
      const answers: Promise<number>[] = [];
      const start = performance.now();
      for (let n = 0; n < count; n++) {
        const wait = start + n * everyMs - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        answers.push(timed(n));
      }
      return Promise.all(answers);
    };
    // the disk alone over the same window and schedule, in a process of its own (fsync-floor.ts)
    const floor = execFileAsync(process.execPath, [FLOOR, join(dataDir, 'fsync-floor'), '300x50,20x2000']);
    const lat = [...(await paced(300, 50)), ...(await paced(20, 2000))].sort((a, b) => a - b);
    const disk = JSON.parse((await floor).stdout) as { p50: number; p99: number; max: number };
    const windowS = (performance.now() - t0) / 1000;
    const bytes = writeBytes(pid) - b0;
    const cardBytes = (card?.written() ?? NaN) - card0;
    // a connection of its own: the admin's was idle longer than uWS keeps one open
    const statusConn = await RawHttpConnection.open(port);
    conns.push(statusConn);
    const st = JSON.parse(
      (await statusConn.request(encodeRequest('GET', '/api/outpost/status', '', auth))).body.toString(),
    ) as {
      writes: { commitDelayMs: number; reserveLeftBytes: number; logSinceStartBytes: number; sinceStartBytes: number };
      eventLoop: { maxMs: number };
    };
    return {
      bytes,
      logBytes: NaN,
      countedBytes: st.writes.sinceStartBytes,
      points: lat.length * FRESH.keys,
      posts: lat.length,
      p50: quantile(lat, 0.5),
      p99: quantile(lat, 0.99),
      maxMs: lat[lat.length - 1] as number,
      disk,
      loopLateMs: st.eventLoop.maxMs,
      rssMb: rssAnonBytes(pid) / 2 ** 20,
      windowS,
      failed: 0,
      upstreamPoints: undefined,
      delayMs: st.writes.commitDelayMs,
      reserveLeftMb: st.writes.reserveLeftBytes / 1e6,
      catchup: undefined,
      delays: [],
      byThread: new Map(),
      deviceBytes: NaN,
      cardBytes,
    };
  } finally {
    for (const c of conns) c.close();
    const p = proc;
    if (p !== undefined && p.exitCode === null)
      await new Promise<void>((resolve) => {
        p.once('exit', () => resolve());
        p.kill('SIGTERM');
      });
    card?.remove();
    rmSync(base, { recursive: true, force: true });
  }
}

async function run(policy: Policy, w: Workload, o: RunOptions): Promise<Result> {
  const base = mkdtempSync(join(tmpdir(), 'outpost-wear-'));
  const card = CARD ? makeCard(base) : undefined;
  const dataDir = card?.dir ?? base;
  /** [0]: the admin's; [i + 1]: device i's; [devices + 1]: the catch-up device's */
  const conns: Array<RawHttpConnection | undefined> = [];
  let proc: ChildProcess | undefined;
  const sink = policy.sync === true ? await startSink() : undefined;
  try {
    const ids = await provision(dataDir, w.devices + 1, sink !== undefined, policy.rules);
    const configFile = join(dataDir, 'config.json');
    writeFileSync(
      configFile,
      JSON.stringify({
        store: policy.store,
        ...(policy.alarms === undefined ? {} : { alarms: policy.alarms }),
        ...(sink === undefined ? {} : { sync: { url: sink.url } }),
      }),
    );
    const started = await spawnListening(
      [MAIN, 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', dataDir, '--config', configFile],
      'outpost',
    );
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
    const login = await request(
      0,
      encodeRequest('POST', '/api/auth/login', JSON.stringify({ username: EMAIL, password: PASSWORD }), {
        'content-type': 'application/json',
      }),
    );
    const jwt = (JSON.parse(login.body.toString()) as { token: string }).token;
    const auth = { 'x-authorization': `Bearer ${jwt}` };
    // a read of one device's latest values: the store puts everything logged into LMDB first
    const read = async (): Promise<void> => {
      const r = await request(
        0,
        encodeRequest('GET', `/api/plugins/telemetry/DEVICE/${ids[0] as string}/values/timeseries`, '', auth),
      );
      if (r.status !== 200) throw new Error(`read: ${r.status} ${r.body.toString()}`);
    };
    const budgetState = async (): Promise<
      { delayMs: number; reserveLeftMb: number; logBytes: number; countedBytes: number } | undefined
    > => {
      // its own connection: the window's sampler asks while the load's reads use the admin's
      const r = await request(w.devices + 2, encodeRequest('GET', '/api/outpost/status', '', auth));
      const st = JSON.parse(r.body.toString()) as {
        writes?: {
          commitDelayMs: number;
          reserveLeftBytes: number;
          logSinceStartBytes: number;
          sinceStartBytes: number;
        };
      };
      return st.writes === undefined
        ? undefined
        : {
            delayMs: st.writes.commitDelayMs,
            reserveLeftMb: st.writes.reserveLeftBytes / 1e6,
            logBytes: st.writes.logSinceStartBytes,
            countedBytes: st.writes.sinceStartBytes,
          };
    };
    const post = async (i: number, n: number, ts: number): Promise<number> => {
      const values: Record<string, number> = {};
      for (let k = 0; k < w.keys; k++) values[`k${k}`] = Math.round(Math.sin(n / 10 + k) * 1000) / 10;
      const r = await request(
        i + 1,
        encodeRequest('POST', `/api/v1/dev${i}/telemetry`, JSON.stringify({ ts, values }), {
          'content-type': 'application/json',
        }),
      );
      return r.status;
    };

    let measuring = false;
    let stop = false;
    const lat: number[] = [];
    let points = 0;
    let posts = 0;
    let failed = 0;
    let rssMax = 0;
    const bulk: Result['bulk'] = w.bulk === true ? { points: 0, seconds: 0, during: [], after: [] } : undefined;
    // the month's upload by device `w.devices` (the catch-up device's token), on connections of its own
    const upload = async (): Promise<void> => {
      if (bulk === undefined) return;
      const t0 = performance.now();
      const end = Date.now() - 3_600_000;
      const start = end - BULK.days * 86_400_000;
      let next = start;
      const sender = async (slot: number): Promise<void> => {
        while (next < end) {
          const from = next;
          next += BULK.perRequest * BULK.stepMs;
          const records: string[] = [];
          for (let ts = from; ts < Math.min(from + BULK.perRequest * BULK.stepMs, end); ts += BULK.stepMs)
            records.push(`{"ts":${ts},"values":{"a":${(ts / 1e7) % 100},"b":${Math.round(Math.sin(ts / 1e6) * 100)}}}`);
          const r = await request(
            w.devices + 3 + slot,
            encodeRequest('POST', `/api/v1/dev${w.devices}/telemetry`, `[${records.join(',')}]`, {
              'content-type': 'application/json',
            }),
          );
          if (r.status !== 200) throw new Error(`bulk upload: ${r.status} ${r.body.toString()}`);
          bulk.points += records.length * 2;
        }
      };
      await Promise.all(Array.from({ length: BULK.inFlight }, (_, slot) => sender(slot)));
      bulk.seconds = (performance.now() - t0) / 1000;
    };
    const device = async (i: number): Promise<void> => {
      const t0 = performance.now() + (i * w.periodMs) / w.devices;
      for (let n = 0; !stop; n++) {
        const due = t0 + n * w.periodMs;
        const wait = due - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        if (stop) return;
        const sent = performance.now();
        if ((await post(i, n, Date.now())) !== 200) failed++;
        if (measuring) {
          const ms = performance.now() - sent;
          lat.push(ms);
          if (bulk !== undefined) (bulk.seconds === 0 ? bulk.during : bulk.after).push(ms);
          points += w.keys;
          posts++;
        }
      }
    };
    // One device posting `count` stored readings one at a time (a catch-up after an outage: past timestamps).
    const catchUp = async (i: number, count: number): Promise<{ seconds: number; p50: number; p99: number }> => {
      const cl: number[] = [];
      const t0 = performance.now();
      const base = Date.now() - count * 1000;
      for (let n = 0; n < count; n++) {
        const sent = performance.now();
        if ((await post(i, n, base + n * 1000)) !== 200) failed++;
        cl.push(performance.now() - sent);
      }
      cl.sort((a, b) => a - b);
      return { seconds: (performance.now() - t0) / 1000, p50: quantile(cl, 0.5), p99: quantile(cl, 0.99) };
    };
    // History first: each device's last HISTORY_MS in one post, so the head holds what it holds in steady state
    // (a fresh store's small B-trees would make every commit look cheaper than on a gateway running for days).
    if (HISTORY_MS > 0 && w.periodMs > 0)
      await Promise.all(
        Array.from({ length: w.devices }, async (_, i) => {
          const now = Date.now();
          const records: string[] = [];
          for (let ts = now - HISTORY_MS; ts < now - w.periodMs; ts += w.periodMs) {
            const values: string[] = [];
            for (let k = 0; k < w.keys; k++) values.push(`"k${k}":${Math.round(Math.sin(ts / 1e5 + k) * 1000) / 10}`);
            records.push(`{"ts":${ts},"values":{${values.join(',')}}}`);
          }
          const r = await request(
            i + 1,
            encodeRequest('POST', `/api/v1/dev${i}/telemetry`, `[${records.join(',')}]`, {
              'content-type': 'application/json',
            }),
          );
          if (r.status !== 200) throw new Error(`history of dev${i}: ${r.status}`);
        }),
      );
    if (sink !== undefined && HISTORY_MS > 0) {
      // steady state: the history is sent before the window (its drain is not what a day of posts costs)
      const historyPoints = w.devices * w.keys * Math.ceil((HISTORY_MS - w.periodMs) / w.periodMs);
      while (sink.points() < historyPoints) await new Promise((r) => setTimeout(r, 250));
    }
    const sampler = setInterval(() => {
      rssMax = Math.max(rssMax, rssAnonBytes(pid));
    }, 250);
    try {
      if (w.periodMs === 0) {
        // the quiet gateway: the whole run is the one device's catch-up
        const b0 = writeBytes(pid);
        const c = await catchUp(0, o.catchup);
        await read();
        const bytes = writeBytes(pid) - b0;
        const state = await budgetState();
        return {
          bytes,
          logBytes: NaN,
          countedBytes: NaN,
          points: o.catchup * w.keys,
          posts: o.catchup,
          p50: c.p50,
          p99: c.p99,
          rssMb: rssMax / 2 ** 20,
          windowS: c.seconds,
          failed,
          upstreamPoints: sink?.points(),
          delayMs: state?.delayMs,
          reserveLeftMb: state?.reserveLeftMb,
          catchup: undefined,
          delays: [],
          byThread: new Map(),
          deviceBytes: NaN,
          cardBytes: NaN,
        };
      }
      const load = Promise.all(Array.from({ length: w.devices }, (_, i) => device(i)));
      await new Promise((r) => setTimeout(r, Math.max(o.warmupS * 1000, w.periodMs)));
      await read();
      measuring = true;
      const state0 = await budgetState();
      const log0 = state0?.logBytes ?? NaN;
      const counted0 = state0?.countedBytes ?? NaN;
      const b0 = writeBytes(pid);
      const threads0 = threadWriteBytes(pid);
      const delays: number[] = [];
      const delaySampler = setInterval(() => {
        budgetState().then(
          (st) => {
            if (st !== undefined && measuring) delays.push(st.delayMs);
          },
          () => undefined,
        );
      }, 5000);
      const dev0 = deviceSectorsWritten() ?? NaN;
      const card0 = card?.written() ?? NaN;
      const t0 = performance.now();
      const uploaded = upload();
      await new Promise((r) => setTimeout(r, o.windowS * 1000));
      await uploaded;
      measuring = false;
      clearInterval(delaySampler);
      delays.sort((a, b) => a - b);
      await read();
      const bytes = writeBytes(pid) - b0;
      const deviceBytes = ((deviceSectorsWritten() ?? NaN) - dev0) * 512;
      const cardBytes = (card?.written() ?? NaN) - card0;
      const byThread = new Map<string, number>();
      for (const [name, b] of threadWriteBytes(pid)) byThread.set(name, b - (threads0.get(name) ?? 0));
      const windowS = (performance.now() - t0) / 1000;
      const state = await budgetState();
      const logBytes = (state?.logBytes ?? NaN) - log0;
      const countedBytes = (state?.countedBytes ?? NaN) - counted0;
      let catchup: Result['catchup'];
      if (o.catchup > 0) {
        const c0 = writeBytes(pid);
        const c = await catchUp(w.devices, o.catchup);
        await read();
        catchup = { posts: o.catchup, seconds: c.seconds, bytes: writeBytes(pid) - c0, p99: c.p99 };
      }
      stop = true;
      await load;
      lat.sort((a, b) => a - b);
      return {
        bytes,
        logBytes,
        countedBytes,
        points,
        posts,
        p50: quantile(lat, 0.5),
        p99: quantile(lat, 0.99),
        rssMb: rssMax / 2 ** 20,
        windowS,
        failed,
        upstreamPoints: sink?.points(),
        delayMs: state?.delayMs,
        reserveLeftMb: state?.reserveLeftMb,
        catchup,
        delays,
        byThread,
        deviceBytes,
        cardBytes,
        ...(bulk === undefined ? {} : { bulk }),
      };
    } finally {
      stop = true;
      clearInterval(sampler);
    }
  } finally {
    await sink?.close();
    for (const c of conns) c?.close();
    const p = proc;
    if (p !== undefined && p.exitCode === null)
      await new Promise<void>((resolve) => {
        p.once('exit', () => resolve());
        p.kill('SIGTERM');
      });
    card?.remove();
    rmSync(base, { recursive: true, force: true });
  }
}

const f = (x: number, d = 0): string =>
  Number.isNaN(x) ? '–' : x.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });

/** bytes per point by writing thread, and the block device's (every process's) over the same window */
function split(p: Policy, w: Workload, r: Result): string {
  const parts = [...r.byThread].filter(([, b]) => b > 0).map(([name, b]) => `${name} ${f(b / r.points)}`);
  return `${w.name}, ${p.name}: B/point by thread: ${parts.join(', ')}; counted by the budget ${f(r.countedBytes / r.points)}; process ${f(r.bytes / r.points)}, log ${f(r.logBytes / r.points)}; device (all processes) ${f(r.deviceBytes / r.points)}${Number.isNaN(r.cardBytes) ? '' : `; card (its own loop device, ext4 with its journal, ${CARD_MOUNT}) ${f(r.cardBytes / r.points)} = ${f(((r.cardBytes / r.points) * ((w.devices * w.keys * 86_400_000) / w.periodMs)) / 1e9, 2)} GB/day`}${r.delays.length === 0 ? '' : `; commit delay every 5 s: min ${f(r.delays[0] as number)}, median ${f(quantile(r.delays, 0.5))}, max ${f(r.delays[r.delays.length - 1] as number)} ms`}`;
}

function row(p: Policy, w: Workload, r: Result): string {
  const perPoint = r.bytes / r.points;
  // the quiet device posts as fast as it is answered, for a few seconds: no rate per day to speak of
  const perDay = w.periodMs <= 0 ? NaN : (perPoint * w.devices * w.keys * 86_400_000) / w.periodMs;
  const workload =
    w.periodMs === 0
      ? `quiet: 1 device, ${f(r.posts)} posts one at a time`
      : w.periodMs < 0
        ? `fresh: README's flow, then 300 posts at 20 Hz and 20 every 2 s (slowest ${f(r.maxMs ?? NaN, 1)} ms; the disk alone beside it, a 4-KiB write and fdatasync on the same schedule: p50 / p99 ${f(r.disk?.p50 ?? NaN, 1)} / ${f(r.disk?.p99 ?? NaN, 1)} ms, slowest ${f(r.disk?.max ?? NaN, 1)} ms; the daemon's event loop late by up to ${f(r.loopLateMs ?? NaN, 1)} ms over the last minute)`
        : `${w.devices}×${w.keys} / ${w.periodMs / 1000} s${w.bulk === true ? ' + a month uploaded (bytes, per day: with the bulk)' : ''}`;
  const state = r.delayMs === undefined ? '–' : `${f(r.delayMs)} ms, ${f(r.reserveLeftMb ?? 0, 1)} MB left`;
  const c = r.catchup;
  const b = r.bulk;
  const acks = (xs: number[]): string => {
    if (xs.length === 0) return 'no acks';
    const sorted = [...xs].sort((x, y) => x - y);
    return `${f(xs.length)} acks p50 / p99 ${f(quantile(sorted, 0.5), 1)} / ${f(quantile(sorted, 0.99), 1)} ms`;
  };
  const catchup =
    b !== undefined
      ? `bulk beside: ${f(b.points)} points in ${f(b.seconds, 1)} s; the light devices while it ran ${acks(b.during)}, after it ${acks(b.after)}`
      : c === undefined
        ? ''
        : `${f(c.posts)} posts in ${f(c.seconds, 1)} s (p99 ${f(c.p99)} ms), ${f(c.bytes / 1e6, 2)} MB written meanwhile (the load's share at its window rate: ${f(((r.bytes / r.windowS) * c.seconds) / 1e6, 2)} MB)`;
  return `| ${workload} | ${p.name} | ${f(r.posts / r.windowS, 1)} | ${f(r.p50, 1)} / ${f(r.p99, 1)} ms | ${f(perPoint)} (${f(r.logBytes / r.points)} log) | ${f(perDay / 1e9, 2)} GB | ${f(CARD_TBW / perDay / 365.25, 1)} y | ${state} | ${f(r.rssMb, 1)} MB | ${catchup}${r.failed > 0 ? ` ${r.failed} failed` : ''}${r.upstreamPoints === undefined ? '' : ` ${f(r.upstreamPoints)} points upstream`} |`;
}

async function main(): Promise<void> {
  const opts = (name: string): RunOptions => ({
    warmupS: argValue(`--${name}-warmup`, argValue('--warmup', 300)),
    windowS: argValue(`--${name}-window`, argValue('--window', 600)),
    catchup:
      name === 'big' || name === 'bulk'
        ? 0
        : name === 'quiet'
          ? argValue('--quiet-posts', 1000)
          : argValue('--catchup', 2000),
  });
  const onlyIdx = process.argv.indexOf('--only');
  const only = onlyIdx >= 0 ? (process.argv[onlyIdx + 1] ?? '').split(',') : ['fresh', 'quiet', 'ref', 'big'];
  const policyIdx = process.argv.indexOf('--policy');
  const policyFilter = policyIdx >= 0 ? (process.argv[policyIdx + 1] ?? '').split(',') : undefined;
  const chosen = (w: Workload): Policy[] =>
    POLICIES.filter(
      (p) =>
        p.workloads.includes(w.name) &&
        (policyFilter === undefined ? p.byDefault === true : policyFilter.some((x) => p.name.includes(x))),
    );
  const rows: string[] = [];
  const splits: string[] = [];
  const emit = (line: string): void => {
    rows.push(line);
    console.error(line);
  };
  const perDayOf = new Map<Policy, number>();
  const emitRow = (p: Policy, w: Workload, r: Result): void => {
    if (w.name === 'ref') perDayOf.set(p, (r.bytes / r.windowS) * 86_400);
    emit(row(p, w, r));
    if (w.periodMs > 0) splits.push(split(p, w, r));
  };
  // The quiet rows alone and one after another (their latency is the point); the loaded rows side by side, each
  // workload's daemons at once (`--serial`: one after another), the catch-up after each reference window.
  if (only.includes('fresh')) for (const p of chosen(FRESH)) emitRow(p, FRESH, await runFresh());
  if (only.includes('quiet')) for (const p of chosen(QUIET)) emitRow(p, QUIET, await run(p, QUIET, opts('quiet')));
  const loads = WORKLOADS.filter((w) => only.includes(w.name)).flatMap((w) => chosen(w).map((p) => ({ p, w })));
  if (process.argv.includes('--serial')) {
    for (const { p, w } of loads) emitRow(p, w, await run(p, w, opts(w.name)));
  } else {
    await Promise.all(loads.map(async ({ p, w }) => emitRow(p, w, await run(p, w, opts(w.name)))));
  }
  console.log(
    `\nwear: ${HISTORY_MS / 60_000} min of history per device before the load; each row its own daemon and fresh data dir; bytes from the daemon's write_bytes, the window's applies included`,
  );
  console.log(
    "| workload | policy | posts/s | ack p50 / p99 | bytes/point (of which the log) | per day | 32 GB card (16 TBW) life | budget at the window's end: delay, reserve | RssAnon max | catch-up while the load runs |",
  );
  console.log('|---|---|---|---|---|---|---|---|---|---|');
  for (const r of rows) console.log(r);
  if (splits.length > 0) console.log(`\n${splits.join('\n')}`);
  const plain = [...perDayOf].find(([p]) => p.byDefault === true && p.name.includes('budget'))?.[1];
  for (const [p, perDay] of perDayOf)
    if (p.rules !== undefined && plain !== undefined)
      console.log(`reference load, ${p.name} ÷ without rules, bytes per day: ${(perDay / plain).toFixed(3)}×`);
}

await main();
