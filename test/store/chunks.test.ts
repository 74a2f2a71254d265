/**
 * Compressed chunks and head fragments (docs/design/storage.md): the point-block codec round-trips every TB value
 * type exactly, and the LMDB store gives the same answers before and after compaction, under out-of-order
 * points, same-ts overwrites and deletes.
 */
import t from 'tap';
import { SeriesColumn } from '../../src/model/batch.js';
import { type KvValue, type TsKv, kvBool, kvDouble, kvJson, kvLong, kvString, kvToString } from '../../src/model/kv.js';
import { decodePoints, decodePointsIn, encodeColumn, encodePoints } from '../../src/store/encoding/gorilla.js';
import { windowKey, windowLookupKey } from '../../src/store/series/chunks.js';
import type { LmdbTimeseriesStore } from '../../src/store/series/store.js';
import { addPoint, emptyAgg } from '../../src/store/rollups/aggregate.js';
import { finalizeAgg } from '../../src/query/aggregate.js';
import { bucketsOf, planBuckets } from '../../src/store/planner/buckets.js';
import { rng } from '../helpers/prng.js';
import type { Teardown } from '../helpers/server.js';
import { compactAll, openSeriesStore } from '../helpers/store.js';

const show = (pts: readonly TsKv[]): string[] =>
  pts.map((p) => `${p.ts}:${p.value.type}:${kvToString(p.value)}:${Object.is(p.value.v, -0) ? '-0' : ''}`);
const series = (n: number, f: (i: number) => KvValue, t0 = 1_700_000_000_000, step = 10_000): TsKv[] =>
  Array.from({ length: n }, (_, i) => ({ ts: t0 + i * step, value: f(i) }));

t.test('point blocks round-trip every value type exactly', async (t) => {
  const cases: Array<[string, TsKv[], number]> = [
    ['counter longs (delta-of-delta)', series(720, (i) => kvLong(1000 + i * 5)), 0.1],
    ['decimal doubles', series(720, (i) => kvDouble(Math.round(2000 + 300 * Math.sin(i / 20)) / 100)), 2.5],
    ['42.0 stays a double', series(3, () => kvDouble(42)), 10],
    ['arbitrary doubles (raw f64)', series(50, (i) => kvDouble(Math.PI * i + 0.1 + 0.2)), 9],
    [
      '-0.0, NaN and Infinity',
      [kvDouble(-0), kvDouble(NaN), kvDouble(Infinity), kvDouble(-Infinity)].map((value, i) => ({ ts: i, value })),
      20,
    ],
    [
      'mixed types',
      [kvLong(1), kvDouble(1.5), kvBool(true), kvString('abc'), kvJson('{"a":[1]}'), kvLong(1234567890123456789n)].map(
        (value, i) => ({ ts: -5000 + i * 7, value }),
      ),
      30,
    ],
    ['large longs', series(5, (i) => kvLong(2 ** 52 + i)), 20],
    [
      'irregular and negative timestamps',
      [-86_400_000, -1, 0, 1, 999, 1_000_000].map((ts, i) => ({ ts, value: kvLong(i) })),
      20,
    ],
    ['empty', [], 10],
  ];
  for (const [name, pts, maxBytesPerPoint] of cases) {
    const block = encodePoints(pts);
    t.same(show(decodePoints(block)), show(pts), name);
    t.ok(
      block.length <= Math.max(16, pts.length * maxBytesPerPoint),
      `${name}: ${block.length} bytes for ${pts.length} points`,
    );
  }
  const pts = series(100, (i) => kvDouble(i / 10));
  const block = encodePoints(pts);
  const from = (pts[10] as TsKv).ts;
  const to = (pts[20] as TsKv).ts;
  t.same(show(decodePointsIn(block, from, to)), show(pts.slice(10, 20)), 'partial decode [from, to)');
  t.same(decodePointsIn(block, to, to), [], 'empty partial range');
});

