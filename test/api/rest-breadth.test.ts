/**
 * ThingsBoard REST that real clients call (docs/api.md), black-box: a customer by title, a device's or asset's
 * `customerId` kept on create and update (with TB's 400 for an unknown customer and nothing stored, the null
 * UUID unassigning, a customer user refused a move), `GET /api/system/info` in TB CE's form, and the requests of
 * ThingsBoard's n8n node (customer by title, create with a customer) as it sends them, with an API key.
 */
import t, { type Test } from 'tap';
import { type HttpResult, addDevice, cliJson, http, startGateway } from '../helpers/server.js';
import { addUser, authHeaders, login } from '../helpers/users.js';
import { WsClient, type WsReply, wsUrl } from '../helpers/ws.js';

const NULL_UUID = '13814000-1dd2-11b2-8080-808080808080';
const UNKNOWN_ID = '0b1c2d3e-0000-4000-8000-000000000777';
const DENY = "You don't have permission to perform this operation!";

interface IdJson {
  entityType: string;
  id: string;
}
interface NamedJson {
  id: IdJson;
  name: string;
  customerId: IdJson;
}
interface TbError {
  status: number;
  message: string;
  errorCode: number;
}

const gw = await startGateway(t);
await addUser(gw.dataDir, 'admin@breadth.test', 'pw-admin', 'TENANT_ADMIN');
const adminH = authHeaders((await login(gw, 'admin@breadth.test', 'pw-admin')).token);
const acme = (await cliJson(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'Acme & Sons'])).id as string;
const other = (await cliJson(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'Other'])).id as string;
const acmeUser = await addUser(gw.dataDir, 'u@acme.test', 'pw-u', 'CUSTOMER_USER', acme);
const userH = authHeaders((await login(gw, acmeUser.email, 'pw-u')).token);

const api = (method: string, path: string, headers: Record<string, string>, body?: unknown): Promise<HttpResult> =>
  http(method, `${gw.url}${path}`, body as object | undefined, headers);

function refused(t: Test, r: HttpResult, status: number, message: string, errorCode: number, what: string): void {
  t.equal(r.status, status, `${what}: ${status}`);
  const e = r.json<TbError>();
  t.same({ status: e.status, message: e.message, errorCode: e.errorCode }, { status, message, errorCode }, what);
}

async function namesUnder(customerId: string, seg: 'devices' | 'assets'): Promise<string[]> {
  const r = await api('GET', `/api/customer/${customerId}/${seg}?pageSize=100&page=0`, adminH);
  return r
    .json<{ data: NamedJson[] }>()
    .data.map((d) => d.name)
    .sort();
}

t.test('GET /api/tenant/customers?customerTitle=', async (t) => {
  const r = await api('GET', `/api/tenant/customers?customerTitle=${encodeURIComponent('Acme & Sons')}`, adminH);
  t.equal(r.status, 200);
  t.same(r.json(), (await api('GET', `/api/customer/${acme}`, adminH)).json(), 'the Customer JSON');
  refused(
    t,
    await api('GET', '/api/tenant/customers?customerTitle=acme%20%26%20sons', adminH),
    404,
    'Customer with title [acme & sons] is not found',
    32,
    'exact, case-sensitive',
  );
  refused(t, await api('GET', '/api/tenant/customers?customerTitle=Acme%20%26%20Sons', userH), 403, DENY, 20, 'role');
  t.equal((await api('GET', '/api/tenant/customers', adminH)).status, 400, 'customerTitle is required');
});

