/**
 * TB's MQTT Gateway API end to end (docs/mqtt.md): a gateway device (CLI `--gateway`, REST
 * `additionalInfo.gateway`) connects sub-devices by name, publishes their telemetry, attributes and depth,
 * asks for their attributes, and receives their shared-attribute changes and RPC without subscribing; a
 * gateway never acts for a gateway, and a plain device cannot use the gateway topics. A device that existed
 * before a gateway named it: mqtt-gateway-existing.test.ts.
 */
import t from 'tap';
import { Inbox, adminHeaders, closed, granted, latest, mqttClient, sleep } from '../../helpers/mqtt.js';
import { addDevice, http, startGateway } from '../../helpers/server.js';

interface DeviceJson {
  id: { id: string };
  name: string;
  customerId: { id: string };
  additionalInfo: { gateway?: boolean } | null;
  type?: string;
  deviceProfileId?: { id: string };
}

const gw = await startGateway(t);
const admin = await adminHeaders(gw);
const cust = await http('POST', `${gw.url}/api/customer`, { title: 'Site A' }, admin);
const customerId = cust.json<{ id: { id: string } }>().id.id;
const gateway = await addDevice(gw.dataDir, 'modbus-gw', ['--gateway', '--customer', 'Site A']);
const plain = await addDevice(gw.dataDir, 'plain-dev');

async function deviceByName(name: string): Promise<DeviceJson | undefined> {
  const r = await http('GET', `${gw.url}/api/tenant/devices?deviceName=${encodeURIComponent(name)}`, undefined, admin);
  return r.status === 200 ? r.json<DeviceJson>() : undefined;
}

t.test('the gateway flag: CLI --gateway and REST additionalInfo.gateway', async (t) => {
  t.same((await deviceByName('modbus-gw'))?.additionalInfo, { gateway: true });
  t.equal((await deviceByName('plain-dev'))?.additionalInfo, null);
  const r = await http('POST', `${gw.url}/api/device`, { name: 'rest-gw', additionalInfo: { gateway: true } }, admin);
  t.equal(r.status, 200);
  t.same(r.json<DeviceJson>().additionalInfo, { gateway: true });
  const bad = await http(
    'POST',
    `${gw.url}/api/device`,
    { name: 'rest-gw2', additionalInfo: { gateway: 'yes' } },
    admin,
  );
  t.equal(bad.status, 400);
});

t.test("connect, telemetry, attributes, depth: sub-devices created by name with the gateway's customer", async (t) => {
  const c = await mqttClient(t, gw, gateway.token, { protocolVersion: 5 });
  await c.publishAsync('v1/gateway/connect', '{"device":"Meter A","type":"meter"}', { qos: 1 });
  const a = await deviceByName('Meter A');
  t.ok(a, 'created on connect');
  t.equal(a?.customerId.id, customerId, "the gateway's customer");
  t.same(a?.additionalInfo, { lastConnectedGateway: gateway.id });
  t.equal(a?.type, 'meter', 'the type of the connect');
  const profile = await http('GET', `${gw.url}/api/deviceProfile/${a?.deviceProfileId?.id ?? ''}`, undefined, admin);
  t.equal(profile.status, 200, 'its profile exists');
  t.equal(profile.json<{ name: string }>().name, 'meter', 'the profile the connect named, created for it');
  await c.publishAsync(
    'v1/gateway/telemetry',
    '{"Meter A":[{"ts":1700000000000,"values":{"kwh":12.5}},{"volts":230}],"Meter B":[{"kwh":3}],"skipped":{"not":"an array"}}',
    { qos: 1 },
  );
  const b = await deviceByName('Meter B');
  t.ok(b, 'an unknown name is connected (created) first');
  t.equal(await deviceByName('skipped'), undefined, 'a non-array entry is skipped (TB)');
  const la = await latest(gw, admin, a?.id.id ?? '');
  t.same(la['kwh']?.[0], { ts: 1700000000000, value: '12.5' });
  t.equal(la['volts']?.[0]?.value, '230');
  t.equal((await latest(gw, admin, b?.id.id ?? ''))['kwh']?.[0]?.value, '3');
  await c.publishAsync('v1/gateway/attributes', '{"Meter A":{"serial":"SN1","model":"X"}}', { qos: 1 });
  const attrs = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${a?.id.id ?? ''}/values/attributes/CLIENT_SCOPE`,
    undefined,
    admin,
  );
  t.same(
    attrs
      .json<Array<{ key: string }>>()
      .map((x) => x.key)
      .sort(),
    ['model', 'serial'],
  );
  await c.publishAsync('v1/gateway/depth/telemetry', '{"Meter A":[{"ds":5.5,"values":{"rop":1}}]}', { qos: 1 });
  const depth = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${a?.id.id ?? ''}/values/depthseries?keys=rop&startDs=0&endDs=10`,
    undefined,
    admin,
  );
  t.equal(depth.json<{ rop: unknown[] }>().rop.length, 1);
});

