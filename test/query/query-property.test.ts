/**
 * Seeded property test (docs/api.md "results equal the same computation over the raw points, exactly"):
 * random series of longs, doubles, strings and mixed values go in through the REST write API; random
 * history queries (ranges, intervals, aggs, limits, orders) go out through the REST read API and are compared
 * with a brute-force reference written here, independently of src/query: it walks every bucket, sums with
 * exact big-integer arithmetic (every double is an integer multiple of 2^-1074) and rounds once.
 */
import t from 'tap';
import { javaDouble } from '../../src/model/kv.js';
import { addDevice, http, startGateway } from '../helpers/server.js';
import { adminHeaders } from '../helpers/users.js';
import { rng } from '../helpers/prng.js';

const SEED = 0x5eed2026;

type RefValue =
  | { t: 'LONG'; v: bigint }
  | { t: 'DOUBLE'; v: number }
  | { t: 'STRING'; v: string }
  | { t: 'BOOLEAN'; v: boolean };

interface RefPoint {
  ts: number;
  val: RefValue;
  literal: string;
}

/** d × 2^1074 as an exact integer. */
function scaledDouble(d: number): bigint {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, d);
  const bits = view.getBigUint64(0);
  const exp = (bits >> 52n) & 0x7ffn;
  const frac = bits & ((1n << 52n) - 1n);
  const mant = exp === 0n ? frac : frac | (1n << 52n);
  const scaled = mant << ((exp === 0n ? 1n : exp) - 1n);
  return bits >> 63n ? -scaled : scaled;
}

const scaledLong = (l: bigint): bigint => l << 1074n;

/** The nearest double to s × 2^-1074, ties to even. */
function roundScaled(s: bigint): number {
  if (s === 0n) return 0;
  const neg = s < 0n;
  const a = neg ? -s : s;
  const bits = a.toString(2).length;
  let m = a;
  let shift = 0;
  if (bits > 53) {
    shift = bits - 53;
    m = a >> BigInt(shift);
    const rem = a - (m << BigInt(shift));
    const half = 1n << BigInt(shift - 1);
    if (rem > half || (rem === half && (m & 1n) === 1n)) m += 1n;
  }
  const r = Number(m) * 2 ** (shift - 1074 + 600) * 2 ** -600;
  return neg ? -r : r;
}

function render(v: RefValue): string {
  switch (v.t) {
    case 'LONG':
      return v.v.toString();
    case 'DOUBLE':
      return javaDouble(v.v);
    case 'STRING':
      return v.v;
    case 'BOOLEAN':
      return String(v.v);
  }
}

type Agg = 'NONE' | 'MIN' | 'MAX' | 'AVG' | 'SUM' | 'COUNT';

/** One bucket's value by brute force, or undefined when the bucket is omitted. */
function refAggregate(points: RefPoint[], agg: Exclude<Agg, 'NONE'>): string | undefined {
  if (points.length === 0) return undefined;
  if (agg === 'COUNT') return String(points.length);
  const nums = points
    .filter((p) => p.val.t === 'LONG' || p.val.t === 'DOUBLE')
    .map((p) => p.val as { t: 'LONG'; v: bigint } | { t: 'DOUBLE'; v: number });
  const anyDouble = nums.some((n) => n.t === 'DOUBLE');
  const scaled = (n: (typeof nums)[number]): bigint => (n.t === 'LONG' ? scaledLong(n.v) : scaledDouble(n.v));
  if (agg === 'AVG' || agg === 'SUM') {
    if (nums.length === 0) return undefined;
    const total = nums.reduce((acc, n) => acc + scaled(n), 0n);
    if (agg === 'AVG') return javaDouble(roundScaled(total) / nums.length);
    if (!anyDouble) return (total >> 1074n).toString();
    return javaDouble(roundScaled(total));
  }
  if (nums.length > 0) {
    let best = nums[0] as (typeof nums)[number];
    for (const n of nums) {
      const c = scaled(n) - scaled(best);
      if (agg === 'MIN' ? c < 0n : c > 0n) best = n;
    }
    if (!anyDouble) return best.v.toString();
    return javaDouble(best.t === 'LONG' ? Number(best.v) : best.v);
  }
  const strs = points
    .filter((p) => p.val.t === 'STRING')
    .map((p) => p.val.v as string)
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  if (strs.length === 0) return undefined;
  return agg === 'MIN' ? strs[0] : strs[strs.length - 1];
}

