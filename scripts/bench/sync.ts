/**
 * Upstream sync benchmark (docs/sync.md). Loopback only, bounded in count and time; real daemons in child processes.
 *
 *   - drain: a backlog of 1 M points (100 devices × 10 keys × 1000 timestamps, posted while the upstream is
 *     unreachable) drained unpaced into a second Outpost (provisioning every device), points/s from the
 *     gateway's start to an empty backlog;
 *   - ingest single-point p99 (one device posting one point at a time, sequentially, from a process of its own)
 *     while that drain runs, against the same probe on a copy of the same data dir with sync off, in rounds
 *     (`--rounds`, default 3): each round drains a copy of the backlog with the sync thread, with
 *     sync.encoderThread false, and into a bare sink (sink.ts, a server elsewhere), then probes with sync off and
 *     with idle-priority busy loops on every core (the floor: what keeping the cores busy costs by itself here);
 *     the table gives the median of the rounds' ratios, and the gateway's CPU time during the drain;
 *   - bytes written per point (/proc/<pid>/io write_bytes) with sync on (upstream reachable, live) ÷ off:
 *     20 devices × 10 keys posting one record at a time, 4 requests in flight, fresh data dirs;
 *   - RssAnon of the gateway with the 1 M backlog pending (link down) − with none (after a drain), both
 *     measured 3 s after a restart.
 *
 * The receiving Outpost stands in for a server elsewhere, so it takes only the CPU the gateway leaves idle:
 * SCHED_IDLE for all its threads (chrt), or `--upstream-nice N` for a nice value instead. `--upstream-dir DIR` puts
 * its data dir elsewhere (a tmpfs: its disk writes out of the gateway's way too); `--no-bytes` skips the
 * bytes-per-point phase (quick runs). `SYNC_BENCH_PROF=dir` writes CPU profiles of the draining gateway.
 *
 *   npm run build && npm run bench:sync [-- --devices 100 --timestamps 1000 --rounds 3 --commit-delay 0]
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { ChildProcess } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import {
  BACKLOG_KEYS,
  background as backgroundAt,
  backlogBodies,
  createDevices,
  drainWithProbe,
  intArg,
  load,
  loginJwt,
  loopDelay,
  median,
  offAndFloor,
  p99,
  peakRssBytes,
  rssAnonBytes,
  settle,
  serveDaemon,
  spawnListening,
  stopDaemon as stop,
  syncStatus,
} from './lib.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const SINK = fileURLToPath(new URL('./sink.js', import.meta.url));
/**
 * store.commitDelayMs of every daemon here (`--commit-delay`, default 0, the low-latency setting): the probe and
 * the bytes-per-point phase post one request after another, so the default's 250 ms would be most of what they
 * measure, and the bench would run for half an hour
 */
const COMMIT_DELAY_MS = process.argv.includes('--commit-delay')
  ? Number(process.argv[process.argv.indexOf('--commit-delay') + 1])
  : 0;
const UPSTREAM_NICE = process.argv.includes('--upstream-nice')
  ? Number(process.argv[process.argv.indexOf('--upstream-nice') + 1])
  : 15;
const KEYS = BACKLOG_KEYS;
/**
 * The backlog's first timestamp: 40 minutes ago, points 1 s apart, so it lies in the head (no compaction runs
 * during the measurements; an outage longer than store.headWindowMs is read back from chunks instead).
 */
const BASE = Date.now() - 40 * 60_000;
const STEP_MS = 1000;

interface Daemon {
  proc: ChildProcess;
  port: number;
}

