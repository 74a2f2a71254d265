import t from 'tap';
import { EventBus, type AttributesEvent } from '../../src/bus/index.js';
import { kvBool, kvDouble, kvJson, kvLong, kvString } from '../../src/model/kv.js';
import { LmdbAttributeStore } from '../../src/store/attributes.js';
import { addDevice, cliJson, http, startGateway } from '../helpers/server.js';
import { openTestEnv } from '../helpers/store.js';
import { addUser, adminHeaders, authHeaders, login } from '../helpers/users.js';

const DEV = '6f1c1f8e-0000-4000-8000-000000000001';
const OTHER = '6f1c1f8e-0000-4000-8000-000000000002';

t.test('store: scopes, order, typed values, overwrite, delete, events after commit', async (t) => {
  const { env, dict } = openTestEnv(t);
  const bus = new EventBus();
  let clock = 1000;
  const store = new LmdbAttributeStore(env, dict, bus, () => clock);
  const events: AttributesEvent[] = [];
  const seenAtEvent: number[] = [];
  bus.on('attributes', (ev) => {
    events.push(ev);
    // the event comes after the commit: a read inside the listener already sees the write
    seenAtEvent.push(store.get(ev.entityId, ev.scope).length);
  });

  await store.save(
    'DEVICE',
    DEV,
    'SHARED_SCOPE',
    [
      ['zeta', kvLong(1)],
      ['alpha', kvString('x')],
    ],
    500,
  );
  await store.save(
    'DEVICE',
    DEV,
    'CLIENT_SCOPE',
    [
      ['c', kvDouble(42)],
      ['j', kvJson('{"n":1}')],
    ],
    600,
  );
  await store.save('DEVICE', DEV, 'SERVER_SCOPE', [['active', kvBool(true)]], 700);
  await store.save('DEVICE', OTHER, 'SHARED_SCOPE', [['alpha', kvLong(9)]], 800);
  await store.save('DEVICE', DEV, 'SHARED_SCOPE', [], 900);
  t.equal(events.length, 4, 'an empty save publishes nothing');
  t.same(seenAtEvent, [2, 2, 1, 1]);

  t.same(
    store.get(DEV).map((a) => `${a.scope}:${a.key}@${a.lastUpdateTs}`),
    [
      'CLIENT_SCOPE:c@600',
      'CLIENT_SCOPE:j@600',
      'SERVER_SCOPE:active@700',
      'SHARED_SCOPE:alpha@500',
      'SHARED_SCOPE:zeta@500',
    ],
    'CLIENT, SERVER, SHARED; keys sorted within a scope',
  );
  t.same(
    store.get(DEV, 'SHARED_SCOPE', ['zeta', 'missing']).map((a) => a.value),
    [kvLong(1)],
    'missing keys absent',
  );
  t.same(
    store.get(DEV, undefined, ['alpha', 'c']).map((a) => a.key),
    ['c', 'alpha'],
  );
  t.same(store.get(DEV, 'CLIENT_SCOPE', ['c'])[0]?.value, kvDouble(42), 'a double stays a double');
  t.same(store.keys(DEV), ['c', 'j', 'active', 'alpha', 'zeta']);
  t.same(store.keys(DEV, 'SERVER_SCOPE'), ['active']);
  t.same(store.keys('unknown-entity'), []);
  t.same(
    store.get(OTHER).map((a) => a.key),
    ['alpha'],
    'entities do not leak into each other',
  );

  await store.save('DEVICE', DEV, 'SHARED_SCOPE', [['zeta', kvString('two')]], 1500);
  t.same(store.get(DEV, 'SHARED_SCOPE', ['zeta'])[0], {
    scope: 'SHARED_SCOPE',
    key: 'zeta',
    lastUpdateTs: 1500,
    value: kvString('two'),
  });

  clock = 2000;
  const removed = await store.delete('DEVICE', DEV, 'SHARED_SCOPE', ['zeta', 'nope', 'zeta']);
  t.same(removed, ['zeta'], 'only existing keys are reported');
  const last = events.at(-1);
  t.same(last?.deleted, ['zeta']);
  t.same(last?.updated, []);
  t.equal(last?.ts, 2000);
  const n = events.length;
  t.same(await store.delete('DEVICE', DEV, 'SHARED_SCOPE', ['nope']), []);
  t.equal(events.length, n, 'deleting nothing publishes nothing');
});

