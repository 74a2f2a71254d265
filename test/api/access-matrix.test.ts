/**
 * The role × endpoint access matrix (docs/api.md), table-driven and black-box.
 *
 * Every user endpoint is a row; every row runs for seven callers:
 *   tenantAdmin      reaches everything of its tenant
 *   ownCustomer      customer user whose customer owns the device/asset: reads and writes data, no management
 *   otherCustomer    customer user of another customer: 403 on the same things
 *   noToken          401 errorCode 10 "Authentication failed"
 *   expired          a correctly signed token past `exp`: 401 errorCode 11 "Token has expired"
 *   tampered         payload changed (customer user claiming TENANT_ADMIN), old signature: 401 errorCode 11
 *   loggedOut        a token whose session was logged out: 401 errorCode 11
 * Unknown entities answer 404 for every authenticated caller. Rows of endpoints not
 * built yet stay in the table and are skipped while the route answers 404 "No endpoint ...".
 *
 * The websocket (docs/api.md) has its own table: a bad `?token=` closes the socket 1011; each command on an
 * entity the caller may not read answers errorCode 1. A session without a token waits for an `authCmd`
 * (TB's /api/ws protocol), so `noToken` is not a row there: test/api/ws/ws.test.ts covers it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { signJwt } from '../../src/auth/jwt.js';
import { type Gateway, type HttpResult, addDevice, cliJson, http, startGateway } from '../helpers/server.js';
import { addUser, login } from '../helpers/users.js';
import { WsClient } from '../helpers/ws.js';

const UNKNOWN_ID = '5e0f0000-0000-4000-8000-00000000abcd';
const ROLES = ['tenantAdmin', 'ownCustomer', 'otherCustomer', 'noToken', 'expired', 'tampered', 'loggedOut'] as const;
type Role = (typeof ROLES)[number];
type Status = 200 | 403 | 404;

interface Fixture {
  readonly gw: Gateway;
  /** customer A owns device D and asset S; customer B owns nothing */
  readonly customerA: string;
  readonly customerB: string;
  readonly deviceD: string;
  readonly deviceToken: string;
  readonly assetS: string;
  readonly tokens: Readonly<Record<Role, string | undefined>>;
  readonly passwords: Readonly<Record<'tenantAdmin' | 'ownCustomer' | 'otherCustomer', readonly [string, string]>>;
}

interface Row {
  readonly name: string;
  readonly method: 'GET' | 'POST' | 'DELETE';
  /** built per role, so destructive rows can act on a fresh entity each time */
  readonly path: (fx: Fixture, role: Role | 'probe') => string | Promise<string>;
  readonly body?: (fx: Fixture, role: Role | 'probe') => unknown;
  /** expected status for [tenantAdmin, ownCustomer, otherCustomer]; the four others always get 401 */
  readonly expect: readonly [Status, Status, Status];
  /** send the token as `Authorization: Bearer` (the downloads, docs/api.md) instead of X-Authorization */
  readonly authorizationHeader?: boolean;
  /** the row consumes the caller's session (logout): authenticated roles log in afresh for it */
  readonly freshLogin?: boolean;
  /** runs alongside the request, e.g. a device polling for the RPC; stopped when the request is answered */
  readonly alongside?: (fx: Fixture, signal: AbortSignal) => Promise<unknown>;
}

const T =
  (entity: string, id: (fx: Fixture) => string, rest: string) =>
  (fx: Fixture): string =>
    `/api/plugins/telemetry/${entity}/${id(fx)}/${rest}`;
const D = (fx: Fixture): string => fx.deviceD;
const S = (fx: Fixture): string => fx.assetS;
const U = (): string => UNKNOWN_ID;

