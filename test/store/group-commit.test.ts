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
    const spaced = async (commitDelayMs?: number): Promise<{ fragments: number; firstAnsweredAfterMs: number }> => {
      const { env, dict, store } = open(t, commitDelayMs);
      const t0 = performance.now();
      let firstAnswer = NaN;
      const writes = [];
      for (let i = 0; i < 5; i++) {
        writes.push(
          store.write(ENTITY, [{ ts: BASE + i * 1000, values: [['a', kvLong(i)]] }]).then(() => {
            firstAnswer = Number.isNaN(firstAnswer) ? performance.now() - t0 : firstAnswer;
          }),
        );
        await new Promise((r) => setTimeout(r, 20));
      }
      await Promise.all(writes);
      const e = dict.entityIdx(ENTITY) as number;
      const k = dict.keyIdx('a') as number;
      t.equal(
        [...store.range(ENTITY, 'a', { startTs: BASE, endTs: BASE + 5000, order: 'ASC' })].length,
        5,
        'every point stored',
      );
      return { fragments: headFragments(env, e, k, BASE, BASE + 5000).length, firstAnsweredAfterMs: firstAnswer };
    };
    const plain = await spaced();
    t.equal(plain.fragments, 5, 'without a delay, writes 20 ms apart get a commit (and a fragment) each');
    const delayed = await spaced(300);
    t.equal(delayed.fragments, 1, 'with 300 ms, the five writes of 80 ms share one commit');
    t.ok(
      delayed.firstAnsweredAfterMs >= 290,
      `and the first is answered only with that commit (${delayed.firstAnsweredAfterMs.toFixed(0)} ms)`,
    );
  },
);
