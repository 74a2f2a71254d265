/**
 * Depth-series sync benchmark (docs/sync.md). Loopback only, real daemons in child processes:
 *
 *   - drain: a depth backlog (devices × depths × 10 keys, posted 100 depths a request while the upstream is
 *     unreachable) drained unpaced into a second Outpost (provisioning every device), points/s from the
 *     gateway's start to an empty depth backlog; one device's series read back from the upstream and compared;
 *   - RssAnon of the gateway 3 s after a start with the backlog pending (link down) − the same after the drain
 *     (medians of 5 starts).
 *
 *   npm run build && npm run bench:sync-depth [-- --devices 10 --depths 10000]
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { ChildProcess } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import {
  RawHttpConnection,
  encodeRequest,
  intArg,
  median,
  rssAnonBytes,
  spawnListening,
  stopDaemon as stop,
} from './lib.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const KEYS = 10;
const DEPTHS_PER_POST = 100;

interface Daemon {
  proc: ChildProcess;
  port: number;
}

async function serve(dir: string, config: object): Promise<Daemon> {
  const file = join(dir, 'config.json');
  writeFileSync(file, JSON.stringify({ logLevel: 'info', store: { commitDelayMs: 0 }, ...config }));
  return spawnListening(
    [MAIN, 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', join(dir, 'data'), '--config', file],
    `outpost ${dir}`,
  );
}

async function request(
  port: number,
  method: string,
  path: string,
  body: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; text: string }> {
  const c = await RawHttpConnection.open(port);
  const r = await c.request(encodeRequest(method, path, body, { 'Content-Type': 'application/json', ...headers }));
  c.close();
  return { status: r.status, text: r.body.toString('utf8') };
}

async function loginJwt(port: number): Promise<string> {
  const r = await request(port, 'POST', '/api/auth/login', '{"username":"bench@depth","password":"secret"}');
  return (JSON.parse(r.text) as { token: string }).token;
}

interface DepthStatus {
  depthBacklogPoints: number;
  depthSentPoints: number;
  state: string;
}

async function depthStatus(port: number, jwt: string): Promise<DepthStatus> {
  return JSON.parse(
    (await request(port, 'GET', '/api/outpost/sync', '', { 'X-Authorization': `Bearer ${jwt}` })).text,
  ) as DepthStatus;
}

/** The median RssAnon of RSS_STARTS starts on `dir`, each read 3 s after the start (one start varies by ±5 MiB). */
const RSS_STARTS = 5;
async function rssAfterStart(dir: string, config: object): Promise<number> {
  const seen: number[] = [];
  for (let i = 0; i < RSS_STARTS; i++) {
    const d = await serve(dir, config);
    await new Promise((r) => setTimeout(r, 3000));
    seen.push(rssAnonBytes(d.proc.pid as number));
    await stop(d);
  }
  return median(seen);
}

