/**
 * Entity management REST, black-box (docs/api.md): devices, credentials, paging and name
 * lookup, customers with assign/unassign, assets, deletion, TB JSON shapes and 400/404 on bad ids.
 */
import t from 'tap';
import { type HttpResult, addDevice, cliJson, http, startGateway } from '../helpers/server.js';
import { addUser, adminToken, authHeaders, login } from '../helpers/users.js';

const NULL_UUID = '13814000-1dd2-11b2-8080-808080808080';
const UNKNOWN_ID = '0b1c2d3e-0000-4000-8000-000000000001';

interface IdJson {
  entityType: string;
  id: string;
}
interface DeviceJson {
  id: IdJson;
  createdTime: number;
  tenantId: IdJson;
  customerId: IdJson;
  name: string;
  type: string;
  label: string | null;
}
interface PageJson<T> {
  data: T[];
  totalPages: number;
  totalElements: number;
  hasNext: boolean;
}
interface TbError {
  status: number;
  message: string;
  errorCode: number;
}

t.test('entity REST', async (t) => {
  const gw = await startGateway(t);
  const token = await adminToken(gw, 'admin@example.com', 'pw-admin');
  const h = authHeaders(token);
  const api = (method: string, path: string, body?: unknown): Promise<HttpResult> =>
    http(method, `${gw.url}${path}`, body as object | undefined, h);
  const err = (r: HttpResult): TbError => r.json<TbError>();

  await t.test('create, get, credentials, duplicate name', async (t) => {
    const r = await api('POST', '/api/device', { name: 'Thermo-1', type: 'thermometer', label: 'Room 1' });
    t.equal(r.status, 200);
    const d = r.json<DeviceJson>();
    t.equal(d.id.entityType, 'DEVICE');
    t.match(d.id.id, /^[0-9a-f-]{36}$/);
    t.same(d.customerId, { entityType: 'CUSTOMER', id: NULL_UUID });
    t.equal(d.tenantId.entityType, 'TENANT');
    t.equal(d.name, 'Thermo-1');
    t.equal(d.type, 'thermometer');
    t.equal(d.label, 'Room 1');
    t.type(d.createdTime, 'number');

    const got = await api('GET', `/api/device/${d.id.id}`);
    t.same(got.json(), d, 'GET answers the created device');

    const cred = await api('GET', `/api/device/${d.id.id}/credentials`);
    t.equal(cred.status, 200);
    const c = cred.json<Record<string, unknown>>();
    t.same(c['deviceId'], d.id);
    t.equal(c['credentialsType'], 'ACCESS_TOKEN');
    t.match(c['credentialsId'], /^[A-Za-z0-9]{20}$/, 'random token: 20 alphanumerics');
    t.equal(c['credentialsValue'], null);
    const tele = await http('POST', `${gw.url}/api/v1/${String(c['credentialsId'])}/telemetry`, { temperature: 21 });
    t.equal(tele.status, 200, 'the issued token works on the device API');

    const dup = await api('POST', '/api/device', { name: 'Thermo-1' });
    t.equal(dup.status, 400);
    t.equal(err(dup).message, 'Device with such name already exists!');
    t.equal(err(dup).errorCode, 31);

    const defaulted = (await api('POST', '/api/device', { name: 'Plain' })).json<DeviceJson>();
    t.equal(defaulted.type, 'default');
    t.equal(defaulted.label, null);
  });

  await t.test('?accessToken= sets the credentials; a taken token → 400', async (t) => {
    const r = await api('POST', '/api/device?accessToken=MY_TOKEN_42', { name: 'With-token' });
    t.equal(r.status, 200);
    const d = r.json<DeviceJson>();
    t.equal(
      (await api('GET', `/api/device/${d.id.id}/credentials`)).json<{ credentialsId: string }>().credentialsId,
      'MY_TOKEN_42',
    );
    t.equal((await http('POST', `${gw.url}/api/v1/MY_TOKEN_42/telemetry`, { a: 1 })).status, 200);
    const taken = await api('POST', '/api/device?accessToken=MY_TOKEN_42', { name: 'Other' });
    t.equal(taken.status, 400);
    t.equal((await api('GET', '/api/tenant/devices?deviceName=Other')).status, 404, 'nothing created');
  });

  await t.test('bad input → 400 / 404, nothing created', async (t) => {
    for (const body of ['{nope', '[]', '{}', '{"name":""}', '{"name":7}', '{"name":"x","type":3}']) {
      const r = await http('POST', `${gw.url}/api/device`, body, h);
      t.equal(r.status, 400, `body ${body}`);
      t.equal(err(r).errorCode, 31);
    }
    t.equal((await api('GET', '/api/tenant/devices?deviceName=x')).status, 404);
    const bad = await api('GET', '/api/device/not-a-uuid');
    t.equal(bad.status, 400);
    t.equal(err(bad).message, 'Invalid UUID string: not-a-uuid');
    const unknown = await api('GET', `/api/device/${UNKNOWN_ID}`);
    t.equal(unknown.status, 404);
    t.equal(err(unknown).message, `Device with id [${UNKNOWN_ID}] is not found`);
    t.equal(err(unknown).errorCode, 32);
    t.equal((await api('GET', `/api/device/${UNKNOWN_ID}/credentials`)).status, 404);
    t.equal((await api('DELETE', `/api/device/${UNKNOWN_ID}`)).status, 404);
  });

  await t.test('tenant devices: paging, textSearch, name lookup', async (t) => {
    const before = (await api('GET', '/api/tenant/devices?pageSize=1000&page=0')).json<PageJson<DeviceJson>>()
      .totalElements;
    for (const n of ['pg-a', 'pg-b', 'PG-c', 'pg-d', 'pg-e'])
      t.equal((await api('POST', '/api/device', { name: n })).status, 200);
    const total = before + 5;
    const p0 = (await api('GET', '/api/tenant/devices?pageSize=2&page=0')).json<PageJson<DeviceJson>>();
    t.equal(p0.totalElements, total);
    t.equal(p0.totalPages, Math.ceil(total / 2));
    t.equal(p0.data.length, 2);
    t.equal(p0.hasNext, true);
    const last = (await api('GET', `/api/tenant/devices?pageSize=2&page=${Math.ceil(total / 2) - 1}`)).json<
      PageJson<DeviceJson>
    >();
    t.equal(last.hasNext, false);
    t.equal(last.data.length, total % 2 === 0 ? 2 : 1);
    const seen = new Set<string>();
    for (let page = 0; page < Math.ceil(total / 2); page++) {
      for (const d of (await api('GET', `/api/tenant/devices?pageSize=2&page=${page}`)).json<PageJson<DeviceJson>>()
        .data)
        seen.add(d.id.id);
    }
    t.equal(seen.size, total, 'pages neither overlap nor skip');

    const search = (await api('GET', '/api/tenant/devices?pageSize=10&page=0&textSearch=pg-')).json<
      PageJson<DeviceJson>
    >();
    t.same(
      search.data.map((d) => d.name),
      ['pg-a', 'pg-b', 'PG-c', 'pg-d', 'pg-e'],
      'case-insensitive substring, creation order',
    );
    const sorted = (
      await api('GET', '/api/tenant/devices?pageSize=2&page=0&textSearch=pg&sortProperty=name&sortOrder=DESC')
    ).json<PageJson<DeviceJson>>();
    t.same(
      sorted.data.map((d) => d.name),
      ['pg-e', 'pg-d'],
    );
    t.same(
      (await api('GET', '/api/tenant/devices?pageSize=10&page=5')).json<PageJson<DeviceJson>>().data,
      [],
      'page past the end is empty',
    );

    for (const q of [
      '',
      'page=0',
      'pageSize=10',
      'pageSize=0&page=0',
      'pageSize=abc&page=0',
      'pageSize=10&page=-1',
      'pageSize=10&page=0&sortOrder=UP',
      'pageSize=10&page=0&sortProperty=secret',
    ]) {
      const r = await api('GET', `/api/tenant/devices?${q}`);
      t.equal(r.status, 400, `?${q} → 400`);
      t.equal(err(r).errorCode, 31);
    }

    const one = await api('GET', '/api/tenant/devices?deviceName=pg-b');
    t.equal(one.status, 200);
    t.equal(one.json<DeviceJson>().name, 'pg-b');
    t.equal((await api('GET', '/api/tenant/device?deviceName=pg-b')).json<DeviceJson>().name, 'pg-b', 'TB alias');
    const none = await api('GET', '/api/tenant/devices?deviceName=missing');
    t.equal(none.status, 404);
    t.equal(err(none).errorCode, 32);
  });

  await t.test('CLI-created entities show at once', async (t) => {
    const d = await addDevice(gw.dataDir, 'from-cli');
    const r = await api('GET', `/api/device/${d.id}`);
    t.equal(r.status, 200);
    t.equal(r.json<DeviceJson>().name, 'from-cli');
  });

  await t.test('update by POST with id: rename, relabel, name clash', async (t) => {
    const d = (await api('POST', '/api/device', { name: 'old-name' })).json<DeviceJson>();
    const r = await api('POST', '/api/device', { ...d, name: 'new-name', label: 'L' });
    t.equal(r.status, 200);
    t.equal(r.json<DeviceJson>().name, 'new-name');
    t.equal(r.json<DeviceJson>().label, 'L');
    t.equal((await api('GET', '/api/tenant/devices?deviceName=old-name')).status, 404);
    t.equal((await api('GET', '/api/tenant/devices?deviceName=new-name')).json<DeviceJson>().id.id, d.id.id);
    t.equal((await api('POST', '/api/device', { name: 'old-name' })).status, 200, 'old name is free again');
    const clash = await api('POST', '/api/device', { id: d.id, name: 'old-name' });
    t.equal(clash.status, 400);
    t.equal(
      (await api('GET', `/api/device/${d.id.id}`)).json<DeviceJson>().name,
      'new-name',
      'unchanged after a failed update',
    );
  });

  await t.test('customers, assign and unassign devices', async (t) => {
    const c = await api('POST', '/api/customer', { title: 'Acme' });
    t.equal(c.status, 200);
    const cust = c.json<{ id: IdJson; title: string; name: string; tenantId: IdJson }>();
    t.equal(cust.id.entityType, 'CUSTOMER');
    t.equal(cust.title, 'Acme');
    t.equal(cust.name, 'Acme');
    t.same((await api('GET', `/api/customer/${cust.id.id}`)).json(), c.json());
    t.equal((await api('POST', '/api/customer', { title: 'Acme' })).status, 400, 'duplicate title');
    t.equal((await api('POST', '/api/customer', {})).status, 400, 'missing title');
    t.equal((await api('GET', `/api/customer/${UNKNOWN_ID}`)).status, 404);

    const d = (await api('POST', '/api/device', { name: 'assign-me' })).json<DeviceJson>();
    const assigned = await api('POST', `/api/customer/${cust.id.id}/device/${d.id.id}`);
    t.equal(assigned.status, 200);
    t.same(assigned.json<DeviceJson>().customerId, cust.id);
    t.same((await api('GET', `/api/device/${d.id.id}`)).json<DeviceJson>().customerId, cust.id);
    const list = (await api('GET', `/api/customer/${cust.id.id}/devices?pageSize=10&page=0`)).json<
      PageJson<DeviceJson>
    >();
    t.same(
      list.data.map((x) => x.id.id),
      [d.id.id],
    );
    t.equal(list.totalElements, 1);
    t.equal((await api('GET', `/api/customer/${cust.id.id}/devices`)).status, 400, 'paging required');

    t.equal((await api('POST', `/api/customer/${UNKNOWN_ID}/device/${d.id.id}`)).status, 404, 'unknown customer');
    t.equal((await api('POST', `/api/customer/${cust.id.id}/device/${UNKNOWN_ID}`)).status, 404, 'unknown device');
    t.equal((await api('POST', `/api/customer/${cust.id.id}/device/nope`)).status, 400, 'bad id');

    const un = await api('DELETE', `/api/customer/device/${d.id.id}`);
    t.equal(un.status, 200);
    t.same(un.json<DeviceJson>().customerId, { entityType: 'CUSTOMER', id: NULL_UUID });
    const again = await api('DELETE', `/api/customer/device/${d.id.id}`);
    t.equal(again.status, 400);
    t.equal(err(again).message, "Device isn't assigned to any customer!");
    t.same(
      (await api('GET', `/api/customer/${cust.id.id}/devices?pageSize=10&page=0`)).json<PageJson<DeviceJson>>().data,
      [],
    );

    const customers = (await api('GET', '/api/customers?pageSize=10&page=0')).json<PageJson<{ title: string }>>();
    t.ok(customers.data.some((x) => x.title === 'Acme'));
  });

  await t.test('assets: create, get, list, assign', async (t) => {
    const r = await api('POST', '/api/asset', { name: 'Building A', type: 'building' });
    t.equal(r.status, 200);
    const a = r.json<DeviceJson>();
    t.equal(a.id.entityType, 'ASSET');
    t.equal(a.type, 'building');
    t.same(a.customerId, { entityType: 'CUSTOMER', id: NULL_UUID });
    t.same((await api('GET', `/api/asset/${a.id.id}`)).json(), a);
    t.equal((await api('POST', '/api/asset', { name: 'Building A', type: 'building' })).status, 400, 'duplicate name');
    t.equal((await api('GET', `/api/asset/${UNKNOWN_ID}`)).status, 404);
    t.equal((await api('GET', `/api/device/${a.id.id}`)).status, 404, 'an asset id is no device');
    const page = (await api('GET', '/api/tenant/assets?pageSize=10&page=0')).json<PageJson<DeviceJson>>();
    t.same(
      page.data.map((x) => x.name),
      ['Building A'],
    );
    t.equal((await api('GET', '/api/tenant/assets?assetName=Building%20A')).json<DeviceJson>().id.id, a.id.id);

    const cust = await cliJson(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'AssetCo']);
    const as = await api('POST', `/api/customer/${cust['id']}/asset/${a.id.id}`);
    t.equal(as.status, 200);
    t.equal(as.json<DeviceJson>().customerId.id, cust['id']);
    t.same(
      (await api('GET', `/api/customer/${cust['id']}/assets?pageSize=10&page=0`))
        .json<PageJson<DeviceJson>>()
        .data.map((x) => x.id.id),
      [a.id.id],
    );
    t.equal((await api('DELETE', `/api/customer/asset/${a.id.id}`)).status, 200);
    t.equal(
      err(await api('DELETE', `/api/customer/asset/${a.id.id}`)).message,
      "Asset isn't assigned to any customer!",
    );
    t.equal((await api('DELETE', `/api/asset/${a.id.id}`)).status, 200);
    t.equal((await api('GET', `/api/asset/${a.id.id}`)).status, 404);
  });

  await t.test('delete device: gone, token dead, name free', async (t) => {
    const d = (await api('POST', '/api/device?accessToken=DEL_TOKEN', { name: 'doomed' })).json<DeviceJson>();
    t.equal((await http('POST', `${gw.url}/api/v1/DEL_TOKEN/telemetry`, { a: 1 })).status, 200);
    const del = await api('DELETE', `/api/device/${d.id.id}`);
    t.equal(del.status, 200);
    t.equal(del.text, '');
    t.equal((await api('GET', `/api/device/${d.id.id}`)).status, 404);
    t.equal((await http('POST', `${gw.url}/api/v1/DEL_TOKEN/telemetry`, { a: 1 })).status, 401);
    t.equal(
      (await api('POST', '/api/device?accessToken=DEL_TOKEN', { name: 'doomed' })).status,
      200,
      'name and token reusable',
    );
  });

  await t.test('delete customer: devices unassigned, its users gone', async (t) => {
    const cust = (await api('POST', '/api/customer', { title: 'Shortlived' })).json<{ id: IdJson }>();
    const d = (await api('POST', '/api/device', { name: 'kept-device' })).json<DeviceJson>();
    t.equal((await api('POST', `/api/customer/${cust.id.id}/device/${d.id.id}`)).status, 200);
    await addUser(gw.dataDir, 'short@example.com', 'pw', 'CUSTOMER_USER', cust.id.id);
    const u = await login(gw, 'short@example.com', 'pw');
    t.equal(
      (await http('GET', `${gw.url}/api/device/${d.id.id}`, undefined, authHeaders(u.token))).status,
      200,
      'cached before deletion',
    );
    t.equal((await api('DELETE', `/api/customer/${cust.id.id}`)).status, 200);
    t.equal((await api('GET', `/api/customer/${cust.id.id}`)).status, 404);
    t.same((await api('GET', `/api/device/${d.id.id}`)).json<DeviceJson>().customerId.id, NULL_UUID);
    t.equal(
      (await http('GET', `${gw.url}/api/device/${d.id.id}`, undefined, authHeaders(u.token))).status,
      401,
      'deleted user token rejected',
    );
    t.equal(
      (await http('POST', `${gw.url}/api/auth/login`, { username: 'short@example.com', password: 'pw' })).status,
      401,
    );
  });
});

