/**
 * A device's `additionalInfo`, black-box (docs/api.md "Entities"): the object a client gives is kept as given on
 * create, update and device-with-credentials, with Outpost's `gateway` and `lastConnectedGateway` merged in; it
 * survives a restart; a non-object or one over 16 KiB of JSON answers 400 and changes nothing. An asset's is kept
 * as given too.
 */
import t from 'tap';
import { mqttClient } from '../helpers/mqtt.js';
import { type HttpResult, addDevice, http, startGateway, tempDir } from '../helpers/server.js';
import { addUser, adminHeaders, authHeaders, login } from '../helpers/users.js';

interface DeviceJson {
  id: { entityType: string; id: string };
  name: string;
  label: string | null;
  additionalInfo: Record<string, unknown> | null;
}

const RICH = {
  gateway: false,
  overwriteActivityTime: true,
  description: 'pump house, north wall',
  layout: { x: 3, y: -1.5, tags: ['a', 'b'], nested: { deep: [null, true, { k: 'v' }] } },
  unicode: 'Größe – 温度',
};

const dataDir = tempDir(t);
let gw = await startGateway(t, { dataDir });
const admin = await adminHeaders(gw);
const api = (method: string, path: string, body?: unknown, headers: Record<string, string> = admin) =>
  http(method, `${gw.url}${path}`, body as object | undefined, headers);
const getDevice = async (id: string): Promise<DeviceJson> => (await api('GET', `/api/device/${id}`)).json<DeviceJson>();
const message = (r: HttpResult): string => r.json<{ message: string }>().message;

t.test('create keeps the object as given; GET answers it; an update of the read object keeps it', async (t) => {
  const r = await api('POST', '/api/device?accessToken=RICHINFO', { name: 'rich', additionalInfo: RICH });
  t.equal(r.status, 200);
  const created = r.json<DeviceJson>();
  t.same(created.additionalInfo, RICH, 'the answer has the object as given');
  t.same((await getDevice(created.id.id)).additionalInfo, RICH, 'GET has it too');

  // what TB's clients do: read the device, change a field, post it back whole
  const read = await getDevice(created.id.id);
  const changed = {
    ...read,
    label: 'L1',
    additionalInfo: { ...read.additionalInfo, description: 'moved to the south wall' },
  };
  const u = await api('POST', '/api/device', changed);
  t.equal(u.status, 200);
  const want = { ...RICH, description: 'moved to the south wall' };
  t.same(u.json<DeviceJson>().additionalInfo, want, 'the answer has the changed object');
  const after = await getDevice(created.id.id);
  t.same(after.additionalInfo, want, 'the change is kept, every other field with it');
  t.equal(after.label, 'L1');

  const renamed = await api('POST', '/api/device', { id: created.id, name: 'rich' });
  t.equal(renamed.status, 200);
  t.same(renamed.json<DeviceJson>().additionalInfo, want, 'an update without additionalInfo keeps it');
});

t.test('any key is kept, even one a JavaScript object would treat specially', async (t) => {
  const raw = '{"name":"odd-keys","additionalInfo":{"__proto__":{"x":1},"constructor":"c","1":"one"}}';
  const r = await api('POST', '/api/device', raw);
  t.equal(r.status, 200);
  const id = r.json<DeviceJson>().id.id;
  const text = (await api('GET', `/api/device/${id}`)).text;
  t.match(text, '"__proto__":{"x":1}', 'a "__proto__" key survives storing and reading back');
  t.match(text, '"constructor":"c"');
});

