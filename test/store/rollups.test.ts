/**
 * Rollup tiers (docs/design/downsampling.md): the alignment function, ladder validation, the block codec (every
 * BucketAgg field round-trips), and tiers that stay equal to a recomputation from raw points under
 * out-of-order points, same-ts overwrites and deletes. TB's worked example goes through the planner.
 */
import t, { type Test } from 'tap';
import { AGG_FNS, type BucketAgg, addPoint, emptyAgg } from '../../src/store/rollups/aggregate.js';
import { finalizeAgg } from '../../src/query/aggregate.js';
import { planBuckets } from '../../src/store/planner/buckets.js';
import { aggregateBuckets } from '../../src/query/history.js';
import { type KvValue, type TsKv, kvBool, kvDouble, kvJson, kvLong, kvString, kvToString } from '../../src/model/kv.js';
import { windowStart } from '../../src/store/series/chunks.js';
import { decodePoints as decodeBlockPoints } from '../../src/store/encoding/gorilla.js';
import { type RollupBucket, bucketize, decodeBlock, encodeBlock, makeTiers } from '../../src/store/rollups/store.js';
import type { LmdbTimeseriesStore } from '../../src/store/series/store.js';
import type { Teardown } from '../helpers/server.js';
import { compactAll, openSeriesStore } from '../helpers/store.js';

const MIN = 60_000;
const HOUR = 3_600_000;
const ENTITY = '00000000-0000-0000-0000-0000000000bb';

/** A BucketAgg as comparable text (bigints, -0, NaN and undefined kept apart). */
function showAgg(a: BucketAgg): string {
  return JSON.stringify(a, (_k, v: unknown) => {
    if (typeof v === 'bigint') return `${v}n`;
    if (typeof v === 'number' && (Object.is(v, -0) || !Number.isFinite(v)))
      return `num:${Object.is(v, -0) ? '-0' : String(v)}`;
    if (v === undefined) return 'undef';
    return v;
  });
}

t.test('alignment: floor to the bucket, negative and epoch-0 cases', async (t) => {
  const table: Array<[number, number, number]> = [
    [0, MIN, 0],
    [1, MIN, 0],
    [59_999, MIN, 0],
    [60_000, MIN, 60_000],
    [-1, MIN, -60_000],
    [-60_000, MIN, -60_000],
    [-60_001, MIN, -120_000],
    [1_700_000_123_456, HOUR, 1_699_999_200_000],
    [-86_400_001, 86_400_000, -172_800_000],
  ];
  for (const [ts, size, want] of table) t.equal(windowStart(ts, size), want, `windowStart(${ts}, ${size})`);
});

t.test('tier ladder validation', async (t) => {
  const tiers = makeTiers([10 * MIN, HOUR, 24 * HOUR], [0, 0, 0], 20 * MIN);
  t.same(
    tiers.map((x) => [x.bucketMs, x.blockMs % x.bucketMs, x.blockMs % (20 * MIN)]),
    [
      [10 * MIN, 0, 0],
      [HOUR, 0, 0],
      [24 * HOUR, 0, 0],
    ],
  );
  t.throws(
    () => makeTiers([MIN, 90_000], [0, 0], HOUR),
    { code: 'CONFIG_INVALID' },
    'not a multiple of the previous tier',
  );
  t.throws(() => makeTiers([7 * MIN], [0], 20 * MIN), { code: 'CONFIG_INVALID' }, 'does not divide the window');
  t.throws(
    () => makeTiers([30 * MIN], [0], 20 * MIN),
    { code: 'CONFIG_INVALID' },
    'coarser than the window but not a multiple',
  );
  t.throws(() => makeTiers([MIN], [0, 0], 20 * MIN), { code: 'CONFIG_INVALID' }, 'one retention per tier');
  t.throws(() => makeTiers([MIN], [-1], 20 * MIN), { code: 'CONFIG_INVALID' }, 'negative retention');
});

t.test('block codec: every BucketAgg field round-trips', async (t) => {
  const values: KvValue[] = [
    kvLong(5),
    kvLong(-7),
    kvLong(9_007_199_254_740_993n),
    kvLong(-9_223_372_036_854_775_808n),
    kvDouble(21.37),
    kvDouble(-0),
    kvDouble(0.1 + 0.2),
    kvDouble(1e300),
    kvDouble(-1e300),
    kvDouble(Infinity),
    kvDouble(NaN),
    kvString('b'),
    kvString('a'),
    kvString('ü'),
    kvBool(true),
    kvJson('{"x":1}'),
  ];
  const blockStart = 1_700_000_400_000 - (1_700_000_400_000 % (20 * MIN));
  const buckets: RollupBucket[] = [];
  for (let b = 0; b < 20; b++) {
    const agg = emptyAgg();
    const start = blockStart + b * MIN;
    // Bucket b holds a different mix: some only strings, some only booleans, some everything.
    for (let i = 0; i < values.length; i++)
      if ((i + b) % (1 + (b % 4)) === 0) addPoint(agg, start + i * 1000 + b, values[i] as KvValue);
    if (agg.count > 0) buckets.push({ start, agg });
  }
  const block = encodeBlock(blockStart, MIN, buckets);
  const back = decodeBlock(block, blockStart, MIN);
  t.same(
    back.map((b) => b.start),
    buckets.map((b) => b.start),
    'bucket starts',
  );
  t.same(
    back.map((b) => showAgg(b.agg)),
    buckets.map((b) => showAgg(b.agg)),
    'states identical',
  );
  t.same(decodeBlock(encodeBlock(blockStart, MIN, []), blockStart, MIN), [], 'empty block');
});

