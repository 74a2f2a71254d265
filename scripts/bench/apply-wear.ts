/**
 * What the log's applies and compaction write per point at the reference load (50 devices × 5 keys every 5 s, one
 * post at a time: a group commit every 250 ms holding a few devices' posts), in-process on the series store with
 * its write-ahead log, in simulated time (hours of load in minutes), with compaction of every window once it is
 * `store.headWindowMs` (2 h) old, which bench:wear's 15-minute windows never reach: the head holds 2 h of
 * fragments at steady state, and each apply adds to every series' leaf pages.
 *
 * Two head layouts side by side, each on a fresh store:
 *   merged      the daemon's: an apply every `store.applyIntervalMs` (5 min) of load puts all its records' points
 *               of a series into one head fragment per window (store/series/apply.ts, applyGroups);
 *   per commit  one fragment per series and group commit, as applies that put each record on its own made: here
 *               by applying after every commit, so its apply row is not that layout's apply cost, only its
 *               compaction row compares.
 * Bytes are the process's from /proc/self/io per phase (after LMDB's flush): what LMDB passed to its write calls
 * (`wchar`) and what the kernel charged (`write_bytes`, over-charged by large folios on Linux >= 6.16:
 * docs/write-budget.md); the log's pages are left out (bench:wear counts them).
 *
 *   node dist/scripts/bench/apply-wear.js [--hours 4 --apply-minutes 5 --merged-only]
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { kvDouble } from '../../src/model/kv.js';
import type { TsRecord } from '../../src/model/record.js';
import { DEFAULTS } from '../../src/config/index.js';
import { Dictionary } from '../../src/store/encoding/dict.js';
import { openStoreEnv } from '../../src/store/env.js';
import { DEFAULT_STORE_OPTIONS } from '../../src/store/series/options.js';
import { LmdbTimeseriesStore } from '../../src/store/series/store.js';
import { nodeWalFs } from '../../src/store/wal.js';
import { argValue } from './lib.js';

const DEVICES = 50;
const KEYS = 5;
const PERIOD_MS = 5000;
const COMMIT_MS = 250;
const HOURS = argValue('--hours', 4);
/** minutes of load per apply: store.applyIntervalMs (5), or 15 as while the write budget paces commits */
const APPLY_MS = argValue('--apply-minutes', DEFAULTS.store.applyIntervalMs / 60_000) * 60_000;

function io(): { charged: number; calls: number } {
  const s = readFileSync('/proc/self/io', 'utf8');
  const num = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+)$`, 'm').exec(s)?.[1] ?? NaN);
  return { charged: num('write_bytes'), calls: num('wchar') };
}

interface Phase {
  charged: number;
  calls: number;
  points: number;
}

async function run(perCommit: boolean): Promise<{ apply: Phase; compaction: Phase; head: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-apply-wear-'));
  const env = openStoreEnv({ dataDir: dir, mapSizeBytes: 2 ** 30 });
  const s = DEFAULTS.store;
  const store = new LmdbTimeseriesStore(env, new Dictionary(env), {
    ...DEFAULT_STORE_OPTIONS,
    commitDelayMs: 0,
    wal: {
      fs: nodeWalFs(join(dir, 'wal')),
      segmentBytes: s.walSegmentBytes,
      // applies are driven here, on the simulated clock
      applyIntervalMs: 24 * 3_600_000,
      applyMaxPoints: 1e9,
    },
  });
  const apply: Phase = { charged: 0, calls: 0, points: 0 };
  const compaction: Phase = { charged: 0, calls: 0, points: 0 };
  /** the applies before the head holds headWindowMs of fragments: measured, not shown */
  const warmup: Phase = { charged: 0, calls: 0, points: 0 };
  const measure = async (into: Phase, fn: () => Promise<unknown> | undefined): Promise<void> => {
    const before = io();
    await fn();
    await env.root.flushed;
    const after = io();
    into.charged += after.charged - before.charged;
    into.calls += after.calls - before.calls;
  };
  // simulated time: whole hours ago, so every window can be compacted by the end
  const t0 = Math.floor((Date.now() - (HOURS + 3) * 3_600_000) / 3_600_000) * 3_600_000;
  const end = t0 + HOURS * 3_600_000;
  let lastApply = t0;
  let lastCompaction = t0;
  let pending = 0;
  let cutoff = t0;
  try {
    for (let now = t0; now < end; now += COMMIT_MS) {
      // the devices whose 5-s period falls in this commit's 250 ms, at their own offsets
      const posts: Array<Promise<void>> = [];
      for (let d = 0; d < DEVICES; d++) {
        const offset = Math.floor((d * PERIOD_MS) / DEVICES);
        const phase = (now - t0) % PERIOD_MS;
        if (offset < phase || offset >= phase + COMMIT_MS) continue;
        const ts = now + (offset - phase);
        const values = Array.from({ length: KEYS }, (_, k) => [
          `k${k}`,
          kvDouble(Math.round(200 + 50 * Math.sin(ts / 600_000 + d + k)) / 10),
        ]) as TsRecord['values'];
        posts.push(store.write(`device-${d}`, [{ ts, values }]));
        pending += KEYS;
      }
      await Promise.all(posts);
      if (perCommit || now - lastApply >= APPLY_MS) {
        // counted once the head holds headWindowMs of fragments, as it does at steady state
        const steady = now - t0 >= s.headWindowMs;
        await measure(steady ? apply : warmup, () => {
          store.applyLogged();
          return undefined;
        });
        if (steady) apply.points += pending;
        pending = 0;
        lastApply = now;
      }
      if (now - lastCompaction >= s.chunkWindowMs) {
        lastCompaction = now;
        // as the daemon's engine: the windows that ended headWindowMs ago
        cutoff = Math.max(t0, Math.floor((now - s.headWindowMs) / s.chunkWindowMs) * s.chunkWindowMs);
        await measure(compaction, async () => {
          let n = 0;
          for (;;) {
            const r = await store.compactStep(now, 50);
            n += r.compacted;
            if (!r.more) return n;
          }
        });
      }
    }
    await measure(apply, () => {
      store.applyLogged();
      return undefined;
    });
    apply.points += pending;
    compaction.points = Math.max(1, ((cutoff - t0) / PERIOD_MS) * DEVICES * KEYS);
    const head = (env.head.getStats() as { entryCount: number }).entryCount;
    await store.closeLog();
    return { apply, compaction, head };
  } finally {
    await env.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const perPoint = (b: number, p: Phase): string => (b / p.points).toFixed(1);
console.log(
  `apply-wear: ${DEVICES} devices × ${KEYS} keys every ${PERIOD_MS / 1000} s, a group commit every ${COMMIT_MS} ms, ` +
    `${HOURS} h of load in simulated time; bytes per point, LMDB's write calls (kernel's charge)`,
);
console.log(
  '| head layout | points applied at steady state | applies B/point | compaction B/point | head entries left |',
);
console.log('|---|---:|---:|---:|---:|');
for (const [name, perCommit] of [
  [`merged (an apply every ${APPLY_MS / 60_000} min)`, false],
  ['one fragment per group commit', true],
] as const) {
  if (perCommit && process.argv.includes('--merged-only')) continue;
  const r = await run(perCommit);
  const applyCell = perCommit
    ? '(not this layout’s)'
    : `${perPoint(r.apply.calls, r.apply)} (${perPoint(r.apply.charged, r.apply)})`;
  console.log(
    `| ${name} | ${r.apply.points} | ${applyCell} | ${perPoint(r.compaction.calls, r.compaction)} (${perPoint(r.compaction.charged, r.compaction)}) | ${r.head} |`,
  );
}