t.test('POST /api/device and /api/asset keep customerId on create', async (t) => {
  for (const [seg, title] of [
    ['device', 'Device'],
    ['asset', 'Asset'],
  ] as const) {
    const made = await api('POST', `/api/${seg}`, adminH, { name: `${seg}-c1`, type: 'x', customerId: { id: acme } });
    t.equal(made.status, 200, `${seg} created`);
    t.same(made.json<NamedJson>().customerId, { entityType: 'CUSTOMER', id: acme }, `${seg}: customer kept`);
    const full = await api('POST', `/api/${seg}`, adminH, {
      name: `${seg}-c2`,
      customerId: { entityType: 'CUSTOMER', id: acme },
    });
    t.same(full.json<NamedJson>().customerId.id, acme, `${seg}: with entityType too`);
    t.same(await namesUnder(acme, `${seg}s`), [`${seg}-c1`, `${seg}-c2`], `${seg}s listed under the customer`);
    t.equal((await api('GET', `/api/${seg}/${made.json<NamedJson>().id.id}`, userH)).status, 200, 'readable by C');

    const nul = await api('POST', `/api/${seg}`, adminH, { name: `${seg}-n`, customerId: { id: NULL_UUID } });
    t.same(nul.json<NamedJson>().customerId.id, NULL_UUID, `${seg}: the null UUID is unassigned`);

    refused(
      t,
      await api('POST', `/api/${seg}`, adminH, { name: `${seg}-bad`, customerId: { id: UNKNOWN_ID } }),
      400,
      `Can't assign ${seg} to non-existent customer!`,
      31,
      `${seg}: unknown customer`,
    );
    const lookup = await api('GET', `/api/tenant/${seg}s?${seg}Name=${seg}-bad`, adminH);
    t.equal(lookup.status, 404, `${title}: nothing stored`);
    t.equal(
      (await api('POST', `/api/${seg}`, adminH, { name: `${seg}-bad`, customerId: { id: 'nope' } })).status,
      400,
      'not a UUID',
    );
    refused(
      t,
      await api('POST', `/api/${seg}`, userH, { name: `${seg}-by-user`, customerId: { id: acme } }),
      403,
      DENY,
      20,
      `${seg}: a customer user cannot create`,
    );
  }
  const withCreds = await api('POST', '/api/device-with-credentials', adminH, {
    device: { name: 'dwc', customerId: { id: acme } },
    credentials: { credentialsType: 'ACCESS_TOKEN', credentialsId: 'DWC_TOKEN' },
  });
  t.same(withCreds.json<NamedJson>().customerId.id, acme, 'device-with-credentials keeps it');
});

t.test('update: move, unassign, keep; unknown → 400 and nothing changed', async (t) => {
  const d = (await api('POST', '/api/device', adminH, { name: 'mover' })).json<NamedJson>();
  const post = (body: Record<string, unknown>): Promise<HttpResult> =>
    api('POST', '/api/device', adminH, { id: d.id, name: 'mover', ...body });
  t.same((await post({ customerId: { id: acme } })).json<NamedJson>().customerId.id, acme, 'moved to Acme');
  t.ok((await namesUnder(acme, 'devices')).includes('mover'), 'listed under Acme');
  t.same((await post({})).json<NamedJson>().customerId.id, acme, 'no customerId: kept');
  t.same((await post({ customerId: { id: other } })).json<NamedJson>().customerId.id, other, 'moved to Other');
  t.notOk((await namesUnder(acme, 'devices')).includes('mover'), 'no longer under Acme');
  refused(
    t,
    await post({ name: 'renamed', customerId: { id: UNKNOWN_ID } }),
    400,
    "Can't assign device to non-existent customer!",
    31,
    'unknown customer',
  );
  const now = (await api('GET', `/api/device/${d.id.id}`, adminH)).json<NamedJson>();
  t.same([now.name, now.customerId.id], ['mover', other], 'nothing changed');
  t.same((await post({ customerId: { id: NULL_UUID } })).json<NamedJson>().customerId.id, NULL_UUID, 'null UUID');
  await post({ customerId: { id: acme } });
  t.same((await post({ customerId: null })).json<NamedJson>().customerId.id, NULL_UUID, 'null unassigns');

  const a = (await api('POST', '/api/asset', adminH, { name: 'shed' })).json<NamedJson>();
  const moved = await api('POST', '/api/asset', adminH, { ...a, customerId: { id: acme } });
  t.same(moved.json<NamedJson>().customerId.id, acme, 'asset moved');
  t.ok((await namesUnder(acme, 'assets')).includes('shed'), 'asset listed under Acme');
});