function openStore(t: Teardown): LmdbTimeseriesStore {
  return openSeriesStore(t, {
    windowMs: 20 * MIN,
    headWindowMs: HOUR,
    tiersMs: [MIN, 10 * MIN, HOUR, 24 * HOUR],
    tierRetentionMs: [0, 0, 0, 0],
  }).store;
}

/** Every tier's buckets equal a recomputation from the raw points currently in chunks. */
function checkTiers(t: Test, store: LmdbTimeseriesStore, label: string): void {
  const s = store.seriesOf(ENTITY, 'v');
  if (s === undefined) {
    t.fail('series missing');
    return;
  }
  const raw: TsKv[] = [];
  for (const { value } of store.env.chunks.getRange({})) raw.push(...decodeBlockPoints(value));
  for (const tier of store.tiers) {
    const got = [...store.rollups.buckets(tier, s.e, s.k, Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)];
    const want = bucketize(raw, tier.bucketMs);
    t.same(
      got.map((b) => `${b.start} ${AGG_FNS.map((fn) => render(finalizeAgg(b.agg, fn))).join(' ')}`),
      want.map((b) => `${b.start} ${AGG_FNS.map((fn) => render(finalizeAgg(b.agg, fn))).join(' ')}`),
      `${label}: tier ${tier.bucketMs} ms`,
    );
  }
}

const render = (v: KvValue | undefined): string => (v === undefined ? '-' : `${v.type}:${kvToString(v)}`);

t.test('tiers follow out-of-order points, overwrites and deletes', async (t) => {
  const store = openStore(t);
  const t0 = 1_700_000_400_000 - (1_700_000_400_000 % (24 * HOUR));
  const recs = Array.from({ length: 3000 }, (_, i) => ({
    ts: t0 + i * 7_000,
    values: [['v', i % 5 === 0 ? kvLong(i) : kvDouble(i / 8)]] as Array<[string, KvValue]>,
  }));
  await store.write(ENTITY, recs.slice(1500));
  await store.write(ENTITY, recs.slice(0, 1500).reverse());
  const now = t0 + 3000 * 7_000 + 2 * HOUR;
  await compactAll(store, now);
  t.ok(store.counters.compactedWindows > 10, 'windows compacted');
  checkTiers(t, store, 'after compaction');

  // same-ts overwrite inside a compacted window, and a new out-of-order point
  await store.write(ENTITY, [
    { ts: t0 + 7_000 * 100, values: [['v', kvString('zz')]] },
    { ts: t0 + 3_500, values: [['v', kvLong(-1)]] },
  ]);
  await compactAll(store, now);
  checkTiers(t, store, 'after a late overwrite');

  await store.delete(ENTITY, {
    keys: ['v'],
    startTs: t0 + 5 * MIN + 1,
    endTs: t0 + 3 * HOUR + 17,
    deleteLatest: true,
    rewriteLatest: false,
  });
  checkTiers(t, store, 'after a delete (no compaction needed)');
});

t.test('TB worked example answers from rollups: AVG 150.0/350.0/550.0', async (t) => {
  const { store } = openSeriesStore(t, {
    windowMs: 20_000,
    headWindowMs: 1000,
    tiersMs: [10_000, 20_000],
    tierRetentionMs: [0, 0],
  });
  await store.write(
    ENTITY,
    [100, 200, 300, 400, 500, 600].map((v, i) => ({
      ts: 5000 + i * 10_000,
      values: [['v', kvLong(v)]] as Array<[string, KvValue]>,
    })),
  );
  await compactAll(store, 1_000_000);
  const plan = planBuckets(0, 60_000, 20_000, { maxIntervals: 700 });
  const got = [...aggregateBuckets(store, ENTITY, 'v', plan, 'AVG')].map((p) => [p.ts, render(p.value)]);
  t.same(got, [
    [10_000, 'DOUBLE:150.0'],
    [30_000, 'DOUBLE:350.0'],
    [50_000, 'DOUBLE:550.0'],
  ]);
  const s = store.seriesOf(ENTITY, 'v');
  const tier = store.tiers[1];
  t.ok(
    s !== undefined && tier !== undefined && [...store.rollups.buckets(tier, s.e, s.k, 0, 60_000)].length === 3,
    'the 20-s tier holds the buckets',
  );
});