t.test(
  'columns: a slice of any column encodes as its points do, and sortedDistinct keeps the last posted',
  async (t) => {
    // The ingest path encodes head fragments straight from columns (model/batch.ts); compaction encodes point
    // arrays. Both must give the same block, so a slice of a mixed (BOXED) column that happens to be all
    // DOUBLE or all LONG still gets the numeric modes.
    const next = rng(4_242);
    const pool = [
      () => kvLong(Math.floor(next() * 1000)),
      () => kvDouble(Math.floor(next() * 10000) / 100),
      () => kvDouble(next()),
      () => kvLong(2 ** 51 + 3),
      () => kvLong(1234567890123456789n),
      () => kvString('s'),
      () => kvBool(next() < 0.5),
      () => kvDouble(-0),
    ];
    for (let c = 0; c < 400; c++) {
      const col = new SeriesColumn();
      const kinds = pool.slice(0, 1 + Math.floor(next() * pool.length));
      let ts = -50_000 + Math.floor(next() * 100_000);
      const runs = 1 + Math.floor(next() * 4);
      for (let r = 0; r < runs; r++) {
        const make = kinds[Math.floor(next() * kinds.length)] as (typeof kinds)[number];
        for (let i = 0, n = 1 + Math.floor(next() * 40); i < n; i++)
          col.push((ts += 1 + Math.floor(next() * 3)), make());
      }
      const from = Math.floor(next() * col.length);
      const to = from + Math.floor(next() * (col.length - from + 1));
      const points = col.toPoints(from, to);
      t.same(
        encodeColumn(col, from, to),
        encodePoints(points),
        `column ${c} (${col.kind}) [${from}, ${to}) encodes as its points`,
      );
      t.same(show(decodePoints(encodeColumn(col, from, to))), show(points), `column ${c} round-trips`);
    }
    const col = new SeriesColumn();
    for (const [ts, v] of [
      [30, 1],
      [10, 2],
      [30, 3],
      [20, 4],
      [10, 5],
    ] as const)
      col.pushLong(ts, v);
    col.pushDouble(20, 6.5);
    t.same(
      show(col.sortedDistinct().toPoints()),
      ['10:LONG:5:', '20:DOUBLE:6.5:', '30:LONG:3:'],
      'ts order, the last posted per ts, types kept',
    );
    const asc = new SeriesColumn();
    asc.pushDouble(1, 1.5);
    asc.pushDouble(2, 2.5);
    t.equal(asc.sortedDistinct(), asc, 'an ascending column is not copied');
  },
);

function openStore(t: Teardown, stepBudgetMs?: number): LmdbTimeseriesStore {
  return openSeriesStore(t, {
    windowMs: 3_600_000,
    headWindowMs: 3_600_000,
    tiersMs: [60_000, 3_600_000, 86_400_000],
    tierRetentionMs: [0, 0, 0],
    ...(stepBudgetMs === undefined ? {} : { stepBudgetMs }),
  }).store;
}

const ENTITY = '11111111-2222-3333-4444-555555555555';
const all = (store: LmdbTimeseriesStore, key: string, order: 'ASC' | 'DESC' = 'ASC', limit?: number): string[] =>
  show([
    ...store.range(ENTITY, key, {
      startTs: Number.MIN_SAFE_INTEGER,
      endTs: Number.MAX_SAFE_INTEGER,
      order,
      ...(limit === undefined ? {} : { limit }),
    }),
  ]);