t.test('pageOf: TB PageLink semantics (unit)', async (t) => {
  const { pageOf } = await import('../../src/store/entities.js');
  const items = [
    { id: 'b', createdTime: 2, name: 'beta', type: 'x' },
    { id: 'a', createdTime: 1, name: 'Alpha', type: 'y' },
    { id: 'c', createdTime: 3, name: 'gamma', type: 'x' },
    { id: 'd', createdTime: 3, name: 'alphabet', type: 'x' },
  ];
  const names = (p: { data: Array<{ name: string }> }): string[] => p.data.map((x) => x.name);
  const cases: Array<[string, Parameters<typeof pageOf>[1], string[], number, number, boolean]> = [
    ['creation order, ties by id', { pageSize: 10, page: 0 }, ['Alpha', 'beta', 'gamma', 'alphabet'], 4, 1, false],
    ['first page', { pageSize: 3, page: 0 }, ['Alpha', 'beta', 'gamma'], 4, 2, true],
    ['last partial page', { pageSize: 3, page: 1 }, ['alphabet'], 4, 2, false],
    ['past the end', { pageSize: 3, page: 7 }, [], 4, 2, false],
    [
      'textSearch is a case-insensitive substring',
      { pageSize: 10, page: 0, textSearch: 'ALPHA' },
      ['Alpha', 'alphabet'],
      2,
      1,
      false,
    ],
    ['no match', { pageSize: 10, page: 0, textSearch: 'zzz' }, [], 0, 0, false],
    ['name DESC', { pageSize: 2, page: 0, sortProperty: 'name', sortOrder: 'DESC' }, ['gamma', 'beta'], 4, 2, true],
    [
      'type ASC, ties in creation order',
      { pageSize: 10, page: 0, sortProperty: 'type' },
      ['beta', 'gamma', 'alphabet', 'Alpha'],
      4,
      1,
      false,
    ],
  ];
  for (const [name, q, want, total, pages, hasNext] of cases) {
    const p = pageOf(items, q);
    t.same(names(p), want, name);
    t.equal(p.totalElements, total, `${name}: totalElements`);
    t.equal(p.totalPages, pages, `${name}: totalPages`);
    t.equal(p.hasNext, hasNext, `${name}: hasNext`);
  }
});