let alarmSeq = 0;
/** An uncleared alarm on device D (customer A's), created as the tenant admin for one run of a row. */
async function freshAlarm(fx: Fixture, role: Role | 'probe'): Promise<string> {
  const headers = { 'X-Authorization': `Bearer ${fx.tokens.tenantAdmin ?? ''}` };
  const body = {
    type: `matrix-${role}-${++alarmSeq}`,
    severity: 'MAJOR',
    originator: { entityType: 'DEVICE', id: fx.deviceD },
  };
  const r = await http('POST', `${fx.gw.url}/api/alarm`, body, headers);
  if (r.status !== 200) throw new Error(`creating an alarm failed: ${r.text}`);
  return r.json<{ id: { id: string } }>().id.id;
}

/** A device assigned to customer A, created (through REST, as the tenant admin) for one run of a destructive row. */
async function freshDeviceOfA(fx: Fixture, role: Role | 'probe', tag: string): Promise<string> {
  const headers = { 'X-Authorization': `Bearer ${fx.tokens.tenantAdmin ?? ''}` };
  const created = await http('POST', `${fx.gw.url}/api/device`, { name: `${tag}-${role}` }, headers);
  if (created.status !== 200) throw new Error(`creating ${tag}-${role} failed: ${created.text}`);
  const id = created.json<{ id: { id: string } }>().id.id;
  const assigned = await http('POST', `${fx.gw.url}/api/customer/${fx.customerA}/device/${id}`, undefined, headers);
  if (assigned.status !== 200) throw new Error(`assigning ${tag}-${role} failed: ${assigned.text}`);
  return id;
}

