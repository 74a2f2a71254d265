/**
 * The downsampling planner answers exactly (docs/design/downsampling.md): a seeded property test writes random
 * data (mixed types, out-of-order points, same-ts overwrites, deletes, compactions that leave some windows
 * dirty), runs random (startTs, endTs, interval, limit) queries through the store's BucketSource and compares
 * every aggregation function with brute force over a model of the raw points.
 */
import t from 'tap';
import { AGG_FNS, type BucketAgg, addPoint, emptyAgg } from '../../src/store/rollups/aggregate.js';
import { finalizeAgg } from '../../src/query/aggregate.js';
import { type BucketPlan, bucketsOf, planBuckets } from '../../src/store/planner/buckets.js';
import { type KvValue, kvBool, kvDouble, kvLong, kvString, kvToString } from '../../src/model/kv.js';
import { RollupPlanner } from '../../src/store/planner/planner.js';
import { compactAll, openSeriesStore } from '../helpers/store.js';
import { rng } from '../helpers/prng.js';

const ENTITY = '00000000-0000-0000-0000-00000000000a';
const HOUR = 3_600_000;
const MIN = 60_000;

function brute(model: Map<number, KvValue>, plan: BucketPlan): Array<{ index: number; agg: BucketAgg }> {
  const sorted = [...model].sort((a, b) => a[0] - b[0]);
  const out: Array<{ index: number; agg: BucketAgg }> = [];
  let index = 0;
  for (const b of bucketsOf(plan)) {
    const agg = emptyAgg();
    for (const [ts, v] of sorted) if (ts >= b.start && ts < b.end) addPoint(agg, ts, v);
    if (agg.count > 0) out.push({ index, agg });
    index++;
  }
  return out;
}

const render = (v: KvValue | undefined): string => (v === undefined ? '-' : `${v.type}:${kvToString(v)}`);

interface Ladder {
  windowMs: number;
  tiersMs: number[];
  seed: number;
  minRollupBuckets: number;
}

const LADDERS: Ladder[] = [
  // tiers finer than, equal to and coarser than the chunk window
  { windowMs: HOUR, tiersMs: [MIN, 10 * MIN, HOUR, 2 * HOUR], seed: 20261121, minRollupBuckets: 1000 },
  // the default shape (20-min chunks), and a finest tier coarser than a window (built from raw chunks)
  { windowMs: 20 * MIN, tiersMs: [10 * MIN, HOUR, 24 * HOUR], seed: 7, minRollupBuckets: 200 },
  { windowMs: 20 * MIN, tiersMs: [HOUR, 3 * HOUR], seed: 99, minRollupBuckets: 50 },
];

for (const ladder of LADDERS)
  t.test(
    `planner equals brute force over raw points (window ${ladder.windowMs / MIN} min, tiers ${ladder.tiersMs.map((x) => x / MIN).join('/')} min)`,
    async (t) => {
      const { store } = openSeriesStore(t, {
        windowMs: ladder.windowMs,
        headWindowMs: HOUR,
        tiersMs: ladder.tiersMs,
        tierRetentionMs: ladder.tiersMs.map(() => 0),
      });
      const planner = new RollupPlanner(store);
      const rand = rng(ladder.seed);
      const int = (n: number): number => Math.floor(rand() * n);
      const t0 = 1_700_000_000_000 - (1_700_000_000_000 % (2 * HOUR)) - 7 * HOUR;
      const span = 36 * HOUR;
      const model = new Map<number, KvValue>();
      const randomValue = (): KvValue => {
        const r = rand();
        if (r < 0.45) return kvDouble(Math.round((rand() - 0.3) * 1e5) / 100);
        if (r < 0.55) return kvDouble((rand() - 0.5) * 1e6);
        if (r < 0.9) return kvLong(int(2000) - 500);
        if (r < 0.96) return kvString(`s${int(50)}`);
        return kvBool(rand() < 0.5);
      };
      let rollupBucketsUsed = 0;
      let queries = 0;
      let now = t0;
      for (let round = 0; round < 12; round++) {
        // A batch of writes: mostly regular-ish 10 s data, plus out-of-order points and overwrites of old ts.
        const recs: Array<{ ts: number; values: Array<[string, KvValue]> }> = [];
        const base = t0 + int(span);
        for (let i = 0; i < 400; i++)
          recs.push({ ts: base + i * 10_000 + int(3) * 1000, values: [['x', randomValue()]] });
        const existing = [...model.keys()];
        for (let i = 0; i < 30 && existing.length > 0; i++)
          recs.push({ ts: existing[int(existing.length)] as number, values: [['x', randomValue()]] });
        for (let i = 0; i < 20; i++) recs.push({ ts: t0 + int(span), values: [['x', randomValue()]] });
        await store.write(ENTITY, recs);
        for (const r of recs) for (const [, v] of r.values) model.set(r.ts, v);
        if (round % 3 === 1) {
          const ds = t0 + int(span);
          const de = ds + int(3 * HOUR);
          await store.delete(ENTITY, { keys: ['x'], startTs: ds, endTs: de, deleteLatest: true, rewriteLatest: false });
          for (const ts of [...model.keys()]) if (ts >= ds && ts < de) model.delete(ts);
        }
        // Compact up to a moving "now", so later windows stay dirty (in head) for some queries.
        now = t0 + Math.min(span + 2 * HOUR, (round + 1) * 4 * HOUR);
        await compactAll(store, now);

        for (let q = 0; q < 25; q++) {
          const startTs = t0 - HOUR + int(span + 2 * HOUR);
          const endTs = startTs + 1 + int(10 * HOUR);
          const intervals = [MIN, 10 * MIN, HOUR, 2 * HOUR, 3 * HOUR, 90 * MIN, 61_000 + int(4 * HOUR)];
          const interval = intervals[int(intervals.length)] as number;
          const limit = rand() < 0.2 ? 1 + int(20) : undefined;
          const plan = planBuckets(startTs, endTs, interval, { limit, maxIntervals: 1_000_000 });
          const got = [...planner.bucketAggs(ENTITY, 'x', plan)];
          rollupBucketsUsed += planner.lastStats.rollupBuckets;
          const want = brute(model, plan);
          const label = `round ${round} query ${q}: [${startTs - t0}, ${endTs - t0}) interval ${interval}${limit ? ` limit ${limit}` : ''}`;
          const fmt = (xs: Array<{ index: number; agg: BucketAgg }>): string[] =>
            xs.map((x) => `${x.index} ${AGG_FNS.map((fn) => `${fn}=${render(finalizeAgg(x.agg, fn))}`).join(' ')}`);
          const g = fmt(got);
          const w = fmt(want);
          if (g.join('\n') !== w.join('\n')) t.same(g, w, label);
          queries++;
        }
      }
      t.pass(`${queries} random queries matched brute force`);
      t.ok(
        rollupBucketsUsed > ladder.minRollupBuckets,
        `rollup buckets were used (${rollupBucketsUsed}), not only raw points`,
      );
      t.equal(store.counters.droppedLatePoints, 0);
    },
  );
