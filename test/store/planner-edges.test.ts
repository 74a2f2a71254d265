/**
 * The planner told the aggregation function (`BucketSource.bucketAggs(…, fn)`) answers exactly (docs/design/downsampling.md,
 * docs/api.md): with COUNT/SUM/AVG it may answer a raw edge as a rollup bucket minus the rest of that bucket,
 * and merges keep only the fields `fn` needs. A seeded property test compares `finalizeAgg(state, fn)` with
 * brute force over a model of the raw points, for every function, over data with mixed types, huge longs
 * (bigints, and longs near 2^50 whose sums leave the safe range),
 * non-finite doubles, overwrites, deletes and dirty (uncompacted) windows.
 */
import t from 'tap';
import { AGG_FNS, addPoint, emptyAgg } from '../../src/store/rollups/aggregate.js';
import { finalizeAgg } from '../../src/query/aggregate.js';
import { type BucketPlan, bucketsOf, planBuckets } from '../../src/store/planner/buckets.js';
import { aggregateBuckets } from '../../src/query/history.js';
import { type KvValue, kvBool, kvDouble, kvLong, kvString, kvToString } from '../../src/model/kv.js';
import { RollupPlanner } from '../../src/store/planner/planner.js';
import { compactAll, openSeriesStore } from '../helpers/store.js';
import { rng } from '../helpers/prng.js';

const ENTITY = '00000000-0000-0000-0000-0000000000c2';
const HOUR = 3_600_000;
const MIN = 60_000;

const render = (v: KvValue | undefined): string =>
  v === undefined ? '-' : `${v.type}:${kvToString(v)}${Object.is(v.v, -0) ? ':-0' : ''}`;

function brute(model: Map<number, KvValue>, plan: BucketPlan, fn: (typeof AGG_FNS)[number]): string[] {
  const sorted = [...model].sort((a, b) => a[0] - b[0]);
  const out: string[] = [];
  for (const b of bucketsOf(plan)) {
    const agg = emptyAgg();
    for (const [ts, v] of sorted) if (ts >= b.start && ts < b.end) addPoint(agg, ts, v);
    const v = agg.count > 0 ? finalizeAgg(agg, fn) : undefined;
    if (v !== undefined) out.push(`${b.ts} ${render(v)}`);
  }
  return out;
}

const LADDERS: Array<{ windowMs: number; tiersMs: number[]; seed: number; readCacheBytes?: number }> = [
  { windowMs: 20 * MIN, tiersMs: [10 * MIN, HOUR, 24 * HOUR], seed: 11 },
  { windowMs: HOUR, tiersMs: [MIN, 10 * MIN, HOUR, 2 * HOUR], seed: 12 },
  { windowMs: 20 * MIN, tiersMs: [HOUR, 3 * HOUR], seed: 13 },
  // read caches far below one query's needs: decoded blocks and chunks are evicted while the planner runs
  { windowMs: 20 * MIN, tiersMs: [10 * MIN, HOUR, 24 * HOUR], seed: 14, readCacheBytes: 24 * 1024 },
];