const ROWS: readonly Row[] = [
  // ---- auth (docs/api.md)
  { name: 'GET /api/auth/user', method: 'GET', path: () => '/api/auth/user', expect: [200, 200, 200] },
  {
    name: 'POST /api/auth/logout',
    method: 'POST',
    path: () => '/api/auth/logout',
    expect: [200, 200, 200],
    freshLogin: true,
  },
  // ---- devices (docs/api.md)
  {
    name: 'POST /api/device (create)',
    method: 'POST',
    path: () => '/api/device',
    body: (_fx, role) => ({ name: `created-by-${role}` }),
    expect: [200, 403, 403],
  },
  {
    name: 'POST /api/device (update D)',
    method: 'POST',
    path: () => '/api/device',
    body: (fx) => ({ id: { entityType: 'DEVICE', id: fx.deviceD }, name: 'device-D', label: 'updated' }),
    expect: [200, 200, 403],
  },
  { name: 'GET /api/device/{D}', method: 'GET', path: (fx) => `/api/device/${fx.deviceD}`, expect: [200, 200, 403] },
  {
    name: 'GET /api/device/{unknown}',
    method: 'GET',
    path: () => `/api/device/${UNKNOWN_ID}`,
    expect: [404, 404, 404],
  },
  {
    name: 'GET /api/device/{D}/credentials',
    method: 'GET',
    path: (fx) => `/api/device/${fx.deviceD}/credentials`,
    expect: [200, 200, 403],
  },
  {
    name: 'DELETE /api/device/{fresh of A}',
    method: 'DELETE',
    path: async (fx, role) => `/api/device/${await freshDeviceOfA(fx, role, 'del')}`,
    expect: [200, 403, 403],
  },
  {
    name: 'DELETE /api/device/{unknown}',
    method: 'DELETE',
    path: () => `/api/device/${UNKNOWN_ID}`,
    expect: [404, 403, 403],
  },
  {
    name: 'GET /api/tenant/devices (page)',
    method: 'GET',
    path: () => '/api/tenant/devices?pageSize=10&page=0',
    expect: [200, 403, 403],
  },
  {
    name: 'GET /api/tenant/devices?deviceName',
    method: 'GET',
    path: () => '/api/tenant/devices?deviceName=device-D',
    expect: [200, 403, 403],
  },
  // ---- customers
  {
    name: 'POST /api/customer',
    method: 'POST',
    path: () => '/api/customer',
    body: (_fx, role) => ({ title: `customer-by-${role}` }),
    expect: [200, 403, 403],
  },
  {
    name: 'GET /api/customer/{A}',
    method: 'GET',
    path: (fx) => `/api/customer/${fx.customerA}`,
    expect: [200, 200, 403],
  },
  {
    name: 'GET /api/customer/{unknown}',
    method: 'GET',
    path: () => `/api/customer/${UNKNOWN_ID}`,
    expect: [404, 404, 404],
  },
  {
    name: 'GET /api/customers',
    method: 'GET',
    path: () => '/api/customers?pageSize=10&page=0',
    expect: [200, 403, 403],
  },
  {
    name: 'GET /api/tenant/customers?customerTitle',
    method: 'GET',
    path: () => '/api/tenant/customers?customerTitle=Customer%20A',
    expect: [200, 403, 403],
  },
  {
    name: 'GET /api/tenant/customers?customerTitle={unknown}',
    method: 'GET',
    path: () => '/api/tenant/customers?customerTitle=nobody',
    expect: [404, 403, 403],
  },
  {
    name: 'POST /api/device (create for customer A)',
    method: 'POST',
    path: () => '/api/device',
    body: (fx, role) => ({ name: `for-a-by-${role}`, customerId: { id: fx.customerA } }),
    expect: [200, 403, 403],
  },
  {
    name: 'GET /api/system/info',
    method: 'GET',
    path: () => '/api/system/info',
    expect: [200, 200, 200],
  },
  {
    name: 'GET /api/customer/{A}/devices',
    method: 'GET',
    path: (fx) => `/api/customer/${fx.customerA}/devices?pageSize=10&page=0`,
    expect: [200, 200, 403],
  },
  {
    name: 'GET /api/customer/{A}/assets',
    method: 'GET',
    path: (fx) => `/api/customer/${fx.customerA}/assets?pageSize=10&page=0`,
    expect: [200, 200, 403],
  },
  {
    name: 'POST /api/customer/{A}/device/{D}',
    method: 'POST',
    path: (fx) => `/api/customer/${fx.customerA}/device/${fx.deviceD}`,
    expect: [200, 403, 403],
  },
  {
    name: 'DELETE /api/customer/device/{fresh of A}',
    method: 'DELETE',
    path: async (fx, role) => `/api/customer/device/${await freshDeviceOfA(fx, role, 'unassign')}`,
    expect: [200, 403, 403],
  },
  // ---- assets
  {
    name: 'POST /api/asset',
    method: 'POST',
    path: () => '/api/asset',
    body: (_fx, role) => ({ name: `asset-by-${role}`, type: 'building' }),
    expect: [200, 403, 403],
  },
  { name: 'GET /api/asset/{S}', method: 'GET', path: (fx) => `/api/asset/${fx.assetS}`, expect: [200, 200, 403] },
  { name: 'GET /api/asset/{unknown}', method: 'GET', path: () => `/api/asset/${UNKNOWN_ID}`, expect: [404, 404, 404] },
  {
    name: 'GET /api/tenant/assets',
    method: 'GET',
    path: () => '/api/tenant/assets?pageSize=10&page=0',
    expect: [200, 403, 403],
  },
  {
    name: 'POST /api/customer/{A}/asset/{S}',
    method: 'POST',
    path: (fx) => `/api/customer/${fx.customerA}/asset/${fx.assetS}`,
    expect: [200, 403, 403],
  },
  // ---- relations and entity data queries (docs/api.md)
  {
    name: 'POST /api/v2/relation (S Contains D)',
    method: 'POST',
    path: () => '/api/v2/relation',
    body: (fx) => ({
      from: { entityType: 'ASSET', id: fx.assetS },
      to: { entityType: 'DEVICE', id: fx.deviceD },
      type: 'Contains',
    }),
    expect: [200, 200, 403],
  },
  {
    name: 'POST /api/v2/relation (unknown end)',
    method: 'POST',
    path: () => '/api/v2/relation',
    body: () => ({
      from: { entityType: 'DEVICE', id: UNKNOWN_ID },
      to: { entityType: 'DEVICE', id: UNKNOWN_ID },
      type: 'Contains',
    }),
    expect: [404, 404, 404],
  },
  {
    name: 'GET /api/relations?fromId={S}',
    method: 'GET',
    path: (fx) => `/api/relations?fromId=${fx.assetS}&fromType=ASSET`,
    expect: [200, 200, 403],
  },
  {
    name: 'GET /api/relations/info?toId={D}',
    method: 'GET',
    path: (fx) => `/api/relations/info?toId=${fx.deviceD}&toType=DEVICE`,
    expect: [200, 200, 403],
  },
  // ---- alarms (docs/api.md "Alarms"): an alarm on D belongs to customer A
  {
    name: 'POST /api/alarm (on D)',
    method: 'POST',
    path: () => '/api/alarm',
    body: (_fx, role) => ({
      type: `posted-by-${role}`,
      severity: 'MINOR',
      originator: { entityType: 'DEVICE', id: _fx.deviceD },
    }),
    expect: [200, 200, 403],
  },
  {
    name: 'POST /api/alarm (unknown originator)',
    method: 'POST',
    path: () => '/api/alarm',
    body: () => ({ type: 'x', severity: 'MINOR', originator: { entityType: 'DEVICE', id: UNKNOWN_ID } }),
    expect: [404, 404, 404],
  },
  {
    name: 'GET /api/alarm/{id}',
    method: 'GET',
    path: async (fx, r) => `/api/alarm/${await freshAlarm(fx, r)}`,
    expect: [200, 200, 403],
  },
  { name: 'GET /api/alarm/{unknown}', method: 'GET', path: () => `/api/alarm/${UNKNOWN_ID}`, expect: [404, 404, 404] },
  {
    name: 'GET /api/alarm/info/{id}',
    method: 'GET',
    path: async (fx, r) => `/api/alarm/info/${await freshAlarm(fx, r)}`,
    expect: [200, 200, 403],
  },
  {
    name: 'POST /api/alarm/{id}/ack',
    method: 'POST',
    path: async (fx, r) => `/api/alarm/${await freshAlarm(fx, r)}/ack`,
    expect: [200, 200, 403],
  },
  {
    name: 'POST /api/alarm/{id}/clear',
    method: 'POST',
    path: async (fx, r) => `/api/alarm/${await freshAlarm(fx, r)}/clear`,
    expect: [200, 200, 403],
  },
  {
    name: 'DELETE /api/alarm/{id}',
    method: 'DELETE',
    path: async (fx, r) => `/api/alarm/${await freshAlarm(fx, r)}`,
    expect: [200, 200, 403],
  },
  {
    name: 'GET /api/alarm/DEVICE/{D}',
    method: 'GET',
    path: (fx) => `/api/alarm/DEVICE/${fx.deviceD}?pageSize=10&page=0`,
    expect: [200, 200, 403],
  },
  {
    name: 'GET /api/v2/alarm/DEVICE/{D}',
    method: 'GET',
    path: (fx) => `/api/v2/alarm/DEVICE/${fx.deviceD}?pageSize=10&page=0`,
    expect: [200, 200, 403],
  },
  {
    name: 'GET /api/alarm/highestSeverity/DEVICE/{D}',
    method: 'GET',
    path: (fx) => `/api/alarm/highestSeverity/DEVICE/${fx.deviceD}`,
    expect: [200, 200, 403],
  },
  { name: 'GET /api/alarms', method: 'GET', path: () => '/api/alarms?pageSize=10&page=0', expect: [200, 200, 200] },
  {
    name: 'GET /api/v2/alarms',
    method: 'GET',
    path: () => '/api/v2/alarms?pageSize=10&page=0',
    expect: [200, 200, 200],
  },
  {
    name: 'GET /api/alarm/types',
    method: 'GET',
    path: () => '/api/alarm/types?pageSize=10&page=0',
    expect: [200, 200, 200],
  },
  {
    name: 'POST /api/entitiesQuery/find',
    method: 'POST',
    path: () => '/api/entitiesQuery/find',
    body: () => ({ entityFilter: { type: 'entityType', entityType: 'DEVICE' }, pageLink: { page: 0, pageSize: 10 } }),
    expect: [200, 200, 200],
  },
  {
    name: 'POST /api/entitiesQuery/count',
    method: 'POST',
    path: () => '/api/entitiesQuery/count',
    body: () => ({ entityFilter: { type: 'entityType', entityType: 'DEVICE' } }),
    expect: [200, 200, 200],
  },
  // ---- telemetry REST (docs/api.md)
  { name: 'GET keys/timeseries (D)', method: 'GET', path: T('DEVICE', D, 'keys/timeseries'), expect: [200, 200, 403] },
  {
    name: 'GET keys/timeseries (unknown)',
    method: 'GET',
    path: T('DEVICE', U, 'keys/timeseries'),
    expect: [404, 404, 404],
  },
  {
    name: 'GET keys/timeseries (asset S)',
    method: 'GET',
    path: T('ASSET', S, 'keys/timeseries'),
    expect: [200, 200, 403],
  },
  {
    name: 'GET values/timeseries latest (D)',
    method: 'GET',
    path: T('DEVICE', D, 'values/timeseries?keys=temperature'),
    expect: [200, 200, 403],
  },
  {
    name: 'GET values/timeseries history (D)',
    method: 'GET',
    path: T('DEVICE', D, 'values/timeseries?keys=temperature&startTs=0&endTs=100000'),
    expect: [200, 200, 403],
  },
  {
    name: 'GET values/timeseries/history (D)',
    method: 'GET',
    path: T('DEVICE', D, 'values/timeseries/history?keys=temperature&startTs=0&endTs=100000'),
    expect: [200, 200, 403],
  },
  {
    name: 'POST timeseries/ANY (D)',
    method: 'POST',
    path: T('DEVICE', D, 'timeseries/ANY'),
    body: () => ({ matrix: 1 }),
    expect: [200, 200, 403],
  },
  {
    name: 'POST timeseries/ANY (asset S)',
    method: 'POST',
    path: T('ASSET', S, 'timeseries/ANY'),
    body: () => ({ matrix: 1 }),
    expect: [200, 200, 403],
  },
  {
    name: 'DELETE timeseries/delete (D)',
    method: 'DELETE',
    path: T('DEVICE', D, 'timeseries/delete?keys=nothing&deleteAllDataForKeys=true'),
    expect: [200, 200, 403],
  },
  { name: 'GET keys/attributes (D)', method: 'GET', path: T('DEVICE', D, 'keys/attributes'), expect: [200, 200, 403] },
  {
    name: 'GET values/attributes (D)',
    method: 'GET',
    path: T('DEVICE', D, 'values/attributes'),
    expect: [200, 200, 403],
  },
  {
    name: 'GET values/attributes (unknown)',
    method: 'GET',
    path: T('DEVICE', U, 'values/attributes'),
    expect: [404, 404, 404],
  },
  {
    name: 'POST attributes/SERVER_SCOPE (D)',
    method: 'POST',
    path: T('DEVICE', D, 'attributes/SERVER_SCOPE'),
    body: () => ({ matrix: 1 }),
    expect: [200, 200, 403],
  },
  {
    name: 'DELETE SERVER_SCOPE (D)',
    method: 'DELETE',
    path: T('DEVICE', D, 'SERVER_SCOPE?keys=nothing'),
    expect: [200, 200, 403],
  },
  {
    name: 'GET keys/depthseries (D)',
    method: 'GET',
    path: T('DEVICE', D, 'keys/depthseries'),
    expect: [200, 200, 403],
  },
  {
    name: 'GET values/depthseries (D)',
    method: 'GET',
    path: T('DEVICE', D, 'values/depthseries?keys=depthKey'),
    expect: [200, 200, 403],
  },
  // ---- server-side RPC (docs/api.md): the device polls while the one-way call waits for delivery
  {
    name: 'POST /api/plugins/rpc/oneway/{D}',
    method: 'POST',
    path: (fx) => `/api/plugins/rpc/oneway/${fx.deviceD}`,
    body: () => ({ method: 'matrix', params: {}, timeout: 20000 }),
    expect: [200, 200, 403],
    alongside: (fx, signal) =>
      fetch(`${fx.gw.url}/api/v1/${fx.deviceToken}/rpc?timeout=20000`, { signal }).then((r) => r.text()),
  },
  {
    name: 'POST /api/plugins/rpc/twoway/{unknown}',
    method: 'POST',
    path: () => `/api/plugins/rpc/twoway/${UNKNOWN_ID}`,
    body: () => ({ method: 'x', params: {} }),
    expect: [404, 404, 404],
  },
  { name: 'GET /api/outpost/status', method: 'GET', path: () => '/api/outpost/status', expect: [200, 403, 403] },
  // ---- CSV downloads (docs/api.md), token in Authorization
  {
    name: 'GET /api/download/deviceSeriesData (D)',
    method: 'GET',
    path: (fx) => `/api/download/deviceSeriesData?deviceId=${fx.deviceD}&type=ts&startValue=0&endValue=100000`,
    expect: [200, 200, 403],
    authorizationHeader: true,
  },
  {
    name: 'GET /api/download/deviceSeriesData (unknown)',
    method: 'GET',
    path: () => `/api/download/deviceSeriesData?deviceId=${UNKNOWN_ID}&type=ts&startValue=0&endValue=1`,
    expect: [404, 404, 404],
    authorizationHeader: true,
  },
  {
    name: 'GET /api/download/deviceAttributesData (D)',
    method: 'GET',
    path: (fx) => `/api/download/deviceAttributesData?deviceId=${fx.deviceD}`,
    expect: [200, 200, 403],
    authorizationHeader: true,
  },
];

