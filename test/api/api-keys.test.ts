/**
 * API keys as ThingsBoard 4.3 (docs/api.md "API keys"), black-box: the endpoints with TB's JSON, roles and errors;
 * a key's value shown once and stored only as its SHA-256; `X-Authorization: ApiKey` (or `Authorization` when
 * X-Authorization is absent) acting as the key's user on REST, the websocket and CSV downloads; disabled,
 * deleted, expired keys and deleted users' keys refused at once with TB's 401s.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { type HttpResult, addDevice, cli, cliJson, http, startGateway } from '../helpers/server.js';
import { addUser, authHeaders, login } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';
import { WsClient, type WsReply, wsUrl } from '../helpers/ws.js';

interface KeyJson {
  id: { entityType: string; id: string };
  createdTime: number;
  tenantId: { entityType: string; id: string };
  userId: { entityType: string; id: string };
  expirationTime: number;
  description: string;
  enabled: boolean;
  expired: boolean;
  value?: string | null;
}
interface TbError {
  status: number;
  message: string;
  errorCode: number;
}

const gw = await startGateway(t);
const admin = await addUser(gw.dataDir, 'admin@keys.test', 'pw-admin', 'TENANT_ADMIN');
const adminH = authHeaders((await login(gw, admin.email, 'pw-admin')).token);
const customerA = (await cliJson(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'A'])).id as string;
const customerB = (await cliJson(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'B'])).id as string;
const a1 = await addUser(gw.dataDir, 'a1@keys.test', 'pw-a1', 'CUSTOMER_USER', customerA);
const a2 = await addUser(gw.dataDir, 'a2@keys.test', 'pw-a2', 'CUSTOMER_USER', customerA);
const b = await addUser(gw.dataDir, 'b@keys.test', 'pw-b', 'CUSTOMER_USER', customerB);
const a1H = authHeaders((await login(gw, a1.email, 'pw-a1')).token);
const devA = await addDevice(gw.dataDir, 'dev-of-a', ['--customer', 'A']);
const devT = await addDevice(gw.dataDir, 'dev-of-tenant');
for (const d of [devA, devT]) {
  const r = await http('POST', `${gw.url}/api/v1/${d.token}/telemetry`, { ts: 1000, values: { t: 21.5 } });
  if (r.status !== 200) throw new Error(`post ${r.status}`);
}

const api = (method: string, path: string, headers: Record<string, string>, body?: unknown): Promise<HttpResult> =>
  http(method, `${gw.url}${path}`, body as object | string | undefined, headers);
const keyH = (value: string): Record<string, string> => ({ 'X-Authorization': `ApiKey ${value}` });
const userRef = (id: string): { entityType: string; id: string } => ({ entityType: 'USER', id });

async function createKey(
  headers: Record<string, string>,
  userId: string,
  extra: Record<string, unknown> = {},
): Promise<KeyJson & { value: string }> {
  const r = await api('POST', '/api/apiKey', headers, {
    description: 'test key',
    enabled: true,
    userId: userRef(userId),
    ...extra,
  });
  if (r.status !== 200) throw new Error(`create key ${r.status} ${r.text}`);
  return r.json<KeyJson & { value: string }>();
}

/** How `/api/ws` closes a socket that authenticates with this key. */
async function wsRefusal(value: string): Promise<{ code: number; reason: string }> {
  const ws = await WsClient.connect(wsUrl(gw, '/api/ws'));
  ws.send({ authCmd: { cmdId: 0, apiKey: value }, cmds: [] });
  return ws.waitClosed();
}

function refused(t: Test, r: HttpResult, status: number, message: string, errorCode: number, what: string): void {
  t.equal(r.status, status, `${what}: ${status}`);
  const e = r.json<TbError>();
  t.same({ status: e.status, message: e.message, errorCode: e.errorCode }, { status, message, errorCode }, what);
}

