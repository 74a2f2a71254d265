/**
 * Announcing devices on the MQTT gateway session (docs/sync.md "Downlink"): after every (re)connect, the
 * devices with something to send or a local listener; again within every sync.announceMs, so TB's inactivity
 * timeout never drops them (the fake drops a sub-device silent for `inactivityMs`).
 */
import t from 'tap';
import { FakeTbMqtt, until } from '../helpers/fake-tb-mqtt.js';
import { Inbox, mqttClient } from '../helpers/mqtt.js';
import { addDevice, http } from '../helpers/server.js';
import { syncGateway, postTelemetry as post, records } from '../helpers/sync.js';

const GW_TOKEN = 'GATEWAY-TOKEN';
const BASE = Date.UTC(2026, 0, 1);

const connectsOf = (tb: FakeTbMqtt, name: string): number =>
  tb.received.filter(
    (m) => m.topic === 'v1/gateway/connect' && (JSON.parse(m.text) as { device: string }).device === name,
  ).length;

t.test(
  'listeners and devices with data are announced, kept alive past the inactivity timeout, announced again after a reconnect',
  async (t) => {
    const tb = new FakeTbMqtt({ tokens: [GW_TOKEN], inactivityMs: 1_500 });
    await tb.start();
    t.teardown(() => tb.stop());
    const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN, announceMs: 1_000 });
    const listener = await addDevice(gw.dataDir, 'listens', ['--type', 'valve']);
    const quiet = await addDevice(gw.dataDir, 'quiet');
    const poster = await addDevice(gw.dataDir, 'posts');
    // a device waiting for RPC over an HTTP long-poll (held while the test runs)
    const ac = new AbortController();
    t.teardown(() => ac.abort());
    const poll = (): void => {
      void fetch(`${gw.url}/api/v1/${listener.token}/rpc?timeout=60000`, { signal: ac.signal }).catch(() => undefined);
    };
    poll();
    await post(gw, poster.token, records(BASE, 3, 1));
    await until(() => connectsOf(tb, 'listens') > 0, 'the listener announced');
    const first = tb.received.find((m) => m.topic === 'v1/gateway/connect' && m.text.includes('listens'));
    t.same(JSON.parse(first?.text ?? '{}'), { device: 'listens', type: 'valve' }, 'announced with its type');
    await until(() => tb.pointCount('posts') === 3, "the poster's points (an implicit connect too)");
    // the time is the subject here: 2.5 × the fake's inactivity timeout, and as many announces as that takes
    const since = performance.now();
    await until(() => performance.now() - since >= 4_000 && connectsOf(tb, 'listens') >= 3, 'three announces and 4 s');
    t.ok(tb.isConnected('listens'), 'still connected upstream after 2.5 × the inactivity timeout');
    t.ok(
      connectsOf(tb, 'listens') >= 3,
      `announced again within announceMs (${connectsOf(tb, 'listens')} times in ~4 s)`,
    );
    t.equal(connectsOf(tb, 'quiet'), 0, 'a device with nothing to send and no listener is not announced');
    void quiet;
    const before = tb.connects.length;
    tb.dropSession();
    await until(() => tb.connects.length > before, 'reconnected');
    const n = connectsOf(tb, 'listens');
    await until(() => connectsOf(tb, 'listens') > n && tb.isConnected('listens'), 'announced in the new session');
    t.pass('announced after the reconnect');
    const st = await http('GET', `${gw.url}/api/v1/${listener.token}/attributes`);
    t.equal(st.status, 200);
  },
);

t.test(
  'gateway_device_deleted / gateway_device_renamed: answered, logged once, shown; nothing local deleted',
  async (t) => {
    const tb = new FakeTbMqtt({ tokens: [GW_TOKEN] });
    await tb.start();
    t.teardown(() => tb.stop());
    const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN });
    const { addUser, login, authHeaders } = await import('../helpers/users.js');
    await addUser(gw.dataDir, 'admin@life.test', 'secret', 'TENANT_ADMIN');
    const jwt = (await login(gw, 'admin@life.test', 'secret')).token;
    const d = await addDevice(gw.dataDir, 'gone-dev');
    await until(() => tb.connected, 'session up');
    tb.gatewayRpc('gateway_device_deleted', 'gone-dev');
    tb.gatewayRpc('gateway_device_deleted', 'gone-dev');
    tb.gatewayRpc('gateway_device_renamed', { 'old-name': 'new-name' });
    await until(
      () => tb.received.filter((m) => m.topic.startsWith('v1/devices/me/rpc/response/')).length === 3,
      'three answers',
    );
    t.ok(
      tb.received
        .filter((m) => m.topic.startsWith('v1/devices/me/rpc/response/'))
        .every((m) => m.text === '{"success":true}'),
      'each answered',
    );
    t.equal(gw.logs.filter((l) => l.includes('deleted the device "gone-dev"')).length, 1, 'logged once');
    const s = await http('GET', `${gw.url}/api/outpost/sync`, undefined, authHeaders(jwt));
    const events = s.json<{
      downlink: { deviceEvents: Array<{ event: string; name: string; newName: string | null }> };
    }>().downlink.deviceEvents;
    t.same(
      events.map((e) => [e.event, e.name, e.newName]),
      [
        ['deleted', 'gone-dev', null],
        ['renamed', 'old-name', 'new-name'],
      ],
      'shown in the status',
    );
    const still = await http('GET', `${gw.url}/api/v1/${d.token}/attributes`);
    t.equal(still.status, 200, 'the local device is still there');
  },
);

t.test(
  'a device subscribed over MQTT only to its attribute updates is announced, and a shared attribute reaches it',
  async (t) => {
    const tb = new FakeTbMqtt({ tokens: [GW_TOKEN] });
    await tb.start();
    t.teardown(() => tb.stop());
    const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN, announceMs: 1_000 });
    const d = await addDevice(gw.dataDir, 'attr-only');
    await until(() => tb.connected, 'session up');
    const c = await mqttClient(t, gw, d.token);
    const inbox = new Inbox(c);
    await c.subscribeAsync('v1/devices/me/attributes', { qos: 1 });
    await until(() => connectsOf(tb, 'attr-only') > 0 && tb.isConnected('attr-only'), 'announced upstream');
    t.pass('announced with neither data nor an RPC listener');
    tb.setShared('attr-only', { target: 21.5 });
    const m = await inbox.next((x) => x.topic === 'v1/devices/me/attributes');
    t.same(JSON.parse(m.text), { target: 21.5 }, 'the upstream change reached the MQTT subscriber');
  },
);

t.test("a device's first uplink goes after its announce, so upstream creates it with its type", async (t) => {
  const tb = new FakeTbMqtt({ tokens: [GW_TOKEN] });
  await tb.start();
  t.teardown(() => tb.stop());
  // a long announce period: the periodic scan is not what announces the device here
  const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN, announceMs: 60_000 });
  await until(() => tb.connected, 'session up');
  const pump = await addDevice(gw.dataDir, 'typed-pump', ['--type', 'pump']);
  await post(gw, pump.token, records(BASE, 3, 1));
  await until(() => tb.pointCount('typed-pump') === 3, 'the points upstream');
  const naming = tb.received.filter((m) => m.text.includes('"typed-pump"'));
  t.equal(naming[0]?.topic, 'v1/gateway/connect', 'the first message naming it is its announce');
  t.same(JSON.parse(naming[0]?.text ?? '{}'), { device: 'typed-pump', type: 'pump' });
});