const AUTHENTICATED = ['tenantAdmin', 'ownCustomer', 'otherCustomer'] as const;

function expected(row: Row, role: Role): { status: number; errorCode?: number } {
  const i = (AUTHENTICATED as readonly string[]).indexOf(role);
  if (i >= 0) {
    const status = row.expect[i] as Status;
    return status === 200 ? { status } : { status, errorCode: status === 403 ? 20 : 32 };
  }
  return { status: 401, errorCode: role === 'noToken' ? 10 : 11 };
}

async function send(fx: Fixture, row: Row, role: Role): Promise<HttpResult> {
  let token = fx.tokens[role];
  if (row.freshLogin && (AUTHENTICATED as readonly string[]).includes(role)) {
    const [email, password] = fx.passwords[role as (typeof AUTHENTICATED)[number]];
    token = (await login(fx.gw, email, password)).token;
  }
  const headers: Record<string, string> = {};
  if (token !== undefined) headers[row.authorizationHeader ? 'Authorization' : 'X-Authorization'] = `Bearer ${token}`;
  const path = await row.path(fx, role);
  const body = row.body?.(fx, role);
  const abort = new AbortController();
  const side = row.alongside?.(fx, abort.signal).catch(() => undefined);
  try {
    return await http(row.method, `${fx.gw.url}${path}`, body as object | undefined, headers);
  } finally {
    abort.abort();
    await side;
  }
}

