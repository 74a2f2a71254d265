/**
 * The data of deleted entities (src/store/background/purge.ts): telemetry in head, chunks, rollups and latest, attributes and depth
 * series all go, in bounded steps of the downsampling engine, resumed after a restart, while every other
 * entity keeps all of its data.
 */
import t from 'tap';
import { EventBus } from '../../src/bus/index.js';
import { DEFAULTS } from '../../src/config/index.js';
import { kvDouble, kvLong } from '../../src/model/kv.js';
import { LmdbAttributeStore } from '../../src/store/attributes.js';
import { entityPrefix, prefixEnd } from '../../src/store/encoding/codec.js';
import { LmdbDepthStore } from '../../src/store/depth.js';
import { Dictionary } from '../../src/store/encoding/dict.js';
import type { StoreEnv } from '../../src/store/env.js';
import { nextPurge, queuePurge } from '../../src/store/background/purge.js';
import { DownsampleEngine } from '../../src/store/background/downsample.js';
import { addDevice, http, startGateway } from '../helpers/server.js';
import { compactAll, openSeriesStore, withDaemonEnv } from '../helpers/store.js';
import { adminToken, authHeaders } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';

const MIN = 60_000;
const HOUR = 60 * MIN;
const T0 = Date.UTC(2026, 0, 1);
const GONE = '0a000000-0000-4000-8000-000000000001';
const KEPT = '0a000000-0000-4000-8000-000000000002';
const TIERS = DEFAULTS.downsample.tiersMs.length;

/** Entries of entity `id` per database ([entity]… keys, and rollups' [tier][entity]…). */
function entries(env: StoreEnv, id: string): Record<string, number> {
  const e = new Dictionary(env).entityIdx(id);
  const out: Record<string, number> = {};
  if (e === undefined) return out;
  const count = (db: StoreEnv['head'], start: Buffer): number =>
    [...db.getKeys({ start, end: prefixEnd(start) })].length;
  for (const name of ['head', 'chunks', 'latest', 'attributes', 'depth'] as const)
    out[name] = count(env[name], entityPrefix(e));
  out['rollups'] = 0;
  for (let tier = 0; tier < TIERS; tier++)
    out['rollups'] += count(env.rollups, Buffer.concat([Buffer.from([tier]), entityPrefix(e)]));
  return out;
}

const total = (x: Record<string, number>): number => Object.values(x).reduce((a, b) => a + b, 0);