t.test('attribute requests: one key → value, several → values, nothing → id and device only', async (t) => {
  const c = await mqttClient(t, gw, gateway.token);
  const inbox = new Inbox(c);
  await c.publishAsync('v1/gateway/attributes', '{"Meter C":{"serial":"SN3","n":2}}', { qos: 1 });
  const cId = (await deviceByName('Meter C'))?.id.id ?? '';
  await http('POST', `${gw.url}/api/plugins/telemetry/DEVICE/${cId}/attributes/SHARED_SCOPE`, { setpoint: 7 }, admin);
  // no SUBSCRIBE: gateway responses arrive anyway
  await c.publishAsync('v1/gateway/attributes/request', '{"id":1,"device":"Meter C","client":true,"key":"serial"}', {
    qos: 1,
  });
  t.same(JSON.parse((await inbox.next((m) => m.text.includes('"id":1'))).text), {
    id: 1,
    device: 'Meter C',
    value: 'SN3',
  });
  await c.publishAsync(
    'v1/gateway/attributes/request',
    '{"id":2,"device":"Meter C","client":true,"keys":["serial","n"]}',
    { qos: 1 },
  );
  t.same(JSON.parse((await inbox.next((m) => m.text.includes('"id":2'))).text), {
    id: 2,
    device: 'Meter C',
    values: { n: 2, serial: 'SN3' },
  });
  await c.publishAsync('v1/gateway/attributes/request', '{"id":3,"device":"Meter C","client":false,"key":"setpoint"}', {
    qos: 1,
  });
  t.same(JSON.parse((await inbox.next((m) => m.text.includes('"id":3'))).text), { id: 3, device: 'Meter C', value: 7 });
  await c.publishAsync('v1/gateway/attributes/request', '{"id":4,"device":"Meter C","client":false,"key":"none"}', {
    qos: 1,
  });
  const m4 = await inbox.next((m) => m.text.includes('"id":4'));
  t.same(JSON.parse(m4.text), { id: 4, device: 'Meter C' });
  t.equal(m4.topic, 'v1/gateway/attributes/response');
  // what was found decides, not key vs keys: TB's gateway SDK always sends `keys` and reads `value`
  await http(
    'POST',
    `${gw.url}/api/plugins/telemetry/DEVICE/${cId}/attributes/SHARED_SCOPE`,
    { setpoint: 22.5 },
    admin,
  );
  await c.publishAsync(
    'v1/gateway/attributes/request',
    '{"id":5,"device":"Meter C","client":false,"keys":["setpoint"]}',
    { qos: 1 },
  );
  t.same(JSON.parse((await inbox.next((m) => m.text.includes('"id":5'))).text), {
    id: 5,
    device: 'Meter C',
    value: 22.5,
  });
  await c.publishAsync(
    'v1/gateway/attributes/request',
    '{"id":6,"device":"Meter C","client":true,"keys":["serial","missing"]}',
    { qos: 1 },
  );
  t.same(
    JSON.parse((await inbox.next((m) => m.text.includes('"id":6'))).text),
    { id: 6, device: 'Meter C', value: 'SN3' },
    'two keys asked, one found → value',
  );
});

t.test('shared attributes and RPC pushed to the gateway for connected sub-devices; replies back', async (t) => {
  const c = await mqttClient(t, gw, gateway.token, { protocolVersion: 5 });
  const inbox = new Inbox(c);
  await c.publishAsync('v1/gateway/connect', '{"device":"Valve 1"}', { qos: 1 });
  const v = (await deviceByName('Valve 1'))?.id.id ?? '';
  await http('POST', `${gw.url}/api/plugins/telemetry/DEVICE/${v}/attributes/SHARED_SCOPE`, { open: true }, admin);
  const m = await inbox.next((x) => x.topic === 'v1/gateway/attributes');
  t.same(JSON.parse(m.text), { device: 'Valve 1', data: { open: true } });
  t.equal(m.qos, 1, 'QoS 1 without a subscription');
  const call = http(
    'POST',
    `${gw.url}/api/plugins/rpc/twoway/${v}`,
    { method: 'setPos', params: { pos: 50 }, timeout: 10_000 },
    admin,
  );
  const r = await inbox.next((x) => x.topic === 'v1/gateway/rpc');
  t.same(
    JSON.parse(r.text),
    { device: 'Valve 1', data: { id: 1, method: 'setPos', params: { pos: 50 } } },
    'RPC ids from 1',
  );
  await c.publishAsync('v1/gateway/rpc', '{"device":"Valve 1","id":1,"data":{"pos":50}}', { qos: 1 });
  const res = await call;
  t.equal(res.status, 200);
  t.same(res.json(), { pos: 50 });
  // after disconnect the sub-device hears nothing through this gateway; its RPC waits for the next connect
  await c.publishAsync('v1/gateway/disconnect', '{"device":"Valve 1"}', { qos: 1 });
  const before = inbox.all.length;
  await http('POST', `${gw.url}/api/plugins/telemetry/DEVICE/${v}/attributes/SHARED_SCOPE`, { open: false }, admin);
  const queued = http(
    'POST',
    `${gw.url}/api/plugins/rpc/oneway/${v}`,
    { method: 'later', params: {}, timeout: 10_000 },
    admin,
  );
  await sleep(300);
  t.equal(inbox.all.length, before, 'nothing pushed after disconnect');
  await c.publishAsync('v1/gateway/connect', '{"device":"Valve 1"}', { qos: 1 });
  const later = await inbox.next((x) => x.text.includes('later'));
  t.same(
    JSON.parse(later.text),
    { device: 'Valve 1', data: { id: 2, method: 'later', params: {} } },
    'queued RPC delivered on connect',
  );
  t.equal((await queued).status, 200);
  t.same(
    await granted(c, {
      'v1/gateway/attributes': { qos: 1 },
      'v1/gateway/rpc': { qos: 1 },
      'v1/gateway/attributes/response': { qos: 1 },
    }),
    [1, 1, 1],
  );
});