t.test('create: the value once, TB JSON, stored only as a hash', async (t) => {
  const before = Date.now();
  const k = await createKey(adminH, admin.id, { description: 'n8n' });
  t.match(k.value, /^tb_[A-Za-z0-9_-]{86}$/, 'tb_ + 86 base64url characters');
  t.same(Object.keys(k), [
    'id',
    'createdTime',
    'tenantId',
    'userId',
    'expirationTime',
    'description',
    'enabled',
    'expired',
    'value',
  ]);
  t.equal(k.id.entityType, 'API_KEY');
  t.equal(k.tenantId.entityType, 'TENANT');
  t.same(k.userId, userRef(admin.id));
  t.ok(k.createdTime >= before);
  t.same([k.expirationTime, k.description, k.enabled, k.expired], [0, 'n8n', true, false]);

  const list = await api('GET', `/api/apiKeys/${admin.id}?pageSize=10&page=0`, adminH);
  t.equal(list.status, 200);
  const page = list.json<{ data: KeyJson[]; totalElements: number; totalPages: number; hasNext: boolean }>();
  const listed = page.data.find((x) => x.id.id === k.id.id);
  t.ok(listed, 'listed');
  t.notOk(listed && 'value' in listed, 'the list never carries the value');

  const file = readFileSync(join(gw.dataDir, 'outpost.mdb'));
  t.notOk(file.includes(Buffer.from(k.value)), 'the value is not in the store');
  t.ok(file.includes(Buffer.from(createHash('sha256').update(k.value).digest('hex'))), 'its SHA-256 is');
});

t.test('a key acts as its user: REST, CSV, websocket', async (t) => {
  const k = await createKey(adminH, admin.id);
  const me = await api('GET', '/api/auth/user', keyH(k.value));
  t.equal(me.status, 200);
  t.equal(me.json<{ email: string }>().email, admin.email, 'GET /api/auth/user answers the key user');
  t.equal((await api('GET', '/api/auth/user', { Authorization: `ApiKey ${k.value}` })).status, 200, 'Authorization');
  refused(
    t,
    await api('GET', '/api/auth/user', { 'X-Authorization': 'Bearer nope', Authorization: `ApiKey ${k.value}` }),
    401,
    'Invalid username or password',
    10,
    'X-Authorization wins over Authorization',
  );
  refused(
    t,
    await api('GET', '/api/auth/user', { 'X-Authorization': `apikey ${k.value}` }),
    401,
    'Authentication failed',
    10,
    'the prefix is case-sensitive',
  );
  refused(
    t,
    await api('GET', '/api/auth/user', keyH(`tb_${'A'.repeat(86)}`)),
    401,
    'Invalid username or password',
    10,
    'unknown key',
  );
  t.equal((await api('GET', '/api/tenant/devices?pageSize=10&page=0', keyH(k.value))).status, 200, 'tenant list');

  const csv = await api(
    'GET',
    `/api/download/deviceSeriesData?deviceId=${devT.id}&type=ts&startValue=0&endValue=5000`,
    { Authorization: `ApiKey ${k.value}` },
  );
  t.equal(csv.status, 200);
  t.equal(csv.text, 'ts,t\n1000,21.5\n', 'CSV download');

  const ws = await WsClient.connect(wsUrl(gw, '/api/ws'));
  t.teardown(() => ws.terminate());
  ws.send({
    authCmd: { cmdId: 0, apiKey: k.value },
    cmds: [{ type: 'TIMESERIES', cmdId: 1, entityType: 'DEVICE', entityId: devT.id, keys: 't' }],
  });
  const first = await ws.nextJson<WsReply>();
  t.same([first.errorCode, first.data], [0, { t: [[1000, '21.5']] }], 'websocket authCmd.apiKey');

  const bad = await WsClient.connect(wsUrl(gw, '/api/ws'));
  bad.send({ authCmd: { cmdId: 0, apiKey: 'tb_nope' }, cmds: [] });
  t.same(await bad.waitClosed(), { code: 1007, reason: 'Invalid username or password' }, 'a bad key closes 1007');

  t.equal((await api('POST', '/api/auth/logout', keyH(k.value))).status, 200, 'logout with a key');
  t.equal((await api('GET', '/api/auth/user', keyH(k.value))).status, 200, 'a key has no session to end');
});