t.test('store: fragments and chunks answer the same, overwrites and deletes included', async (t) => {
  const store = openStore(t);
  const t0 = 1_700_000_000_000 - (1_700_000_000_000 % 3_600_000);
  // One request of 1,000 records spanning 3 windows; ts 5 out of order and one duplicated (the later wins).
  const recs = Array.from({ length: 1000 }, (_, i) => ({
    ts: t0 + i * 10_000,
    values: [
      ['a', kvLong(i)],
      ['b', kvDouble(i / 4)],
    ] as Array<[string, KvValue]>,
  }));
  recs.push({ ts: t0 + 5 * 10_000, values: [['a', kvString('dup')]] });
  recs.reverse();
  await store.write(ENTITY, recs);
  const expectA = Array.from(
    { length: 1000 },
    (_, i) => `${t0 + i * 10_000}:${i === 5 ? 'STRING' : 'LONG'}:${i === 5 ? 'dup' : i}:`,
  );
  // Reversed request: for ts 5 the element now comes first, so the LONG (later in the array) wins.
  expectA[5] = `${t0 + 5 * 10_000}:LONG:5:`;
  t.same(all(store, 'a'), expectA, 'head read, ascending, later element of the request wins on equal ts');
  t.same(all(store, 'a', 'DESC', 3), expectA.slice(-3).reverse(), 'descending with limit');
  t.equal(store.latest(ENTITY).get('a')?.ts, t0 + 999 * 10_000, 'latest is the newest point');

  const now = t0 + 1000 * 10_000 + 2 * 3_600_000;
  const compacted = await compactAll(store, now);
  t.ok(compacted >= 4, `compacted ${compacted} windows`);
  t.same(all(store, 'a'), expectA, 'after compaction: same points');
  const mid = t0 + 3_600_000 + 1234;
  t.same(
    show([...store.range(ENTITY, 'b', { startTs: mid, endTs: mid + 60_000, order: 'ASC' })]),
    show(series(6, (i) => kvDouble((361 + i) / 4), t0 + 3_610_000)),
    'range inside one chunk, [start, end)',
  );

  // A late overwrite into a compacted window lands in head and wins; then compaction merges it.
  await store.write(ENTITY, [
    { ts: t0 + 10_000, values: [['a', kvDouble(-1.5)]] },
    { ts: t0 + 15_000, values: [['a', kvLong(7)]] },
  ]);
  const withLate = expectA.slice();
  withLate.splice(1, 1, `${t0 + 10_000}:DOUBLE:-1.5:`, `${t0 + 15_000}:LONG:7:`);
  t.same(all(store, 'a'), withLate, 'late points merged over the chunk');
  t.same(all(store, 'a', 'DESC'), withLate.slice().reverse(), 'descending over chunks and fragments');
  t.same(all(store, 'a', 'DESC', 999), withLate.slice(-999).reverse(), 'descending with a limit across windows');
  await compactAll(store, now);
  t.same(all(store, 'a'), withLate, 'and after compacting them');

  // Delete across a chunk boundary and head data.
  await store.write(ENTITY, [{ ts: now, values: [['a', kvLong(-9)]] }]);
  const delFrom = t0 + 300 * 10_000;
  const delTo = t0 + 500 * 10_000;
  await store.delete(ENTITY, { keys: ['a'], startTs: delFrom, endTs: delTo, deleteLatest: true, rewriteLatest: false });
  const afterDelete = withLate.filter((s) => {
    const ts = Number(s.split(':')[0]);
    return ts < delFrom || ts >= delTo;
  });
  afterDelete.push(`${now}:LONG:-9:`);
  t.same(all(store, 'a'), afterDelete, 'delete removed [start, end) from chunks only');
  await store.delete(ENTITY, { keys: ['a'], startTs: now, endTs: now + 1, deleteLatest: true, rewriteLatest: true });
  t.equal(
    store.latest(ENTITY).get('a')?.ts,
    t0 + 999 * 10_000,
    'rewriteLatest promotes the newest remaining point from a chunk',
  );
});

t.test('a delete over many windows runs in steps: a write is acknowledged while it runs', async (t) => {
  // A zero step budget: one window per transaction.
  const store = openStore(t, 0);
  const H = 3_600_000;
  const t0 = 1_700_000_000_000 - (1_700_000_000_000 % H);
  const hours = 200;
  for (let h = 0; h < hours; h += 20) {
    await store.write(
      ENTITY,
      Array.from({ length: 20 * 60 }, (_, i) => ({
        ts: t0 + h * H + i * 60_000,
        values: [
          ['a', kvLong(i)],
          ['b', kvDouble(i / 4)],
        ] as Array<[string, KvValue]>,
      })),
    );
  }
  const now = t0 + (hours + 2) * H;
  await compactAll(store, now);
  const b = all(store, 'b');

  const deleting = store.delete(ENTITY, {
    keys: ['a'],
    startTs: Number.MIN_SAFE_INTEGER,
    endTs: Number.MAX_SAFE_INTEGER,
    deleteLatest: true,
    rewriteLatest: false,
  });
  await store.write(ENTITY, [{ ts: now, values: [['b', kvLong(-1)]] }]);
  const left = all(store, 'a').length;
  t.ok(
    left > 0 && left < hours * 60,
    `the write was acknowledged while the delete was under way (${left} of ${hours * 60} points left)`,
  );
  await deleting;
  t.same(all(store, 'a'), [], 'then every point of the key is gone');
  t.equal(store.latest(ENTITY).get('a'), undefined, 'with its latest value');
  const plan = planBuckets(t0, now, 6 * H, { maxIntervals: 100 });
  t.same([...store.bucketAggs(ENTITY, 'a', plan, 'COUNT')], [], 'and its rollups');
  t.same(all(store, 'b'), [...b, `${now}:LONG:-1:`], 'the other key keeps its points and the new one');
});