interface Query {
  keys: string[];
  startTs: number;
  endTs: number;
  agg: Agg;
  interval: number | undefined;
  limit: number | undefined;
  orderBy: 'ASC' | 'DESC' | undefined;
}
type Expected = { status: 400 } | { status: 200; body: Array<[string, Array<{ ts: number; value: string }>]> };

function reference(series: Map<string, RefPoint[]>, q: Query): Expected {
  const interval = q.interval ?? 0;
  const body: Array<[string, Array<{ ts: number; value: string }>]> = [];
  if (q.agg === 'NONE' || interval === 0) {
    const limit = q.limit ?? 100;
    for (const key of q.keys) {
      const pts = (series.get(key) ?? [])
        .filter((p) => p.ts >= q.startTs && p.ts < q.endTs)
        .sort((a, b) => a.ts - b.ts);
      if (q.orderBy !== 'ASC') pts.reverse();
      const page = pts.slice(0, limit).map((p) => ({ ts: p.ts, value: render(p.val) }));
      if (page.length > 0) body.push([key, page]);
    }
    return { status: 200, body };
  }
  if (interval < 0 || q.endTs < q.startTs) return { status: 400 };
  if (q.limit === undefined && Math.ceil((q.endTs - q.startTs) / interval) > 700) return { status: 400 };
  for (const key of q.keys) {
    const out: Array<{ ts: number; value: string }> = [];
    const pts = series.get(key) ?? [];
    let n = 0;
    for (let start = q.startTs; start < q.endTs && (q.limit === undefined || n < q.limit); start += interval, n++) {
      const end = Math.min(start + interval, q.endTs);
      const v = refAggregate(
        pts.filter((p) => p.ts >= start && p.ts < end),
        q.agg,
      );
      if (v !== undefined) out.push({ ts: start + Math.floor((end - start) / 2), value: v });
    }
    if (out.length > 0) body.push([key, out]);
  }
  return { status: 200, body };
}

function randomPoint(r: () => number, kind: string): { val: RefValue; literal: string } {
  const pick = kind === 'mix' ? (['lng', 'dbl', 'str', 'bool'][Math.floor(r() * 4)] as string) : kind;
  switch (pick) {
    case 'lng': {
      // mostly small; sometimes near ±2^62 so sums leave the 64-bit range
      const v =
        r() < 0.15
          ? (r() < 0.5 ? -1n : 1n) * (2n ** 62n - BigInt(Math.floor(r() * 1e6)))
          : BigInt(Math.floor((r() - 0.5) * 2e6));
      return { val: { t: 'LONG', v }, literal: v.toString() };
    }
    case 'dbl': {
      const lit = ((r() - 0.5) * 10 ** Math.floor(r() * 8)).toFixed(Math.floor(r() * 4) + 1);
      return { val: { t: 'DOUBLE', v: Number(lit) }, literal: lit };
    }
    case 'str': {
      const s = `s${String.fromCharCode(97 + Math.floor(r() * 26))}${String.fromCharCode(65 + Math.floor(r() * 26))}`;
      return { val: { t: 'STRING', v: s }, literal: JSON.stringify(s) };
    }
    default: {
      const b = r() < 0.5;
      return { val: { t: 'BOOLEAN', v: b }, literal: String(b) };
    }
  }
}

