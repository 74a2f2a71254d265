/**
 * The sync's wire format (src/upstream/uplink/wire.ts): doubles always carry a `.` that both TB (JsonConverter: a `.`
 * makes a double) and Outpost as an upstream (src/ingest/typing.ts) read back as the same double; bodies are
 * cut between timestamps, within the byte cap, and say up to which ts they reach.
 */
import '../helpers/sandbox.js';
import t from 'tap';
import { typeNumberLiteral } from '../../src/ingest/typing.js';
import { kvDouble, kvJson, kvLong, kvString, kvBool } from '../../src/model/kv.js';
import { type WirePoint, plainDouble, wireBodies, wireValue } from '../../src/upstream/uplink/wire.js';
import { rng } from '../helpers/prng.js';

t.test('every double Outpost can store survives the trip as a double with a dot', async (t) => {
  // Outpost types a literal as a double when it has at most 16 fraction digits (src/ingest/typing.ts), so the
  // doubles in its store are those: random ones of that kind, in every magnitude, plus edge values
  const fixed = [
    0,
    -0,
    42,
    -42,
    0.1,
    1e10,
    1e21,
    1.7976931348623157e308,
    1.5e-7,
    123456789.125,
    2 ** 53 + 2,
    -1e-5,
    1e-16,
  ];
  const rand = rng(16);
  const randoms: number[] = [];
  for (let i = 0; i < 3000; i++) {
    const frac = Math.floor(rand() * 17);
    const lit = `${rand() < 0.5 ? '-' : ''}${Math.floor(rand() * 1e6)}.${String(Math.floor(rand() * 1e16))
      .padStart(16, '0')
      .slice(0, Math.max(1, frac))}`;
    const back = typeNumberLiteral(i % 3 === 0 ? `${lit}e${Math.floor(rand() * 40) - 20}` : lit);
    if (back.type === 'DOUBLE') randoms.push(back.v);
  }
  t.ok(randoms.length > 1500, `${randoms.length} random doubles`);
  const bad: string[] = [];
  for (const d of [...fixed, ...randoms]) {
    const lit = plainDouble(d);
    const back = typeNumberLiteral(lit);
    if (!lit.includes('.') || back.type !== 'DOUBLE' || !(Object.is(back.v, d) || (d === 0 && back.v === 0)))
      bad.push(`${d} → ${lit} → ${back.type} ${String(back.v)}`);
  }
  t.same(bad.slice(0, 5), [], 'each literal has a dot and Outpost types it back as that very double');
  t.equal(plainDouble(42), '42.0');
  t.equal(plainDouble(1e10), '10000000000.0');
  t.equal(plainDouble(1.5e-7), '0.00000015');
  t.equal(plainDouble(1.5e-17), '1.5E-17');
});

t.test('values keep their TB type on the wire', async (t) => {
  t.equal(wireValue(kvLong(9007199254740993n)), '9007199254740993');
  t.equal(wireValue(kvLong(42)), '42');
  t.equal(wireValue(kvDouble(42)), '42.0');
  t.equal(wireValue(kvString('42')), '"42"');
  t.equal(wireValue(kvBool(false)), 'false');
  t.equal(wireValue(kvJson('{"a":[1,2]}')), '{"a":[1,2]}');
  t.equal(wireValue(kvDouble(NaN)), '"NaN"', 'a non-finite double cannot be a JSON number');
});

t.test('bodies are cut between timestamps, within the byte cap, and a later write of a key wins', async (t) => {
  const pts: WirePoint[] = [];
  for (let ts = 0; ts < 500; ts++) for (const k of ['"a"', '"b"']) pts.push({ ts, key: k, value: String(ts) });
  pts.push({ ts: 7, key: '"a"', value: '"later"' });
  const bodies = [...wireBodies(pts, 1000, Infinity)];
  t.ok(bodies.length > 1, `${bodies.length} bodies`);
  let seen = 0;
  let prevLast = -1;
  for (const b of bodies) {
    t.ok(Buffer.byteLength(b.body) <= 1000, 'within the cap');
    const arr = JSON.parse(b.body) as Array<{ ts: number; values: Record<string, unknown> }>;
    t.equal(arr[0]?.ts, prevLast + 1, 'the next body starts after the last ts of the previous one');
    prevLast = b.lastTs;
    t.equal(arr[arr.length - 1]?.ts, b.lastTs, "lastTs is the body's last timestamp");
    seen += b.points;
    if (arr.some((e) => e.ts === 7))
      t.same(arr.find((e) => e.ts === 7)?.values, { a: 'later', b: 7 }, 'the later write wins');
  }
  t.equal(seen, 1000, 'every point once');
  const small: WirePoint[] = [];
  for (let ts = 0; ts < 10; ts++) for (const k of ['"a"', '"b"']) small.push({ ts, key: k, value: '1' });
  t.same(
    [...wireBodies(small, 1_000_000, 5)].map((b) => b.points),
    [4, 4, 4, 4, 4],
    'a point cap cuts too, between timestamps',
  );
});