async function setup(t: Test): Promise<Fixture> {
  const gw = await startGateway(t);
  const dir = gw.dataDir;
  const a = await cliJson(['customer', 'add', '--data-dir', dir, '--title', 'Customer A']);
  const b = await cliJson(['customer', 'add', '--data-dir', dir, '--title', 'Customer B']);
  const passwords = {
    tenantAdmin: ['admin@matrix.test', 'pw-admin'],
    ownCustomer: ['a@matrix.test', 'pw-a'],
    otherCustomer: ['b@matrix.test', 'pw-b'],
  } as const;
  await addUser(dir, ...passwords.tenantAdmin, 'TENANT_ADMIN');
  await addUser(dir, ...passwords.ownCustomer, 'CUSTOMER_USER', 'Customer A');
  await addUser(dir, ...passwords.otherCustomer, 'CUSTOMER_USER', 'Customer B');
  const device = await addDevice(dir, 'device-D', ['--customer', 'Customer A', '--token', 'MATRIX_DEVICE_TOKEN']);

  const admin = await login(gw, ...passwords.tenantAdmin);
  const own = await login(gw, ...passwords.ownCustomer);
  const other = await login(gw, ...passwords.otherCustomer);
  const adminHeaders = { 'X-Authorization': `Bearer ${admin.token}` };
  const asset = await http('POST', `${gw.url}/api/asset`, { name: 'asset-S', type: 'building' }, adminHeaders);
  if (asset.status !== 200) throw new Error(`creating the asset failed: ${asset.text}`);
  const assetS = asset.json<{ id: { id: string } }>().id.id;
  const assigned = await http('POST', `${gw.url}/api/customer/${a['id']}/asset/${assetS}`, undefined, adminHeaders);
  if (assigned.status !== 200) throw new Error(`assigning the asset failed: ${assigned.text}`);

  // expired: correctly signed with this install's key, valid claims, exp in the past
  const key = Buffer.from(readFileSync(join(dir, 'jwt.key'), 'utf8').trim(), 'base64');
  const [, payload = '', signature = ''] = own.token.split('.');
  const ownClaims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
  const past = Math.floor(Date.now() / 1000) - 20_000;
  const expired = signJwt({ ...ownClaims, iat: past, exp: past + 9000 }, key);
  // tampered: the customer user promotes itself, keeping the original signature
  const header = own.token.split('.')[0] ?? '';
  const promoted = Buffer.from(JSON.stringify({ ...ownClaims, scopes: ['TENANT_ADMIN'] })).toString('base64url');
  const tampered = `${header}.${promoted}.${signature}`;
  // logged out: a session of the tenant admin that has ended
  const gone = await login(gw, ...passwords.tenantAdmin);
  const out = await http('POST', `${gw.url}/api/auth/logout`, undefined, { 'X-Authorization': `Bearer ${gone.token}` });
  if (out.status !== 200) throw new Error(`logout failed: ${out.status} ${out.text}`);

  return {
    gw,
    customerA: a['id'] as string,
    customerB: b['id'] as string,
    deviceD: device.id,
    deviceToken: device.token,
    assetS,
    passwords,
    tokens: {
      tenantAdmin: admin.token,
      ownCustomer: own.token,
      otherCustomer: other.token,
      noToken: undefined,
      expired,
      tampered,
      loggedOut: gone.token,
    },
  };
}

