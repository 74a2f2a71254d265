/**
 * Downlink benchmark (docs/sync.md "Downlink"): two real Outpost daemons on loopback, the lower one's sync.url
 * the upper one's MQTT listener with a gateway device's token. One table, side by side in one run:
 *
 *   - RPC round trip: REST two-way RPC on the upper one to a device of the lower one (upper → MQTT gateway
 *     session → lower → the device's HTTP long-poll → its reply → back), against the same call to a device of the
 *     upper one itself; p50/p99 over `--calls` sequential calls each, interleaved;
 *   - uplink drain, measured as bench:sync measures it (lib.ts): a backlog of `--devices` × 10 keys ×
 *     `--timestamps` (default 100 × 1000: 1 M points, bench:sync's shape), posted while the upstream was away,
 *     drained unpaced into a fresh upper Outpost at SCHED_IDLE (a server elsewhere) over HTTP (provisioning every
 *     device) and, from a copy of the same data dir, over MQTT (one gateway session); points/s from the lower
 *     one listening to an empty backlog, with the ingest probe (single-point posts, a process of its own)
 *     running, against the same probe with sync off and its floor (idle-priority busy loops on every core);
 *     `--rounds` (default 1) of each, order alternating;
 *   - RssAnon of a lower one with `--announced` devices announced and `--pending` RPCs pending for its devices
 *     (nobody polls), minus the same daemon with the same devices while its upstream was away (the devices' own
 *     memory, also shown against the daemon idle), each the least of 10 readings a second once it settles.
 *
 * `--drain-only` skips the RPC and RssAnon phases, `--no-drain` the drain; `--concurrency N` and `--inflight N` set sync.concurrency and
 * sync.inflight of the draining gateway (defaults: the config's, 4 and 16); DOWNLINK_BENCH_PROF=dir writes CPU
 * profiles of the draining gateway.
 *
 * store.commitDelayMs is 0 on both (the low-latency setting): every RPC and its reply is flushed before its
 * PUBACK, and a 250 ms group commit would be most of what the round trip measures.
 *
 *   npm run build && npm run bench:downlink [-- --calls 200 --devices 100 --timestamps 1000 --rounds 1 --announced 1000 --pending 100]
 */
