/**
 * Retention and the disk budget (docs/design/downsampling.md, docs/design/storage.md): raw chunks go first and rollups answer for the range they
 * covered; the budget drops the oldest raw windows until live pages fit; tier retention never costs exactness;
 * late points below the raw horizon are counted; the engine runs in bounded steps and stops cleanly.
 * Fake clock: the engine reads `now` from the test.
 */
import t from 'tap';
import { AGG_FNS, type BucketAgg, addPoint, emptyAgg } from '../../src/store/rollups/aggregate.js';
import { finalizeAgg } from '../../src/query/aggregate.js';
import { type BucketPlan, bucketsOf, planBuckets } from '../../src/store/planner/buckets.js';
import { type KvValue, kvDouble, kvLong, kvToString } from '../../src/model/kv.js';
import { windowStart } from '../../src/store/series/chunks.js';
import { readOrderedI64 } from '../../src/store/encoding/codec.js';
import { DownsampleEngine, type EngineOptions, liveBytes } from '../../src/store/background/downsample.js';
import type { LmdbTimeseriesStore } from '../../src/store/series/store.js';
import type { Teardown } from '../helpers/server.js';
import { compactAll, openSeriesStore } from '../helpers/store.js';
import { waitFor } from '../helpers/wait.js';

const MIN = 60_000;
const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const ENTITY = '00000000-0000-0000-0000-0000000000cc';
const T0 = 1_700_006_400_000 - (1_700_006_400_000 % DAY);
const STEP = 30_000;
const POINTS = (3 * DAY) / STEP;

function setup(t: Teardown, tierRetentionMs = [0, 0, 0]): { store: LmdbTimeseriesStore; dataDir: string } {
  const { store, dataDir } = openSeriesStore(t, {
    windowMs: 20 * MIN,
    headWindowMs: HOUR,
    tiersMs: [10 * MIN, HOUR, DAY],
    tierRetentionMs,
  });
  return { store, dataDir };
}

/** 3 days of 30-s points: longs with a double every 7th point, in key "v" and as many copies as asked. */
async function load(store: LmdbTimeseriesStore, copies = 0): Promise<Map<number, KvValue>> {
  const model = new Map<number, KvValue>();
  for (let from = 0; from < POINTS; from += 1000) {
    const recs = [];
    for (let i = from; i < Math.min(POINTS, from + 1000); i++) {
      const v = i % 7 === 0 ? kvDouble(i / 4) : kvLong(i);
      model.set(T0 + i * STEP, v);
      const values: Array<[string, KvValue]> = [['v', v]];
      for (let c = 0; c < copies; c++) values.push([`v${c}`, v]);
      recs.push({ ts: T0 + i * STEP, values });
    }
    await store.write(ENTITY, recs);
  }
  return model;
}

function engine(
  store: LmdbTimeseriesStore,
  dataDir: string,
  now: () => number,
  opts: Partial<EngineOptions> = {},
): DownsampleEngine {
  return new DownsampleEngine(
    store,
    { rawRetentionMs: 0, maxDiskBytes: 0, stepBudgetMs: 4, sweepIntervalMs: 50, dataDir, ...opts },
    now,
  );
}

async function drain(e: DownsampleEngine): Promise<number> {
  let steps = 0;
  while (await e.step()) if (++steps > 5000) throw new Error('engine never settles');
  return steps;
}

const render = (v: KvValue | undefined): string => (v === undefined ? '-' : `${v.type}:${kvToString(v)}`);
const show = (xs: Array<{ index: number; agg: BucketAgg }>): string[] =>
  xs.map((x) => `${x.index} ${AGG_FNS.map((fn) => render(finalizeAgg(x.agg, fn))).join(' ')}`);

function brute(model: Map<number, KvValue>, plan: BucketPlan): Array<{ index: number; agg: BucketAgg }> {
  const out: Array<{ index: number; agg: BucketAgg }> = [];
  let index = 0;
  for (const b of bucketsOf(plan)) {
    const agg = emptyAgg();
    for (const [ts, v] of model) if (ts >= b.start && ts < b.end) addPoint(agg, ts, v);
    if (agg.count > 0) out.push({ index, agg });
    index++;
  }
  return out;
}

