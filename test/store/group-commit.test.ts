/**
 * Group commit in the timeseries store: the writes of one event-loop turn share one transaction and
 * become one head fragment per series, yet keep sequential semantics (later call wins on an equal ts; a delete
 * covers writes queued before it). Real LMDB in a temp dir.
 */
import t from 'tap';
import { kvLong } from '../../src/model/kv.js';
import { headFragments } from '../../src/store/series/chunks.js';
import type { Teardown } from '../helpers/server.js';
import { openSeriesStore } from '../helpers/store.js';

function open(t: Teardown, commitDelayMs?: number) {
  return openSeriesStore(t, commitDelayMs === undefined ? {} : { commitDelayMs });
}

const ENTITY = '11111111-2222-3333-4444-555555555555';
const BASE = 1_700_000_000_000;

t.test('concurrent writes of one turn become one fragment per series', async (t) => {
  const { env, dict, store } = open(t);
  const writes = [];
  for (let i = 0; i < 50; i++) {
    writes.push(
      store.write(ENTITY, [
        {
          ts: BASE + i * 1000,
          values: [
            ['a', kvLong(i)],
            ['b', kvLong(-i)],
          ],
        },
      ]),
    );
  }
  await Promise.all(writes);
  const e = dict.entityIdx(ENTITY) as number;
  for (const key of ['a', 'b']) {
    const k = dict.keyIdx(key) as number;
    t.equal(headFragments(env, e, k, BASE, BASE + 50_000).length, 1, `${key}: 50 requests, one fragment`);
    const pts = [...store.range(ENTITY, key, { startTs: BASE, endTs: BASE + 50_000, order: 'ASC' })];
    t.equal(pts.length, 50, `${key}: every point stored`);
  }
  t.equal(store.latest(ENTITY, ['a']).get('a')?.ts, BASE + 49_000, 'latest follows the newest ts');
});

t.test('on an equal ts the later call wins, within and across turns', async (t) => {
  const { store } = open(t);
  await Promise.all([
    store.write(ENTITY, [{ ts: BASE, values: [['a', kvLong(1)]] }]),
    store.write(ENTITY, [{ ts: BASE, values: [['a', kvLong(2)]] }]),
  ]);
  t.same(
    [...store.range(ENTITY, 'a', { startTs: BASE, endTs: BASE + 1, order: 'ASC' })].map((p) => p.value.v),
    [2],
  );
  await store.write(ENTITY, [{ ts: BASE, values: [['a', kvLong(3)]] }]);
  t.same(
    [...store.range(ENTITY, 'a', { startTs: BASE, endTs: BASE + 1, order: 'ASC' })].map((p) => p.value.v),
    [3],
  );
  t.equal(store.latest(ENTITY).get('a')?.value.v, 3, 'latest takes the overwrite at the same ts');
});

t.test('a delete covers writes queued before it in the same turn', async (t) => {
  const { store } = open(t);
  const w = store.write(ENTITY, [{ ts: BASE + 5, values: [['a', kvLong(5)]] }]);
  const d = store.delete(ENTITY, {
    keys: ['a'],
    startTs: BASE,
    endTs: BASE + 10,
    deleteLatest: true,
    rewriteLatest: false,
  });
  await Promise.all([w, d]);
  t.same([...store.range(ENTITY, 'a', { startTs: BASE, endTs: BASE + 10, order: 'ASC' })], []);
  t.equal(store.latest(ENTITY).get('a'), undefined);
});

t.test('an empty write resolves at once and stores nothing', async (t) => {
  const { store } = open(t);
  await store.write(ENTITY, [{ ts: BASE, values: [] }]);
  t.same(store.keys(ENTITY), []);
});

t.test(
  'store.commitDelayMs: writes spread over the delay share one commit, each answered once it is on disk',
  async (t) => {
    const fragmentsOf = (o: ReturnType<typeof open>): number => {
      const e = o.dict.entityIdx(ENTITY) as number;
      const k = o.dict.keyIdx('a') as number;
      t.equal(
        [...o.store.range(ENTITY, 'a', { startTs: BASE, endTs: BASE + 5000, order: 'ASC' })].length,
        5,
        'every point stored',
      );
      return headFragments(o.env, e, k, BASE, BASE + 5000).length;
    };
    const write = (o: ReturnType<typeof open>, i: number): Promise<void> =>
      o.store.write(ENTITY, [{ ts: BASE + i * 1000, values: [['a', kvLong(i)]] }]);

    const plain = open(t);
    for (let i = 0; i < 5; i++) await write(plain, i);
    t.equal(
      fragmentsOf(plain),
      5,
      'without a delay, a write made after the last was answered gets a commit of its own',
    );

    // A second's delay: far more than the five turns the writes take, or the commit of the store beside it.
    const delayed = open(t, 1000);
    const beside = open(t);
    const answered: number[] = [];
    const writes: Array<Promise<void>> = [];
    for (let i = 0; i < 5; i++) {
      if (i > 0) await new Promise((r) => setImmediate(r));
      writes.push(write(delayed, i).then(() => void answered.push(i)));
    }
    await write(beside, 0);
    t.same(answered, [], 'none is answered before the delay is out, though a commit of the store beside was');
    await Promise.all(writes);
    t.equal(fragmentsOf(delayed), 1, 'the five writes, each in its own event-loop turn, share one commit');
    t.same(answered, [0, 1, 2, 3, 4], 'and are answered with it, in order');
  },
);