function writeBytes(pid: number): number {
  const m = /write_bytes:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/io`, 'utf8'));
  return Number(m?.[1] ?? 0);
}

function cliRun(args: string[]): string {
  return execFileSync(process.execPath, [MAIN, ...args], { encoding: 'utf8' });
}

async function serve(dir: string, config: object, nodeArgs: string[] = []): Promise<Daemon> {
  const file = join(dir, 'config.json');
  writeFileSync(file, JSON.stringify({ logLevel: 'info', store: { commitDelayMs: COMMIT_DELAY_MS }, ...config }));
  return serveDaemon(MAIN, dir, file, nodeArgs);
}

/** The receiving Outpost at SCHED_IDLE, or `--upstream-nice N` (lib.ts background). */
const background = (pid: number): string =>
  backgroundAt(pid, process.argv.includes('--upstream-nice') ? UPSTREAM_NICE : undefined);

interface Drain {
  s: number;
  lat: number[];
  loop: string;
  hwm: number;
  cpu: { main: number; all: number };
}

async function main(): Promise<void> {
  const devices = intArg(process.argv, 'devices', 100);
  const timestamps = intArg(process.argv, 'timestamps', 1000);
  const rounds = intArg(process.argv, 'rounds', 3);
  const total = devices * KEYS * timestamps;
  const root = mkdtempSync(join(tmpdir(), 'outpost-bench-sync-'));
  const upArg = process.argv.indexOf('--upstream-dir');
  const upRoot =
    upArg > 0 ? mkdtempSync(join(process.argv[upArg + 1] as string, 'outpost-bench-sync-up-')) : join(root, 'up');
  // pristine copies: the upstream before anything reached it, the gateway with its backlog before any drain
  const upDir = join(upRoot, 'fresh');
  const gwDir = join(root, 'gw');
  try {
    for (const d of [upDir, gwDir]) {
      execFileSync('mkdir', ['-p', d]);
      cliRun([
        'user',
        'add',
        '--data-dir',
        join(d, 'data'),
        '--email',
        'bench@sync',
        '--password',
        'secret',
        '--authority',
        'TENANT_ADMIN',
      ]);
    }
    const upCfg = { provision: { key: 'pk', secret: 'ps' } };
    const down = { url: 'http://127.0.0.1:9', retryMaxMs: 1000 };
    const syncOn = (url: string): { sync: object } => ({ sync: { url, provisionKey: 'pk', provisionSecret: 'ps' } });

    // 1. the backlog, posted while the upstream is unreachable
    let gw = await serve(gwDir, { sync: down });
    let jwt = await loginJwt(gw.port);
    const tokens = await createDevices(gw.port, jwt, devices, 'dev');
    const [probeToken] = await createDevices(gw.port, jwt, 1, 'probe');
    const l0 = performance.now();
    await load(gw.port, backlogBodies(tokens, timestamps, BASE), 4);
    const loadS = (performance.now() - l0) / 1000;
    await stop(gw);

    // 2. RssAnon with the backlog pending (link still down)
    gw = await serve(gwDir, { sync: down });
    jwt = await loginJwt(gw.port);
    await settle(3000);
    const withBacklog = await syncStatus(gw.port, jwt);
    const rssBacklog = rssAnonBytes(gw.proc.pid as number);
    await stop(gw);

    // 3. rounds of: the drain into a fresh second Outpost with the single-point probe running, with the sync
    // thread (the default) and with sync.encoderThread false, each on a copy of the backlog; then the same probe
    // on another copy with sync off, for as long as the drain took. One p99 ratio per round (the machine's noise
    // moves single runs by ±30%); the table gives their median.
    const copy = (from: string, to: string): string => {
      execFileSync('cp', ['-a', from, to]);
      return to;
    };
    let scheduling = '';
    const drain = async (dir: string, encoderThread: boolean, into: 'outpost' | 'sink' = 'outpost'): Promise<Drain> => {
      const upCopy = copy(upDir, `${upDir}-${encoderThread ? 't' : 'm'}`);
      const up = into === 'outpost' ? await serve(upCopy, upCfg) : await spawnListening([SINK], 'sink');
      scheduling = background(up.proc.pid as number);
      const prof = process.env['SYNC_BENCH_PROF'];
      const g = await serve(
        dir,
        { sync: { ...syncOn(`http://127.0.0.1:${up.port}`).sync, encoderThread } },
        prof ? ['--cpu-prof', `--cpu-prof-dir=${prof}`] : [],
      );
      const pid = g.proc.pid as number;
      const login = loginJwt(g.port);
      const { s, lat, cpu } = await drainWithProbe(g, login, probeToken as string, total);
      const j = await login;
      const loop = await loopDelay(g.port, j);
      const hwm = peakRssBytes(pid);
      await stop(g);
      await stop(up);
      rmSync(upCopy, { recursive: true, force: true });
      return { s, lat, loop, hwm, cpu };
    };
    const threaded: Drain[] = [];
    const inMain: Drain[] = [];
    const toSink: Drain[] = [];
    const off: Array<{ lat: number[]; loop: string; hwm: number }> = [];
    const floor: number[][] = [];
    let drainedDir = '';
    for (let r = 0; r < rounds; r++) {
      const dt = copy(gwDir, join(root, `gw-t${r}`));
      threaded.push(await drain(dt, true));
      if (r === 0) drainedDir = dt;
      else rmSync(dt, { recursive: true, force: true });
      const dm = copy(gwDir, join(root, `gw-m${r}`));
      inMain.push(await drain(dm, false));
      rmSync(dm, { recursive: true, force: true });
      const ds = copy(gwDir, join(root, `gw-s${r}`));
      toSink.push(await drain(ds, true, 'sink'));
      rmSync(ds, { recursive: true, force: true });
      const doff = copy(gwDir, join(root, `gw-o${r}`));
      const g = await serve(doff, {});
      const sf = await offAndFloor(
        g.port,
        await loginJwt(g.port),
        probeToken as string,
        (threaded[r] as Drain).s,
        (threaded[r] as Drain).lat.length,
      );
      off.push({ lat: sf.off, loop: sf.loop, hwm: peakRssBytes(g.proc.pid as number) });
      floor.push(sf.floor);
      await stop(g);
      rmSync(doff, { recursive: true, force: true });
    }

    // 4. RssAnon with no backlog: a drained data dir, same config as in 2
    gw = await serve(drainedDir, { sync: down });
    await settle(3000);
    const rssNone = rssAnonBytes(gw.proc.pid as number);
    await stop(gw);

    // 5. bytes written per point, fresh data dirs, sync on (live, reachable) vs off
    const upB = copy(upDir, `${upDir}-bytes`);
    const up = await serve(upB, upCfg);
    background(up.proc.pid as number);
    const live = syncOn(`http://127.0.0.1:${up.port}`);
    const perPoint = async (config: object, label: string): Promise<number> => {
      const dir = join(root, label);
      execFileSync('mkdir', ['-p', dir]);
      cliRun([
        'user',
        'add',
        '--data-dir',
        join(dir, 'data'),
        '--email',
        'bench@sync',
        '--password',
        'secret',
        '--authority',
        'TENANT_ADMIN',
      ]);
      const g = await serve(dir, config);
      const j = await loginJwt(g.port);
      const toks = await createDevices(g.port, j, 20, label);
      await settle(500);
      const w0 = writeBytes(g.proc.pid as number);
      const posts = 200;
      await load(
        g.port,
        (function* (): Generator<[string, string]> {
          for (let i = 0; i < posts; i++) {
            for (const t of toks) {
              const vals = Array.from({ length: KEYS }, (_, k) => `"k${k}":${(i * 7 + k) % 100}.25`).join(',');
              yield [`/api/v1/${t}/telemetry`, `{"ts":${BASE + i * STEP_MS},"values":{${vals}}}`];
            }
          }
        })(),
        4,
      );
      // let the sync finish and commit its acknowledgements before reading the counter
      if (config === live) {
        for (;;) {
          const s = await syncStatus(g.port, j);
          if (s.backlogPoints === 0) break;
          await settle(100);
        }
      }
      await settle(1500);
      const w1 = writeBytes(g.proc.pid as number);
      await stop(g);
      return (w1 - w0) / (posts * toks.length * KEYS);
    };
    // three of each, alternating (the page cache and the other helpers' load move single runs by ±30%)
    const offs: number[] = [];
    const ons: number[] = [];
    const recs: number[] = [];
    for (let r = 0; r < (process.argv.includes('--no-bytes') ? 0 : 3); r++) {
      offs.push(await perPoint({}, `off${r}`));
      ons.push(await perPoint(live, `on${r}`));
      recs.push(await perPoint({ sync: down }, `rec${r}`));
    }
    const bytesOff = median(offs);
    const bytesOn = median(ons);
    const bytesRec = median(recs);
    await stop(up);

    const p99Ratio = (d: Drain, r: number): number => p99(d.lat) / p99((off[r] as { lat: number[] }).lat);
    const ratios = (ds: Drain[]): number[] => ds.map(p99Ratio);
    const list = (xs: number[], digits = 2): string => xs.map((x) => x.toFixed(digits)).join(', ');
    const rate = (d: Drain): number => total / d.s;
    const mid = (ds: Drain[], f: (d: Drain) => number): number => median(ds.map(f));
    const offP99 = off.map((o) => p99(o.lat));
    const rows: Array<[string, string, string, string]> = [
      [
        'backlog loaded (link down)',
        `${withBacklog.backlogPoints.toLocaleString('en')} points`,
        `${loadS.toFixed(1)} s to post`,
        '',
      ],
      [
        'drain into a second Outpost, unpaced',
        `${Math.round(mid(threaded, rate)).toLocaleString('en')} points/s`,
        `median of ${rounds} (${threaded.map((d) => Math.round(rate(d) / 1000)).join(', ')} k); upstream at ${scheduling}`,
        'target ≥ 200,000',
      ],
      [
        'ingest single-point p99, draining ÷ sync off',
        `${median(ratios(threaded)).toFixed(2)}×`,
        `median of ${rounds} rounds' ratios (${list(ratios(threaded))}); p99 ${list(threaded.map((d) => p99(d.lat)))} ms ÷ ${list(offP99)} ms; ` +
          `medians ${list(threaded.map((d) => median(d.lat)))} / ${list(off.map((o) => median(o.lat)))} ms; ` +
          `event-loop delay ${(threaded[0] as Drain).loop} / ${(off[0] as { loop: string }).loop} (round 1)`,
        'target ≤ 1.5×',
      ],
      [
        '… into a bare sink (a server elsewhere): ingest p99 ÷ sync off',
        `${median(ratios(toSink)).toFixed(2)}×`,
        `${list(ratios(toSink))}; drain ${toSink.map((d) => Math.round(rate(d) / 1000)).join(', ')} k points/s; gateway CPU, main / all ${mid(toSink, (d) => d.cpu.main / 1000).toFixed(2)} / ${mid(toSink, (d) => d.cpu.all / 1000).toFixed(2)} s`,
        '',
      ],
      [
        'floor: ingest p99 with sync off and idle-priority busy loops on every core ÷ without',
        `${median(floor.map((f, r) => p99(f) / (offP99[r] as number))).toFixed(2)}×`,
        `median of ${rounds} (${list(floor.map((f, r) => p99(f) / (offP99[r] as number)))}); p99 ${list(floor.map(p99))} ms: what keeping the cores busy alone costs here`,
        '',
      ],
      [
        'gateway CPU while draining: main thread / all threads',
        `${mid(threaded, (d) => d.cpu.main / 1000).toFixed(2)} / ${mid(threaded, (d) => d.cpu.all / 1000).toFixed(2)} s`,
        `medians, for the whole drain; main thread in each round ${list(threaded.map((d) => d.cpu.main / 1000))} s`,
        '',
      ],
      [
        '… sync.encoderThread false: drain',
        `${Math.round(mid(inMain, rate)).toLocaleString('en')} points/s`,
        `${inMain.map((d) => Math.round(rate(d) / 1000)).join(', ')} k`,
        '',
      ],
      [
        '… sync.encoderThread false: ingest p99 ÷ sync off',
        `${median(ratios(inMain)).toFixed(2)}×`,
        `${list(ratios(inMain))}; event-loop delay ${(inMain[0] as Drain).loop} (round 1)`,
        '',
      ],
      [
        '… sync.encoderThread false: gateway CPU, main / all',
        `${mid(inMain, (d) => d.cpu.main / 1000).toFixed(2)} / ${mid(inMain, (d) => d.cpu.all / 1000).toFixed(2)} s`,
        '',
        '',
      ],
      [
        'peak RSS (VmHWM): draining ÷ sync off',
        `${(mid(threaded, (d) => d.hwm) / 2 ** 20).toFixed(1)} ÷ ${(median(off.map((o) => o.hwm)) / 2 ** 20).toFixed(1)} MiB`,
        `medians; sync.encoderThread false: ${(mid(inMain, (d) => d.hwm) / 2 ** 20).toFixed(1)} MiB`,
        '',
      ],
      [
        'bytes written per point, sync on ÷ off',
        `${bytesOn.toFixed(0)} B ÷ ${bytesOff.toFixed(0)} B = ${(bytesOn / bytesOff).toFixed(3)}`,
        `medians of 3 each (off ${offs.map((b) => b.toFixed(0)).join(', ')}; on ${ons.map((b) => b.toFixed(0)).join(', ')}); 20 devices × 10 keys, one record per post`,
        'target ≤ 1.15',
      ],
      [
        'bytes written per point, outbox only (link down) ÷ off',
        `${bytesRec.toFixed(0)} B ÷ ${bytesOff.toFixed(0)} B = ${(bytesRec / bytesOff).toFixed(3)}`,
        `medians of 3 (${recs.map((b) => b.toFixed(0)).join(', ')}): the bookkeeping without the sending`,
        '',
      ],
      [
        'RssAnon, 1 M backlog − none',
        `${((rssBacklog - rssNone) / 2 ** 20).toFixed(1)} MiB`,
        `${(rssBacklog / 2 ** 20).toFixed(1)} − ${(rssNone / 2 ** 20).toFixed(1)} MiB`,
        'target < 10 MiB',
      ],
    ];
    console.log('| measure | result | detail | target |');
    console.log('|---|---|---|---|');
    for (const r of rows) if (offs.length > 0 || !r[0].startsWith('bytes written')) console.log(`| ${r.join(' | ')} |`);
  } finally {
    rmSync(root, { recursive: true, force: true });
    rmSync(upRoot, { recursive: true, force: true });
  }
}

await main();