t.test("a customer user's key reaches what the user can", async (t) => {
  const k = await createKey(a1H, a1.id);
  const h = keyH(k.value);
  t.equal((await api('GET', `/api/device/${devA.id}`, h)).status, 200, 'its customer device');
  refused(
    t,
    await api('GET', `/api/device/${devT.id}`, h),
    403,
    "You don't have permission to perform this operation!",
    20,
    "the tenant's device",
  );
  t.equal((await api('GET', '/api/tenant/devices?pageSize=10&page=0', h)).status, 403, 'tenant list');
  const csv = `/api/download/deviceSeriesData?deviceId=${devT.id}&type=ts&startValue=0&endValue=5000`;
  t.equal((await api('GET', csv, { Authorization: `ApiKey ${k.value}` })).status, 403, 'CSV of another');
  const ws = await WsClient.connect(wsUrl(gw, '/api/ws'));
  t.teardown(() => ws.terminate());
  ws.send({
    authCmd: { cmdId: 0, apiKey: k.value },
    cmds: [{ type: 'TIMESERIES', cmdId: 1, entityType: 'DEVICE', entityId: devT.id, keys: 't' }],
  });
  t.equal((await ws.nextJson<WsReply>()).errorCode, 1, 'websocket: no access to the tenant device');
});

t.test('who may create and list keys for whom', async (t) => {
  const deny = "You don't have permission to perform this operation!";
  const body = (userId: string): Record<string, unknown> => ({
    description: 'x',
    enabled: true,
    userId: userRef(userId),
  });
  refused(t, await api('POST', '/api/apiKey', a1H, body(a2.id)), 403, deny, 20, 'customer user for a fellow user');
  refused(t, await api('POST', '/api/apiKey', a1H, body(admin.id)), 403, deny, 20, 'customer user for the admin');
  t.equal((await api('POST', '/api/apiKey', adminH, body(a2.id))).status, 200, 'tenant admin for a customer user');
  t.equal((await api('GET', `/api/apiKeys/${a2.id}?pageSize=5&page=0`, a1H)).status, 200, 'lists a fellow user');
  refused(t, await api('GET', `/api/apiKeys/${b.id}?pageSize=5&page=0`, a1H), 403, deny, 20, "another customer's");
  refused(t, await api('GET', `/api/apiKeys/${admin.id}?pageSize=5&page=0`, a1H), 403, deny, 20, "the admin's");
  const unknown = '0b1c2d3e-0000-4000-8000-00000000abcd';
  refused(
    t,
    await api('POST', '/api/apiKey', adminH, body(unknown)),
    404,
    `User with id [${unknown}] is not found`,
    32,
    'unknown user',
  );
  refused(
    t,
    await api('POST', '/api/apiKey', adminH, { enabled: true, userId: userRef(admin.id) }),
    400,
    'Validation error: description must not be blank',
    31,
    'no description',
  );
  t.equal((await api('GET', `/api/apiKeys/${admin.id}?page=0`, adminH)).status, 400, 'pageSize is required');
  t.equal((await api('POST', '/api/apiKey', {}, body(admin.id))).status, 401, 'no credentials');
});