t.test(
  'read caches: emptied by a compaction that changes chunks, never filled while it may be committing',
  async (t) => {
    const store = openStore(t);
    const H = 3_600_000;
    const t0 = 1_700_000_000_000 - (1_700_000_000_000 % H);
    const model = new Map<number, KvValue>();
    await store.write(
      ENTITY,
      Array.from({ length: 3 * 360 }, (_, i) => {
        const v = kvDouble((i % 97) / 4);
        model.set(t0 + i * 10_000, v);
        return { ts: t0 + i * 10_000, values: [['v', v]] as Array<[string, KvValue]> };
      }),
    );
    // the first two hour-windows compacted (chunks and rollups), the third still head fragments
    await compactAll(store, t0 + 3 * H);
    const plan = planBuckets(t0 + 7 * 60_000 + 1234, t0 + 3 * H, 25 * 60_000, { maxIntervals: 1000 });
    const answer = (): string =>
      [...store.bucketAggs(ENTITY, 'v', plan, 'AVG')]
        .map(({ index, agg }) => `${index}:${finalizeAgg(agg, 'AVG')?.v}`)
        .join(' ');
    const want = [...bucketsOf(plan)]
      .map((b, index) => {
        const agg = emptyAgg();
        for (const [ts, v] of model) if (ts >= b.start && ts < b.end) addPoint(agg, ts, v);
        return `${index}:${finalizeAgg(agg, 'AVG')?.v}`;
      })
      .join(' ');
    t.equal(answer(), want, 'exact before');
    t.ok(
      store.readCacheUsage().chunkBytes > 0 && store.readCacheUsage().rollupBytes > 0,
      'the query filled both caches',
    );

    // Compact the third window while querying at every turn until the step has resolved.
    let resolved = false;
    const step = store.compactStep(t0 + 4 * H, 50).then((r) => {
      resolved = true;
      return r;
    });
    let emptied = false;
    let turns = 0;
    while (!resolved) {
      t.equal(answer(), want, `exact at turn ${turns}`);
      const use = store.readCacheUsage();
      if (use.chunkBytes === 0 && use.rollupBytes === 0) emptied = true;
      else if (emptied) t.fail(`the caches were filled again at turn ${turns} before the commit resolved`);
      turns++;
      await new Promise((r) => setImmediate(r));
    }
    t.equal((await step).compacted, 1, 'the step compacted the third window');
    t.ok(emptied, `the caches were emptied while the step was pending (${turns} turns)`);
    t.equal(answer(), want, 'exact after');
    t.ok(store.readCacheUsage().rollupBytes > 0, 'and the caches fill again');
  },
);

t.test('store: bytes per point of compressed chunks', async (t) => {
  const store = openStore(t);
  const t0 = 1_700_000_000_000;
  for (let r = 0; r < 20; r++) {
    await store.write(
      ENTITY,
      Array.from({ length: 1000 }, (_, i) => {
        const n = r * 1000 + i;
        return {
          ts: t0 + n * 10_000,
          values: [
            ['t', kvDouble(Math.round(2000 + 500 * Math.sin(n / 100) + (n % 7)) / 100)],
            ['c', kvLong(n * 3)],
          ] as Array<[string, KvValue]>,
        };
      }),
    );
  }
  await compactAll(store, t0 + 20_000 * 10_000 + 3 * 3_600_000);
  let bytes = 0;
  let points = 0;
  for (const { value } of store.env.chunks.getRange({})) {
    bytes += value.length;
    points += decodePoints(value).length;
  }
  t.equal(points, 40_000, 'every window compacted');
  t.ok(bytes / points < 1.5, `chunk payload ${(bytes / points).toFixed(2)} B/point`);
  t.equal(store.env.head.getKeysCount(), 0, 'head emptied');
});

t.test("a chunk lookup key has windowKey's bytes, and order", async (t) => {
  const starts = [
    0,
    1,
    -1,
    1_200_000,
    -1_200_000,
    1_700_000_000_000,
    -(2 ** 52),
    2 ** 52,
    4_294_967_296,
    4_294_967_295,
  ];
  const wrong: string[] = [];
  for (const [e, k] of [
    [0, 0],
    [1, 2],
    [0xffffffff, 0x7fffffff],
  ] as const)
    for (const w of starts) {
      const want = windowKey(e, k, w).toString('hex');
      const got = windowLookupKey(e, k, w).toString('hex');
      if (got !== want) wrong.push(`${e}/${k}/${w}: ${got} != ${want}`);
    }
  t.same(wrong, [], 'every entity, key and window start');
  const sorted = [...starts].sort((a, b) => a - b).map((w) => windowKey(1, 2, w).toString('hex'));
  t.same([...sorted].sort(), sorted, 'keys sort as their window starts');
});