async function main(): Promise<void> {
  const devices = intArg(process.argv, 'devices', 10);
  const depths = intArg(process.argv, 'depths', 10_000);
  const total = devices * depths * KEYS;
  const root = mkdtempSync(join(tmpdir(), 'outpost-bench-depth-'));
  const upDir = join(root, 'up');
  const gwDir = join(root, 'gw');
  try {
    for (const d of [upDir, gwDir]) {
      execFileSync('mkdir', ['-p', d]);
      execFileSync(process.execPath, [
        MAIN,
        'user',
        'add',
        '--data-dir',
        join(d, 'data'),
        '--email',
        'bench@depth',
        '--password',
        'secret',
        '--authority',
        'TENANT_ADMIN',
      ]);
    }
    const up = await serve(upDir, { provision: { key: 'pk', secret: 'ps' } });
    const down = { sync: { url: 'http://127.0.0.1:9', retryMaxMs: 1000 } };
    const syncOn = { sync: { url: `http://127.0.0.1:${up.port}`, provisionKey: 'pk', provisionSecret: 'ps' } };

    // 1. the backlog, posted while the upstream is unreachable
    let gw = await serve(gwDir, down);
    let jwt = await loginJwt(gw.port);
    const tokens: string[] = [];
    for (let i = 0; i < devices; i++) {
      const token = `rig${i}`;
      const r = await request(
        gw.port,
        'POST',
        `/api/device?accessToken=${token}`,
        JSON.stringify({ name: `rig-${i}` }),
        { 'X-Authorization': `Bearer ${jwt}` },
      );
      if (r.status !== 200) throw new Error(`device create ${r.status}: ${r.text}`);
      tokens.push(token);
    }
    const l0 = performance.now();
    const c = await RawHttpConnection.open(gw.port);
    for (let p = 0; p < depths / DEPTHS_PER_POST; p++) {
      for (const [d, token] of tokens.entries()) {
        const recs: string[] = [];
        for (let i = 0; i < DEPTHS_PER_POST; i++) {
          const n = p * DEPTHS_PER_POST + i;
          const vals: string[] = [];
          for (let k = 0; k < KEYS; k++)
            vals.push(`"k${k}":${k % 2 === 0 ? `${(d + n) % 1000}.5` : `${d * 1_000_000 + n}`}`);
          recs.push(`{"ds":${(n * 0.1).toFixed(1)},"values":{${vals.join(',')}}}`);
        }
        const r = await c.request(
          encodeRequest('POST', `/api/v1/${token}/depth/telemetry`, `[${recs.join(',')}]`, {
            'Content-Type': 'application/json',
          }),
        );
        if (r.status !== 200) throw new Error(`depth post ${r.status}: ${r.body.toString()}`);
      }
    }
    c.close();
    const loadS = (performance.now() - l0) / 1000;
    await stop(gw);

    // 2. RssAnon with the backlog pending (link still down)
    gw = await serve(gwDir, down);
    jwt = await loginJwt(gw.port);
    await new Promise((r) => setTimeout(r, 3000));
    const pending = (await depthStatus(gw.port, jwt)).depthBacklogPoints;
    await stop(gw);
    const rssBacklog = await rssAfterStart(gwDir, down);

    // 3. the drain
    gw = await serve(gwDir, syncOn);
    const d0 = performance.now();
    jwt = await loginJwt(gw.port);
    let s = await depthStatus(gw.port, jwt);
    while (s.depthBacklogPoints > 0) {
      await new Promise((r) => setTimeout(r, 100));
      s = await depthStatus(gw.port, jwt);
    }
    const drainS = (performance.now() - d0) / 1000;
    await stop(gw);

    // 4. RssAnon with none pending, as in 2. (link down)
    const rssNone = await rssAfterStart(gwDir, down);
    gw = await serve(gwDir, syncOn);
    jwt = await loginJwt(gw.port);

    // 5. one device's series, read back from both
    const upJwt = await loginJwt(up.port);
    const q = `values/depthseries?keys=${Array.from({ length: KEYS }, (_, k) => `k${k}`).join(',')}&startDs=-1&endDs=1e9&limit=${depths}&useStrictDataTypes=true`;
    const idOf = async (port: number, token: string): Promise<string> =>
      (
        JSON.parse(
          (
            await request(port, 'GET', '/api/tenant/devices?deviceName=rig-0', '', {
              'X-Authorization': `Bearer ${token}`,
            })
          ).text,
        ) as { id: { id: string } }
      ).id.id;
    const local = await request(gw.port, 'GET', `/api/plugins/telemetry/DEVICE/${await idOf(gw.port, jwt)}/${q}`, '', {
      'X-Authorization': `Bearer ${jwt}`,
    });
    const remote = await request(
      up.port,
      'GET',
      `/api/plugins/telemetry/DEVICE/${await idOf(up.port, upJwt)}/${q}`,
      '',
      { 'X-Authorization': `Bearer ${upJwt}` },
    );
    await stop(gw);
    await stop(up);

    const mib = (b: number): string => (b / 2 ** 20).toFixed(1);
    console.log(
      `| depth points | ${total} (${devices} devices × ${depths} depths × ${KEYS} keys; ${pending} pending after the restart) |`,
    );
    console.log(`| posted (100 depths a request, sync down) | ${loadS.toFixed(1)} s |`);
    console.log(
      `| drain into a second Outpost, unpaced | ${drainS.toFixed(1)} s = ${Math.round(total / drainS)} points/s (sent ${s.depthSentPoints}) |`,
    );
    console.log(
      `| RssAnon with the backlog − with none | ${mib(rssBacklog)} − ${mib(rssNone)} MiB = ${mib(rssBacklog - rssNone)} MiB |`,
    );
    console.log(
      `| rig-0 read back from the upstream | ${remote.text === local.text ? 'identical' : 'DIFFERENT'} (${remote.text.length} bytes) |`,
    );
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
