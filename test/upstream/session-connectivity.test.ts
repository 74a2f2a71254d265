/**
 * Local devices' connects and disconnects told upstream on the MQTT gateway session (docs/sync.md "What the
 * upstream sees"): a device's first local session → `v1/gateway/connect {"device","type"}`, its last one
 * closing → `v1/gateway/disconnect {"device"}` once its data has gone; after an outage the state of the moment,
 * not the flaps it went through, and a disconnected device's backlog between a connect and a disconnect.
 */
import type { MqttClient } from 'mqtt';
import t from 'tap';
import { FakeTbMqtt, type Message, until } from '../helpers/fake-tb-mqtt.js';
import { adminHeaders, mqttClient } from '../helpers/mqtt.js';
import { type Gateway, addDevice, http } from '../helpers/server.js';
import { postTelemetry, syncGateway } from '../helpers/sync.js';
import { waitFor } from '../helpers/wait.js';

const GW_TOKEN = 'GATEWAY-TOKEN';

/** `v1/gateway/connect` or `.../disconnect` naming `name` in `msgs`, their bodies */
function said(msgs: readonly Message[], what: 'connect' | 'disconnect', name: string): Array<Record<string, unknown>> {
  return msgs
    .filter((m) => m.topic === `v1/gateway/${what}`)
    .map((m) => JSON.parse(m.text) as Record<string, unknown>)
    .filter((b) => b['device'] === name);
}

/** index in `msgs` of the last message naming `name` on `topic` (-1: none) */
function lastIndex(msgs: readonly Message[], topic: string, name: string): number {
  for (let i = msgs.length - 1; i >= 0; i--) {
    const m = msgs[i] as Message;
    if (m.topic !== topic) continue;
    const body = JSON.parse(m.text) as Record<string, unknown>;
    if (body['device'] === name || name in body) return i;
  }
  return -1;
}

/** Ends the client and waits until the daemon counted the session closed (its lastDisconnectTime). */
async function end(gw: Gateway, admin: Record<string, string>, id: string, c: MqttClient): Promise<void> {
  const from = Date.now();
  c.end(true);
  await waitFor(
    async () => {
      const r = await http(
        'GET',
        `${gw.url}/api/plugins/telemetry/DEVICE/${id}/values/attributes/SERVER_SCOPE`,
        undefined,
        admin,
      );
      const a = r.json<Array<{ key: string; value: unknown }>>().find((x) => x.key === 'lastDisconnectTime');
      return typeof a?.value === 'number' && a.value >= from;
    },
    { message: `device ${id} disconnected locally` },
  );
}

t.test(
  'a LAN device connecting and disconnecting is told upstream; its last data goes before the disconnect',
  async (t) => {
    const tb = new FakeTbMqtt({ tokens: [GW_TOKEN] });
    await tb.start();
    t.teardown(() => tb.stop());
    // short announces: scans every 250 ms, and the keeper's re-announces show scans went by
    const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN, announceMs: 1_000 });
    const admin = await adminHeaders(gw);
    const pump = await addDevice(gw.dataDir, 'pump', ['--type', 'pumps']);
    const keeper = await addDevice(gw.dataDir, 'keeper');
    await until(() => tb.connected, 'session up');
    await mqttClient(t, gw, keeper.token);
    await until(() => said(tb.received, 'connect', 'keeper').length > 0, 'the keeper connected upstream');

    // a client that only connects: no data, no subscription
    const c = await mqttClient(t, gw, pump.token);
    await until(() => said(tb.received, 'connect', 'pump').length > 0, 'its connect told upstream');
    t.same(said(tb.received, 'connect', 'pump')[0], { device: 'pump', type: 'pumps' }, 'named with its profile');
    t.ok(tb.isConnected('pump'), 'connected upstream');

    await c.publishAsync('v1/devices/me/telemetry', '{"level":7}', { qos: 1 });
    await end(gw, admin, pump.id, c);
    await until(() => said(tb.received, 'disconnect', 'pump').length > 0, 'its disconnect told upstream');
    const off = lastIndex(tb.received, 'v1/gateway/disconnect', 'pump');
    t.same(JSON.parse((tb.received[off] as Message).text), { device: 'pump' }, "TB's disconnect body");
    t.ok(lastIndex(tb.received, 'v1/gateway/telemetry', 'pump') < off, 'its last point went before the disconnect');
    t.equal(tb.pointCount('pump'), 1);

    // two more announces of the keeper: scans went by after the disconnect, and none connected the pump again
    const k = said(tb.received, 'connect', 'keeper').length;
    await until(() => said(tb.received, 'connect', 'keeper').length >= k + 2, 'two more scans');
    const after = tb.received.slice(off + 1);
    t.equal(said(after, 'connect', 'pump').length, 0, 'not connected again by a scan');
    t.notOk(tb.isConnected('pump'), 'disconnected upstream');
    t.equal(said(tb.received, 'disconnect', 'keeper').length, 0, 'the keeper, still connected, never disconnected');

    // a post over HTTP while its session is closed: up between a connect and a disconnect again
    const mark = tb.received.length;
    await postTelemetry(gw, pump.token, '{"level":8}');
    await until(() => said(tb.received.slice(mark), 'disconnect', 'pump').length > 0, 'disconnected after the post');
    const again = tb.received.slice(mark);
    t.ok(
      lastIndex(again, 'v1/gateway/connect', 'pump') < lastIndex(again, 'v1/gateway/telemetry', 'pump') &&
        lastIndex(again, 'v1/gateway/telemetry', 'pump') < lastIndex(again, 'v1/gateway/disconnect', 'pump'),
      'connect, the post, disconnect',
    );
    t.equal(tb.pointCount('pump'), 2);
    t.notOk(tb.isConnected('pump'));
  },
);