t.test('device and REST attribute APIs, bad input, access, durability', async (t) => {
  const gw = await startGateway(t);
  const dev = await addDevice(gw.dataDir, 'attr-dev');
  const other = await addDevice(gw.dataDir, 'attr-other');
  const admin = await adminHeaders(gw, 'admin@attrs.test');
  const customer = await cliJson<{ id: string }>([
    'customer',
    'add',
    '--data-dir',
    gw.dataDir,
    '--title',
    'Attr customer',
  ]);
  await addUser(gw.dataDir, 'cust@attrs.test', 'secret-2', 'CUSTOMER_USER', customer.id);
  const cust = authHeaders((await login(gw, 'cust@attrs.test', 'secret-2')).token);
  const dv = `${gw.url}/api/v1/${dev.token}`;
  const rest = `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}`;

  t.test('device POST /attributes', async (t) => {
    const ok = await http('POST', `${dv}/attributes`, '{"a":1,"b":"x","c":null,"d":42.0,"e":{"n":1},"f":"17"}');
    t.equal(ok.status, 200);
    t.equal(ok.text, '');
    for (const bad of ['[1,2]', '"str"', '{abc', '{"k":1,"":2}']) {
      const r = await http('POST', `${dv}/attributes`, bad);
      t.equal(r.status, 400, `400 for ${bad}`);
      t.equal(r.json<{ errorCode: number }>().errorCode, 31);
    }
    t.equal((await http('POST', `${gw.url}/api/v1/nope/attributes`, '{abc')).status, 401);
    t.equal((await http('POST', `${dv}/attributes`, '{}')).status, 200, 'empty object is fine');
  });

  t.test('REST writes: scopes and rejections', async (t) => {
    t.equal((await http('POST', `${rest}/attributes/SHARED_SCOPE`, { s1: true, s2: 'v' }, admin)).status, 200);
    t.equal((await http('POST', `${rest}/SERVER_SCOPE`, { srv: 5 }, admin)).status, 200, "TB's POST .../{scope}");
    t.equal(
      (await http('POST', `${gw.url}/api/plugins/telemetry/${dev.id}/SERVER_SCOPE`, { legacy: 1.5 }, admin)).status,
      200,
      'legacy /{deviceId}/{scope}',
    );
    const cases: Array<[string, string, string | object]> = [
      ['CLIENT_SCOPE write', `${rest}/attributes/CLIENT_SCOPE`, { x: 1 }],
      ['unknown scope', `${rest}/attributes/FOO_SCOPE`, { x: 1 }],
      ['empty object', `${rest}/attributes/SHARED_SCOPE`, {}],
      ['null value', `${rest}/attributes/SHARED_SCOPE`, { x: 1, y: null }],
      ['blank key', `${rest}/attributes/SHARED_SCOPE`, { x: 1, ' ': 2 }],
      ['array body', `${rest}/attributes/SHARED_SCOPE`, '[{"x":1}]'],
      ['malformed JSON', `${rest}/attributes/SHARED_SCOPE`, '{"x":'],
      ['bad entity type', `${gw.url}/api/plugins/telemetry/GADGET/${dev.id}/attributes/SHARED_SCOPE`, { x: 1 }],
    ];
    for (const [what, url, body] of cases) {
      const r = await http('POST', url, body, admin);
      t.equal(r.status, 400, what);
      t.equal(r.json<{ status: number }>().status, 400, `${what}: TB error JSON`);
    }
    const keys = await http('GET', `${rest}/keys/attributes/SHARED_SCOPE`, undefined, admin);
    t.same(keys.json(), ['s1', 's2'], 'nothing from rejected requests was stored');
  });

  t.test('device GET /attributes rules', async (t) => {
    const all = await http('GET', `${dv}/attributes`);
    t.equal(all.status, 200);
    t.match(all.headers.get('content-type'), /application\/json/);
    t.same(all.json(), { client: { a: 1, b: 'x', d: 42.0, e: { n: 1 }, f: 17 }, shared: { s1: true, s2: 'v' } });
    t.match(all.text, /"d":42\.0/, 'a double keeps its .0');
    t.same((await http('GET', `${dv}/attributes?clientKeys=a,f`)).json(), { client: { a: 1, f: 17 } }, 'only client');
    t.same((await http('GET', `${dv}/attributes?sharedKeys=s2`)).json(), { shared: { s2: 'v' } }, 'only shared');
    t.same((await http('GET', `${dv}/attributes?clientKeys=b&sharedKeys=s1,nope`)).json(), {
      client: { b: 'x' },
      shared: { s1: true },
    });
    t.same((await http('GET', `${dv}/attributes?clientKeys=nope`)).json(), {}, 'nothing found → {}');
    t.same(
      (await http('GET', `${dv}/attributes?clientKeys=&sharedKeys=s1`)).json(),
      { shared: { s1: true } },
      'empty param = not given',
    );
    t.same(
      (await http('GET', `${dv}/attributes?clientKeys=srv`)).json(),
      {},
      'server scope is never shown to the device',
    );
    t.equal((await http('GET', `${gw.url}/api/v1/nope/attributes`)).status, 401);
    t.same((await http('GET', `${gw.url}/api/v1/${other.token}/attributes`)).json(), {}, 'another device sees nothing');
  });

  t.test('REST reads', async (t) => {
    const values = await http('GET', `${rest}/values/attributes`, undefined, admin);
    t.equal(values.status, 200);
    const arr = values.json<Array<{ lastUpdateTs: number; key: string; value: unknown }>>();
    t.same(
      arr.map((a) => a.key),
      // active, lastActivityTime: the device's connectivity state, kept by the daemon (src/device/state.ts)
      ['a', 'b', 'd', 'e', 'f', 'active', 'lastActivityTime', 'legacy', 'srv', 's1', 's2'],
      'CLIENT, SERVER, SHARED',
    );
    t.ok(
      arr.every((a) => typeof a.lastUpdateTs === 'number' && a.lastUpdateTs > 1_600_000_000_000),
      'lastUpdateTs in ms',
    );
    t.same(arr.find((a) => a.key === 'e')?.value, { n: 1 }, 'JSON values embedded');
    t.same(arr.find((a) => a.key === 'legacy')?.value, 1.5);
    const one = await http('GET', `${rest}/values/attributes/SHARED_SCOPE?keys=s2,nope`, undefined, admin);
    t.same(
      one.json<Array<{ key: string; value: unknown }>>().map((a) => [a.key, a.value]),
      [['s2', 'v']],
    );
    const rep = await http('GET', `${rest}/values/attributes/CLIENT_SCOPE?key=a&key=b`, undefined, admin);
    t.same(
      rep.json<Array<{ key: string }>>().map((a) => a.key),
      ['a', 'b'],
      'repeated key= form',
    );
    t.same((await http('GET', `${rest}/keys/attributes`, undefined, admin)).json(), [
      'a',
      'b',
      'd',
      'e',
      'f',
      'active',
      'lastActivityTime',
      'legacy',
      'srv',
      's1',
      's2',
    ]);
    t.same((await http('GET', `${rest}/keys/attributes/SERVER_SCOPE`, undefined, admin)).json(), [
      'active',
      'lastActivityTime',
      'legacy',
      'srv',
    ]);
    t.equal((await http('GET', `${rest}/keys/attributes/NOPE`, undefined, admin)).status, 400);
  });

  t.test('REST delete', async (t) => {
    t.equal((await http('DELETE', `${rest}/SHARED_SCOPE`, undefined, admin)).status, 400, 'keys required');
    const del = await http('DELETE', `${rest}/SHARED_SCOPE?keys=s1,nope`, undefined, admin);
    t.equal(del.status, 200);
    t.same((await http('GET', `${rest}/keys/attributes/SHARED_SCOPE`, undefined, admin)).json(), ['s2']);
    t.equal(
      (await http('DELETE', `${gw.url}/api/plugins/telemetry/${dev.id}/CLIENT_SCOPE?keys=f`, undefined, admin)).status,
      200,
      'legacy delete',
    );
    t.same((await http('GET', `${dv}/attributes?clientKeys=f,a`)).json(), { client: { a: 1 } });
  });

  t.test('access rules', async (t) => {
    t.equal((await http('GET', `${rest}/values/attributes`)).status, 401, 'no token');
    const denied = await http('GET', `${rest}/values/attributes`, undefined, cust);
    t.equal(denied.status, 403, 'customer user, unassigned device');
    t.equal(denied.json<{ errorCode: number }>().errorCode, 20);
    t.equal((await http('POST', `${rest}/attributes/SHARED_SCOPE`, { hack: 1 }, cust)).status, 403);
    t.equal((await http('DELETE', `${rest}/SHARED_SCOPE?keys=s2`, undefined, cust)).status, 403);
    t.same(
      (await http('GET', `${rest}/keys/attributes/SHARED_SCOPE`, undefined, admin)).json(),
      ['s2'],
      'denied calls changed nothing',
    );
    const missing = await http(
      'GET',
      `${gw.url}/api/plugins/telemetry/DEVICE/00000000-0000-4000-8000-000000000000/values/attributes`,
      undefined,
      admin,
    );
    t.equal(missing.status, 404);
  });

  t.test('acknowledged attributes survive kill -9', async (t) => {
    t.equal((await http('POST', `${dv}/attributes`, { durable: 'yes' })).status, 200);
    t.equal((await http('POST', `${rest}/attributes/SHARED_SCOPE`, { durableShared: 7 }, admin)).status, 200);
    await gw.stop('SIGKILL');
    const gw2 = await startGateway(t, { dataDir: gw.dataDir });
    const after = await http(
      'GET',
      `${gw2.url}/api/v1/${dev.token}/attributes?clientKeys=durable&sharedKeys=durableShared`,
    );
    t.same(after.json(), { client: { durable: 'yes' }, shared: { durableShared: 7 } });
  });
});