// One fixture for both tables: starting a gateway and creating users (scrypt) is the slow part.
const fx = await setup(t);

t.test('access matrix: endpoint × role', async (t) => {
  for (const row of ROWS) {
    // Guard for endpoints of issues not built yet: the route itself is missing.
    const probe = await http(row.method, `${fx.gw.url}${await row.path(fx, 'probe')}`);
    if (probe.status === 404 && probe.text.includes('No endpoint')) {
      await t.test(row.name, { skip: 'not implemented yet (404 No endpoint)' }, async () => undefined);
      continue;
    }
    await t.test(row.name, async (t) => {
      for (const role of ROLES) {
        const want = expected(row, role);
        const r = await send(fx, row, role);
        t.equal(
          r.status,
          want.status,
          `${role} → ${want.status}${r.status === want.status ? '' : ` (got ${r.text.slice(0, 200)})`}`,
        );
        if (want.errorCode !== undefined && r.status === want.status) {
          const err = r.json<{ status: number; errorCode: number; message: string }>();
          t.equal(err.errorCode, want.errorCode, `${role} errorCode ${want.errorCode}`);
          t.equal(err.status, want.status);
          if (want.status === 403) t.equal(err.message, "You don't have permission to perform this operation!");
          if (want.status === 401 && role !== 'noToken') t.equal(err.message, 'Token has expired');
        }
      }
    });
  }

  await t.test('refused callers created nothing', async (t) => {
    const adminHeaders = { 'X-Authorization': `Bearer ${fx.tokens.tenantAdmin ?? ''}` };
    for (const role of ROLES) {
      const lookup = await http(
        'GET',
        `${fx.gw.url}/api/tenant/devices?deviceName=created-by-${role}`,
        undefined,
        adminHeaders,
      );
      t.equal(
        lookup.status,
        role === 'tenantAdmin' ? 200 : 404,
        `device created by ${role}: ${role === 'tenantAdmin' ? 'yes' : 'no'}`,
      );
      const customer = await http(
        'GET',
        `${fx.gw.url}/api/customers?pageSize=100&page=0&textSearch=customer-by-${role}`,
        undefined,
        adminHeaders,
      );
      t.equal(
        customer.json<{ totalElements: number }>().totalElements,
        role === 'tenantAdmin' ? 1 : 0,
        `customer created by ${role}`,
      );
    }
  });
});

