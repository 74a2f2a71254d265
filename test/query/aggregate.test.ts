/**
 * Unit tests of the aggregation state, the docs/api.md type rules, bucket planning and the query planner.
 * TB worked examples are the fixtures; a seeded test checks mergeAgg == adding every point.
 */
import '../helpers/sandbox.js';
import t from 'tap';
import { type KvValue, kvBool, kvDouble, kvJson, kvLong, kvString } from '../../src/model/kv.js';
import {
  type AggFn,
  AGG_FNS,
  type BucketAgg,
  addPartial,
  addPoint,
  addScaledExactly,
  emptyAgg,
  mergeAgg,
  numericSum,
} from '../../src/store/rollups/aggregate.js';
import { finalizeAgg } from '../../src/query/aggregate.js';
import { bucketAt, bucketsOf, planBuckets } from '../../src/store/planner/buckets.js';
import { type KeySeries, planHistory } from '../../src/query/history.js';
import { renderHistoryChunks } from '../../src/query/render.js';
import { parseHistoryParams, parseKeys } from '../../src/query/params.js';
import { rng } from '../helpers/prng.js';

function aggOf(points: ReadonlyArray<readonly [number, KvValue]>): BucketAgg {
  const a = emptyAgg();
  for (const [ts, v] of points) addPoint(a, ts, v);
  return a;
}

/** Aggregates `points` over [start, end) buckets of `interval` with `fn`, as [midpoint ts, value] pairs. */
function bucketed(
  points: ReadonlyArray<readonly [number, KvValue]>,
  start: number,
  end: number,
  interval: number,
  fn: AggFn,
): Array<[number, KvValue]> {
  const out: Array<[number, KvValue]> = [];
  for (const b of bucketsOf(planBuckets(start, end, interval, { maxIntervals: 700 }))) {
    const v = finalizeAgg(aggOf(points.filter(([ts]) => ts >= b.start && ts < b.end)), fn);
    if (v !== undefined) out.push([b.ts, v]);
  }
  return out;
}

t.test('TB worked example: longs 100..600 at 5000..55000, [0,60000) interval 20000', async (t) => {
  const pts = [100, 200, 300, 400, 500, 600].map((v, i) => [5000 + i * 10000, kvLong(v)] as const);
  t.same(bucketed(pts, 0, 60000, 20000, 'AVG'), [
    [10000, kvDouble(150)],
    [30000, kvDouble(350)],
    [50000, kvDouble(550)],
  ]);
  t.same(bucketed(pts, 0, 60000, 20000, 'SUM'), [
    [10000, kvLong(300)],
    [30000, kvLong(700)],
    [50000, kvLong(1100)],
  ]);
  t.same(bucketed(pts, 0, 60000, 20000, 'MIN'), [
    [10000, kvLong(100)],
    [30000, kvLong(300)],
    [50000, kvLong(500)],
  ]);
  t.same(bucketed(pts, 0, 60000, 20000, 'MAX'), [
    [10000, kvLong(200)],
    [30000, kvLong(400)],
    [50000, kvLong(600)],
  ]);
  t.same(bucketed(pts, 0, 60000, 20000, 'COUNT'), [
    [10000, kvLong(2)],
    [30000, kvLong(2)],
    [50000, kvLong(2)],
  ]);
});

t.test('TB worked example: strings A1..C2 → lexicographic MIN/MAX, COUNT 2', async (t) => {
  const pts = ['A1', 'A2', 'B1', 'B2', 'C1', 'C2'].map((v, i) => [65000 + i * 10000, kvString(v)] as const);
  t.same(bucketed(pts, 60000, 120000, 20000, 'MIN'), [
    [70000, kvString('A1')],
    [90000, kvString('B1')],
    [110000, kvString('C1')],
  ]);
  t.same(bucketed(pts, 60000, 120000, 20000, 'MAX'), [
    [70000, kvString('A2')],
    [90000, kvString('B2')],
    [110000, kvString('C2')],
  ]);
  t.same(bucketed(pts, 60000, 120000, 20000, 'COUNT'), [
    [70000, kvLong(2)],
    [90000, kvLong(2)],
    [110000, kvLong(2)],
  ]);
  t.same(bucketed(pts, 60000, 120000, 20000, 'AVG'), [], 'AVG of strings: buckets omitted (TB quirk 0.0 dropped)');
  t.same(bucketed(pts, 60000, 120000, 20000, 'SUM'), [], 'SUM of strings: buckets omitted');
});

