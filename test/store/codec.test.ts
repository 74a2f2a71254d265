/**
 * Binary codecs (src/store/encoding/codec.ts): keys sort as bytes exactly as (entity, key, ts) sort as numbers,
 * negative timestamps and epoch 0 included; every value type round-trips.
 */
import '../helpers/sandbox.js';
import t from 'tap';
import {
  decodePointKey,
  decodeStamped,
  decodeValue,
  encodeStamped,
  encodeValue,
  entityPrefix,
  pointKey,
  prefixEnd,
  readOrderedI64,
  seriesKey,
  writeOrderedI64,
} from '../../src/store/encoding/codec.js';
import { type KvValue, kvBool, kvDouble, kvJson, kvLong, kvString } from '../../src/model/kv.js';
import { rng } from '../helpers/prng.js';

const I64_EDGES = [
  Number.MIN_SAFE_INTEGER,
  -(2 ** 32) - 1,
  -(2 ** 32),
  -(2 ** 31),
  -1000,
  -2,
  -1,
  0,
  1,
  2,
  1000,
  2 ** 31,
  2 ** 32 - 1,
  2 ** 32,
  2 ** 32 + 1,
  1_700_000_000_000,
  Number.MAX_SAFE_INTEGER,
];

t.test('ordered i64: round trip and byte order equals numeric order', async (t) => {
  const next = rng(1);
  const values = [...I64_EDGES];
  for (let i = 0; i < 500; i++) {
    const mag = 10 ** Math.floor(next() * 16);
    values.push(Math.trunc((next() * 2 - 1) * mag));
  }
  const encoded = values.map((v) => {
    const b = Buffer.alloc(8);
    writeOrderedI64(b, v, 0);
    t.equal(readOrderedI64(b, 0), v === 0 ? 0 : v, `round trip ${v}`);
    return { v, b };
  });
  const byBytes = [...encoded].sort((x, y) => Buffer.compare(x.b, y.b)).map((x) => x.v);
  const byValue = [...values].sort((x, y) => x - y);
  t.same(byBytes, byValue, 'sorting the encodings as bytes sorts the numbers');
  const zero = Buffer.alloc(8);
  writeOrderedI64(zero, 0, 0);
  t.equal(zero.toString('hex'), '8000000000000000', 'epoch 0 sits in the middle of the key space');
  const minusOne = Buffer.alloc(8);
  writeOrderedI64(minusOne, -1, 0);
  t.equal(minusOne.toString('hex'), '7fffffffffffffff');
  t.ok(Buffer.compare(minusOne, zero) < 0, '-1 sorts before epoch 0');
});

t.test('point keys sort by entity, then key, then ts', async (t) => {
  const keys: Array<[number, number, number]> = [];
  for (const e of [1, 2, 255, 256, 2 ** 32 - 1])
    for (const k of [1, 7, 65536]) for (const ts of [-5000, -1, 0, 1, 5000, 1_700_000_000_000]) keys.push([e, k, ts]);
  const next = rng(2);
  const shuffled = [...keys];
  for (let i = shuffled.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [shuffled[i], shuffled[j]] = [shuffled[j] as [number, number, number], shuffled[i] as [number, number, number]];
  }
  const sortedBytes = shuffled
    .map((x) => pointKey(...x))
    .sort(Buffer.compare)
    .map((b) => {
      const d = decodePointKey(b);
      return [d.e, d.k, d.ts];
    });
  const sortedTuples = [...keys].sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]);
  t.same(sortedBytes, sortedTuples);
  t.equal(pointKey(1, 2, 3).length, 16, 'a point key is 16 bytes');
  t.same(pointKey(3, 4, 5).subarray(0, 8), seriesKey(3, 4), 'a series key is the prefix of its points');
  t.same(seriesKey(3, 4).subarray(0, 4), entityPrefix(3), 'an entity prefix is the prefix of its series');
});

t.test('prefixEnd is the first key after every key with the prefix', async (t) => {
  const p = seriesKey(5, 0xff);
  const end = prefixEnd(p);
  for (const ts of [Number.MIN_SAFE_INTEGER, 0, Number.MAX_SAFE_INTEGER])
    t.ok(Buffer.compare(pointKey(5, 0xff, ts), end) < 0);
  t.ok(Buffer.compare(pointKey(5, 0x100, Number.MIN_SAFE_INTEGER), end) >= 0, 'the next series is not inside');
  t.same(prefixEnd(Buffer.from([1, 0xff, 0xff])), Buffer.from([2]), 'carries over 0xff bytes');
  t.same(prefixEnd(Buffer.from([0xff, 0xff])), Buffer.from([0xff, 0xff, 0xff]), 'an all-0xff prefix gets a longer key');
});

t.test('values round trip through encodeValue/decodeValue and encodeStamped', async (t) => {
  const values: KvValue[] = [
    kvBool(true),
    kvBool(false),
    kvLong(0),
    kvLong(-1),
    kvLong(2147483647),
    kvLong(-2147483648),
    kvLong(2147483648),
    kvLong(-2147483649),
    kvLong(Number.MAX_SAFE_INTEGER),
    kvLong(Number.MIN_SAFE_INTEGER),
    kvLong(9223372036854775807n),
    kvLong(-9223372036854775808n),
    kvLong(9007199254740993n),
    kvDouble(0),
    kvDouble(-0),
    kvDouble(42),
    kvDouble(10.1),
    kvDouble(-1.5e-300),
    kvDouble(Number.MAX_VALUE),
    kvDouble(Infinity),
    kvDouble(NaN),
    kvString(''),
    kvString('abc'),
    kvString('ünïcödé 😀'),
    kvString('\u0000nul'),
    kvString('x'.repeat(100_000)),
    kvJson('{"a":1.0,"b":[1E2,null]}'),
    kvJson('[]'),
  ];
  for (const v of values) {
    const label = `${v.type} ${typeof v.v === 'string' ? v.v.slice(0, 20) : String(v.v)}`;
    const back = decodeValue(encodeValue(v));
    t.equal(back.type, v.type, `${label}: type`);
    t.ok(Object.is(back.v, v.v) || back.v === v.v, `${label}: value`);
    for (const ts of [-1, 0, 1_700_000_000_123]) {
      const s = decodeStamped(encodeStamped(ts, v));
      t.equal(s.ts, ts);
      t.ok(Object.is(s.value.v, v.v) || s.value.v === v.v, `${label}: stamped value at ${ts}`);
    }
  }
  t.equal(typeof decodeValue(encodeValue(kvLong(12))).v, 'number', 'a small long decodes as a number');
  t.equal(encodeValue(kvLong(12)).length, 5, 'longs in 32 bits take 5 bytes');
  t.equal(
    typeof decodeValue(encodeValue(kvLong(9223372036854775807n))).v,
    'bigint',
    'a long beyond 2^53 decodes as a bigint',
  );
  t.equal(
    typeof decodeValue(encodeValue(kvLong(2 ** 40))).v,
    'number',
    'a safe long beyond 32 bits decodes as a number',
  );
  t.throws(() => decodeValue(Buffer.from([99])), /unknown tag 99/);
  const framed = Buffer.concat([Buffer.from('junk'), encodeValue(kvString('mid')), Buffer.from('tail')]);
  t.equal(decodeValue(framed, 4, framed.length - 4).v, 'mid', 'decodes a slice given offset and end');
});
