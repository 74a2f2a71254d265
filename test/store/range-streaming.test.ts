/**
 * Streamed range reads: `TimeseriesStore.range` merges chunks and head fragments point by point
 * (chunks.ts `seriesPoints`, gorilla.ts `BlockColumns`). A seeded property test compares it with a model of
 * the raw points over random [startTs, endTs), ASC/DESC and limits, while windows hold a chunk, many
 * fragments, both, or legacy single-point head entries; and BlockColumns matches decodePoints for every mode.
 */
import t from 'tap';
import { type KvValue, type TsKv, kvBool, kvDouble, kvJson, kvLong, kvString, kvToString } from '../../src/model/kv.js';
import { encodeValue, pointKey } from '../../src/store/encoding/codec.js';
import { BlockColumns, decodePoints, encodePoints } from '../../src/store/encoding/gorilla.js';
import { compactAll, openSeriesStore } from '../helpers/store.js';
import { rng } from '../helpers/prng.js';

const show = (pts: Iterable<TsKv>): string[] =>
  [...pts].map((p) => `${p.ts}:${p.value.type}:${kvToString(p.value)}${Object.is(p.value.v, -0) ? ':-0' : ''}`);
const ENTITY = '00000000-0000-0000-0000-0000000000c1';
const MIN = 60_000;
const HOUR = 60 * MIN;

t.test('BlockColumns takes runs of one step at once, to any bound, and a point off the grid after them', async (t) => {
  // Regular stretches (runs of zero second differences, which load takes without a step per point) broken by
  // gaps, late points and a changed step; bounds before, on, between and after points, inside and at the ends
  // of runs. Counts, every ts, lowerBound and the values must be decodePoints' for the same bound.
  const rand = rng(11);
  const cols = new BlockColumns();
  const mismatches: string[] = [];
  let blocks = 0;
  for (let round = 0; round < 200; round++) {
    const pts: TsKv[] = [];
    let ts = 1_700_000_000_000 + Math.floor(rand() * 1e6);
    let step = [1000, 10_000, 7][Math.floor(rand() * 3)] as number;
    const n = 1 + Math.floor(rand() * 150);
    for (let i = 0; i < n; i++) {
      pts.push({ ts, value: kvLong(i * 3) });
      const r = rand();
      if (r < 0.02)
        ts += step * 5; // a gap
      else if (r < 0.04)
        ts += step + 1; // one late point
      else if (r < 0.05) step *= 2; // a new step
      ts += step;
    }
    const block = encodePoints(pts);
    blocks++;
    const tsOf = (i: number): number => (pts[i] as TsKv).ts;
    const bounds = [Infinity, -Infinity, tsOf(0), tsOf(pts.length - 1) + 1];
    for (let b = 0; b < 6; b++) {
      const p = tsOf(Math.floor(rand() * pts.length));
      bounds.push(p, p + 1, p - 1);
    }
    for (const toTs of bounds) {
      cols.load(block, toTs);
      const want = decodePoints(block).filter((p) => p.ts < toTs);
      const got = Array.from({ length: cols.count }, (_, i) => `${cols.tsAt(i)}:${String(cols.num(i))}`);
      const exp = want.map((p) => `${p.ts}:${String(p.value.v)}`);
      if (got.join() !== exp.join()) mismatches.push(`round ${round} toTs ${toTs}: ${got.length} vs ${exp.length}`);
      const wrong = want.filter((p, i) => cols.lowerBound(p.ts) !== i || cols.lowerBound(p.ts + 1) !== i + 1);
      if (wrong.length > 0) mismatches.push(`round ${round} toTs ${toTs}: lowerBound at ${(wrong[0] as TsKv).ts}`);
    }
  }
  t.same(mismatches.slice(0, 5), [], `${blocks} blocks, every bound: the points decodePoints has`);
});