t.test('mixed long/double → double; negative MAX', async (t) => {
  const mixed = [kvLong(100), kvDouble(200), kvLong(300), kvDouble(400)].map((v, i) => [5000 + i * 10000, v] as const);
  t.same(bucketed(mixed, 0, 40000, 20000, 'SUM'), [
    [10000, kvDouble(300)],
    [30000, kvDouble(700)],
  ]);
  t.same(bucketed(mixed, 0, 40000, 20000, 'MIN'), [
    [10000, kvDouble(100)],
    [30000, kvDouble(300)],
  ]);
  t.same(bucketed(mixed, 0, 40000, 20000, 'MAX'), [
    [10000, kvDouble(200)],
    [30000, kvDouble(400)],
  ]);
  t.same(
    finalizeAgg(
      aggOf([
        [1, kvLong(-100)],
        [2, kvDouble(-50)],
      ]),
      'MAX',
    ),
    kvDouble(-50),
  );
  t.same(
    finalizeAgg(
      aggOf([
        [1, kvLong(-100)],
        [2, kvDouble(-50)],
      ]),
      'MIN',
    ),
    kvDouble(-100),
  );
  t.same(
    finalizeAgg(
      aggOf([
        [1, kvDouble(1.5)],
        [2, kvDouble(2.5)],
      ]),
      'SUM',
    ),
    kvDouble(4),
  );
});

t.test('type rules: numbers win over strings; booleans/JSON alone are omitted except COUNT', async (t) => {
  const mixed = aggOf([
    [1, kvString('zzz')],
    [2, kvLong(5)],
    [3, kvBool(true)],
    [4, kvJson('{"a":1}')],
  ]);
  t.same(finalizeAgg(mixed, 'MAX'), kvLong(5), 'numeric max ignores strings');
  t.same(finalizeAgg(mixed, 'COUNT'), kvLong(4), 'COUNT counts every point');
  t.same(finalizeAgg(mixed, 'AVG'), kvDouble(5));
  const boolsOnly = aggOf([
    [1, kvBool(true)],
    [2, kvJson('[1]')],
  ]);
  for (const fn of ['MIN', 'MAX', 'AVG', 'SUM'] as const)
    t.equal(finalizeAgg(boolsOnly, fn), undefined, `${fn} of booleans/JSON omitted`);
  t.same(finalizeAgg(boolsOnly, 'COUNT'), kvLong(2));
  t.equal(finalizeAgg(emptyAgg(), 'COUNT'), undefined, 'empty bucket omitted');
});

t.test('exactness: long sums beyond 2^53 and double sums are exact / correctly rounded', async (t) => {
  const big = aggOf([
    [1, kvLong(9007199254740991n)],
    [2, kvLong(9007199254740991n)],
    [3, kvLong(-1)],
  ]);
  t.same(finalizeAgg(big, 'SUM'), kvLong(18014398509481981n));
  const tenths = aggOf(Array.from({ length: 10 }, (_, i) => [i, kvDouble(0.1)] as const));
  t.same(
    finalizeAgg(tenths, 'SUM'),
    kvDouble(1),
    'ten 0.1 sum to exactly 1.0 (naive summation gives 0.9999999999999999)',
  );
  const cancel = aggOf([
    [1, kvDouble(1e100)],
    [2, kvDouble(1)],
    [3, kvDouble(-1e100)],
  ]);
  t.equal(numericSum(cancel), 1, 'catastrophic cancellation handled');
  const mixed = aggOf([
    [1, kvLong(9007199254740993n)],
    [2, kvDouble(0.5)],
  ]);
  t.same(finalizeAgg(mixed, 'SUM'), kvDouble(9007199254740994), 'long beyond 2^53 plus double: one rounding');
  t.same(
    finalizeAgg(
      aggOf([
        [1, kvLong(9007199254740993n)],
        [2, kvLong(1)],
      ]),
      'MAX',
    ),
    kvLong(9007199254740993n),
  );
});

