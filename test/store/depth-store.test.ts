import t from 'tap';
import { type KvValue, kvDouble, kvLong, kvString, kvToString } from '../../src/model/kv.js';
import { LmdbDepthStore, depthKey, readOrderedF64, writeOrderedF64 } from '../../src/store/depth.js';
import { openTestEnv } from '../helpers/store.js';

t.test('ordered f64: byte order is numeric order, and it round-trips', async (t) => {
  const values = [
    -Infinity,
    -Number.MAX_VALUE,
    -1e300,
    -5844.23,
    -1,
    -0.5,
    -Number.MIN_VALUE,
    0,
    Number.MIN_VALUE,
    1e-300,
    0.1,
    0.25,
    0.5,
    1,
    1.0000000000000002,
    2,
    1000,
    4000.5,
    5844.23,
    1e300,
    Number.MAX_VALUE,
    Infinity,
  ];
  const enc = (v: number): Buffer => {
    const b = Buffer.alloc(8);
    writeOrderedF64(b, v, 0);
    return b;
  };
  for (let i = 0; i + 1 < values.length; i++) {
    const a = values[i] as number;
    const b = values[i + 1] as number;
    t.ok(Buffer.compare(enc(a), enc(b)) < 0, `${a} sorts before ${b}`);
  }
  for (const v of values) t.equal(readOrderedF64(enc(v), 0), v, `round trip ${v}`);
  t.same(enc(-0), enc(0), '-0 is stored as 0');
  t.ok(Object.is(readOrderedF64(enc(-0), 0), 0));
  const k = depthKey(7, 9, -2.5);
  t.equal(k.length, 16);
  t.equal(k.readUInt32BE(0), 7);
  t.equal(k.readUInt32BE(4), 9);
  t.equal(readOrderedF64(k, 8), -2.5);
});

t.test('LmdbDepthStore: overwrite, keys, latest, inclusive ranges, paging, limit', async (t) => {
  const { env, dict } = openTestEnv(t);
  const store = new LmdbDepthStore(env, dict);
  const dev = 'dev-a';
  await store.write(dev, [
    {
      ds: 10.5,
      values: [
        ['rop', kvDouble(1.5)],
        ['bit', kvString('pdc')],
      ],
    },
    { ds: -3.25, values: [['rop', kvLong(7)]] },
    { ds: 0, values: [['rop', kvLong(0)]] },
    { ds: 2, values: [['wob', kvLong(22)]] },
  ]);
  await store.write(dev, [{ ds: 10.5, values: [['rop', kvDouble(2.5)]] }]);
  await store.write('dev-b', [{ ds: 99, values: [['other', kvLong(1)]] }]);

  t.same(store.keys(dev), ['bit', 'rop', 'wob']);
  t.same(store.keys('dev-b'), ['other']);
  t.same(store.keys('nobody'), []);

  const latest = store.latest(dev);
  t.same([...latest.keys()].sort(), ['bit', 'rop', 'wob']);
  t.equal(latest.get('rop')?.ds, 10.5, 'latest is the greatest depth');
  t.equal(kvToString(latest.get('rop')?.value as KvValue), '2.5', 'same key+depth overwrote');
  t.same([...store.latest(dev, ['wob', 'missing']).keys()], ['wob'], 'missing keys absent');

  const rop = [...store.range(dev, 'rop', { startDs: -10, endDs: 100 })].map((p) => [p.ds, kvToString(p.value)]);
  t.same(
    rop,
    [
      [-3.25, '7'],
      [0, '0'],
      [10.5, '2.5'],
    ],
    'ascending across negative, zero and fractional depths',
  );
  t.same(
    [...store.range(dev, 'rop', { startDs: -3.25, endDs: 10.5 })].map((p) => p.ds),
    [-3.25, 0, 10.5],
    'both bounds inclusive',
  );
  t.same(
    [...store.range(dev, 'rop', { startDs: -3.24, endDs: 10.49 })].map((p) => p.ds),
    [0],
    'just inside the bounds',
  );
  t.same([...store.range(dev, 'rop', { startDs: 11, endDs: 20 })], [], 'empty range');
  t.same([...store.range(dev, 'rop', { startDs: 5, endDs: 1 })], [], 'inverted range is empty');
  t.same(
    [...store.range(dev, 'rop', { startDs: -Infinity, endDs: Infinity, limit: 2 })].map((p) => p.ds),
    [-3.25, 0],
    'limit',
  );

  // More than one page (1024) of points, at fractional depths.
  const many = Array.from({ length: 2500 }, (_, i) => ({ ds: i * 0.1 - 100, values: [['gr', kvLong(i)]] as const }));
  await store.write(
    dev,
    many.map((r) => ({ ds: r.ds, values: [...r.values] })),
  );
  const all = [...store.range(dev, 'gr', { startDs: -1000, endDs: 1000 })];
  t.equal(all.length, 2500, 'every point across pages');
  let ordered = true;
  for (let i = 1; i < all.length; i++)
    if (!((all[i - 1] as { ds: number }).ds < (all[i] as { ds: number }).ds)) ordered = false;
  t.ok(ordered, 'strictly ascending across page boundaries');
  t.equal(kvToString((all[2499] as { value: KvValue }).value), '2499');
  t.equal([...store.range(dev, 'gr', { startDs: -1000, endDs: 1000, limit: 2000 })].length, 2000, 'limit across pages');
});
