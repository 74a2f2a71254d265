/**
 * A gateway at rest: what the daemon holds in memory when nothing happens, the footprint a 512-MB Pi pays all
 * day. Each variant is a fresh process on a fresh data dir, left alone OUTPOST_IDLE_SETTLE_MS (`--settle`), then
 * garbage-collected twice and read by idle-probe.ts: RssAnon (what the kernel holds for it, not LMDB's mapped
 * files), V8's heap used (live objects) and reserved (what V8 keeps for growth: it moves several MB from run to
 * run with V8's sizing, which is why RssAnon alone is noisy), and memory outside the heap (lmdb-js's write
 * buffers, mostly untouched, so mostly not resident).
 *
 * Variants, alternated round by round: a bare node process (the floor: Node and V8 alone), this build's
 * `serve` with HTTP, MQTT and CoAP listening (started plainly, and as the systemd unit starts it), and with `--baseline DIR` another build's (a checkout built with
 * `npm run build`), so a change's cost is read side by side in one run.
 *
 *   node dist/scripts/bench/idle.js [--rounds 4] [--settle 8000] [--flags "node flags"]... [--baseline /path/to/other/checkout [--baseline-flags "its unit's node flags"]]
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { intArg, median } from './lib.js';

interface Reading {
  readonly rssAnon: number;
  readonly heapUsed: number;
  readonly heapTotal: number;
  readonly external: number;
  readonly collected: boolean;
}

interface Variant {
  readonly name: string;
  /** node's arguments after the probe's; `dir` is a fresh temp dir */
  readonly args: (dir: string) => string[];
  /** environment beyond the bench's own */
  readonly env?: Readonly<Record<string, string>>;
}

/**
 * How systemd/outpost.service and `npm start` start this build: node's flags and glibc's arena cap
 * (docs/design/memory-budget.md); test/daemon/install.test.ts keeps the two in step.
 */
const AS_STARTED = {
  flags: ['--max-semi-space-size=2', '--max-old-space-size=512'],
  env: { MALLOC_ARENA_MAX: '2', MALLOC_TRIM_THRESHOLD_: '131072' },
};

/** what `--baseline-flags` starts a baseline with: the arena cap, for a build whose unit set no trim threshold */
const BASELINE_ENV = { MALLOC_ARENA_MAX: '2' };
const envText = (env: Readonly<Record<string, string>>): string =>
  Object.entries(env)
    .map(([k, v]) => `${k}=${v}`)
    .join(' ');

const HERE = dirname(fileURLToPath(import.meta.url));
const PROBE = pathToFileURL(join(HERE, 'idle-probe.js')).href;
const THIS_MAIN = resolve(HERE, '../../src/main.js');

function serveArgs(main: string): (dir: string) => string[] {
  return (dir) => [main, 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', join(dir, 'data')];
}

/** Runs one variant to its probe's line, then stops it. */
async function readOnce(v: Variant, settleMs: number): Promise<Reading> {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-bench-idle-'));
  const proc = spawn(process.execPath, ['--expose-gc', '--import', PROBE, ...v.args(dir)], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...v.env, OUTPOST_IDLE_SETTLE_MS: String(settleMs) },
  });
  try {
    return await new Promise<Reading>((res, rej) => {
      let buf = '';
      proc.stderr.on('data', (c: Buffer) => {
        buf += c.toString();
        const m = /idle-probe (\{.*\})\n/.exec(buf);
        if (m?.[1] !== undefined) res(JSON.parse(m[1]) as Reading);
      });
      proc.once('exit', (code) => rej(new Error(`${v.name} exited with ${code} before its reading: ${buf}`)));
    });
  } finally {
    const exited = new Promise<void>((r) => proc.once('exit', () => r()));
    if (proc.exitCode === null) proc.kill('SIGTERM');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  }
}