t.test('raw retention: old chunks go, rollups answer for their range', async (t) => {
  const { store, dataDir } = setup(t);
  const model = await load(store);
  const newest = T0 + (POINTS - 1) * STEP;
  await drain(engine(store, dataDir, () => newest + MIN));
  const eng = engine(store, dataDir, () => newest + MIN, { rawRetentionMs: DAY });
  await drain(eng);
  const horizon = windowStart(newest - DAY, 20 * MIN);
  const st = eng.stats();
  t.equal(st.rawHorizonTs, horizon, 'raw horizon = newest − retention, window aligned');
  t.equal(st.headFragments, 3, 'only the last hour (3 windows) is left in head');
  const raw = [
    ...store.range(ENTITY, 'v', { startTs: Number.MIN_SAFE_INTEGER, endTs: Number.MAX_SAFE_INTEGER, order: 'ASC' }),
  ];
  t.equal(raw[0]?.ts, horizon, 'the oldest raw point left is at the horizon');
  t.equal(raw.length, [...model.keys()].filter((ts) => ts >= horizon).length, 'every point after the horizon kept');
  t.ok(
    st.droppedRawChunks > 0 && st.droppedRawPoints === POINTS - raw.length,
    `dropped ${st.droppedRawPoints} raw points in ${st.droppedRawChunks} chunks`,
  );

  // Aligned to the tiers, answers over the dropped range stay exact.
  const aligned = planBuckets(T0 + HOUR, horizon, HOUR, { maxIntervals: 700 });
  t.same(
    show([...store.bucketAggs(ENTITY, 'v', aligned)] as Array<{ index: number; agg: BucketAgg }>),
    show(brute(model, aligned)),
    'hour buckets from rollups = raw',
  );
  // Unaligned: each 10-min rollup bucket is counted in the request bucket holding its start (docs/design/downsampling.md).
  const unaligned = planBuckets(T0 + 7 * MIN, T0 + 5 * HOUR + 7 * MIN, HOUR, { maxIntervals: 700 });
  const counts = [...store.bucketAggs(ENTITY, 'v', unaligned)].map((b) => b.agg.count);
  const approx = [...bucketsOf(unaligned)].map(
    (b) =>
      [...model.keys()].filter((ts) => {
        const tenMin = windowStart(ts, 10 * MIN);
        return tenMin >= b.start && tenMin < b.end;
      }).length,
  );
  t.same(counts, approx, 'edge approximation: whole 10-min buckets by start');

  // A late point below the horizon into a window that has rollups is dropped and counted.
  await store.write(ENTITY, [{ ts: T0 + 5 * MIN + 1, values: [['v', kvLong(1)]] }]);
  await drain(eng);
  t.equal(eng.stats().droppedLatePoints, 1, 'late point counted as dropped');
  t.equal([...store.range(ENTITY, 'v', { startTs: T0, endTs: T0 + HOUR, order: 'ASC' })].length, 0, 'and not stored');
});

t.test('disk budget: the oldest raw windows go first, rollups stay', async (t) => {
  const { store, dataDir } = setup(t);
  await load(store);
  const newest = T0 + (POINTS - 1) * STEP;
  const eng = engine(store, dataDir, () => newest + MIN);
  await drain(eng);
  const full = liveBytes(store.env);
  const rollupBlocks = eng.stats().rollupBlocks;
  const chunks = eng.stats().chunks;
  const budgeted = engine(store, dataDir, () => newest + MIN, { maxDiskBytes: Math.floor(full * 0.95) });
  await drain(budgeted);
  const st = budgeted.stats();
  t.ok(st.liveBytes <= 0.9 * st.maxDiskBytes, `live ${st.liveBytes} B ≤ 90% of ${st.maxDiskBytes} B`);
  t.ok(
    st.droppedRawChunks > 0 && st.chunks === chunks - st.droppedRawChunks,
    `dropped ${st.droppedRawChunks} of ${chunks} chunks`,
  );
  t.equal(st.rollupBlocks, rollupBlocks, 'rollup blocks untouched');
  t.ok(st.rawHorizonTs > T0, 'the horizon moved past the oldest window');
  const first = [
    ...store.range(ENTITY, 'v', {
      startTs: Number.MIN_SAFE_INTEGER,
      endTs: Number.MAX_SAFE_INTEGER,
      order: 'ASC',
      limit: 1,
    }),
  ][0];
  t.equal(first?.ts, st.rawHorizonTs, 'raw data starts at the horizon: the oldest went first');
});