import { type ChildProcess, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import {
  BACKLOG_KEYS,
  RawHttpConnection,
  background,
  backlogBodies,
  createDevices,
  drainWithProbe,
  encodeRequest,
  intArg,
  load,
  loginJwt,
  loopDelay,
  median,
  offAndFloor,
  p99,
  rssAnonBytes,
  threadCount,
  serveDaemon,
  stopDaemon as stop,
} from './lib.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const argv = process.argv.slice(2);
const CALLS = intArg(argv, 'calls', 200);
const DEVICES = intArg(argv, 'devices', 100);
const TIMESTAMPS = intArg(argv, 'timestamps', 1000);
const ANNOUNCED = intArg(argv, 'announced', 1000);
const PENDING = intArg(argv, 'pending', 100);
const ROUNDS = intArg(argv, 'rounds', 1);
const CONCURRENCY = intArg(argv, 'concurrency', 4);
const INFLIGHT = intArg(argv, 'inflight', 16);
const DRAIN_ONLY = argv.includes('--drain-only');
const NO_DRAIN = argv.includes('--no-drain');
const USER = 'bench@downlink';
const BASE = Date.now() - 40 * 60_000;

interface Daemon {
  proc: ChildProcess;
  port: number;
  mqttPort: number;
}

interface Drained {
  s: number;
  lat: number[];
  cpu: { main: number; all: number };
  loop: string;
}

function serve(dir: string, config: object, nodeArgs: string[] = []): Promise<Daemon> {
  const file = join(dir, 'config.json');
  writeFileSync(
    file,
    JSON.stringify({
      logLevel: 'info',
      store: { commitDelayMs: 0 },
      provision: { key: 'K', secret: 'S' },
      mqtt: { port: 0 },
      ...config,
    }),
  );
  return serveDaemon(MAIN, dir, file, nodeArgs);
}

function cli(args: string[]): string {
  return execFileSync(process.execPath, [MAIN, ...args], { encoding: 'utf8' });
}

async function req(
  port: number,
  method: string,
  path: string,
  body = '',
  jwt?: string,
): Promise<{ status: number; text: string }> {
  const c = await RawHttpConnection.open(port);
  try {
    const r = await c.request(
      encodeRequest(method, path, body, {
        'Content-Type': 'application/json',
        ...(jwt === undefined ? {} : { 'X-Authorization': `Bearer ${jwt}` }),
      }),
    );
    return { status: r.status, text: r.body.toString('utf8') };
  } finally {
    c.close();
  }
}

function addUser(dir: string): void {
  cli([
    'user',
    'add',
    '--data-dir',
    join(dir, 'data'),
    '--email',
    USER,
    '--password',
    'secret',
    '--authority',
    'TENANT_ADMIN',
  ]);
}

async function jwtOf(dir: string, port: number): Promise<string> {
  addUser(dir);
  return loginJwt(port, USER);
}

async function until(pred: () => Promise<boolean>, label: string, ms = 600_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error(`timed out: ${label}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function upperId(port: number, jwt: string, name: string): Promise<string> {
  let id = '';
  await until(
    async () => {
      const r = await req(port, 'GET', `/api/tenant/devices?deviceName=${encodeURIComponent(name)}`, '', jwt);
      if (r.status === 200) id = (JSON.parse(r.text) as { id: { id: string } }).id.id;
      return id !== '';
    },
    `${name} upstream`,
    30_000,
  );
  return id;
}

/** A device answering every RPC over its HTTP long-poll, until `stopped`. */
function poller(port: number, token: string, stopped: () => boolean): Promise<void> {
  return (async () => {
    const c = await RawHttpConnection.open(port);
    while (!stopped()) {
      const r = await c.request(encodeRequest('GET', `/api/v1/${token}/rpc?timeout=2000`, ''));
      if (r.status !== 200) continue;
      const { id } = JSON.parse(r.body.toString()) as { id: number };
      await c.request(
        encodeRequest('POST', `/api/v1/${token}/rpc/${id}`, '{"ok":true}', { 'Content-Type': 'application/json' }),
      );
    }
    c.close();
  })();
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

async function backlog(port: number, jwt: string): Promise<number> {
  const r = await req(port, 'GET', '/api/outpost/sync', '', jwt);
  return (JSON.parse(r.text) as { backlogPoints: number }).backlogPoints;
}

/**
 * RssAnon once the daemon has been left alone: the least of one reading a second over 10 s, after 3 s. A
 * single reading caught V8's heap at whatever size the last burst of work left it (the same phase read 6.3 and
 * 20.6 MiB in two runs); the least over a quiet spell is what the daemon keeps.
 */
async function settledRssAnon(pid: number): Promise<number> {
  await new Promise((r) => setTimeout(r, 3_000));
  let least = rssAnonBytes(pid);
  for (let i = 0; i < 10; i++) {
    await new Promise((r) => setTimeout(r, 1_000));
    least = Math.min(least, rssAnonBytes(pid));
  }
  return least;
}

/** The RPC round trips and the RssAnon of announced devices and pending RPCs (rows in `rows`). */
async function rpcAndRss(root: string, rows: Array<[string, string]>): Promise<void> {
  // ---- RPC round trip -------------------------------------------------------------------------------------
  const upDir = join(root, 'upper');
  const loDir = join(root, 'lower');
  execFileSync('mkdir', ['-p', upDir, loDir]);
  const upper = await serve(upDir, { mqtt: { port: -1 } });
  const upJwt = await jwtOf(upDir, upper.port);
  const gw = JSON.parse(
    cli(['device', 'add', '--data-dir', join(upDir, 'data'), '--name', 'site-gw', '--gateway']),
  ) as { token: string };
  const direct = JSON.parse(cli(['device', 'add', '--data-dir', join(upDir, 'data'), '--name', 'direct-dev'])) as {
    id: string;
    token: string;
  };
  const lower = await serve(loDir, {
    sync: { url: `mqtt://127.0.0.1:${upper.mqttPort}`, gatewayToken: gw.token },
    mqtt: { port: 0 },
  });
  const lan = JSON.parse(cli(['device', 'add', '--data-dir', join(loDir, 'data'), '--name', 'lan-dev'])) as {
    token: string;
  };
  let done = false;
  const polls = [poller(upper.port, direct.token, () => done), poller(lower.port, lan.token, () => done)];
  const lanId = await upperId(upper.port, upJwt, 'lan-dev');
  const viaLower: number[] = [];
  const viaDirect: number[] = [];
  const call = async (id: string, into: number[]): Promise<void> => {
    const t0 = performance.now();
    const r = await req(
      upper.port,
      'POST',
      `/api/plugins/rpc/twoway/${id}`,
      '{"method":"ping","params":{},"timeout":10000}',
      upJwt,
    );
    if (r.status !== 200) throw new Error(`rpc ${r.status}: ${r.text}`);
    into.push(performance.now() - t0);
  };
  for (let i = 0; i < 10; i++) {
    await call(lanId, []);
    await call(direct.id, []);
  }
  for (let i = 0; i < CALLS; i++) {
    await call(lanId, viaLower);
    await call(direct.id, viaDirect);
  }
  done = true;
  await Promise.all(polls);
  rows.push([
    'RPC round trip, device of the upper one (direct), p50 / p99',
    `${median(viaDirect).toFixed(1)} / ${p99(viaDirect).toFixed(1)} ms`,
  ]);
  rows.push([
    'RPC round trip, REST → upper → MQTT → lower → device → back, p50 / p99',
    `${median(viaLower).toFixed(1)} / ${p99(viaLower).toFixed(1)} ms`,
  ]);
  rows.push([
    '  target: p99 ≤ 2 × direct p99 + 20 ms',
    `${(2 * p99(viaDirect) + 20).toFixed(1)} ms: ${p99(viaLower) <= 2 * p99(viaDirect) + 20 ? 'met' : 'NOT met'}`,
  ]);
  await stop(lower);

  await stop(upper);

  // ---- RssAnon: idle; the devices alone (the upstream away); announced; with RPCs pending ---------------------
  // an upper one on a fixed MQTT port, stopped while the devices are made and started again, so the devices'
  // own memory (entities, series, ingest) is measured before the session announces them
  const upRss = join(root, 'upper-rss');
  const rssDir = join(root, 'rss');
  execFileSync('mkdir', ['-p', upRss, rssDir]);
  const fixed = await freePort();
  let upper2 = await serve(upRss, { mqtt: { port: fixed } });
  const up2Jwt = await jwtOf(upRss, upper2.port);
  const rssGw = JSON.parse(
    cli(['device', 'add', '--data-dir', join(upRss, 'data'), '--name', 'rss-gw', '--gateway']),
  ) as { token: string };
  const rss = await serve(rssDir, {
    sync: { url: `mqtt://127.0.0.1:${fixed}`, gatewayToken: rssGw.token, retryBaseMs: 200, retryMaxMs: 1_000 },
    mqtt: { port: 0 },
  });
  const rssJwt = await jwtOf(rssDir, rss.port);
  const rssStatus = async (): Promise<{
    backlogPoints: number;
    session: { announcedDevices: number };
    downlink: { rpcPending: number };
  }> =>
    JSON.parse((await req(rss.port, 'GET', '/api/outpost/sync', '', rssJwt)).text) as {
      backlogPoints: number;
      session: { announcedDevices: number };
      downlink: { rpcPending: number };
    };
  const idle = await settledRssAnon(rss.proc.pid as number);
  await stop(upper2);
  const c = await RawHttpConnection.open(rss.port);
  for (let i = 0; i < ANNOUNCED; i++) {
    const token = `A${String(i).padStart(5, '0')}`;
    const r = await c.request(
      encodeRequest('POST', `/api/device?accessToken=${token}`, JSON.stringify({ name: `ann-${i}` }), {
        'Content-Type': 'application/json',
        'X-Authorization': `Bearer ${rssJwt}`,
      }),
    );
    if (r.status !== 200) throw new Error(`device ${r.status}`);
    await c.request(
      encodeRequest('POST', `/api/v1/${token}/telemetry`, `{"ts":${BASE},"values":{"v":1}}`, {
        'Content-Type': 'application/json',
      }),
    );
  }
  c.close();
  await until(async () => (await rssStatus()).backlogPoints >= ANNOUNCED, "the devices' points pending", 120_000);
  const devicesOnly = await settledRssAnon(rss.proc.pid as number);
  const threadsBefore = threadCount(rss.proc.pid as number);
  upper2 = await serve(upRss, { mqtt: { port: fixed } });
  await until(
    async () => {
      const s = await rssStatus();
      return s.backlogPoints === 0 && s.session.announcedDevices >= ANNOUNCED;
    },
    'announced',
    120_000,
  );
  // the sync thread that read the 1,000 points back retires after 30 s without work (sync/thread.ts): what is
  // measured is the gateway holding its announced devices, not a thread about to end
  await until(async () => threadCount(rss.proc.pid as number) <= threadsBefore, 'the sync thread retired', 90_000);
  const announcedRss = await settledRssAnon(rss.proc.pid as number);
  for (let i = 0; i < PENDING; i++) {
    const id = await upperId(upper2.port, up2Jwt, `ann-${i}`);
    void req(
      upper2.port,
      'POST',
      `/api/plugins/rpc/oneway/${id}`,
      '{"method":"later","params":{"i":1},"timeout":120000}',
      up2Jwt,
    ).catch(() => undefined);
  }
  await until(async () => (await rssStatus()).downlink.rpcPending >= PENDING, 'pending RPCs', 60_000);
  const loaded = await settledRssAnon(rss.proc.pid as number);
  const mib = (b: number): string => `${(b / 2 ** 20).toFixed(1)} MiB`;
  rows.push([
    `RssAnon: ${ANNOUNCED} devices announced + ${PENDING} RPCs pending − the same devices, upstream away`,
    // the readings in between are shown as they are: V8 gives back heap over tens of seconds, so the step from one
    // reading to the next is no measure of what either phase keeps (it read -15 MiB for the RPCs)
    `${mib(loaded - devicesOnly)}; target < 10 MB (readings: devices alone ${mib(devicesOnly)}, announced ${mib(announcedRss)}, with the RPCs ${mib(loaded)})`,
  ]);
  rows.push([
    `  for scale: the ${ANNOUNCED} devices themselves (created, one point each) − idle`,
    `${mib(devicesOnly - idle)} (idle ${mib(idle)})`,
  ]);
  await stop(rss);
  await stop(upper2);
}