t.test('BlockColumns reads every block mode like decodePoints, with a ts bound and in any order', async (t) => {
  const t0 = 1_700_000_000_000;
  const cases: TsKv[][] = [
    Array.from({ length: 300 }, (_, i) => ({ ts: t0 + i * 1000, value: kvLong(5 + i * 3) })),
    Array.from({ length: 300 }, (_, i) => ({ ts: t0 + i * 1000, value: kvLong(((i * 7919) % 1000) - 500) })),
    Array.from({ length: 200 }, (_, i) => ({
      ts: t0 + i * 997,
      value: kvDouble(Math.round(2000 + 300 * Math.sin(i / 9)) / 100),
    })),
    Array.from({ length: 50 }, (_, i) => ({ ts: -50_000 + i * 2000, value: kvDouble(Math.PI * i) })),
    // irregular: a late point every 7th, and a gap
    Array.from({ length: 100 }, (_, i) => ({
      ts: t0 + i * 1000 + (i % 7 === 3 ? 400 : 0) + (i > 60 ? 50_000 : 0),
      value: kvLong(i),
    })),
    [
      kvDouble(-0),
      kvDouble(NaN),
      kvDouble(Infinity),
      kvLong(1),
      kvBool(true),
      kvString('a,"b"'),
      kvJson('{"x":1}'),
      kvLong(2n ** 62n),
    ].map((value, i) => ({ ts: i * 3, value })),
    [],
  ];
  const cols = new BlockColumns();
  for (const pts of cases) {
    const block = encodePoints(pts);
    // a longer buffer than the block (the planner's reused copy): only the encoded bytes are read
    const padded = Buffer.concat([block, Buffer.alloc(64, 0xff)]);
    for (const toTs of [Infinity, pts[Math.floor(pts.length / 2)]?.ts ?? 0]) {
      cols.load(padded, toTs);
      const want = decodePoints(block).filter((p) => p.ts < toTs);
      t.equal(cols.count, want.length, `count (n=${pts.length}, toTs=${toTs})`);
      const desc: TsKv[] = [];
      for (let i = cols.count - 1; i >= 0; i--) desc.push({ ts: cols.tsAt(i), value: cols.valueAt(i) });
      t.same(show(desc.reverse()), show(want), 'values read last-to-first');
      if (cols.numericKind !== 'NONE') {
        t.same(
          want.map(
            (p, i) => cols.num(i) === p.value.v || (Number.isNaN(cols.num(i)) && Number.isNaN(p.value.v as number)),
          ),
          want.map(() => true),
          'num()',
        );
      }
      // lowerBound (computed on a regular grid, searched otherwise) against a scan, around every point
      const scan = (x: number): number =>
        want.findIndex((p) => p.ts >= x) === -1 ? want.length : want.findIndex((p) => p.ts >= x);
      const probes = want.flatMap((p) => [p.ts - 1, p.ts, p.ts + 1, p.ts + 499]).concat([-1e15, 1e15]);
      const wrong = probes.filter((x) => cols.lowerBound(x) !== scan(x));
      t.same(wrong, [], `lowerBound around all ${want.length} points`);
    }
  }
  cols.loadSingle(42, encodeValue(kvString('legacy')), 100);
  t.same(show([{ ts: cols.tsAt(0), value: cols.valueAt(0) }]), ['42:STRING:legacy']);
  t.equal(cols.loadSingle(42, encodeValue(kvLong(1)), 42).count, 0, 'single point at toTs is excluded');
});