t.test(
  'access: a gateway never acts for a gateway, its own name included; a plain device cannot act as one',
  async (t) => {
    const other = await addDevice(gw.dataDir, 'other-gw', ['--gateway']);
    const g2 = await mqttClient(t, gw, other.token, { protocolVersion: 5 });
    for (const [topic, body] of [
      ['v1/gateway/connect', '{"device":"modbus-gw"}'],
      ['v1/gateway/connect', '{"device":"other-gw"}'],
      ['v1/gateway/telemetry', '{"modbus-gw":[{"x":1}]}'],
      ['v1/gateway/telemetry', '{"other-gw":[{"x":1}]}'],
      ['v1/gateway/attributes', '{"modbus-gw":{"x":1}}'],
      ['v1/gateway/attributes/request', '{"id":1,"device":"modbus-gw","client":true,"key":"x"}'],
      ['v1/gateway/rpc', '{"device":"modbus-gw","id":1,"data":{}}'],
    ] as const) {
      const err = await g2.publishAsync(topic, body, { qos: 1 }).then(
        () => undefined,
        (e: { code?: number }) => e,
      );
      t.equal(err?.code, 0x87, `${topic} ${body} → not authorized`);
    }
    t.same(await latest(gw, admin, gateway.id), {}, 'nothing reached the gateway device');
    t.same(await latest(gw, admin, other.id), {}, 'nor the connecting gateway itself');
    t.same((await deviceByName('modbus-gw'))?.additionalInfo, { gateway: true }, 'still a gateway, of nobody');
    // a mixed batch is refused whole: nothing of it stored, no device created, none taken over
    const err = await g2
      .publishAsync('v1/gateway/telemetry', '{"Theirs":[{"y":1}],"plain-dev":[{"y":2}],"modbus-gw":[{"y":3}]}', {
        qos: 1,
      })
      .then(
        () => undefined,
        (e: { code?: number }) => e,
      );
    t.equal(err?.code, 0x87);
    t.equal(await deviceByName('Theirs'), undefined, 'no device created');
    t.equal((await deviceByName('plain-dev'))?.additionalInfo, null, 'the plain device not taken over');
    t.same(await latest(gw, admin, plain.id), {}, 'all-or-nothing');
    // 3.1.1: refused by closing
    const g3 = await mqttClient(t, gw, other.token);
    const gone = closed(g3);
    g3.publish('v1/gateway/telemetry', '{"modbus-gw":[{"x":1}]}', { qos: 1 });
    await gone;
    // a plain device: gateway topics are unknown topics, its subscriptions refused
    const p = await mqttClient(t, gw, plain.token, { protocolVersion: 5 });
    const e2 = await p.publishAsync('v1/gateway/telemetry', '{"Sneaky":[{"x":1}]}', { qos: 1 }).then(
      () => undefined,
      (e: { code?: number }) => e,
    );
    t.equal(e2?.code, 0x90, 'unknown topic for a plain device');
    t.equal(await deviceByName('Sneaky'), undefined, 'no device created');
    t.same(await granted(p, { 'v1/gateway/rpc': { qos: 1 } }), [128]);
  },
);

t.test('malformed gateway payloads: nothing stored, 0x99 on MQTT 5', async (t) => {
  const c = await mqttClient(t, gw, gateway.token, { protocolVersion: 5 });
  for (const [topic, body] of [
    ['v1/gateway/telemetry', '{"Meter Z":[{"ts":"x","values":{"a":1}}]}'],
    ['v1/gateway/telemetry', '[]'],
    ['v1/gateway/telemetry', '{"Meter Z":{"a":1}}'],
    ['v1/gateway/connect', '{"type":"x"}'],
    ['v1/gateway/attributes/request', '{"id":1,"device":"Meter Z","key":"a"}'],
    ['v1/gateway/rpc', '{"device":"Meter Z"}'],
    ['v1/gateway/telemetry', 'not json'],
  ] as const) {
    const err = await c.publishAsync(topic, body, { qos: 1 }).then(
      () => undefined,
      (e: { code?: number }) => e,
    );
    t.equal(err?.code, 0x99, `${topic} ${body}`);
  }
  t.equal(await deviceByName('Meter Z'), undefined, 'nothing created by a rejected message');
  t.ok(c.connected);
});
