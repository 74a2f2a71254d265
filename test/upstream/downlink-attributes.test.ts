/**
 * Shared attributes down the MQTT gateway session (docs/sync.md "Downlink"), against the fake TB endpoint:
 * applied as a local REST write (HTTP long-poll and MQTT subscriber see it), durable before the PUBACK, and
 * reconciled after a restart exactly despite TB's attribute-request quirks.
 */
import t, { type Test } from 'tap';
import { FakeTbMqtt, until } from '../helpers/fake-tb-mqtt.js';
import { Inbox, mqttClient } from '../helpers/mqtt.js';
import { type Gateway, addDevice, http } from '../helpers/server.js';
import { syncGateway, postTelemetry as post, records, syncStatusOf } from '../helpers/sync.js';
import { addUser, authHeaders, login } from '../helpers/users.js';

const GW_TOKEN = 'GATEWAY-TOKEN';
const BASE = Date.UTC(2026, 0, 1);

interface Status {
  downlink: { enabled: boolean; attributesApplied: number; lastReconcileTs: number | null };
}

async function sharedOf(gw: Gateway, token: string): Promise<Record<string, unknown>> {
  const r = await http('GET', `${gw.url}/api/v1/${token}/attributes`);
  return r.json<{ shared?: Record<string, unknown> }>().shared ?? {};
}

async function admin(gw: Gateway): Promise<string> {
  await addUser(gw.dataDir, 'admin@attrs.test', 'secret', 'TENANT_ADMIN');
  return (await login(gw, 'admin@attrs.test', 'secret')).token;
}

async function fakeTb(t: Test): Promise<FakeTbMqtt> {
  const tb = new FakeTbMqtt({ tokens: [GW_TOKEN] });
  await tb.start();
  t.teardown(() => tb.stop());
  return tb;
}

t.test(
  'a shared-attribute change upstream reaches a long-poll and an MQTT subscriber; durable before the PUBACK',
  async (t) => {
    const tb = await fakeTb(t);
    const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN, announceMs: 2_000 });
    const jwt = await admin(gw);
    const d = await addDevice(gw.dataDir, 'thermo');
    const sub = await mqttClient(t, gw, d.token);
    const inbox = new Inbox(sub);
    await sub.subscribeAsync('v1/devices/me/attributes', { qos: 1 });
    const poll = http('GET', `${gw.url}/api/v1/${d.token}/attributes/updates?timeout=20000`);
    // the long-poll makes it a listener: announced, so the upstream pushes to it
    await until(() => tb.isConnected('thermo'), 'announced');
    tb.setShared('thermo', { target: 21.5, mode: 'auto', big: 9_007_199_254_740_993n.toString() });
    const got = await poll;
    t.equal(got.status, 200);
    t.same(got.json(), { target: 21.5, mode: 'auto', big: '9007199254740993' }, 'the long-poll got the change');
    const m = await inbox.next((x) => x.topic === 'v1/devices/me/attributes');
    t.same(JSON.parse(m.text), { target: 21.5, mode: 'auto', big: '9007199254740993' }, 'the MQTT subscriber too');
    t.same(
      await sharedOf(gw, d.token),
      { target: 21.5, mode: 'auto', big: '9007199254740993' },
      'stored as shared attributes',
    );
    // acknowledged upstream only once durable: a kill -9 right after the PUBACK keeps it
    const acked = tb.acked.filter((x) => x === 'v1/gateway/attributes').length;
    tb.setShared('thermo', { target: 23 });
    await until(() => tb.acked.filter((x) => x === 'v1/gateway/attributes').length > acked, 'PUBACK of the change');
    await gw.stop('SIGKILL');
    const again = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN }, {}, gw.dataDir);
    t.equal((await sharedOf(again, d.token))['target'], 23, 'the acknowledged change survived kill -9');
    const s = await syncStatusOf<Status>(again, jwt);
    t.ok(s.downlink.enabled && s.downlink.attributesApplied >= 4, `counted (${s.downlink.attributesApplied})`);
  },
);

t.test(
  'changes made upstream while the gateway is stopped arrive after it starts: new, changed, deleted; client keys and local keys kept apart',
  async (t) => {
    const tb = await fakeTb(t);
    const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN });
    const jwt = await admin(gw);
    const d = await addDevice(gw.dataDir, 'pump');
    const solo = await addDevice(gw.dataDir, 'solo');
    await post(gw, d.token, records(BASE, 2, 1));
    await post(gw, solo.token, records(BASE, 2, 1));
    await until(() => tb.isConnected('pump') && tb.isConnected('solo'), 'both connected (implicitly, by their data)');
    tb.setShared('pump', { speed: 10, keep: 'same', drop: true });
    tb.setShared('solo', { only: 1 });
    await until(
      async () => (await sharedOf(gw, d.token))['drop'] === true && (await sharedOf(gw, solo.token))['only'] === 1,
      'first values',
    );
    // a shared attribute set locally (REST) is not the upstream's: a reconcile leaves it
    const local = await http(
      'POST',
      `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/attributes/SHARED_SCOPE`,
      { localNote: 'x' },
      authHeaders(jwt),
    );
    t.equal(local.status, 200);
    await gw.stop('SIGTERM');
    // while the gateway is away: a new key, a changed value, a deletion; and a client attribute upstream, which
    // TB's keys:[] answer merges with the shared ones
    tb.setShared('pump', { speed: 12, fresh: 'new' });
    tb.deleteShared('pump', ['drop']);
    tb.client.set('pump', { firmware: '1.2' });
    // solo: its only attribute upstream is one shared key, answered as a nameless `value`
    tb.setShared('solo', { only: 2 });
    const again = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN }, {}, gw.dataDir);
    await post(again, d.token, records(BASE + 10_000, 1, 1));
    await post(again, solo.token, records(BASE + 10_000, 1, 1));
    await until(async () => {
      const sh = await sharedOf(again, d.token);
      return sh['speed'] === 12 && sh['fresh'] === 'new' && !('drop' in sh);
    }, 'pump reconciled');
    t.same(
      await sharedOf(again, d.token),
      { fresh: 'new', keep: 'same', localNote: 'x', speed: 12 },
      "exactly the upstream's shared keys, the local one kept, no client key",
    );
    await until(
      async () => (await sharedOf(again, solo.token))['only'] === 2,
      'solo reconciled through the nameless value',
    );
    const s = await syncStatusOf<Status>(again, jwt);
    t.ok(s.downlink.lastReconcileTs !== null, 'lastReconcileTs shown');
  },
);