t.test('paging, text search and sorting of a user list', async (t) => {
  const u = await addUser(gw.dataDir, 'pager@keys.test', 'pw-p', 'TENANT_ADMIN');
  for (const d of ['beta', 'alpha', 'gamma']) await createKey(adminH, u.id, { description: d });
  const page = (q: string): Promise<{ data: KeyJson[]; totalPages: number; totalElements: number; hasNext: boolean }> =>
    api('GET', `/api/apiKeys/${u.id}?${q}`, adminH).then((r) => r.json());
  const p0 = await page('pageSize=2&page=0');
  t.same(
    [p0.data.map((k) => k.description), p0.totalPages, p0.totalElements, p0.hasNext],
    [['beta', 'alpha'], 2, 3, true],
  );
  const sorted = await page('pageSize=5&page=0&sortProperty=description&sortOrder=DESC');
  t.same(
    sorted.data.map((k) => k.description),
    ['gamma', 'beta', 'alpha'],
  );
  const found = await page('pageSize=5&page=0&textSearch=AMM');
  t.same(
    found.data.map((k) => k.description),
    ['gamma'],
  );
  t.equal((await api('GET', `/api/apiKeys/${u.id}?pageSize=5&page=0&sortProperty=value`, adminH)).status, 400);
});

t.test('disable, enable, describe, update, delete: at once', async (t) => {
  const k = await createKey(adminH, admin.id);
  const h = keyH(k.value);
  const ws = await WsClient.connect(wsUrl(gw, '/api/ws'));
  t.teardown(() => ws.terminate());
  ws.send({
    authCmd: { cmdId: 0, apiKey: k.value },
    cmds: [{ type: 'TIMESERIES', cmdId: 1, entityType: 'DEVICE', entityId: devT.id, keys: 't' }],
  });
  t.equal((await ws.nextJson<WsReply>()).errorCode, 0, 'subscribed with the key');
  t.equal((await api('GET', '/api/auth/user', h)).status, 200, 'works (and its lookup is cached)');

  const off = await api('PUT', `/api/apiKey/${k.id.id}/enabled/false`, adminH);
  t.equal(off.status, 200);
  t.same([off.json<KeyJson>().enabled, 'value' in off.json<KeyJson>()], [false, false], 'ApiKeyInfo, disabled');
  refused(t, await api('GET', '/api/auth/user', h), 401, 'User account is not active', 10, 'disabled');
  t.same(await ws.waitClosed(), { code: 1008, reason: 'Token has expired' }, "the key's websocket is closed");
  refused(
    t,
    await api('GET', '/api/tenant/devices?pageSize=1&page=0', h),
    401,
    'User account is not active',
    10,
    'REST',
  );
  refused(
    t,
    await api('GET', `/api/download/deviceSeriesData?deviceId=${devT.id}&type=ts&startValue=0&endValue=5000`, {
      Authorization: `ApiKey ${k.value}`,
    }),
    401,
    'User account is not active',
    10,
    'CSV',
  );
  t.same(await wsRefusal(k.value), { code: 1007, reason: 'User account is not active' }, 'a new websocket');

  t.equal((await api('PUT', `/api/apiKey/${k.id.id}/enabled/true`, adminH)).status, 200);
  t.equal((await api('GET', '/api/auth/user', h)).status, 200, 'enabled again');
  t.equal((await api('PUT', `/api/apiKey/${k.id.id}/enabled/maybe`, adminH)).status, 400, 'enabled/maybe');

  const described = await api('PUT', `/api/apiKey/${k.id.id}/description`, adminH, 'for the n8n flow');
  t.equal(described.status, 200);
  t.equal(described.json<KeyJson>().description, 'for the n8n flow', 'the raw body is the description');

  const updated = await api('POST', '/api/apiKey', adminH, { ...k, value: undefined, description: 'renamed' });
  t.equal(updated.status, 200);
  t.same([updated.json<KeyJson>().description, updated.json<KeyJson>().value], ['renamed', null], 'update: value null');
  refused(
    t,
    await api('POST', '/api/apiKey', adminH, { ...k, value: undefined, userId: userRef(a1.id) }),
    400,
    'Cannot update API key user id!',
    31,
    'user id is fixed',
  );
  refused(
    t,
    await api('POST', '/api/apiKey', adminH, { ...k, value: undefined, expirationTime: Date.now() + 60_000 }),
    400,
    'Cannot update API key expiration time!',
    31,
    'expiration time is fixed',
  );
  refused(
    t,
    await api('PUT', `/api/apiKey/${k.id.id}/enabled/false`, a1H),
    403,
    "You don't have permission to perform this operation!",
    20,
    "a customer user on the admin's key",
  );

  const del = await api('DELETE', `/api/apiKey/${k.id.id}`, adminH);
  t.same([del.status, del.text], [200, ''], 'deleted: 200, empty');
  refused(t, await api('GET', '/api/auth/user', h), 401, 'Invalid username or password', 10, 'deleted');
  t.same(await wsRefusal(k.value), { code: 1007, reason: 'Invalid username or password' }, 'deleted: websocket');
  refused(
    t,
    await api('DELETE', `/api/apiKey/${k.id.id}`, adminH),
    404,
    `Api key with id [${k.id.id}] is not found`,
    32,
    'deleted twice',
  );
});