t.test('addScaledExactly: the same exact sum as adding each value to the partials, or nothing and false', async (t) => {
  const r = rng(20261122);
  const sumOf = (partials: number[]): number => {
    const a = emptyAgg();
    a.doubleSum = partials;
    return numericSum(a);
  };
  let fast = 0;
  let declined = 0;
  for (let round = 0; round < 400; round++) {
    const n = 1 + Math.floor(r() * 60);
    const div = 10 ** Math.floor(r() * 4);
    // a sensor-like walk, or magnitudes from 1e-3 to 1e15 (rounding errors too far apart for one term)
    const wide = r() < 0.3;
    const ints = Float64Array.from({ length: n }, () =>
      wide ? Math.round((r() - 0.5) * 10 ** Math.floor(r() * 18)) : 2000 + Math.round((r() - 0.5) * 500),
    );
    const i0 = Math.floor(r() * n);
    const i1 = i0 + Math.floor(r() * (n - i0 + 1));
    const expected: number[] = [0.1];
    for (let i = i0; i < i1; i++) addPartial(expected, (ints[i] as number) / div);
    const got: number[] = [0.1];
    if (addScaledExactly(got, ints, div, i0, i1)) {
      fast++;
      t.equal(sumOf(got), sumOf(expected), `round ${round}`);
    } else {
      declined++;
      t.same(got, [0.1], `round ${round}: declined, partials untouched`);
    }
  }
  t.ok(fast > 300, `fast path taken (${fast})`);
  t.ok(declined > 0, `fallback exercised (${declined})`);
  t.notOk(addScaledExactly([], Float64Array.of(1.7e308, 1.7e308), 1, 0, 2), 'an overflowing sum is declined');
});

function randomValue(r: () => number): KvValue {
  const pick = r();
  if (pick < 0.3) return kvLong(Math.floor((r() - 0.5) * 2e6));
  if (pick < 0.4) return kvLong(BigInt(Math.floor((r() - 0.5) * 2 ** 30)) * 2n ** 33n + BigInt(Math.floor(r() * 1000)));
  if (pick < 0.7) return kvDouble((r() - 0.5) * 10 ** Math.floor(r() * 20 - 8));
  if (pick < 0.85) return kvString(String.fromCharCode(65 + Math.floor(r() * 26), 65 + Math.floor(r() * 26)));
  if (pick < 0.95) return kvBool(r() < 0.5);
  return kvJson(`{"n":${Math.floor(r() * 10)}}`);
}

t.test('mergeAgg of any split equals adding every point (seeded)', async (t) => {
  const r = rng(20261121);
  let checked = 0;
  for (let round = 0; round < 300; round++) {
    const n = Math.floor(r() * 40);
    const pts = Array.from({ length: n }, (_, i) => [i * 7 + Math.floor(r() * 5), randomValue(r)] as const);
    const whole = aggOf(pts);
    // split into 1..4 parts, merge in a shuffled order
    const cuts = Array.from({ length: Math.floor(r() * 4) }, () => Math.floor(r() * (n + 1))).sort((a, b) => a - b);
    const parts: BucketAgg[] = [];
    let from = 0;
    for (const c of [...cuts, n]) {
      parts.push(aggOf(pts.slice(from, c)));
      from = c;
    }
    parts.sort(() => r() - 0.5);
    const merged = parts.reduce((acc, p) => mergeAgg(acc, p), emptyAgg());
    for (const fn of AGG_FNS) {
      t.same(finalizeAgg(merged, fn), finalizeAgg(whole, fn), `round ${round} ${fn}`);
      checked++;
    }
    t.equal(merged.count, whole.count);
    t.equal(merged.firstTs, whole.firstTs);
    t.same(merged.first, whole.first);
    t.same(merged.last, whole.last);
  }
  t.equal(checked, 1500);
});

t.test('bucket planning (docs/api.md)', async (t) => {
  const p = planBuckets(1, 3000, 2000, { maxIntervals: 700 });
  t.same(
    [...bucketsOf(p)],
    [
      { start: 1, end: 2001, ts: 1001 },
      { start: 2001, end: 3000, ts: 2500 },
    ],
    '[1,3000) by 2000 → [1,2001),[2001,3000)',
  );
  t.same(bucketAt(planBuckets(0, 60000, 20000, { maxIntervals: 700 }), 2), { start: 40000, end: 60000, ts: 50000 });
  t.equal(planBuckets(0, 700, 1, { maxIntervals: 700 }).count, 700, 'exactly maxIntervals is fine');
  t.throws(() => planBuckets(0, 701, 1, { maxIntervals: 700 }), { code: 'BAD_PARAM' }, 'more than maxIntervals → 400');
  const limited = planBuckets(0, 1_000_000, 1, { maxIntervals: 700, limit: 3 });
  t.same([limited.count, limited.endTs], [3, 3], 'explicit limit keeps the first N buckets and skips the check');
  t.same(
    [...bucketsOf(planBuckets(0, 10, 4, { maxIntervals: 700, limit: 5 }))].map((b) => b.end),
    [4, 8, 10],
    'limit beyond the range',
  );
  t.equal(planBuckets(5, 5, 10, { maxIntervals: 700 }).count, 0, 'empty range → no buckets');
  t.throws(() => planBuckets(5, 4, 10, { maxIntervals: 700 }), { code: 'BAD_PARAM' });
  t.throws(() => planBuckets(0, 10, 0, { maxIntervals: 700 }), { code: 'BAD_PARAM' });
  t.throws(() => planBuckets(0, 10, -5, { maxIntervals: 700 }), { code: 'BAD_PARAM' });
  t.same(
    [...bucketsOf(planBuckets(-25, -5, 10, { maxIntervals: 700 }))],
    [
      { start: -25, end: -15, ts: -20 },
      { start: -15, end: -5, ts: -10 },
    ],
    'negative timestamps',
  );
});