t.test("a LAN gateway's sub-device: its connect, and its disconnect when the LAN gateway goes", async (t) => {
  const tb = new FakeTbMqtt({ tokens: [GW_TOKEN] });
  await tb.start();
  t.teardown(() => tb.stop());
  const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN });
  const lan = await addDevice(gw.dataDir, 'lan-gw', ['--gateway']);
  await until(() => tb.connected, 'session up');
  const c = await mqttClient(t, gw, lan.token);
  await c.publishAsync('v1/gateway/connect', '{"device":"meter-1","type":"meters"}', { qos: 1 });
  await until(() => said(tb.received, 'connect', 'meter-1').length > 0, "the sub-device's connect told upstream");
  t.same(said(tb.received, 'connect', 'meter-1')[0], { device: 'meter-1', type: 'meters' });
  c.end(true);
  await until(() => said(tb.received, 'disconnect', 'meter-1').length > 0, 'the LAN gateway gone: disconnected');
  t.notOk(tb.isConnected('meter-1'));
  // the LAN gateway is a local device with a session of its own: told as any other
  t.equal(said(tb.received, 'connect', 'lan-gw').length, 1, 'the LAN gateway itself connected');
  await until(() => said(tb.received, 'disconnect', 'lan-gw').length > 0, 'and disconnected');
});

t.test(
  'after an outage, the state of the moment: no flap replayed; a disconnected device backlog bracketed',
  async (t) => {
    const tb = new FakeTbMqtt({ tokens: [GW_TOKEN] });
    await tb.start();
    t.teardown(() => tb.stop());
    // the default announce interval: nothing is announced again during the test, every announce is a state
    const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN });
    const admin = await adminHeaders(gw);
    const steady = await addDevice(gw.dataDir, 'steady');
    const flapOn = await addDevice(gw.dataDir, 'flap-on');
    const flapOff = await addDevice(gw.dataDir, 'flap-off');
    const brief = await addDevice(gw.dataDir, 'brief');
    const logger = await addDevice(gw.dataDir, 'logger', ['--type', 'loggers']);
    const barrier = await addDevice(gw.dataDir, 'barrier');
    await until(() => tb.connected, 'session up');
    await mqttClient(t, gw, steady.token);
    let off = await mqttClient(t, gw, flapOff.token);
    await until(
      () => said(tb.received, 'connect', 'steady').length > 0 && said(tb.received, 'connect', 'flap-off').length > 0,
      'both connected upstream before the outage',
    );

    await tb.stop();
    await waitFor(
      async () => {
        const r = await http('GET', `${gw.url}/api/outpost/sync`, undefined, admin);
        return r.json<{ session?: { state: string } }>().session?.state !== 'up';
      },
      { message: 'the gateway saw its session end' },
    );
    const mark = tb.received.length;
    // flap-on: on, off, on; flap-off: off, on, off; brief: on, off; logger: on, a reading, off
    let on = await mqttClient(t, gw, flapOn.token);
    await end(gw, admin, flapOn.id, on);
    on = await mqttClient(t, gw, flapOn.token);
    await end(gw, admin, flapOff.id, off);
    off = await mqttClient(t, gw, flapOff.token);
    await end(gw, admin, flapOff.id, off);
    await end(gw, admin, brief.id, await mqttClient(t, gw, brief.token));
    const lg = await mqttClient(t, gw, logger.token);
    await lg.publishAsync('v1/devices/me/telemetry', '{"temp":4.5}', { qos: 1 });
    await end(gw, admin, logger.id, lg);

    await tb.start();
    await until(() => tb.pointCount('logger') === 1, "the disconnected logger's backlog went up");
    await until(() => said(tb.received, 'disconnect', 'logger').length > 0, 'and it was disconnected after it');
    await postTelemetry(gw, barrier.token, '{"x":1}');
    await until(() => tb.pointCount('barrier') === 1, 'a later post went up');
    const now = tb.received.slice(mark);
    t.equal(said(now, 'connect', 'steady').length, 1, 'connected before and since: announced once');
    t.equal(said(now, 'connect', 'flap-on').length, 1, 'ended connected: announced once');
    t.equal(said(now, 'connect', 'flap-off').length, 0, 'ended disconnected: nothing said');
    t.equal(said(now, 'connect', 'brief').length, 0, 'connected and gone during the outage: nothing said');
    t.same(said(now, 'connect', 'logger'), [{ device: 'logger', type: 'loggers' }], 'the logger: one connect, typed');
    const disconnects = now.filter((m) => m.topic === 'v1/gateway/disconnect').map((m) => m.text);
    t.same(disconnects, ['{"device":"logger"}'], 'one disconnect: the logger, after its backlog');
    t.ok(
      lastIndex(now, 'v1/gateway/connect', 'logger') < lastIndex(now, 'v1/gateway/telemetry', 'logger') &&
        lastIndex(now, 'v1/gateway/telemetry', 'logger') < lastIndex(now, 'v1/gateway/disconnect', 'logger'),
      'connect, backlog, disconnect, in that order',
    );
    // the upstream's view settles once what is in flight is through (on a busy machine, after the assertions above)
    await until(
      () =>
        tb.isConnected('steady') &&
        tb.isConnected('flap-on') &&
        !tb.isConnected('logger') &&
        !tb.isConnected('flap-off') &&
        !tb.isConnected('brief'),
      'upstream, the connected ones are connected and the others not',
    );
    void on;
  },
);