// Each ladder runs with COUNT/SUM/AVG buckets answered by their boundaries where possible (the default), and
// with that path off, so the piece-by-piece path (buckets near the head take it) is checked as hard.
for (const boundaries of [true, false])
  for (const ladder of LADDERS)
    t.test(
      `planner with fn equals brute force (window ${ladder.windowMs / MIN} min, tiers ${ladder.tiersMs.map((x) => x / MIN).join('/')} min${ladder.readCacheBytes === undefined ? '' : `, read caches of ${ladder.readCacheBytes} bytes`}${boundaries ? '' : ', boundaries off'})`,
      async (t) => {
        const { store } = openSeriesStore(t, {
          windowMs: ladder.windowMs,
          headWindowMs: HOUR,
          tiersMs: ladder.tiersMs,
          tierRetentionMs: ladder.tiersMs.map(() => 0),
          ...(ladder.readCacheBytes === undefined ? {} : { readCacheBytes: ladder.readCacheBytes }),
        });
        const planner = new RollupPlanner(store, { boundaries });
        const rand = rng(ladder.seed);
        const int = (n: number): number => Math.floor(rand() * n);
        const t0 = 1_700_000_000_000 - (1_700_000_000_000 % (2 * HOUR)) - 5 * HOUR;
        const span = 30 * HOUR;
        const model = new Map<number, KvValue>();
        // Mostly one type per stretch (so chunks use the numeric block modes), sometimes anything.
        let mode = 0;
        const randomValue = (): KvValue => {
          if (mode === 0) return kvDouble(Math.round((rand() - 0.4) * 1e5) / 100);
          if (mode === 1) return kvLong(int(2000) - 500);
          // longs just inside the numeric block modes' bound (2^50): a few of them sum past 2^53
          if (mode === 3) return kvLong((rand() < 0.8 ? 1 : -1) * (2 ** 50 - 1 - int(1000)));
          const r = rand();
          if (r < 0.3) return kvDouble((rand() - 0.5) * 1e6);
          if (r < 0.5) return kvLong(int(2000) - 500);
          if (r < 0.6) return kvLong(BigInt(int(1000)) * 2n ** 53n + 1n);
          if (r < 0.7) return kvString(`s${int(20)}`);
          if (r < 0.75) return kvDouble(rand() < 0.5 ? Infinity : -0);
          if (r < 0.8) return kvBool(rand() < 0.5);
          return kvDouble(Math.round(rand() * 1e4) / 100);
        };
        let queries = 0;
        let subtracted = 0;
        let plainDirty = 0;
        let rawPieces = 0;
        let byBoundaries = 0;
        // the head fragment cache is emptied by every compaction: its peak is what the budget must bound
        let fragmentPeak = 0;
        for (let round = 0; round < 10; round++) {
          mode = round % 4;
          const recs: Array<{ ts: number; values: Array<[string, KvValue]> }> = [];
          const base = t0 + int(span);
          for (let i = 0; i < 600; i++) recs.push({ ts: base + i * 10_000, values: [['x', randomValue()]] });
          const existing = [...model.keys()];
          for (let i = 0; i < 20 && existing.length > 0; i++)
            recs.push({ ts: existing[int(existing.length)] as number, values: [['x', randomValue()]] });
          await store.write(ENTITY, recs);
          for (const r of recs) for (const [, v] of r.values) model.set(r.ts, v);
          if (round % 4 === 3) {
            const ds = t0 + int(span);
            const de = ds + int(2 * HOUR);
            await store.delete(ENTITY, {
              keys: ['x'],
              startTs: ds,
              endTs: de,
              deleteLatest: true,
              rewriteLatest: false,
            });
            for (const ts of [...model.keys()]) if (ts >= ds && ts < de) model.delete(ts);
          }
          const now = t0 + Math.min(span + 2 * HOUR, (round + 1) * 4 * HOUR);
          await compactAll(store, now);

          for (let q = 0; q < 20; q++) {
            const startTs = t0 - HOUR + int(span + 2 * HOUR);
            const endTs = startTs + 1 + int(12 * HOUR);
            const intervals = [10 * MIN, HOUR, 2 * HOUR, 90 * MIN, 25 * MIN, 61_000 + int(3 * HOUR)];
            const interval = intervals[int(intervals.length)] as number;
            const limit = rand() < 0.2 ? 1 + int(20) : undefined;
            const plan = planBuckets(startTs, endTs, interval, { limit, maxIntervals: 1_000_000 });
            for (const fn of AGG_FNS) {
              const states = [...planner.bucketAggs(ENTITY, 'x', plan, fn)];
              subtracted += planner.lastStats.subtractedPieces;
              plainDirty += planner.lastStats.plainDirtyPieces;
              rawPieces += planner.lastStats.rawPieces;
              byBoundaries += planner.lastStats.boundaryBuckets;
              fragmentPeak = Math.max(fragmentPeak, store.readCacheUsage().fragmentBytes);
              const got = states.flatMap(({ index, agg }) => {
                const v = finalizeAgg(agg, fn);
                const b = [...bucketsOf(plan)][index];
                return v === undefined || b === undefined ? [] : [`${b.ts} ${render(v)}`];
              });
              const viaHistory = [...aggregateBuckets(store, ENTITY, 'x', plan, fn)].map(
                (p) => `${p.ts} ${render(p.value)}`,
              );
              const want = brute(model, plan, fn);
              const label = `round ${round} query ${q} ${fn}: [${startTs - t0}, ${endTs - t0}) interval ${interval}${limit ? ` limit ${limit}` : ''}`;
              if (got.join('\n') !== want.join('\n')) t.same(got, want, label);
              if (viaHistory.join('\n') !== want.join('\n')) t.same(viaHistory, want, `${label} (aggregateBuckets)`);
              queries++;
            }
          }
        }
        t.pass(`${queries} random (query, fn) pairs matched brute force`);
        if (!boundaries) t.equal(byBoundaries, 0, 'no bucket answered by its boundaries');
        else if ((ladder.tiersMs[0] ?? Number.POSITIVE_INFINITY) <= ladder.windowMs)
          t.ok(byBoundaries > 500, `buckets answered by their boundaries: ${byBoundaries}`);
        if (!boundaries && (ladder.tiersMs[0] ?? Number.POSITIVE_INFINITY) <= ladder.windowMs)
          t.ok(subtracted > 50, `edges answered as bucket minus rest: ${subtracted}`);
        t.ok(plainDirty > 20, `dirty pieces summed from fragment columns: ${plainDirty} of ${rawPieces} raw pieces`);
        if (ladder.readCacheBytes !== undefined) {
          const use = store.readCacheUsage();
          // each cache may exceed its share by the one entry it just took (a block of ≤ 120 buckets, a chunk)
          t.ok(
            use.chunkBytes <= use.chunkBudget + 4096,
            `decoded chunks held ${use.chunkBytes} B of a ${use.chunkBudget} B budget`,
          );
          t.ok(
            fragmentPeak > 0 && fragmentPeak <= use.fragmentBudget + 4096,
            `decoded head fragments held at most ${fragmentPeak} B of a ${use.fragmentBudget} B budget`,
          );
          t.ok(use.chunkBytes > 0 && use.rollupBytes > 0, 'both other caches were in use');
          t.ok(
            use.rollupBytes <= ladder.readCacheBytes - use.chunkBudget - use.fragmentBudget + 120 * 640 + 320,
            `decoded rollup blocks held ${use.rollupBytes} B`,
          );
        }
      },
    );