t.test('range streams exactly what a model of the raw points holds (seeded)', async (t) => {
  const { env, store } = openSeriesStore(t, {
    windowMs: 20 * MIN,
    headWindowMs: HOUR,
    tiersMs: [10 * MIN, HOUR],
    tierRetentionMs: [0, 0],
  });
  const rand = rng(424242);
  const int = (n: number): number => Math.floor(rand() * n);
  const t0 = 1_700_000_000_000 - (1_700_000_000_000 % HOUR);
  const span = 12 * HOUR;
  const model = new Map<number, KvValue>();
  const value = (): KvValue => {
    const r = rand();
    if (r < 0.4) return kvDouble(Math.round(rand() * 1e4) / 100);
    if (r < 0.8) return kvLong(int(1000));
    if (r < 0.95) return kvString(`s${int(9)}`);
    return kvBool(rand() < 0.5);
  };
  let queries = 0;
  for (let round = 0; round < 10; round++) {
    // bulk 10-s data, then many one-point writes into the same windows (many fragments per window)
    const base = t0 + int(span);
    const recs: Array<{ ts: number; values: Array<[string, KvValue]> }> = [];
    for (let i = 0; i < 300; i++) recs.push({ ts: base + i * 10_000, values: [['x', value()]] });
    await store.write(ENTITY, recs);
    for (const r of recs) model.set(r.ts, (r.values[0] as (typeof r.values)[number])[1]);
    for (let i = 0; i < 40; i++) {
      const keys = [...model.keys()];
      const ts = rand() < 0.6 ? (keys[int(keys.length)] as number) : t0 + int(span);
      const v = value();
      await store.write(ENTITY, [{ ts, values: [['x', v]] }]);
      model.set(ts, v);
    }
    if (round % 4 === 2) {
      // A legacy single-point head entry (16-byte key, written before fragments existed: seq 0, so it beats a
      // chunk but loses to any fragment). At a ts nothing holds yet, as such an entry would be.
      let ts = t0 + int(span);
      while (model.has(ts)) ts++;
      const v = value();
      const s = store.seriesOf(ENTITY, 'x');
      if (s === undefined) throw new Error('series not interned');
      await env.head.put(pointKey(s.e, s.k, ts), encodeValue(v));
      model.set(ts, v);
    }
    if (round % 3 === 1) {
      const ds = t0 + int(span);
      const de = ds + int(2 * HOUR);
      await store.delete(ENTITY, { keys: ['x'], startTs: ds, endTs: de, deleteLatest: false, rewriteLatest: false });
      for (const ts of [...model.keys()]) if (ts >= ds && ts < de) model.delete(ts);
    }
    // compact older windows only: later ones keep chunk + fragments, or fragments alone
    await compactAll(store, t0 + (round + 1) * HOUR);

    const sorted = [...model].sort((a, b) => a[0] - b[0]).map(([ts, v]) => ({ ts, value: v }));
    for (let q = 0; q < 30; q++) {
      const startTs = t0 - HOUR + int(span + 2 * HOUR);
      const endTs = startTs + int(rand() < 0.3 ? 10 * MIN : 6 * HOUR);
      const order = rand() < 0.5 ? ('ASC' as const) : ('DESC' as const);
      const limit = rand() < 0.4 ? 1 + int(200) : undefined;
      let want = sorted.filter((p) => p.ts >= startTs && p.ts < endTs);
      if (order === 'DESC') want = want.reverse();
      if (limit !== undefined) want = want.slice(0, limit);
      const got = store.range(ENTITY, 'x', { startTs, endTs, order, ...(limit === undefined ? {} : { limit }) });
      const g = show(got);
      const w = show(want);
      if (g.join('\n') !== w.join('\n'))
        t.same(g, w, `round ${round} query ${q}: [${startTs - t0}, ${endTs - t0}) ${order} limit ${limit}`);
      queries++;
    }
    // stopping early releases the iterator, and a new one reads the same
    const it = store.range(ENTITY, 'x', { startTs: t0, endTs: t0 + span, order: 'ASC' });
    const firstTwo = [it.next().value, it.next().value].filter((p): p is TsKv => p !== undefined);
    it.return?.();
    t.same(
      show(firstTwo),
      show(sorted.filter((p) => p.ts >= t0 && p.ts < t0 + span).slice(0, 2)),
      `round ${round}: early stop`,
    );
  }
  t.pass(`${queries} random range queries matched the model`);
});
