/**
 * The aggregated read path's decoding (docs/design/memory-budget.md, read caches): rollup blocks' counts and
 * sums decoded straight from their bytes, raw edges decoded only up to the boundary they need, the chunks kept
 * encoded, and what the read caches account for a month-like query.
 */
import t from 'tap';
import { AGG_FNS, type BucketAgg, addPoint, emptyAgg } from '../../src/store/rollups/aggregate.js';
import { finalizeAgg } from '../../src/query/aggregate.js';
import { bucketsOf, planBuckets } from '../../src/store/planner/buckets.js';
import { type KvValue, type TsKv, kvBool, kvDouble, kvLong, kvString, kvToString } from '../../src/model/kv.js';
import { BlockColumns, encodePoints } from '../../src/store/encoding/gorilla.js';
import {
  NON_FINITE,
  NO_COMPACT_FORM,
  SUM_COUNT,
  SUM_DOUBLE_COUNT,
  SUM_LONG_COUNT,
  SUM_LONG_SUM,
  SUM_MAX_PARTIALS,
  SUM_PARTIALS,
  decodeSums,
} from '../../src/store/rollups/decoded-block.js';
import { type RollupBucket, bucketize, decodeBlock, encodeBlock } from '../../src/store/rollups/store.js';
import { RollupPlanner } from '../../src/store/planner/planner.js';
import { compactAll, openSeriesStore } from '../helpers/store.js';
import { rng } from '../helpers/prng.js';

const ENTITY = '00000000-0000-0000-0000-0000000000d7';
const MIN = 60_000;
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** The compact form a bucket's state has (the read path's rule): its fields, or undefined when it has none. */
function compactOf(agg: BucketAgg): number[] | undefined {
  const compact =
    typeof agg.longSum === 'number' &&
    agg.doubleSum.length <= SUM_MAX_PARTIALS &&
    agg.doubleSpecial === 0 &&
    agg.boolCount === 0 &&
    agg.stringCount === 0 &&
    agg.jsonCount === 0;
  return compact ? [agg.longSum as number, ...agg.doubleSum] : undefined;
}

t.test('rollup blocks: counts and sums decoded from the bytes equal the decoded states', async (t) => {
  const rand = rng(7);
  const int = (n: number): number => Math.floor(rand() * n);
  const T = 10 * MIN;
  const blockStart = 1_700_000_400_000 - (1_700_000_400_000 % (20 * HOUR));
  const series: Array<[string, (i: number) => KvValue]> = [
    ['decimal doubles', () => kvDouble(Math.round((rand() - 0.4) * 1e5) / 100)],
    ['small longs', () => kvLong(int(2000) - 500)],
    ['longs near 2^50 (sums past 2^53)', () => kvLong(2 ** 50 - 1 - int(1000))],
    ['64-bit longs', () => kvLong(BigInt(int(1000)) * 2n ** 53n + 1n)],
    ['F64 doubles', () => kvDouble((rand() - 0.5) * 1e6)],
    // partials of very different magnitudes: more than SUM_MAX_PARTIALS of them
    ['spread doubles', (i) => kvDouble([1e300, 1, 1e-300, 1e200, 1e-200, 1e100, 3][i % 7] as number)],
    ['non-finite doubles', (i) => kvDouble(i % 13 === 0 ? Infinity : i % 17 === 0 ? -0 : i / 4)],
    ['mixed', (i) => [kvBool(true), kvString('s'), kvLong(3), kvDouble(0.5), kvString('{"a":1}')][i % 5] as KvValue],
  ];
  for (const [name, value] of series) {
    // gaps: some buckets empty, some with one point
    const points: TsKv[] = [];
    for (let i = 0; i < 7000; i++) if (rand() < 0.6) points.push({ ts: blockStart + i * 10_000, value: value(i) });
    const buckets = bucketize(points, T);
    const raw = encodeBlock(blockStart, T, buckets);
    const blk = decodeSums(raw, blockStart, T, () => decodeBlock(raw, blockStart, T));
    const want = decodeBlock(raw, blockStart, T);
    t.equal(blk.length, want.length, `${name}: ${want.length} buckets`);
    let compact = 0;
    let mismatches = 0;
    for (let i = 0; i < want.length; i++) {
      const { start, agg } = want[i] as RollupBucket;
      const f = (field: number): number => blk.field(field, i);
      const c = compactOf(agg);
      const got = [
        blk.starts[i],
        f(SUM_COUNT),
        f(SUM_LONG_COUNT),
        f(SUM_DOUBLE_COUNT),
        blk.firstTs(i),
        blk.lastTs(i),
        f(SUM_PARTIALS),
      ];
      // no compact form: NON_FINITE when a non-finite double is why (such a bucket cannot be subtracted)
      const form = c ? c.length - 1 : agg.doubleSpecial !== 0 ? NON_FINITE : NO_COMPACT_FORM;
      const exp = [start, agg.count, agg.longCount, agg.doubleCount, agg.firstTs, agg.lastTs, form];
      if (c !== undefined) {
        compact++;
        const np = f(SUM_PARTIALS);
        got.push(f(SUM_LONG_SUM), ...Array.from({ length: np }, (_, j) => blk.partial(i, j)));
        exp.push(...c);
      }
      if (got.some((x, j) => !Object.is(x, exp[j])) || got.length !== exp.length) {
        if (mismatches++ < 3) t.same(got, exp, `${name}: bucket ${i}`);
      }
    }
    t.equal(mismatches, 0, `${name}: every bucket's columns equal its state (${compact} with a compact form)`);
    t.same(blk.buckets, want, `${name}: and the states themselves on demand`);
  }
  const empty = decodeSums(Buffer.alloc(0), 0, T, () => []);
  t.equal(empty.length, 0, 'no bytes: an empty block');
  const none = encodeBlock(blockStart, T, []);
  t.equal(decodeSums(none, blockStart, T, () => []).length, 0, 'a block of no buckets');
});

