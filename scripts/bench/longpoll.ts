/**
 * Long-poll benchmark: hold 10,000 concurrent `GET /attributes/updates` polls (one per device, raw
 * keep-alive `net` sockets, not fetches), then change one shared attribute of every device through REST and
 * time until every poll has been answered. Reports the daemon's RssAnon (/proc/<pid>/status) idle and with the
 * polls open (target < 120 MB).
 *
 * Baseline measured in the same run: the same 10,000 REST writes with no poll open, so the table shows what
 * waking the polls adds to the writes themselves, and RssAnon of the idle daemon. Each round runs on a fresh
 * daemon (same data dir); medians over rounds are reported. Loopback only; bounded by --devices and --rounds.
 *
 *   npm run bench:longpoll [-- --devices 10000 --rounds 3 --concurrency 64]
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { hashPassword } from '../../src/auth/password.js';
import { EntityStore } from '../../src/store/entities.js';
import { openStoreEnv } from '../../src/store/env.js';
import { intArg, median, rssAnonBytes, spawnListening } from './lib.js';

interface Args {
  devices: number;
  rounds: number;
  concurrency: number;
}

function parseArgs(argv: string[]): Args {
  const get = (name: string, def: number): number => intArg(argv, name, def);
  return { devices: get('devices', 10_000), rounds: get('rounds', 3), concurrency: get('concurrency', 64) };
}

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const MB = 1024 * 1024;

async function setup(dataDir: string, n: number): Promise<Array<{ id: string; token: string }>> {
  const env = openStoreEnv({ dataDir, mapSizeBytes: 4 * 1024 * MB });
  const entities = new EntityStore(env);
  await entities.ensureTenant();
  await entities.createUser({
    email: 'bench@example.com',
    passwordHash: await hashPassword('bench-pw'),
    authority: 'TENANT_ADMIN',
  });
  const out: Array<{ id: string; token: string }> = [];
  for (let from = 0; from < n; from += 500) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(500, n - from) }, (_, i) =>
        entities.createDevice({ name: `lp-${from + i}`, token: `lp-token-${from + i}` }),
      ),
    );
    for (const d of batch) out.push({ id: d.id, token: d.token });
  }
  await env.close();
  return out;
}

function startDaemon(dataDir: string): Promise<{ proc: ChildProcess; port: number }> {
  // every poll comes from the one loopback address: lift the per-address cap the daemon has by default
  const config = `${dataDir}.config.json`;
  writeFileSync(config, JSON.stringify({ longPoll: { maxPerAddress: 0 } }));
  return spawnListening(
    [MAIN, 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', dataDir, '--config', config],
    'daemon',
  );
}

async function openPollCount(base: string, auth: Record<string, string>): Promise<number> {
  const r = await fetch(`${base}/api/outpost/status`, { headers: auth });
  return ((await r.json()) as { longPoll: { openPolls: number } }).longPoll.openPolls;
}

async function waitPolls(base: string, auth: Record<string, string>, want: number): Promise<void> {
  const deadline = Date.now() + 60_000;
  while ((await openPollCount(base, auth)) !== want) {
    if (Date.now() > deadline) throw new Error(`open polls never reached ${want}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** One shared attribute per device through REST, `concurrency` requests in flight. Resolves when all are 200. */
async function writeAll(
  base: string,
  auth: Record<string, string>,
  devices: ReadonlyArray<{ id: string }>,
  round: number,
  concurrency: number,
): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < devices.length) {
      const d = devices[next++] as { id: string };
      const r = await fetch(`${base}/api/plugins/telemetry/DEVICE/${d.id}/attributes/SHARED_SCOPE`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json' },
        body: `{"round":${round}}`,
      });
      await r.arrayBuffer();
      if (r.status !== 200) throw new Error(`write failed: ${r.status}`);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

/** Opens one raw keep-alive poll per device; `answered` resolves once every socket has received a 200. */
async function openPolls(
  port: number,
  devices: ReadonlyArray<{ token: string }>,
): Promise<{ sockets: Socket[]; answered: Promise<number> }> {
  const sockets: Socket[] = [];
  let left = devices.length;
  let done!: (at: number) => void;
  let fail!: (e: Error) => void;
  const answered = new Promise<number>((resolve, reject) => {
    done = resolve;
    fail = reject;
  });
  for (let from = 0; from < devices.length; from += 500) {
    await Promise.all(
      devices.slice(from, from + 500).map(
        (d) =>
          new Promise<void>((resolve, reject) => {
            const s = connect(port, '127.0.0.1', () => {
              s.write(
                `GET /api/v1/${d.token}/attributes/updates?timeout=300000 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n`,
              );
              resolve();
            });
            let seen = false;
            s.on('data', (chunk) => {
              if (seen) return;
              seen = true;
              if (!chunk.toString('latin1', 0, 12).startsWith('HTTP/1.1 200'))
                fail(new Error(`poll answered: ${chunk.toString().slice(0, 80)}`));
              if (--left === 0) done(performance.now());
            });
            s.on('error', reject);
            sockets.push(s);
          }),
      ),
    );
  }
  return { sockets, answered };
}