t.test('a sweep cut short by a restart is finished after it, so the budget holds again', async (t) => {
  const { store, dataDir } = setup(t);
  await load(store, 3);
  const newest = T0 + (POINTS - 1) * STEP;
  const now = (): number => newest + MIN;
  await drain(engine(store, dataDir, now));
  // A zero step budget removes one key per step: the first window's sweep over 4 series takes 4 steps.
  const opts = { maxDiskBytes: Math.floor(liveBytes(store.env) * 0.95), stepBudgetMs: 0 };
  const first = engine(store, dataDir, now, opts);
  while (first.stats().droppedRawChunks === 0) await first.step();
  const horizon = first.stats().rawHorizonTs;
  const below = (): number =>
    [...store.env.chunks.getKeys({})].filter((k) => readOrderedI64(k as Buffer, 8) < horizon).length;
  t.equal(below(), 3, 'stopped after one step of the sweep: 3 chunks below the persisted horizon are left');

  // The daemon restarts: a new engine, the horizon read back from disk, the sweep's progress gone with memory.
  const second = engine(store, dataDir, now, opts);
  await drain(second);
  t.equal(below(), 0, 'the next engine drops what the cut-short sweep left');
  const st = second.stats();
  t.ok(
    st.rawHorizonTs > horizon && st.liveBytes <= 0.9 * opts.maxDiskBytes,
    `and the budget is enforced again (horizon moved on; live ${st.liveBytes} B)`,
  );
});

t.test('disk budget: over it before anything is compacted, the chunks compacted later still go', async (t) => {
  const { store, dataDir } = setup(t);
  await load(store, 3);
  const newest = T0 + (POINTS - 1) * STEP;
  // Everything is still in the head: the first plan finds no chunk to drop.
  const eng = engine(store, dataDir, () => newest + MIN, { maxDiskBytes: Math.floor(liveBytes(store.env) * 0.5) });
  await drain(eng);
  const st = eng.stats();
  t.ok(st.compactedWindows > 0, `compaction made chunks of ${st.compactedWindows} windows`);
  t.ok(
    st.droppedRawChunks > 0 && st.liveBytes <= 0.9 * st.maxDiskBytes,
    `and the budget then dropped ${st.droppedRawChunks} of them (live ${st.liveBytes} of ${st.maxDiskBytes} B)`,
  );
});

t.test('tier retention drops blocks but the planner stays exact (raw kept)', async (t) => {
  const { store, dataDir } = setup(t, [DAY, 0, 0]);
  const model = await load(store);
  const newest = T0 + (POINTS - 1) * STEP;
  await compactAll(store, newest + MIN); // before retention runs
  const eng = engine(store, dataDir, () => newest + MIN);
  await drain(eng);
  const st = eng.stats();
  t.ok(st.droppedRollupBlocks > 0, `${st.droppedRollupBlocks} 10-min blocks dropped`);
  // A late point below the tier-0 horizon rebuilds the other tiers from raw, not from the missing tier 0.
  await store.write(ENTITY, [{ ts: T0 + 5 * MIN + 1, values: [['v', kvLong(-5)]] }]);
  model.set(T0 + 5 * MIN + 1, kvLong(-5));
  await drain(eng);
  t.ok((st.tierHorizonTs[0] as number) > T0, 'tier 0 horizon moved');
  const plan = planBuckets(T0 + 7 * MIN, newest, 3 * HOUR, { maxIntervals: 700 });
  t.same(
    show([...store.bucketAggs(ENTITY, 'v', plan)] as Array<{ index: number; agg: BucketAgg }>),
    show(brute(model, plan)),
    'exact over the whole range',
  );
});