t.test('raw edges: a chunk decoded up to a boundary holds exactly the points before it', async (t) => {
  const t0 = 1_700_000_400_000;
  const regular = (n: number): number[] => Array.from({ length: n }, (_, i) => t0 + i * 10_000);
  const irregular = [t0, t0 + 1, t0 + 7_000, t0 + 9_999, t0 + 10_000, t0 + 600_000, t0 + 1_199_999];
  const blocks: Array<[string, TsKv[]]> = [
    ['decimal doubles', regular(120).map((ts, i) => ({ ts, value: kvDouble((i * 37) / 100) }))],
    ['a counter (second differences)', regular(120).map((ts, i) => ({ ts, value: kvLong(1000 + 5 * i) }))],
    ['longs', regular(120).map((ts, i) => ({ ts, value: kvLong((i * 7919) % 1000) }))],
    ['F64 doubles', regular(120).map((ts, i) => ({ ts, value: kvDouble(Math.PI * i) }))],
    [
      'mixed (tagged)',
      irregular.map((ts, i) => ({ ts, value: i % 2 === 0 ? kvString(`s${i}`) : kvLong(2n ** 60n + BigInt(i)) })),
    ],
    ['irregular doubles', irregular.map((ts, i) => ({ ts, value: kvDouble(i + 0.25) }))],
    ['one point', [{ ts: t0 + 5_000, value: kvDouble(1.5) }]],
  ];
  // one reader's columns, reloaded block after block, as the planner's edge columns are
  const cols = new BlockColumns();
  for (const [name, points] of blocks) {
    const block = encodePoints(points);
    const first = (points[0] as TsKv).ts;
    const last = (points[points.length - 1] as TsKv).ts;
    const mid = (points[points.length >> 1] as TsKv).ts;
    const bounds = [first - 1, first, first + 1, mid - 1, mid, mid + 1, last, last + 1, t0 + 1_200_000];
    for (const upTo of bounds) {
      cols.load(block, upTo);
      const want = points.filter((p) => p.ts < upTo);
      const got: TsKv[] = [];
      for (let i = 0; i < cols.count; i++) got.push({ ts: cols.tsAt(i), value: cols.valueAt(i) });
      t.same(got, want, `${name}: the points before ${upTo - t0}`);
      if (cols.numericKind !== 'NONE')
        t.same(
          want.map((_, i) => cols.num(i)),
          want.map((p) => p.value.v),
          `${name}: as numbers before ${upTo - t0}`,
        );
      const lb = bounds.filter((x) => x <= upTo).map((x) => cols.lowerBound(x));
      const wantLb = bounds.filter((x) => x <= upTo).map((x) => points.filter((p) => p.ts < x).length);
      t.same(lb, wantLb, `${name}: lower bounds up to ${upTo - t0}`);
    }
  }
});

const render = (v: KvValue | undefined): string => (v === undefined ? '-' : `${v.type}:${kvToString(v)}`);