const mb = (bytes: number): string => (bytes / 1048576).toFixed(1);

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const rounds = intArg(argv, 'rounds', 4);
  const settleMs = intArg(argv, 'settle', 8000);
  const b = argv.indexOf('--baseline');
  const baselineDir = b >= 0 ? argv[b + 1] : undefined;
  const variants: Variant[] = [
    { name: 'bare node (floor)', args: () => ['-e', 'setInterval(() => {}, 60_000)'] },
    { name: 'outpost serve, this build', args: serveArgs(THIS_MAIN) },
    {
      name: `outpost serve, this build as systemd starts it (${AS_STARTED.flags.join(' ')}, ${envText(AS_STARTED.env)})`,
      args: (dir) => [...AS_STARTED.flags, ...serveArgs(THIS_MAIN)(dir)],
      env: AS_STARTED.env,
    },
  ];
  // --flags "...": this build with other node flags (MALLOC_ARENA_MAX=2 as the unit), to weigh one flag against the unit's
  for (let i = argv.indexOf('--flags'); i >= 0; i = argv.indexOf('--flags', i + 1)) {
    const flags = (argv[i + 1] ?? '').split(/\s+/).filter((x) => x !== '');
    variants.push({
      name: `outpost serve, this build with ${flags.join(' ') || 'no flags'}, ${envText(AS_STARTED.env)}`,
      args: (dir) => [...flags, ...serveArgs(THIS_MAIN)(dir)],
      env: AS_STARTED.env,
    });
  }
  if (baselineDir !== undefined) {
    const main = resolve(baselineDir, 'dist/src/main.js');
    if (!existsSync(main)) throw new Error(`--baseline: ${main} not found (run npm run build there)`);
    variants.push({ name: `outpost serve, ${baselineDir}`, args: serveArgs(main) });
    // --baseline-flags "...": the baseline also as its own unit started it
    const bf = argv.indexOf('--baseline-flags');
    if (bf >= 0) {
      const flags = (argv[bf + 1] ?? '').split(/\s+/).filter((x) => x !== '');
      variants.push({
        name: `outpost serve, ${baselineDir} with ${flags.join(' ')}, ${envText(BASELINE_ENV)}`,
        args: (dir) => [...flags, ...serveArgs(main)(dir)],
        env: BASELINE_ENV,
      });
    }
  }
  const readings = new Map<string, Reading[]>(variants.map((v) => [v.name, []]));
  for (let round = 1; round <= rounds; round++) {
    for (const v of variants) {
      const r = await readOnce(v, settleMs);
      if (!r.collected) throw new Error('the probe could not collect garbage (node without --expose-gc?)');
      readings.get(v.name)?.push(r);
      console.error(
        `round ${round}/${rounds} ${v.name}: RssAnon ${mb(r.rssAnon)} MB, heap used ${mb(r.heapUsed)} of ${mb(r.heapTotal)} MB, external ${mb(r.external)} MB`,
      );
    }
  }
  const med = (name: string, k: keyof Omit<Reading, 'collected'>): number =>
    median((readings.get(name) ?? []).map((r) => r[k]));
  const floor = variants[0]?.name ?? '';
  const ours = variants[1]?.name ?? '';
  console.log(
    `idle bench: a fresh process on a fresh data dir, ${settleMs} ms at rest, two full collections, medians of ${rounds} alternated rounds`,
  );
  console.log(
    '| variant | RssAnon MB | heap used MB | heap reserved MB | outside the heap MB | RssAnon vs this build | heap used vs this build |',
  );
  console.log('|---|---:|---:|---:|---:|---:|---:|');
  for (const v of variants) {
    const ratio = (k: 'rssAnon' | 'heapUsed'): string => `${(med(v.name, k) / med(ours, k)).toFixed(2)}×`;
    console.log(
      `| ${v.name} | ${mb(med(v.name, 'rssAnon'))} | ${mb(med(v.name, 'heapUsed'))} | ${mb(med(v.name, 'heapTotal'))} | ${mb(med(v.name, 'external'))} | ${ratio('rssAnon')} | ${ratio('heapUsed')} |`,
    );
  }
  console.log(
    `this build over the floor: RssAnon +${mb(med(ours, 'rssAnon') - med(floor, 'rssAnon'))} MB, heap used +${mb(med(ours, 'heapUsed') - med(floor, 'heapUsed'))} MB`,
  );
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
