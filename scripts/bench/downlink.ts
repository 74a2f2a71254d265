/**
 * Downlink benchmark (docs/sync.md "Downlink"): two real Outpost daemons on loopback, the lower one's sync.url
 * the upper one's MQTT listener with a gateway device's token. One table, side by side in one run:
 *
 *   - RPC round trip: REST two-way RPC on the upper one to a device of the lower one (upper → MQTT gateway
 *     session → lower → the device's HTTP long-poll → its reply → back), against the same call to a device of the
 *     upper one itself; p50/p99 over `--calls` sequential calls each, interleaved;
 *   - uplink drain: a backlog (`--devices` × 10 keys × `--timestamps`, posted while the upstream was away)
 *     drained unpaced into the upper one over MQTT, and the same backlog (a copy of the data dir) over HTTP
 *     (provisioning every device); points/s from the lower one's start to an empty backlog;
 *   - RssAnon of a lower one with `--announced` devices announced and `--pending` RPCs pending for its devices
 *     (nobody polls), minus the same daemon with the same devices while its upstream was away (the devices' own
 *     memory, also shown against the daemon idle), 3 s after each settles.
 *
 * Not measured here: ingest p99 while draining over MQTT (bench:sync's probe does it for HTTP).
 *
 * store.commitDelayMs is 0 on both (the low-latency setting): every RPC and its reply is flushed before its
 * PUBACK, and a 250 ms group commit would be most of what the round trip measures.
 *
 *   npm run build && npm run bench:downlink [-- --calls 200 --devices 20 --timestamps 1000 --announced 1000 --pending 100]
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { RawHttpConnection, encodeRequest, intArg, median, rssAnonBytes } from './lib.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const argv = process.argv.slice(2);
const CALLS = intArg(argv, 'calls', 200);
const DEVICES = intArg(argv, 'devices', 20);
const TIMESTAMPS = intArg(argv, 'timestamps', 1000);
const ANNOUNCED = intArg(argv, 'announced', 1000);
const PENDING = intArg(argv, 'pending', 100);
const KEYS = 10;
const RECORDS_PER_POST = 100;
const BASE = Date.now() - 40 * 60_000;

interface Daemon {
  proc: ChildProcess;
  port: number;
  mqttPort: number;
}

function serve(dir: string, config: object): Promise<Daemon> {
  const file = join(dir, 'config.json');
  writeFileSync(
    file,
    JSON.stringify({ logLevel: 'info', store: { commitDelayMs: 0 }, provision: { key: 'K', secret: 'S' }, ...config }),
  );
  const proc = spawn(
    process.execPath,
    [MAIN, 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', join(dir, 'data'), '--config', file],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  return new Promise((resolve, reject) => {
    let buf = '';
    const onData = (c: Buffer): void => {
      buf += c.toString();
      const m = /listening on https?:\/\/[^:]+:(\d+)(?:, mqtt:\/\/[^:]+:(\d+))?/.exec(buf);
      if (m) resolve({ proc, port: Number(m[1]), mqttPort: Number(m[2] ?? 0) });
    };
    proc.stderr?.on('data', onData);
    proc.stdout?.on('data', onData);
    proc.once('exit', (code) => reject(new Error(`outpost ${dir} exited with ${code}: ${buf}`)));
  });
}

async function stop(d: Daemon): Promise<void> {
  if (d.proc.exitCode !== null) return;
  const exited = new Promise<void>((r) => d.proc.once('exit', () => r()));
  d.proc.kill('SIGTERM');
  await exited;
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

async function jwtOf(dir: string, port: number): Promise<string> {
  cli([
    'user',
    'add',
    '--data-dir',
    join(dir, 'data'),
    '--email',
    'bench@downlink',
    '--password',
    'secret',
    '--authority',
    'TENANT_ADMIN',
  ]);
  const r = await req(port, 'POST', '/api/auth/login', '{"username":"bench@downlink","password":"secret"}');
  return (JSON.parse(r.text) as { token: string }).token;
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

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] as number;
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

async function main(): Promise<void> {
  const root = mkdtempSync(join(tmpdir(), 'outpost-bench-downlink-'));
  const rows: Array<[string, string]> = [];
  try {
    // ---- RPC round trip -------------------------------------------------------------------------------------
    const upDir = join(root, 'upper');
    const loDir = join(root, 'lower');
    execFileSync('mkdir', ['-p', upDir, loDir]);
    const upper = await serve(upDir, {});
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
      `${median(viaDirect).toFixed(1)} / ${pct(viaDirect, 99).toFixed(1)} ms`,
    ]);
    rows.push([
      'RPC round trip, REST → upper → MQTT → lower → device → back, p50 / p99',
      `${median(viaLower).toFixed(1)} / ${pct(viaLower, 99).toFixed(1)} ms`,
    ]);
    rows.push([
      '  target: p99 ≤ 2 × direct p99 + 20 ms',
      `${(2 * pct(viaDirect, 99) + 20).toFixed(1)} ms: ${pct(viaLower, 99) <= 2 * pct(viaDirect, 99) + 20 ? 'met' : 'NOT met'}`,
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
    await new Promise((r) => setTimeout(r, 3_000));
    const idle = rssAnonBytes(rss.proc.pid as number);
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
    await new Promise((r) => setTimeout(r, 3_000));
    const devicesOnly = rssAnonBytes(rss.proc.pid as number);
    upper2 = await serve(upRss, { mqtt: { port: fixed } });
    await until(
      async () => {
        const s = await rssStatus();
        return s.backlogPoints === 0 && s.session.announcedDevices >= ANNOUNCED;
      },
      'announced',
      120_000,
    );
    await new Promise((r) => setTimeout(r, 3_000));
    const announcedRss = rssAnonBytes(rss.proc.pid as number);
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
    await new Promise((r) => setTimeout(r, 3_000));
    const loaded = rssAnonBytes(rss.proc.pid as number);
    const mib = (b: number): string => `${(b / 2 ** 20).toFixed(1)} MiB`;
    rows.push([
      `RssAnon: ${ANNOUNCED} devices announced + ${PENDING} RPCs pending − the same devices, upstream away`,
      `${mib(loaded - devicesOnly)} (announced ${mib(announcedRss - devicesOnly)}, RPCs ${mib(loaded - announcedRss)}; target < 10 MB)`,
    ]);
    rows.push([
      `  for scale: the ${ANNOUNCED} devices themselves (created, one point each) − idle`,
      `${mib(devicesOnly - idle)} (idle ${mib(idle)})`,
    ]);
    await stop(rss);
    await stop(upper2);

    // ---- uplink drain: MQTT vs HTTP, the same backlog -------------------------------------------------------
    const points = DEVICES * KEYS * TIMESTAMPS;
    const srcDir = join(root, 'src');
    execFileSync('mkdir', ['-p', srcDir]);
    const src = await serve(srcDir, {
      sync: {
        url: 'http://127.0.0.1:9',
        provisionKey: 'K',
        provisionSecret: 'S',
        retryBaseMs: 60_000,
        retryMaxMs: 60_000,
      },
      mqtt: { port: 0 },
    });
    const srcJwt = await jwtOf(srcDir, src.port);
    const c2 = await RawHttpConnection.open(src.port);
    for (let d = 0; d < DEVICES; d++) {
      const token = `D${String(d).padStart(4, '0')}`;
      await c2.request(
        encodeRequest('POST', `/api/device?accessToken=${token}`, JSON.stringify({ name: `drain-${d}` }), {
          'Content-Type': 'application/json',
          'X-Authorization': `Bearer ${srcJwt}`,
        }),
      );
      for (let t0 = 0; t0 < TIMESTAMPS; t0 += RECORDS_PER_POST) {
        const recs: string[] = [];
        for (let t = t0; t < Math.min(TIMESTAMPS, t0 + RECORDS_PER_POST); t++) {
          const vals: string[] = [];
          for (let k = 0; k < KEYS; k++) vals.push(`"k${k}":${(t * 10 + k) / 4}`);
          recs.push(`{"ts":${BASE + t * 1000},"values":{${vals.join(',')}}}`);
        }
        const r = await c2.request(
          encodeRequest('POST', `/api/v1/${token}/telemetry`, `[${recs.join(',')}]`, {
            'Content-Type': 'application/json',
          }),
        );
        if (r.status !== 200) throw new Error(`post ${r.status}`);
      }
    }
    c2.close();
    await until(async () => (await backlog(src.port, srcJwt)) >= points, 'backlog recorded', 120_000);
    await stop(src);
    const drain = async (kind: 'mqtt' | 'http'): Promise<number> => {
      const up = join(root, `up-${kind}`);
      const lo = join(root, `lo-${kind}`);
      execFileSync('mkdir', ['-p', up]);
      cpSync(srcDir, lo, { recursive: true });
      const u = await serve(up, {});
      const g = JSON.parse(
        cli(['device', 'add', '--data-dir', join(up, 'data'), '--name', `drain-gw-${kind}`, '--gateway']),
      ) as { token: string };
      const sync =
        kind === 'mqtt'
          ? { url: `mqtt://127.0.0.1:${u.mqttPort}`, gatewayToken: g.token }
          : { url: `http://127.0.0.1:${u.port}`, provisionKey: 'K', provisionSecret: 'S' };
      const t0 = performance.now();
      const l = await serve(lo, { sync, mqtt: { port: 0 } });
      await until(async () => (await backlog(l.port, srcJwt)) === 0, `drain ${kind}`);
      const secs = (performance.now() - t0) / 1000;
      await stop(l);
      await stop(u);
      return points / secs;
    };
    const viaHttp = await drain('http');
    const viaMqtt = await drain('mqtt');
    rows.push([
      `uplink drain of ${points.toLocaleString('en')} points, HTTP (provisioned devices)`,
      `${Math.round(viaHttp).toLocaleString('en')} points/s`,
    ]);
    rows.push([
      `uplink drain of ${points.toLocaleString('en')} points, MQTT gateway session`,
      `${Math.round(viaMqtt).toLocaleString('en')} points/s (${(viaMqtt / viaHttp).toFixed(2)} × HTTP)`,
    ]);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
  const w = Math.max(...rows.map((r) => r[0].length));
  console.log(`\n| ${'measure'.padEnd(w)} | value |\n|${'-'.repeat(w + 2)}|---|`);
  for (const [k, v] of rows) console.log(`| ${k.padEnd(w)} | ${v} |`);
}

await main();