t.test('2-h buckets whose boundaries fall on, between and beside points answer as brute force', async (t) => {
  const { store } = openSeriesStore(t, { readCacheBytes: 256 * 1024 });
  const planner = new RollupPlanner(store);
  const t0 = 1_700_000_000_000 - (1_700_000_000_000 % DAY);
  const model = new Map<string, Array<[number, KvValue]>>([
    ['d', []],
    ['l', []],
  ]);
  for (let i = 0; i < 2 * 8640; i += 1000) {
    const recs = [];
    for (let j = i; j < Math.min(i + 1000, 2 * 8640); j++) {
      const ts = t0 + j * 10_000;
      const d = kvDouble(Math.round(Math.sin(j / 50) * 2000) / 100);
      const l = kvLong((j * 7919) % 1000);
      recs.push({ ts, values: [['d', d] as [string, KvValue], ['l', l] as [string, KvValue]] });
      model.get('d')?.push([ts, d]);
      model.get('l')?.push([ts, l]);
    }
    await store.write(ENTITY, recs);
  }
  await compactAll(store, t0 + 3 * DAY);
  // start offsets from the 10-min grid: on it, on a point, between points, a point before, the last point of a
  // window, half a tier bucket; and ranges with no point at all
  const offsets = [0, 10_000, 5_000, -10_000, 20 * MIN - 10_000, 5 * MIN, 5 * MIN + 1, HOUR - 1];
  let answered = 0;
  for (const key of ['d', 'l']) {
    const points = model.get(key) ?? [];
    for (const off of offsets) {
      for (const [from, to] of [
        [t0 + 2 * HOUR + off, t0 + 2 * DAY - 3 * HOUR + off],
        [t0 + 5 * HOUR + off, t0 + 5 * HOUR + off],
        [t0 - DAY + off, t0 - 2 * HOUR],
      ] as Array<[number, number]>) {
        const plan = planBuckets(from, to, 2 * HOUR, { maxIntervals: 1000 });
        for (const fn of AGG_FNS) {
          const got = [...planner.bucketAggs(ENTITY, key, plan, fn)].map(({ index, agg }) => {
            const b = [...bucketsOf(plan)][index];
            return `${b?.ts} ${render(finalizeAgg(agg, fn))}`;
          });
          const want: string[] = [];
          for (const b of bucketsOf(plan)) {
            const agg = emptyAgg();
            for (const [ts, v] of points) if (ts >= b.start && ts < b.end) addPoint(agg, ts, v);
            if (agg.count > 0) want.push(`${b.ts} ${render(finalizeAgg(agg, fn))}`);
          }
          t.same(got, want, `${key} ${fn} from ${off} ms off the grid, ${plan.count} buckets`);
          t.notOk(
            got.some((x) => x.includes('NaN')),
            `${key} ${fn}: no NaN`,
          );
          answered += got.length;
        }
      }
    }
  }
  t.ok(answered > 1000, `${answered} buckets compared`);
});

t.test(
  'a month-like 2-h AVG keeps compact blocks and encoded chunks; a MIN accounts the states it decodes',
  async (t) => {
    const { store } = openSeriesStore(t);
    const planner = new RollupPlanner(store);
    const days = 4;
    const t0 = 1_700_000_000_000 - (1_700_000_000_000 % DAY);
    const n = days * 8640;
    for (let i = 0; i < n; i += 1000) {
      const recs = [];
      for (let j = i; j < Math.min(i + 1000, n); j++)
        recs.push({
          ts: t0 + j * 10_000,
          values: [['v', kvDouble(Math.round(2000 + Math.sin(j / 50) * 500) / 100)] as [string, KvValue]],
        });
      await store.write(ENTITY, recs);
    }
    await compactAll(store, t0 + (days + 1) * DAY);
    // off the 10-min and hourly grids, as a "last N days" query is: a raw edge and ten-minute buckets at every
    // boundary
    const from = t0 + 23 * MIN + 37_000;
    const plan = planBuckets(from, t0 + days * DAY, 2 * HOUR, { maxIntervals: 1000 });
    const avg = [...planner.bucketAggs(ENTITY, 'v', plan, 'AVG')];
    t.equal(avg.length, plan.count, 'every bucket answered');
    const afterAvg = store.readCacheUsage();
    // per day of 10-s data: 144 ten-minute and 24 hourly buckets, 12 chunks read at 2-h boundaries
    const perDay = (b: number): number => Math.round(b / days);
    t.ok(
      perDay(afterAvg.rollupBytes) <= 40 * 1024,
      `rollup blocks: ${perDay(afterAvg.rollupBytes)} B accounted per day (decoded bucket objects: ~110 KB)`,
    );
    t.ok(
      perDay(afterAvg.chunkBytes) > 0 && perDay(afterAvg.chunkBytes) <= 12 * 1024,
      `chunks: ${perDay(afterAvg.chunkBytes)} B accounted per day (decoded columns: ~29 KB)`,
    );
    const min = [...planner.bucketAggs(ENTITY, 'v', plan, 'MIN')];
    t.equal(min.length, plan.count, 'MIN answered too');
    const afterMin = store.readCacheUsage();
    t.ok(
      afterMin.rollupBytes >= afterAvg.rollupBytes + 144 * days * 500,
      `the states MIN decoded are accounted: ${afterAvg.rollupBytes} → ${afterMin.rollupBytes} B`,
    );
    const again = [...planner.bucketAggs(ENTITY, 'v', plan, 'AVG')];
    t.same(
      again.map((b) => finalizeAgg(b.agg, 'AVG')),
      avg.map((b) => finalizeAgg(b.agg, 'AVG')),
      'and the cached blocks answer the same',
    );
  },
);
