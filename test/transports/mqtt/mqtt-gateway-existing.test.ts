/**
 * A device that exists before a LAN gateway names it (docs/mqtt.md "Access"): made with the CLI or REST, or a
 * sub-device of another gateway, it becomes the naming gateway's sub-device as in ThingsBoard (both of the same
 * customer here: another owner's device is refused, mqtt-gateway-fence.test.ts). Same id, no second device; its
 * customer, type and token stay; additionalInfo.lastConnectedGateway shows the gateway that
 * named it last, durably; its shared attributes and RPC go to that gateway's session. A gateway's name is
 * still refused.
 */
import t from 'tap';
import { Inbox, adminHeaders, latest, mqttClient, sleep } from '../../helpers/mqtt.js';
import { addDevice, http, startGateway } from '../../helpers/server.js';
import { authHeaders, login } from '../../helpers/users.js';

interface DeviceJson {
  id: { id: string };
  name: string;
  type: string;
  customerId: { id: string };
  additionalInfo: { gateway?: boolean; lastConnectedGateway?: string } | null;
}

let gw = await startGateway(t);
let admin = await adminHeaders(gw);
const cust = await http('POST', `${gw.url}/api/customer`, { title: 'Pump House' }, admin);
const customerId = cust.json<{ id: { id: string } }>().id.id;
const siteGw = await addDevice(gw.dataDir, 'site-gw', ['--gateway', '--customer', 'Pump House']);
const secondGw = await addDevice(gw.dataDir, 'second-gw', ['--gateway', '--customer', 'Pump House']);
const pump = await addDevice(gw.dataDir, 'Pump 7', ['--type', 'pump', '--customer', 'Pump House']);

async function deviceByName(name: string): Promise<DeviceJson | undefined> {
  const r = await http('GET', `${gw.url}/api/tenant/devices?deviceName=${encodeURIComponent(name)}`, undefined, admin);
  return r.status === 200 ? r.json<DeviceJson>() : undefined;
}

async function devicesNamed(name: string): Promise<number> {
  const r = await http('GET', `${gw.url}/api/tenant/devices?pageSize=100&page=0`, undefined, admin);
  return r.json<{ data: DeviceJson[] }>().data.filter((d) => d.name === name).length;
}

const refusal = (p: Promise<unknown>): Promise<number | undefined> =>
  p.then(
    () => undefined,
    (e: { code?: number }) => e.code,
  );

t.test('a device made with the CLI: the gateway connects it and posts for it under its own id', async (t) => {
  const c = await mqttClient(t, gw, siteGw.token, { protocolVersion: 5 });
  const inbox = new Inbox(c);
  await c.publishAsync('v1/gateway/connect', '{"device":"Pump 7","type":"meter"}', { qos: 1 });
  await c.publishAsync('v1/gateway/telemetry', '{"Pump 7":[{"ts":1700000000000,"values":{"flow":3.5}}]}', { qos: 1 });
  t.same((await latest(gw, admin, pump.id))['flow']?.[0], { ts: 1700000000000, value: '3.5' }, 'stored under its id');
  t.equal(await devicesNamed('Pump 7'), 1, 'no second device');
  const d = await deviceByName('Pump 7');
  t.equal(d?.id.id, pump.id);
  t.same(d?.additionalInfo, { lastConnectedGateway: siteGw.id }, 'the gateway that connected it');
  t.equal(d?.customerId.id, customerId, 'its customer kept');
  t.equal(d?.type, 'pump', "its type kept, not the connect's");

  // downlinks go to the gateway's session, as for a sub-device it created
  await http(
    'POST',
    `${gw.url}/api/plugins/telemetry/DEVICE/${pump.id}/attributes/SHARED_SCOPE`,
    { mode: 'eco' },
    admin,
  );
  const pushed = await inbox.next((m) => m.topic === 'v1/gateway/attributes');
  t.same(JSON.parse(pushed.text), { device: 'Pump 7', data: { mode: 'eco' } });
  const call = http('POST', `${gw.url}/api/plugins/rpc/oneway/${pump.id}`, { method: 'stop', params: {} }, admin);
  const rpc = await inbox.next((m) => m.topic === 'v1/gateway/rpc');
  t.same(JSON.parse(rpc.text), { device: 'Pump 7', data: { id: 1, method: 'stop', params: {} } });
  t.equal((await call).status, 200);

  // its own token goes on working
  const own = await http('POST', `${gw.url}/api/v1/${pump.token}/telemetry`, { ts: 1700000001000, values: { own: 1 } });
  t.equal(own.status, 200);
  t.equal((await latest(gw, admin, pump.id))['own']?.[0]?.value, '1');
  const shared = await http('GET', `${gw.url}/api/v1/${pump.token}/attributes?sharedKeys=mode`);
  t.same(shared.json(), { shared: { mode: 'eco' } });
});