interface WsRow {
  readonly name: string;
  readonly frame: (fx: Fixture) => object;
  /** reply errorCode for [tenantAdmin, ownCustomer, otherCustomer]: 0 allowed, 1 refused or unknown */
  readonly expect: readonly [0 | 1, 0 | 1, 0 | 1];
}

const WS_ROWS: readonly WsRow[] = [
  {
    name: 'tsSubCmds DEVICE D',
    frame: (fx) => ({ tsSubCmds: [{ cmdId: 1, entityType: 'DEVICE', entityId: fx.deviceD, keys: 'temperature' }] }),
    expect: [0, 0, 1],
  },
  {
    name: 'tsSubCmds ASSET S',
    frame: (fx) => ({ tsSubCmds: [{ cmdId: 1, entityType: 'ASSET', entityId: fx.assetS }] }),
    expect: [0, 0, 1],
  },
  {
    name: 'tsSubCmds unknown device',
    frame: () => ({ tsSubCmds: [{ cmdId: 1, entityType: 'DEVICE', entityId: UNKNOWN_ID }] }),
    expect: [1, 1, 1],
  },
  {
    name: 'historyCmds DEVICE D',
    frame: (fx) => ({
      historyCmds: [
        { cmdId: 1, entityType: 'DEVICE', entityId: fx.deviceD, keys: 'temperature', startTs: 0, endTs: 100000 },
      ],
    }),
    expect: [0, 0, 1],
  },
  {
    name: 'attrSubCmds DEVICE D',
    frame: (fx) => ({ attrSubCmds: [{ cmdId: 1, entityType: 'DEVICE', entityId: fx.deviceD }] }),
    expect: [0, 0, 1],
  },
];

