/**
 * `npm run bench:soak -- [--minutes N] [--seed S[,S2..]] [--http]`: the seeded fault run of docs/design/soak.md, one row
 * per seed. A failing run prints its seed, what failed and its fault log, keeps its daemons' logs in a file, and
 * exits 1; the same seed replays the same schedule of faults (the machine's timing still varies).
 */
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { intArg } from './lib.js';
import { table } from './soak-check.js';
import { runSoak } from './soak-run.js';

const minutes = intArg(process.argv, 'minutes', 10);
const transport = process.argv.includes('--http') ? 'http' : 'mqtt';
const i = process.argv.indexOf('--seed');
const seeds = (i >= 0 ? (process.argv[i + 1] ?? '') : String(Date.now() % 1_000_000)).split(',').map((s) => Number(s));
if (seeds.some((s) => !Number.isInteger(s) || s < 0))
  throw new Error('--seed must be non-negative integers, comma-separated');

const reports = [];
let failed = false;
for (const seed of seeds) {
  const logs: string[] = [];
  const r = await runSoak({
    minutes,
    seed,
    transport,
    log: (l) => process.stderr.write(`[seed ${seed}] ${l}\n`),
    daemonLogs: (lines) => logs.push(...lines),
  });
  reports.push(r);
  if (r.failures.length > 0) {
    failed = true;
    const file = join(tmpdir(), `outpost-soak-seed-${seed}.log`);
    const samples = r.samples.map((s) => `${s.daemon}#${s.run} age ${s.age} ms: RssAnon ${s.rssAnon} B, ${s.fds} fds`);
    writeFileSync(file, `${logs.join('\n')}\n${samples.join('\n')}\n`);
    process.stderr.write(
      `\nseed ${seed} FAILED (replay: npm run bench:soak -- --minutes ${minutes} --seed ${seed}${transport === 'http' ? ' --http' : ''}); daemon logs: ${file}\n` +
        `${r.failures.join('\n')}\nfault log:\n${r.faultLog.map((f) => `  ${f.at} s ${f.kind}: ${f.detail}${f.drainMs === undefined ? '' : `, drained in ${f.drainMs} ms`}`).join('\n')}\n`,
    );
  }
}
process.stdout.write(`${table(reports)}\n`);
process.exit(failed ? 1 : 0);