t.test('the gateway flag follows the object; null clears it', async (t) => {
  const made = (
    await api('POST', '/api/device', { name: 'gw-flag', additionalInfo: { gateway: true, description: 'edge box' } })
  ).json<DeviceJson>();
  t.same(made.additionalInfo, { gateway: true, description: 'edge box' });
  const token = (await api('GET', `/api/device/${made.id.id}/credentials`)).json<{ credentialsId: string }>()
    .credentialsId;
  const asGateway = await mqttClient(t, gw, token);
  await asGateway.publishAsync('v1/gateway/connect', '{"device":"behind-gw-flag"}', { qos: 1 });
  const sub = await api('GET', '/api/tenant/devices?deviceName=behind-gw-flag');
  t.equal(sub.status, 200, 'a device marked gateway by REST speaks the Gateway API');
  await asGateway.endAsync();

  const off = await api('POST', '/api/device', { ...made, additionalInfo: { ...made.additionalInfo, gateway: false } });
  t.same(off.json<DeviceJson>().additionalInfo, { gateway: false, description: 'edge box' });
  const cleared = await api('POST', '/api/device', { ...made, additionalInfo: null });
  t.equal(cleared.status, 200);
  t.equal(cleared.json<DeviceJson>().additionalInfo, null, 'null clears it, as TB stores null');
  t.equal((await getDevice(made.id.id)).additionalInfo, null);
});

t.test("a sub-device: lastConnectedGateway is Outpost's, a client's value is not taken", async (t) => {
  const gateway = await addDevice(gw.dataDir, 'site-gw', ['--gateway']);
  const other = await addDevice(gw.dataDir, 'other-gw', ['--gateway']);
  const c = await mqttClient(t, gw, gateway.token);
  await c.publishAsync('v1/gateway/connect', '{"device":"meter-9"}', { qos: 1 });
  const sub = (await api('GET', '/api/tenant/devices?deviceName=meter-9')).json<DeviceJson>();
  t.same(sub.additionalInfo, { lastConnectedGateway: gateway.id });
  const posted = await api('POST', '/api/device', {
    ...sub,
    additionalInfo: { lastConnectedGateway: other.id, description: 'meter in cabinet 2' },
  });
  t.equal(posted.status, 200);
  const want = { description: 'meter in cabinet 2', lastConnectedGateway: gateway.id };
  t.same(posted.json<DeviceJson>().additionalInfo, want, 'the description is kept, the gateway is not moved');
  t.same((await getDevice(sub.id.id)).additionalInfo, want);
  await c.endAsync();
});

t.test('device-with-credentials keeps the object as given', async (t) => {
  const r = await api('POST', '/api/device-with-credentials', {
    device: { name: 'with-creds', additionalInfo: RICH },
    credentials: { credentialsType: 'ACCESS_TOKEN', credentialsId: 'WITHCREDSINFO' },
  });
  t.equal(r.status, 200);
  const d = r.json<DeviceJson>();
  t.same(d.additionalInfo, RICH);
  t.same((await getDevice(d.id.id)).additionalInfo, RICH);
});

t.test('a non-object or an oversize object → 400, nothing created or changed', async (t) => {
  for (const bad of ['a string', ['an', 'array'], 42, true]) {
    const r = await api('POST', '/api/device', { name: 'bad-info', additionalInfo: bad });
    t.equal(r.status, 400, `${JSON.stringify(bad)} → 400`);
    t.equal(message(r), '"additionalInfo" must be a JSON object or null');
    const wc = await api('POST', '/api/device-with-credentials', {
      device: { name: 'bad-info', additionalInfo: bad },
      credentials: { credentialsType: 'ACCESS_TOKEN', credentialsId: 'BADINFOTOKEN' },
    });
    t.equal(wc.status, 400, `${JSON.stringify(bad)} with credentials → 400`);
  }
  const big = { description: 'x'.repeat(16 * 1024) };
  const tooBig = await api('POST', '/api/device', { name: 'bad-info', additionalInfo: big });
  t.equal(tooBig.status, 400);
  t.match(message(tooBig), /^"additionalInfo" is too large: \d+ bytes of JSON, at most 16384$/);
  t.equal((await api('GET', '/api/tenant/devices?deviceName=bad-info')).status, 404, 'no device was created');

  const fits = { description: 'x'.repeat(16 * 1024 - '{"description":""}'.length) };
  const ok = await api('POST', '/api/device', { name: 'just-fits', additionalInfo: fits });
  t.equal(ok.status, 200, 'exactly 16384 bytes of JSON fit');

  const target = (await api('GET', '/api/tenant/devices?deviceName=rich')).json<DeviceJson>();
  for (const bad of ['a string', [1], { description: 'y'.repeat(20_000) }]) {
    const r = await api('POST', '/api/device', { ...target, name: 'renamed-by-bad', additionalInfo: bad });
    t.equal(r.status, 400, 'an update with a bad additionalInfo → 400');
  }
  const after = await getDevice(target.id.id);
  t.same(after, target, 'the device is unchanged: not renamed, its additionalInfo as before');
});