const WS_BAD_TOKEN_ROLES = ['expired', 'tampered', 'loggedOut'] as const;

t.test('access matrix: websocket command × role', async (t) => {
  const wsUrl = (token: string): string =>
    `${fx.gw.url.replace(/^http/, 'ws')}/api/ws/plugins/telemetry?token=${encodeURIComponent(token)}`;
  let probe: WsClient;
  try {
    probe = await WsClient.connect(wsUrl(fx.tokens.tenantAdmin ?? ''));
  } catch {
    await t.test('websocket', { skip: 'not implemented yet (upgrade refused)' }, async () => undefined);
    return;
  }
  probe.close();

  for (const role of WS_BAD_TOKEN_ROLES) {
    const ws = await WsClient.connect(wsUrl(fx.tokens[role] ?? ''));
    const closed = await ws.waitClosed();
    t.equal(closed.code, 1011, `${role}: closed 1011`);
    t.match(closed.reason, /Token has expired/, `${role}: reason names the failure`);
  }

  for (const row of WS_ROWS) {
    await t.test(row.name, async (t) => {
      for (const [i, role] of AUTHENTICATED.entries()) {
        const ws = await WsClient.connect(wsUrl(fx.tokens[role] ?? ''));
        t.teardown(() => ws.close());
        ws.send(row.frame(fx));
        const reply = await ws.nextJson<{ subscriptionId: number; errorCode: number; errorMsg: string | null }>();
        t.equal(reply.subscriptionId, 1, `${role}: reply to cmdId 1`);
        t.equal(reply.errorCode, row.expect[i], `${role} → errorCode ${row.expect[i] as number}`);
        if (row.expect[i] === 1) t.match(reply.errorMsg, /^Failed to fetch/, `${role}: TB message`);
        ws.close();
      }
    });
  }
});