t.test('history answers equal a brute-force reference (seeded)', async (t) => {
  const r = rng(SEED);
  const gw = await startGateway(t);
  const h = await adminHeaders(gw, 'admin@example.com', 'secret-pw');
  const dev = await addDevice(gw.dataDir, 'prop');
  const base = `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}`;

  const kinds: Record<string, number> = { lng: 300, dbl: 300, str: 150, mix: 300, sparse: 6 };
  const series = new Map<string, RefPoint[]>();
  for (const [key, n] of Object.entries(kinds)) {
    const byTs = new Map<number, RefPoint>();
    while (byTs.size < n) {
      const ts = Math.floor(r() * 100_000);
      byTs.set(ts, { ts, ...randomPoint(r, key === 'sparse' ? 'mix' : key) });
    }
    const pts = [...byTs.values()];
    series.set(key, pts);
    const body = `[${pts.map((p) => `{"ts":${p.ts},"values":{${JSON.stringify(key)}:${p.literal}}}`).join(',')}]`;
    const w = await http('POST', `${base}/timeseries/ANY`, body, h);
    t.equal(w.status, 200, `seeded ${key}`);
  }

  const allKeys = [...Object.keys(kinds), 'nokey'];
  const aggs: Agg[] = ['NONE', 'MIN', 'MAX', 'AVG', 'SUM', 'COUNT'];
  let agree = 0;
  let nonEmpty = 0;
  let rejected = 0;
  const QUERIES = 300;
  for (let i = 0; i < QUERIES; i++) {
    const keys = allKeys.filter(() => r() < 0.4).sort(() => r() - 0.5);
    if (keys.length === 0) keys.push(allKeys[Math.floor(r() * allKeys.length)] as string);
    const startTs = Math.floor(r() * 110_000) - 5000;
    const endTs = r() < 0.04 ? startTs - 1 - Math.floor(r() * 100) : startTs + Math.floor(r() ** 2 * 110_000);
    const agg = aggs[Math.floor(r() * aggs.length)] as Agg;
    const iv = r();
    const interval =
      iv < 0.1
        ? 0
        : iv < 0.13
          ? -Math.ceil(r() * 1000)
          : iv < 0.2
            ? undefined
            : Math.max(1, Math.floor(Math.exp(r() * Math.log(60_000))));
    const limit = r() < 0.5 ? undefined : 1 + Math.floor(r() * 300);
    const order = r() < 0.33 ? undefined : r() < 0.5 ? 'ASC' : 'DESC';
    const q: Query = { keys, startTs, endTs, agg, interval, limit, orderBy: order };

    let qs = `keys=${encodeURIComponent(keys.join(','))}&startTs=${startTs}&endTs=${endTs}&agg=${agg}`;
    if (interval !== undefined) qs += `&interval=${interval}`;
    if (limit !== undefined) qs += `&limit=${limit}`;
    if (order !== undefined) qs += `&orderBy=${order}`;
    const res = await http('GET', `${base}/values/timeseries?${qs}`, undefined, h);
    const want = reference(series, q);
    if (res.status !== want.status) {
      t.fail(`status of ${qs}: got ${res.status} ${res.text.slice(0, 200)}, want ${want.status}`);
      continue;
    }
    if (want.status === 400) {
      t.equal(res.json<{ errorCode: number }>().errorCode, 31, `400 carries errorCode 31 (${qs})`);
      rejected++;
      agree++;
      continue;
    }
    const got = res.json<Record<string, unknown>>();
    const same = JSON.stringify(Object.entries(got)) === JSON.stringify(want.body);
    if (!same) {
      t.same(Object.entries(got), want.body, `answer of ${qs}`);
      continue;
    }
    if (want.body.length > 0) nonEmpty++;
    agree++;
  }
  t.equal(agree, QUERIES, 'every query agrees with the reference (keys in request order, values exact)');
  t.ok(nonEmpty > QUERIES / 3, `most queries return data (${nonEmpty})`);
  t.ok(rejected > 5, `some queries are rejected with 400 (${rejected})`);
});