async function main(): Promise<void> {
  const root = mkdtempSync(join(tmpdir(), 'outpost-bench-downlink-'));
  const rows: Array<[string, string]> = [];
  let offLoop = '';
  try {
    if (!DRAIN_ONLY) await rpcAndRss(root, rows);
    if (NO_DRAIN) {
      printRows(rows);
      return;
    }
    // ---- uplink drain: MQTT vs HTTP, the same backlog, the ingest probe running (as bench:sync) ----------------
    // the backlog: DEVICES × 10 keys × TIMESTAMPS points (bench:sync's shape), posted while the upstream was away,
    // and a probe device. Each round drains a copy over HTTP (provisioning every device) and one over MQTT (one
    // gateway session) into a fresh upper Outpost at SCHED_IDLE (a server elsewhere), the probe posting single
    // points meanwhile; then probes a copy with sync off, and with idle-priority busy loops (the floor), each for
    // as long as the slower drain took.
    const total = DEVICES * BACKLOG_KEYS * TIMESTAMPS;
    const gwDir = join(root, 'gw');
    const upFresh = join(root, 'up-fresh');
    execFileSync('mkdir', ['-p', gwDir, upFresh]);
    addUser(gwDir);
    const src = await serve(gwDir, { sync: { url: 'http://127.0.0.1:9', retryMaxMs: 1_000 } });
    const srcJwt = await loginJwt(src.port, USER);
    const tokens = await createDevices(src.port, srcJwt, DEVICES, 'dev');
    const [probeToken] = await createDevices(src.port, srcJwt, 1, 'probe');
    const l0 = performance.now();
    await load(src.port, backlogBodies(tokens, TIMESTAMPS, BASE), 4);
    const loadS = (performance.now() - l0) / 1000;
    await until(async () => (await backlog(src.port, srcJwt)) >= total, 'backlog recorded', 120_000);
    await stop(src);
    const upGw = JSON.parse(
      cli(['device', 'add', '--data-dir', join(upFresh, 'data'), '--name', 'drain-gw', '--gateway']),
    ) as { token: string };
    let scheduling = '';
    const drain = async (kind: 'mqtt' | 'http', r: number): Promise<Drained> => {
      const up = join(root, `up-${kind}${r}`);
      const lo = join(root, `lo-${kind}${r}`);
      execFileSync('cp', ['-a', upFresh, up]);
      execFileSync('cp', ['-a', gwDir, lo]);
      const u = await serve(up, { mqtt: { port: -1 } });
      scheduling = background(u.proc.pid as number);
      const tuning = { concurrency: CONCURRENCY, inflight: INFLIGHT };
      const sync =
        kind === 'mqtt'
          ? { url: `mqtt://127.0.0.1:${u.mqttPort}`, gatewayToken: upGw.token, ...tuning }
          : { url: `http://127.0.0.1:${u.port}`, provisionKey: 'K', provisionSecret: 'S', ...tuning };
      const prof = process.env['DOWNLINK_BENCH_PROF'];
      const l = await serve(lo, { sync }, prof ? ['--cpu-prof', `--cpu-prof-dir=${prof}`] : []);
      const login = loginJwt(l.port, USER);
      const d = await drainWithProbe(l, login, probeToken as string, total);
      const loop = await loopDelay(l.port, await login);
      await stop(l);
      await stop(u);
      rmSync(up, { recursive: true, force: true });
      rmSync(lo, { recursive: true, force: true });
      return { ...d, loop };
    };
    const viaHttp: Drained[] = [];
    const viaMqtt: Drained[] = [];
    const off: number[][] = [];
    const floor: number[][] = [];
    for (let r = 0; r < ROUNDS; r++) {
      // the order alternates between rounds: the page cache and the other engineers' load drift
      if (r % 2 === 0) {
        viaHttp.push(await drain('http', r));
        viaMqtt.push(await drain('mqtt', r));
      } else {
        viaMqtt.push(await drain('mqtt', r));
        viaHttp.push(await drain('http', r));
      }
      const doff = join(root, `off${r}`);
      execFileSync('cp', ['-a', gwDir, doff]);
      const g = await serve(doff, {});
      const h = viaHttp[r] as Drained;
      const m = viaMqtt[r] as Drained;
      const sf = await offAndFloor(
        g.port,
        await loginJwt(g.port, USER),
        probeToken as string,
        Math.max(h.s, m.s),
        Math.max(h.lat.length, m.lat.length),
      );
      off.push(sf.off);
      floor.push(sf.floor);
      if (r === 0) offLoop = sf.loop;
      await stop(g);
      rmSync(doff, { recursive: true, force: true });
    }
    const rate = (d: Drained): number => total / d.s;
    const k = (ds: Drained[]): string => ds.map((d) => `${Math.round(rate(d) / 1000)} k`).join(', ');
    const ratio = (lat: number[], r: number): number => p99(lat) / p99(off[r] as number[]);
    const ratios = (ds: Drained[]): number[] => ds.map((d, r) => ratio(d.lat, r));
    const list = (xs: number[]): string => xs.map((x) => x.toFixed(2)).join(', ');
    const cpu = (ds: Drained[]): string =>
      `${median(ds.map((d) => d.cpu.main / 1000)).toFixed(2)} / ${median(ds.map((d) => d.cpu.all / 1000)).toFixed(2)} s`;
    const pts = total.toLocaleString('en');
    rows.push([
      `backlog: ${DEVICES} devices × ${BACKLOG_KEYS} keys × ${TIMESTAMPS} timestamps, posted with the upstream away`,
      `${pts} points in ${loadS.toFixed(1)} s; sync.concurrency ${CONCURRENCY}, sync.inflight ${INFLIGHT}; upper at ${scheduling}; ${ROUNDS} round(s)`,
    ]);
    rows.push([
      `uplink drain of ${pts} points, HTTP (provisioned devices)`,
      `${Math.round(median(viaHttp.map(rate))).toLocaleString('en')} points/s (${k(viaHttp)})`,
    ]);
    rows.push([
      `uplink drain of ${pts} points, MQTT gateway session`,
      `${Math.round(median(viaMqtt.map(rate))).toLocaleString('en')} points/s (${k(viaMqtt)}); ${list(viaMqtt.map((d, r) => rate(d) / rate(viaHttp[r] as Drained)))} × HTTP, same round`,
    ]);
    rows.push([
      'ingest single-point p99 while draining ÷ sync off: HTTP / MQTT',
      `${median(ratios(viaHttp)).toFixed(2)}× / ${median(ratios(viaMqtt)).toFixed(2)}× (p99 ${list(viaHttp.map((d) => p99(d.lat)))} / ${list(viaMqtt.map((d) => p99(d.lat)))} ms ÷ ${list(off.map(p99))} ms)`,
    ]);
    rows.push([
      '  floor: sync off with idle-priority busy loops on every core ÷ sync off',
      `${median(floor.map((f, r) => ratio(f, r))).toFixed(2)}× (p99 ${list(floor.map(p99))} ms)`,
    ]);
    rows.push([
      '  event-loop delay of the draining gateway: HTTP / MQTT / sync off (round 1)',
      `${(viaHttp[0] as Drained).loop} / ${(viaMqtt[0] as Drained).loop} / ${offLoop}`,
    ]);
    rows.push(['  gateway CPU while draining, main thread / all: HTTP', cpu(viaHttp)]);
    rows.push(['  gateway CPU while draining, main thread / all: MQTT', cpu(viaMqtt)]);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
  printRows(rows);
}

function printRows(rows: ReadonlyArray<[string, string]>): void {
  const w = Math.max(...rows.map((r) => r[0].length));
  console.log(`\n| ${'measure'.padEnd(w)} | value |\n|${'-'.repeat(w + 2)}|---|`);
  for (const [k, v] of rows) console.log(`| ${k.padEnd(w)} | ${v} |`);
}

await main();