t.test('engine: bounded steps, clean start/stop', async (t) => {
  const { store, dataDir } = setup(t);
  await load(store);
  // A step stops once its budget is spent, checked after each window: with no budget, every step folds one
  // window. How long a 4-ms step holds the main thread is bench:downsample's figure, on a quiet machine.
  const eng = engine(store, dataDir, () => T0 + 10 * DAY, { stepBudgetMs: 0 });
  eng.start();
  await waitFor(() => eng.stats().compactedWindows >= 30, { timeout: 120_000, message: '30 windows compacted' });
  await eng.stop();
  const st = eng.stats();
  t.ok(st.compactedWindows >= 30, `${st.compactedWindows} windows compacted`);
  t.ok(st.steps >= st.compactedWindows, `in ${st.steps} steps: one window a step`);
  const before = st.steps;
  // no event says "no step": wait out more than two of the engine's 50-ms sweep intervals
  await new Promise((r) => setTimeout(r, 120));
  t.equal(eng.stats().steps, before, 'no step after stop()');
});

t.test(
  'engine: foreground first — a few % under saturating writes, about a tenth under light ones, half once they stop',
  async (t) => {
    const { store, dataDir } = setup(t);
    // A backlog of 3 days × 24 keys of 30-s points (5,184 windows, more than all phases can compact here), every
    // window due at the engine's "now".
    for (let from = 0; from < POINTS; from += 1000) {
      const recs = [];
      for (let i = from; i < Math.min(POINTS, from + 1000); i++) {
        recs.push({
          ts: T0 + i * STEP,
          values: Array.from({ length: 24 }, (_, k) => [`k${k}`, kvLong(i + k)]) as Array<[string, KvValue]>,
        });
      }
      await store.write(ENTITY, recs);
    }
    const now = T0 + 10 * DAY;
    const eng = engine(store, dataDir, () => now, { stepBudgetMs: 2 });
    let i = 0;
    // A device writing at the engine's present: its windows are not due, so the backlog stays as it was.
    const probe = (): Promise<void> =>
      store.write('00000000-0000-0000-0000-0000000000cd', [{ ts: now - i++, values: [['probe', kvLong(i)]] }]);
    /** the share of wall time the engine's steps took, and their count, while a write came every `gapMs` (undefined: none) */
    const share = async (ms: number, gapMs: number | undefined): Promise<{ share: number; steps: number }> => {
      const b0 = eng.stats().backgroundMs;
      const s0 = eng.stats().steps;
      const t0 = performance.now();
      const writes: Array<Promise<void>> = [];
      while (performance.now() - t0 < ms) {
        // not awaited: a write is issued every gapMs whatever its commit takes
        if (gapMs !== undefined) writes.push(probe());
        await new Promise((r) => setTimeout(r, gapMs ?? 20));
      }
      await Promise.all(writes);
      return { share: (eng.stats().backgroundMs - b0) / (performance.now() - t0), steps: eng.stats().steps - s0 };
    };
    eng.start();
    const saturated = await share(800, 1);
    const light = await share(800, 10);
    await new Promise((r) => setTimeout(r, 150)); // past the 100 ms in which the last write still counts as recent
    // The pause after the light phase's last step (up to 9× that step on a loaded machine) can outlast the whole
    // window: the idle phase is measured from the first step taken once the writes stopped.
    const stepsBefore = eng.stats().steps;
    const giveUpAt = performance.now() + 5_000;
    while (eng.stats().steps === stepsBefore && performance.now() < giveUpAt)
      await new Promise((r) => setTimeout(r, 2));
    const idle = await share(400, undefined);
    const left = eng.stats().headFragments;
    await eng.stop();
    t.ok(
      left > 0,
      `the backlog outlasted every phase (${left} head fragments left), so each measured a draining engine`,
    );
    // a write every ~1 ms leaves no 5 ms gap: one step per 200 ms (a timer firing late may let one more in)
    t.ok(
      saturated.steps <= 6,
      `under saturating writes, ${saturated.steps} steps in 800 ms (${(saturated.share * 100).toFixed(1)}% of the time; one step per 200 ms by design)`,
    );
    t.ok(light.share < 0.2, `under light writes, ${(light.share * 100).toFixed(1)}% of the time (about 10% by design)`);
    t.ok(
      idle.share > 1.5 * light.share,
      `once writes stop, ${(idle.share * 100).toFixed(1)}% of the time (about half by design; less when timers fire late on a loaded machine)`,
    );
  },
);