t.test('a device made over REST: any gateway message naming it connects it (implicit connect)', async (t) => {
  const made = await http('POST', `${gw.url}/api/device`, { name: 'Tank 2', type: 'tank' }, admin);
  t.equal(made.status, 200);
  const id = made.json<DeviceJson>().id.id;
  t.equal((await http('POST', `${gw.url}/api/customer/${customerId}/device/${id}`, undefined, admin)).status, 200);
  const c = await mqttClient(t, gw, siteGw.token, { protocolVersion: 5 });
  await c.publishAsync('v1/gateway/attributes', '{"Tank 2":{"fw":"1.2"}}', { qos: 1 });
  const attrs = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${id}/values/attributes/CLIENT_SCOPE`,
    undefined,
    admin,
  );
  t.same(
    attrs.json<Array<{ key: string; value: unknown }>>().map((a) => [a.key, a.value]),
    [['fw', '1.2']],
  );
  t.equal(await devicesNamed('Tank 2'), 1, 'no second device');
  t.same((await deviceByName('Tank 2'))?.additionalInfo, { lastConnectedGateway: siteGw.id });
});

t.test("another gateway's sub-device: the gateway naming it last gets it and its downlinks", async (t) => {
  const first = await mqttClient(t, gw, siteGw.token, { protocolVersion: 5 });
  const firstInbox = new Inbox(first);
  await first.publishAsync('v1/gateway/connect', '{"device":"Pump 7"}', { qos: 1 });
  const second = await mqttClient(t, gw, secondGw.token, { protocolVersion: 5 });
  const secondInbox = new Inbox(second);
  await second.publishAsync('v1/gateway/telemetry', '{"Pump 7":[{"ts":1700000002000,"values":{"flow":4}}]}', {
    qos: 1,
  });
  t.equal((await latest(gw, admin, pump.id))['flow']?.[0]?.value, '4');
  t.same((await deviceByName('Pump 7'))?.additionalInfo, { lastConnectedGateway: secondGw.id });
  await http(
    'POST',
    `${gw.url}/api/plugins/telemetry/DEVICE/${pump.id}/attributes/SHARED_SCOPE`,
    { mode: 'max' },
    admin,
  );
  const pushed = await secondInbox.next((m) => m.topic === 'v1/gateway/attributes');
  t.same(JSON.parse(pushed.text), { device: 'Pump 7', data: { mode: 'max' } });
  await sleep(200);
  t.equal(
    firstInbox.all.filter((m) => m.topic === 'v1/gateway/attributes').length,
    0,
    'the gateway that connected it before hears nothing of it',
  );
});

t.test("a gateway's name is refused: the other gateway's, and its own", async (t) => {
  const c = await mqttClient(t, gw, siteGw.token, { protocolVersion: 5 });
  t.equal(await refusal(c.publishAsync('v1/gateway/connect', '{"device":"second-gw"}', { qos: 1 })), 0x87);
  t.equal(await refusal(c.publishAsync('v1/gateway/telemetry', '{"site-gw":[{"x":1}]}', { qos: 1 })), 0x87);
  t.same(await latest(gw, admin, secondGw.id), {});
  t.same(await latest(gw, admin, siteGw.id), {});
  t.same((await deviceByName('second-gw'))?.additionalInfo, { gateway: true });
});

t.test('the hand-over is durable: it survives a kill -9 right after the PUBACK', async (t) => {
  const c = await mqttClient(t, gw, siteGw.token, { protocolVersion: 5 });
  await c.publishAsync('v1/gateway/connect', '{"device":"Pump 7"}', { qos: 1 });
  await gw.stop('SIGKILL');
  gw = await startGateway(t, { dataDir: gw.dataDir });
  admin = authHeaders((await login(gw, 'mqtt-admin@example.com', 'secret-pass-1')).token);
  const d = await deviceByName('Pump 7');
  t.equal(d?.id.id, pump.id);
  t.same(d?.additionalInfo, { lastConnectedGateway: siteGw.id });
});