t.test("a deleted entity's data goes in bounded steps and a restart resumes; others keep theirs", async (t) => {
  const { env, dict, store, dataDir } = openSeriesStore(t);
  const attributes = new LmdbAttributeStore(env, dict, new EventBus());
  const depth = new LmdbDepthStore(env, dict);
  for (const id of [GONE, KEPT]) {
    // a day of minute points (compacted below) and one recent point (left in the head)
    await store.write(
      id,
      Array.from({ length: 24 * 60 }, (_, i) => ({
        ts: T0 + i * MIN,
        values: [
          ['v', kvLong(i)],
          ['w', kvDouble(i / 4)],
        ] as Array<[string, ReturnType<typeof kvLong>]>,
      })),
    );
    await attributes.save(
      'DEVICE',
      id,
      'SERVER_SCOPE',
      [
        ['a', kvLong(1)],
        ['b', kvLong(2)],
      ],
      T0,
    );
    await depth.write(
      id,
      Array.from({ length: 100 }, (_, i) => ({ ds: i, values: [['d', kvLong(i)]] })),
    );
  }
  const now = T0 + 3 * 24 * HOUR;
  await compactAll(store, now); // the day
  for (const id of [GONE, KEPT]) await store.write(id, [{ ts: now, values: [['v', kvLong(-1)]] }]);
  const kept = entries(env, KEPT);
  const gone = entries(env, GONE);
  t.ok(
    Object.values(gone).every((n) => n > 0),
    `the entity has data in every database: ${JSON.stringify(gone)}`,
  );

  // what deleting the entity does, in the deleting transaction
  await env.root.transaction(() => queuePurge(env, GONE));
  const opts = { rawRetentionMs: 0, maxDiskBytes: 0, sweepIntervalMs: 50, dataDir };
  // A zero step budget: one batch of keys per step. One purge step (after the retention sweep a start
  // begins with), then the daemon "restarts".
  const first = new DownsampleEngine(store, { ...opts, stepBudgetMs: 0 }, () => now);
  for (let steps = 0; first.stats().purgedEntries === 0; steps++) {
    if (!(await first.step()) || steps > 100) throw new Error('the engine never came to the purge');
  }
  const partial = total(entries(env, GONE));
  t.ok(
    partial > 0 && partial < total(gone),
    `after one step part of the data is gone (${partial} of ${total(gone)} entries left)`,
  );
  t.equal(nextPurge(env), GONE, 'and the purge is still recorded');

  const second = new DownsampleEngine(store, { ...opts, stepBudgetMs: 0 }, () => now);
  for (let steps = 0; await second.step(); steps++) if (steps > 10_000) throw new Error('the purge never ends');
  t.same(
    entries(env, GONE),
    { head: 0, chunks: 0, latest: 0, attributes: 0, depth: 0, rollups: 0 },
    'the next engine removes the rest',
  );
  t.equal(nextPurge(env), undefined, 'then the record');
  t.same(entries(env, KEPT), kept, 'the other entity keeps every entry');
  t.same(store.latest(GONE), new Map(), 'no latest value is left for the deleted entity');
  t.equal(store.latest(KEPT).get('v')?.ts, now);
  t.same(attributes.get(GONE), []);
  t.equal(attributes.get(KEPT).length, 2);
  t.same(depth.keys(GONE), []);
  const st = second.stats();
  t.ok(
    st.purgedEntities === 1 && st.purgedEntries > 0,
    `counted: ${st.purgedEntities} entity, ${st.purgedEntries} entries`,
  );
});

t.test("DELETE /api/device/{id}: the daemon removes the device's data, other devices keep theirs", async (t) => {
  const gw = await startGateway(t);
  const gone = await addDevice(gw.dataDir, 'purge-gone');
  const kept = await addDevice(gw.dataDir, 'purge-kept');
  const token = await adminToken(gw, 'purge@example.com', 'secret-pw');
  for (const d of [gone, kept]) {
    const body = JSON.stringify(Array.from({ length: 6 * 60 }, (_, i) => ({ ts: T0 + i * MIN, values: { v: i } })));
    t.equal((await http('POST', `${gw.url}/api/v1/${d.token}/telemetry`, body)).status, 200);
    t.equal((await http('POST', `${gw.url}/api/v1/${d.token}/attributes`, { fw: '1.2' })).status, 200);
    t.equal(
      (await http('POST', `${gw.url}/api/v1/${d.token}/depth/telemetry`, { ds: 1.5, values: { rop: 3 } })).status,
      200,
    );
  }
  const read = (id: string): Promise<Record<string, number>> => withDaemonEnv(gw.dataDir, (env) => entries(env, id));
  t.ok(total(await read(gone.id)) > 0, 'the device has data');
  t.equal((await http('DELETE', `${gw.url}/api/device/${gone.id}`, undefined, authHeaders(token))).status, 200);
  // Wait for the event: every entry of the device is gone.
  let left: Record<string, number> = {};
  await waitFor(async () => total((left = await read(gone.id))) === 0, {
    timeout: 60_000,
    interval: 50,
    message: () => `the deleted device's data removed; left: ${JSON.stringify(left)}`,
  });
  t.pass('every entry of the deleted device is gone');
  const q = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${kept.id}/values/timeseries?keys=v&startTs=${T0}&endTs=${T0 + 6 * HOUR}&limit=1000`,
    undefined,
    authHeaders(token),
  );
  t.equal(q.json<{ v: unknown[] }>().v.length, 6 * 60, 'the other device keeps its points');
  const a = await http('GET', `${gw.url}/api/v1/${kept.token}/attributes`);
  t.same(a.json(), { client: { fw: '1.2' } }, 'and its attributes');
  t.equal(await gw.stop('SIGTERM'), 0);
});