async function stopDaemon(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  proc.kill('SIGTERM');
  await exited;
}

interface Round {
  idle: number;
  open: number;
  after: number;
  baselineMs: number;
  writesWithPollsMs: number;
  fanoutMs: number;
  tailMs: number;
}

/**
 * One round on a FRESH daemon (so rounds are comparable and garbage of earlier rounds does not count as poll
 * memory): warm up, RssAnon idle, open every poll, RssAnon open, one shared write per device timed until every
 * poll is answered, drop the polls, then the same writes with no poll open (the baseline).
 */
async function round(
  dataDir: string,
  devices: ReadonlyArray<{ id: string; token: string }>,
  no: number,
  concurrency: number,
): Promise<Round> {
  const { proc, port } = await startDaemon(dataDir);
  try {
    const pid = proc.pid as number;
    const base = `http://127.0.0.1:${port}`;
    const login = await fetch(`${base}/api/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: 'bench@example.com', password: 'bench-pw' }),
    });
    const auth = { 'X-Authorization': `Bearer ${((await login.json()) as { token: string }).token}` };
    // Warm-up: JIT and LMDB pages for the write path, so "idle" is a running daemon, not a cold one.
    await writeAll(base, auth, devices.slice(0, 200), -1, concurrency);
    const idle = rssAnonBytes(pid);

    const { sockets, answered } = await openPolls(port, devices);
    await waitPolls(base, auth, devices.length);
    const open = rssAnonBytes(pid);
    const t1 = performance.now();
    await writeAll(base, auth, devices, no * 2, concurrency);
    const writesDone = performance.now();
    const allAnswered = await answered;
    for (const s of sockets) s.destroy();
    await waitPolls(base, auth, 0);

    const t0 = performance.now();
    await writeAll(base, auth, devices, no * 2 + 1, concurrency);
    const baselineMs = performance.now() - t0;
    return {
      idle,
      open,
      after: rssAnonBytes(pid),
      baselineMs,
      writesWithPollsMs: writesDone - t1,
      fanoutMs: allAnswered - t1,
      tailMs: Math.max(0, allAnswered - writesDone),
    };
  } finally {
    await stopDaemon(proc);
  }
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const dataDir = mkdtempSync(join(tmpdir(), 'outpost-bench-longpoll-'));
  try {
    const devices = await setup(dataDir, args.devices);
    const rounds: Round[] = [];
    for (let no = 1; no <= args.rounds; no++) rounds.push(await round(dataDir, devices, no, args.concurrency));
    const med = (f: (r: Round) => number): number => median(rounds.map(f));
    const idle = med((r) => r.idle);
    const open = med((r) => r.open);

    const n = args.devices.toLocaleString('en-US');
    const mb = (b: number): string => (b / MB).toFixed(1);
    const row = (cells: string[]): string => `| ${cells.join(' | ')} |`;
    console.log(
      `\nLong-poll: ${n} devices, ${args.rounds} rounds (fresh daemon each), ${args.concurrency} concurrent REST writers, medians\n`,
    );
    console.log(row(['metric', 'baseline: no polls open', `${n} polls open`, 'ratio']));
    console.log(row(['---', '---:', '---:', '---:']));
    console.log(row(['daemon RssAnon (MB)', `${mb(idle)} (idle)`, mb(open), `${(open / idle).toFixed(2)}x`]));
    console.log(row(['RssAnon per open poll (KB)', '-', ((open - idle) / 1024 / args.devices).toFixed(2), '-']));
    console.log(
      row([
        `${n} shared-attribute REST writes (ms)`,
        med((r) => r.baselineMs).toFixed(0),
        med((r) => r.writesWithPollsMs).toFixed(0),
        `${(med((r) => r.writesWithPollsMs) / med((r) => r.baselineMs)).toFixed(2)}x`,
      ]),
    );
    console.log(row(['first write → every poll answered (ms)', '-', med((r) => r.fanoutMs).toFixed(0), '-']));
    console.log(row(['last write acknowledged → last poll answered (ms)', '-', med((r) => r.tailMs).toFixed(1), '-']));
    console.log(row(['daemon RssAnon at round end, polls closed (MB)', '-', mb(med((r) => r.after)), '-']));
    console.log(`\nper round RssAnon open (MB): ${rounds.map((r) => mb(r.open)).join(', ')}`);
    console.log(`target: RssAnon with polls open < 120 MB → ${open < 120 * MB ? 'met' : 'NOT met'}`);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(`${dataDir}.config.json`, { force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