t.test('a customer user may not turn the gateway flag on', async (t) => {
  const cust = (await api('POST', '/api/customer', { title: 'Site B' })).json<{ id: { id: string } }>();
  const d = (
    await api('POST', '/api/device', { name: 'cust-dev', additionalInfo: { description: 'd' } })
  ).json<DeviceJson>();
  t.equal((await api('POST', `/api/customer/${cust.id.id}/device/${d.id.id}`)).status, 200);
  await addUser(gw.dataDir, 'user@site-b.test', 'pw-user', 'CUSTOMER_USER', 'Site B');
  const user = authHeaders((await login(gw, 'user@site-b.test', 'pw-user')).token);
  const current = (await api('GET', `/api/device/${d.id.id}`, undefined, user)).json<DeviceJson>();
  const flip = await api(
    'POST',
    '/api/device',
    { ...current, additionalInfo: { description: 'd', gateway: true } },
    user,
  );
  t.equal(flip.status, 403);
  const edit = await api('POST', '/api/device', { ...current, additionalInfo: { description: 'e' } }, user);
  t.equal(edit.status, 200, 'other fields are the customer user’s to edit');
  t.same((await getDevice(d.id.id)).additionalInfo, { description: 'e' });
});

t.test("an asset's additionalInfo is kept as given too", async (t) => {
  const info = { description: 'the pump house', gateway: 'not a flag on an asset', lastConnectedGateway: 'kept' };
  const r = await api('POST', '/api/asset', { name: 'pump-house', type: 'building', additionalInfo: info });
  t.equal(r.status, 200);
  const a = r.json<DeviceJson>();
  t.same(a.additionalInfo, info);
  const changed = { ...a, additionalInfo: { ...info, description: 'the old pump house' } };
  t.same((await api('POST', '/api/asset', changed)).json<DeviceJson>().additionalInfo, changed.additionalInfo);
  t.same((await api('GET', `/api/asset/${a.id.id}`)).json<DeviceJson>().additionalInfo, changed.additionalInfo);
  const bad = await api('POST', '/api/asset', { ...a, name: 'renamed', additionalInfo: 'text' });
  t.equal(bad.status, 400);
  t.same((await api('GET', `/api/asset/${a.id.id}`)).json<DeviceJson>(), changed, 'unchanged by the 400');
  const plain = (await api('POST', '/api/asset', { name: 'shed' })).json<DeviceJson>();
  t.equal(plain.additionalInfo, null, 'none given: null, as before');
});

t.test('kept across a restart', async (t) => {
  const before = (await api('GET', '/api/tenant/devices?pageSize=100&page=0')).json<{ data: DeviceJson[] }>().data;
  t.ok(before.some((d) => d.name === 'with-creds'));
  await gw.stop();
  gw = await startGateway(t, { dataDir });
  const after = (await api('GET', '/api/tenant/devices?pageSize=100&page=0')).json<{ data: DeviceJson[] }>().data;
  t.same(after, before, 'every device, its additionalInfo with it, as before the restart');
  t.same(after.find((d) => d.name === 'rich')?.additionalInfo, { ...RICH, description: 'moved to the south wall' });
  const asset = await api('GET', '/api/tenant/assets?assetName=pump-house');
  t.equal(asset.json<DeviceJson>().additionalInfo?.['description'], 'the old pump house', "an asset's too");
});
