/**
 * `npm run bench:cli`: wall time of `outpost latest <device>` locally and remotely next to
 * `node -e 0` (the floor: Node's own start) in the same run, and `outpost query` over a month of 10-s data
 * with `--interval 2h` (AVG), local (data dir read-only) vs REST (remote mode). Medians of RUNS runs each.
 * Then the daemon's ingest latency (sequential one-point posts) alone and while local `outpost query` runs
 * back to back beside it: a local reader must not delay the daemon's commits (no write txn, no lock).
 */
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { argValue, median, spawnListening } from './lib.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const RUNS = argValue('--runs', 15);
const DAYS = argValue('--days', 30);
const POSTS = argValue('--posts', 500);

/** fetch, once more when a kept-alive connection the server closed while idle fails */
async function fetchOnce(url: string, init?: RequestInit): Promise<Response> {
  try {
    return await fetch(url, init);
  } catch {
    return fetch(url, init);
  }
}

/** CPU ms (user + system) of each timed run, read through /usr/bin/time: less moved by other load than wall time */
const cpu = new Map<readonly number[], number[]>();
const TIME = existsSync('/usr/bin/time') ? '/usr/bin/time' : undefined;

/** Wall ms of one run of `node args`; its CPU ms go to cpu.get(into) when /usr/bin/time exists. */
function wall(args: readonly string[], env: NodeJS.ProcessEnv, into: number[]): number {
  const t0 = performance.now();
  if (TIME === undefined) {
    execFileSync(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
  } else {
    const r = spawnSync(TIME, ['-f', 'cpu %U %S', process.execPath, ...args], {
      env: { ...process.env, ...env },
      encoding: 'utf8',
    });
    const m = /cpu ([\d.]+) ([\d.]+)\s*$/.exec(r.stderr);
    if (r.status !== 0 || !m) throw new Error(`${args.join(' ')} failed: ${r.stderr}`);
    const list = cpu.get(into) ?? [];
    list.push((Number(m[1]) + Number(m[2])) * 1000);
    cpu.set(into, list);
  }
  const ms = performance.now() - t0;
  into.push(ms);
  return ms;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-bench-cli-'));
  const data = join(dir, 'data');
  const env = { XDG_CONFIG_HOME: join(dir, 'cfg'), OUTPOST_URL: '' };
  const run = (...a: string[]): string =>
    execFileSync(process.execPath, [MAIN, ...a], { env: { ...process.env, ...env }, encoding: 'utf8' });
  run('user', 'add', '--data-dir', data, '--email', 'b@example.com', '--password', 'pw', '--authority', 'TENANT_ADMIN');
  run('device', 'add', '--data-dir', data, '--name', 'pump-1', '--token', 'PUMP1');
  const { proc, port } = await spawnListening([
    MAIN,
    'serve',
    '--host',
    '127.0.0.1',
    '--port',
    '0',
    '--data-dir',
    data,
  ]);
  const url = `http://127.0.0.1:${port}`;
  try {
    // a month of 10-s points of one key, posted in day-sized batches, ending now
    const end = Math.floor(Date.now() / 10_000) * 10_000;
    const start = end - DAYS * 86_400_000;
    for (let day = start; day < end; day += 86_400_000) {
      const pts: string[] = [];
      for (let ts = day; ts < Math.min(end, day + 86_400_000); ts += 10_000)
        pts.push(`{"ts":${ts},"values":{"t":${(20 + Math.sin(ts / 3.6e6) * 5).toFixed(2)}}}`);
      const r = await fetch(`${url}/api/v1/PUMP1/telemetry`, {
        method: 'POST',
        body: `[${pts.join(',')}]`,
        headers: { 'content-type': 'application/json' },
      });
      if (r.status !== 200) throw new Error(`post failed: ${r.status}`);
    }
    run('login', '--url', url, '--username', 'b@example.com', '--password', 'pw');
    // as a month-old store would be: wait until the daemon has compacted the posted month into chunks and
    // rollups (the head fragments /metrics reports stop falling), at most two minutes
    let last = Infinity;
    for (let i = 0; i < 120; i++) {
      await new Promise((r) => setTimeout(r, 1000));
      const m = /^outpost_compaction_backlog_fragments (\d+)$/m.exec(await (await fetchOnce(`${url}/metrics`)).text());
      const backlog = Number(m?.[1] ?? 0);
      if (backlog >= last) break;
      last = backlog;
    }
    console.log(`compaction backlog settled at ${last} head fragments`);
    // nothing is written until the probes below: a file copy now is a consistent store
    const copy = join(dir, 'copy');
    mkdirSync(copy);
    copyFileSync(join(data, 'outpost.mdb'), join(copy, 'outpost.mdb'));
    const floor: number[] = [];
    const latestLocal: number[] = [];
    const latestRemote: number[] = [];
    const queryLocal: number[] = [];
    const queryRemote: number[] = [];
    const q = [
      'query',
      'pump-1',
      '--keys',
      't',
      '--from',
      String(start),
      '--to',
      String(end),
      '--agg',
      'AVG',
      '--interval',
      '2h',
      '--json',
    ];
    for (let i = 0; i < RUNS; i++) {
      wall(['-e', '0'], env, floor);
      wall([MAIN, 'latest', 'pump-1', '--json', '--data-dir', data], env, latestLocal);
      wall([MAIN, 'latest', 'pump-1', '--json', '--url', url], env, latestRemote);
      wall([MAIN, ...q, '--data-dir', data], env, queryLocal);
      wall([MAIN, ...q, '--url', url], env, queryRemote);
    }
    // ingest p99 alone, then with local queries running back to back (one at a time)
    const posts = async (n: number): Promise<number[]> => {
      const out: number[] = [];
      for (let i = 0; i < n; i++) {
        const t0 = performance.now();
        const r = await fetchOnce(`${url}/api/v1/PUMP1/telemetry`, {
          method: 'POST',
          body: `{"probe":${i}}`,
          headers: { 'content-type': 'application/json' },
        });
        await r.arrayBuffer();
        out.push(performance.now() - t0);
      }
      return out.sort((a, b) => a - b);
    };
    const pct = (xs: number[], p: number): number => xs[Math.min(xs.length - 1, Math.floor(xs.length * p))] as number;
    /** `n` posts while `args` (if any) run back to back as child processes; how many ran, and the latencies */
    const besideOf = async (n: number, args: readonly string[] | undefined): Promise<[number, number[]]> => {
      let stop = false;
      let runs = 0;
      const loop = (async () => {
        while (!stop && args !== undefined) {
          await new Promise<void>((resolve) =>
            execFile(process.execPath, args, { env: { ...process.env, ...env } }, () => resolve()),
          );
          runs++;
        }
      })();
      const lat = await posts(n);
      stop = true;
      await loop;
      return [runs, lat];
    };
    // three conditions in alternating blocks, so a change of machine load falls on all of them alike: alone;
    // beside local queries of the daemon's data dir; and the control, the same queries on a copy of the data
    // dir (same CPU, threads and reads, but not the daemon's store), which shows CPU contention apart
    const BLOCKS = 5;
    const cond: Array<{ name: string; args: readonly string[] | undefined; runs: number; lat: number[] }> = [
      { name: 'alone', args: undefined, runs: 0, lat: [] },
      {
        name: "local month queries on the daemon's data dir",
        args: [MAIN, ...q, '--data-dir', data],
        runs: 0,
        lat: [],
      },
      {
        name: 'control: the same queries on a copy of the data dir',
        args: [MAIN, ...q, '--data-dir', copy],
        runs: 0,
        lat: [],
      },
    ];
    for (let b = 0; b < BLOCKS; b++) {
      for (const c of cond) {
        const [runs, lat] = await besideOf(Math.ceil(POSTS / BLOCKS), c.args);
        c.runs += runs;
        c.lat.push(...lat);
      }
    }
    for (const c of cond) c.lat.sort((x, y) => x - y);
    const f = median(floor);
    const rows: Array<[string, number[]]> = [
      ['node -e 0 (floor)', floor],
      ['outpost latest pump-1 --json (local)', latestLocal],
      ['outpost latest pump-1 --json (remote)', latestRemote],
      [`outpost query, ${DAYS} days of 10-s data, AVG 2h (local)`, queryLocal],
      [`outpost query, ${DAYS} days of 10-s data, AVG 2h (remote/REST)`, queryRemote],
    ];
    const fc = median(cpu.get(floor) ?? [NaN]);
    console.log(
      `| command (${RUNS} runs) | wall ms, median | over the floor | first run | CPU ms (user+sys), median | over the floor |`,
    );
    console.log('|---|---:|---:|---:|---:|---:|');
    for (const [name, xs] of rows) {
      const ms = median(xs);
      const c = median(cpu.get(xs) ?? [NaN]);
      const over = (v: number, base: number): string => (name.includes('floor') ? '' : `+${(v - base).toFixed(0)}`);
      console.log(
        `| ${name} | ${ms.toFixed(0)} | ${over(ms, f)} | ${(xs[0] as number).toFixed(0)} | ${c.toFixed(0)} | ${over(c, fc)} |`,
      );
    }
    console.log('');
    console.log(
      `| daemon ingest, ${POSTS} sequential posts in ${BLOCKS} alternating blocks | beside | p50 ms | p99 ms | max ms |`,
    );
    console.log('|---|---:|---:|---:|---:|');
    for (const c of cond) {
      console.log(
        `| ${c.name} | ${c.args === undefined ? '' : `${c.runs} runs`} | ${pct(c.lat, 0.5).toFixed(1)} | ${pct(c.lat, 0.99).toFixed(1)} | ${(c.lat.at(-1) as number).toFixed(1)} |`,
      );
    }
  } finally {
    proc.kill('SIGTERM');
    await new Promise((r) => proc.once('exit', r));
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