t.test('a customer user keeps its entity its customer’s', async (t) => {
  const d = (
    await api('POST', '/api/device', adminH, { name: 'acme-pump', customerId: { id: acme } })
  ).json<NamedJson>();
  const ok = await api('POST', '/api/device', userH, { ...d, label: 'by the user' });
  t.equal(ok.status, 200, 'update with its own customerId');
  t.equal(
    (await api('POST', '/api/device', userH, { id: d.id, name: 'acme-pump', label: 'x' })).status,
    200,
    'update without customerId',
  );
  for (const target of [other, NULL_UUID]) {
    refused(
      t,
      await api('POST', '/api/device', userH, { ...d, customerId: { id: target } }),
      403,
      DENY,
      20,
      `moving to ${target === NULL_UUID ? 'the tenant' : 'another customer'}`,
    );
  }
  t.same((await api('GET', `/api/device/${d.id.id}`, adminH)).json<NamedJson>().customerId.id, acme, 'still Acme’s');
});

t.test("a move by update ends the old customer's subscriptions", async (t) => {
  const dev = await addDevice(gw.dataDir, 'watched', ['--customer', acme]);
  const userJwt = userH['X-Authorization'].slice('Bearer '.length);
  const ws = await WsClient.connect(`${wsUrl(gw, '/api/ws/plugins/telemetry')}?token=${userJwt}`);
  t.teardown(() => ws.terminate());
  ws.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, keys: 't', cmdId: 1 }] });
  t.equal((await ws.nextJson<WsReply>()).errorCode, 0, 'subscribed');
  const current = (await api('GET', `/api/device/${dev.id}`, adminH)).json<NamedJson>();
  t.equal((await api('POST', '/api/device', adminH, { ...current, customerId: { id: other } })).status, 200);
  const end = await ws.nextJson<WsReply>();
  t.same([end.subscriptionId, end.errorCode, end.errorMsg], [1, 1, 'Failed to fetch data!'], 'ended');
});

t.test('GET /api/system/info', async (t) => {
  const ce = { version: '4.3.1.3', artifact: 'application', name: 'ThingsBoard Server Application', type: 'CE' };
  for (const [who, h] of [
    ['tenant admin', adminH],
    ['customer user', userH],
  ] as const) {
    const r = await api('GET', '/api/system/info', h);
    t.equal(r.status, 200, who);
    t.same(r.json(), ce, `${who}: TB CE's form`);
  }
  refused(t, await api('GET', '/api/system/info', {}), 401, 'Authentication failed', 10, 'no token');
});

t.test("the n8n node's requests, with its API key credential", async (t) => {
  const admin = (await api('GET', '/api/auth/user', adminH)).json<{ id: IdJson }>();
  const key = await api('POST', '/api/apiKey', adminH, { description: 'n8n', enabled: true, userId: admin.id });
  const value = key.json<{ value: string }>().value;
  // the node's request handler: JSON in and out, the credential in X-Authorization, the query as `qs`
  const node = (method: string, endpoint: string, qs: Record<string, string> = {}, body?: unknown) =>
    http(method, `${gw.url}${endpoint}${Object.keys(qs).length ? `?${new URLSearchParams(qs)}` : ''}`, body as object, {
      'X-Authorization': `ApiKey ${value}`,
      Accept: 'application/json',
    });
  t.equal((await node('GET', '/api/auth/user')).status, 200, 'credential test');
  t.equal((await node('GET', '/api/system/info')).json<{ type: string }>().type, 'CE', 'edition');
  const byTitle = await node('GET', '/api/tenant/customers', { customerTitle: 'Other' });
  t.same([byTitle.status, byTitle.json<{ id: IdJson }>().id.id], [200, other], 'customer > get by title');
  // buildEntityWithCustomer: {name, type, label?, customerId: {id}}
  const dev = await node('POST', '/api/device', {}, { name: 'n8n-dev', type: 'sensor', customerId: { id: other } });
  t.same([dev.status, dev.json<NamedJson>().customerId.id], [200, other], 'device > create with a customer');
  const asset = await node('POST', '/api/asset', {}, { name: 'n8n-asset', type: 'site', customerId: { id: other } });
  t.same([asset.status, asset.json<NamedJson>().customerId.id], [200, other], 'asset > create with a customer');
  const listed = await node('GET', `/api/customer/${other}/devices`, { pageSize: '10', page: '0' });
  t.ok(
    listed.json<{ data: NamedJson[] }>().data.some((d) => d.name === 'n8n-dev'),
    'device > get customer devices',
  );
});