t.test('enabled omitted: a disabled key, as TB', async (t) => {
  const r = await api('POST', '/api/apiKey', adminH, { description: 'off', userId: userRef(admin.id) });
  const k = r.json<KeyJson & { value: string }>();
  t.equal(k.enabled, false);
  refused(t, await api('GET', '/api/auth/user', keyH(k.value)), 401, 'User account is not active', 10, 'disabled');
});

t.test('expired keys', async (t) => {
  const past = await createKey(adminH, admin.id, { expirationTime: Date.now() - 1000 });
  t.equal(past.expired, true);
  refused(t, await api('GET', '/api/auth/user', keyH(past.value)), 401, 'API key is expired', 10, 'already expired');
  refused(
    t,
    await api('GET', `/api/download/deviceAttributesData?deviceId=${devT.id}`, {
      Authorization: `ApiKey ${past.value}`,
    }),
    401,
    'API key is expired',
    10,
    'CSV',
  );
  t.same(await wsRefusal(past.value), { code: 1007, reason: 'API key is expired' }, 'websocket');

  const expiresAt = Date.now() + 3000;
  const soon = await createKey(adminH, admin.id, { expirationTime: expiresAt });
  const h = keyH(soon.value);
  const before = await api('GET', '/api/auth/user', h);
  t.equal(before.status, Date.now() < expiresAt ? 200 : 401, 'works until it expires');
  // expiry is checked per request, on the cached lookup too: wait for the first refusal, bounded
  let r = before;
  while (r.status === 200 && Date.now() < expiresAt + 10_000) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    r = await api('GET', '/api/auth/user', h);
  }
  refused(t, r, 401, 'API key is expired', 10, 'expired while in use');
  t.ok(Date.now() >= expiresAt, 'refused only once past its expiration time');
});

t.test("a deleted user's keys stop at once", async (t) => {
  const k = await createKey(adminH, a2.id);
  t.equal((await api('GET', `/api/device/${devA.id}`, keyH(k.value))).status, 200);
  const del = await cli(['user', 'delete', '--data-dir', gw.dataDir, '--email', a2.email, '--yes']);
  t.equal(del.code, 0, del.stderr);
  refused(
    t,
    await api('GET', `/api/device/${devA.id}`, keyH(k.value)),
    401,
    'Invalid username or password',
    10,
    'gone',
  );
  // then removed with the user's other data, in the background (a bounded wait on the data dir's list)
  const listed = (): Promise<Array<{ id: { id: string } }>> =>
    cliJson<Array<{ id: { id: string } }>>(['apikey', 'list', '--data-dir', gw.dataDir, '--json']);
  await waitFor(async () => !(await listed()).some((x) => x.id.id === k.id.id), {
    timeout: 60_000,
    interval: 200,
    message: "the deleted user's key removed from the store",
  });
  t.pass("the deleted user's key is removed from the store");
});