t.test('history planning and parameter parsing', async (t) => {
  const limits = { maxIntervals: 700, defaultLimit: 100 };
  t.same(
    planHistory({ startTs: 0, endTs: 10, agg: 'AVG', interval: 0 }, limits),
    { kind: 'raw', startTs: 0, endTs: 10, limit: 100, order: 'DESC' },
    'agg with interval 0 → raw',
  );
  t.equal(planHistory({ startTs: 0, endTs: 10, agg: 'AVG', interval: 5 }, limits).kind, 'agg');
  t.throws(() => planHistory({ startTs: 0, endTs: 10, agg: 'AVG', interval: -1 }, limits), { code: 'BAD_PARAM' });
  t.throws(() => planHistory({ startTs: 0, endTs: 10, limit: 0 }, limits), { code: 'BAD_PARAM' });
  const q = (s: string): URLSearchParams => new URLSearchParams(s);
  t.same(parseHistoryParams(q('startTs=1&endTs=2&agg=SUM&interval=3&limit=4&orderBy=asc')), {
    startTs: 1,
    endTs: 2,
    agg: 'SUM',
    interval: 3,
    limit: 4,
    orderBy: 'ASC',
  });
  for (const bad of [
    'startTs=x&endTs=2',
    'startTs=1&endTs=2.5',
    'startTs=1&endTs=2&agg=avg',
    'startTs=1&endTs=2&agg=MEDIAN',
    'startTs=1&endTs=2&orderBy=UP',
    'startTs=1&endTs=2&interval=1s',
    'startTs=1&endTs=2&limit=ten',
    'startTs=1',
  ]) {
    t.throws(() => parseHistoryParams(q(bad)), { code: 'BAD_PARAM' }, bad);
  }
  t.same(parseKeys(q('keys=a,b,,a')), ['a', 'b']);
  t.same(parseKeys(q('keys=x&key=a,b&key=c')), ['a,b', 'c'], 'repeatable key= wins and keeps commas');
  t.equal(parseKeys(q('keys=')), undefined);
});

t.test('history rendering: chunks join to the same JSON, any chunk size', async (t) => {
  const series = (): KeySeries[] => [
    {
      key: 'a',
      points: [
        { ts: 1, value: kvLong(1) },
        { ts: 2, value: kvDouble(1e10) },
      ][Symbol.iterator](),
    },
    {
      key: 'b"q',
      points: [
        { ts: 3, value: kvString('x"y') },
        { ts: 4, value: kvBool(true) },
        { ts: 5, value: kvJson('{"n":1}') },
      ][Symbol.iterator](),
    },
  ];
  const whole = [...renderHistoryChunks(series(), false)].join('');
  t.equal(
    whole,
    '{"a":[{"ts":1,"value":"1"},{"ts":2,"value":"1.0E10"}],"b\\"q":[{"ts":3,"value":"x\\"y"},{"ts":4,"value":"true"},{"ts":5,"value":"{\\"n\\":1}"}]}',
  );
  const small = [...renderHistoryChunks(series(), false, 10)];
  t.ok(small.length > 3, 'split into several chunks');
  t.equal(small.join(''), whole);
  t.equal(
    [...renderHistoryChunks(series(), true)].join(''),
    '{"a":[{"ts":1,"value":1},{"ts":2,"value":1.0E10}],"b\\"q":[{"ts":3,"value":"x\\"y"},{"ts":4,"value":true},{"ts":5,"value":{"n":1}}]}',
  );
  t.equal([...renderHistoryChunks([], false)].join(''), '{}');
});
