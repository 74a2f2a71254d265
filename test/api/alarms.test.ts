/**
 * Alarms REST, black-box (docs/api.md "Alarms"): TB's Alarm and AlarmInfo JSON, create-or-update per originator
 * and type, ack/clear/assign and their errors, status derivation, the list endpoints' paging, filters and
 * sorting, highestSeverity and types, a customer user's view, the cap per device, and alarms going with their
 * device.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { type HttpResult, http, startGateway, tempDir } from '../helpers/server.js';
import { addUser, adminToken, authHeaders, login } from '../helpers/users.js';

interface IdJson {
  entityType: string;
  id: string;
}
interface AlarmJson {
  id: IdJson;
  createdTime: number;
  tenantId: IdJson;
  customerId: IdJson | null;
  type: string;
  originator: IdJson;
  severity: string;
  acknowledged: boolean;
  cleared: boolean;
  assigneeId: IdJson | null;
  startTs: number;
  endTs: number;
  ackTs: number;
  clearTs: number;
  assignTs: number;
  details: unknown;
  name: string;
  status: string;
  propagateRelationTypes: string[];
  originatorName?: string;
  originatorLabel?: string | null;
  originatorDisplayName?: string;
  assignee?: { id: IdJson; email: string } | null;
}
interface Page<T> {
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

const UNKNOWN = '0b1c2d3e-0000-4000-8000-0000000000aa';
const cfg = join(tempDir(t), 'outpost.json');
writeFileSync(cfg, JSON.stringify({ alarms: { maxPerDevice: 3 } }));
const gw = await startGateway(t, { args: ['--config', cfg] });
const h = authHeaders(await adminToken(gw));
const api = (method: string, path: string, body?: unknown, headers = h): Promise<HttpResult> =>
  http(method, `${gw.url}${path}`, body as object | undefined, headers);
const ok = async <T>(method: string, path: string, body?: unknown, headers = h): Promise<T> => {
  const r = await api(method, path, body, headers);
  if (r.status !== 200) throw new Error(`${method} ${path} → ${r.status} ${r.text}`);
  return r.json<T>();
};
const fails = async (t: Test, r: Promise<HttpResult>, status: number, errorCode: number, message: string | RegExp) => {
  const res = await r;
  t.equal(res.status, status, `→ ${status} (${res.text.slice(0, 200)})`);
  t.match(res.json<TbError>(), { status, errorCode, message });
};
const device = async (name: string, label?: string): Promise<IdJson> =>
  (await ok<{ id: IdJson }>('POST', '/api/device', { name, type: 'default', label })).id;
const raise = (originator: IdJson, type: string, severity: string, extra: object = {}) =>
  ok<AlarmJson>('POST', '/api/alarm', { type, severity, originator, ...extra });
const page = (path: string, headers = h) => ok<Page<AlarmJson>>('GET', path, undefined, headers);

const freezer = await device('freezer-1', 'Freezer by the door');
const pump = await device('pump-1');

t.test('create: TB JSON, customerId null, status derived, defaults', async (t) => {
  const before = Date.now();
  const a = await raise(freezer, 'High Temperature', 'MAJOR', { details: { data: 'warm' } });
  t.match(a, {
    id: { entityType: 'ALARM' },
    tenantId: { entityType: 'TENANT' },
    customerId: null,
    type: 'High Temperature',
    name: 'High Temperature',
    originator: freezer,
    severity: 'MAJOR',
    acknowledged: false,
    cleared: false,
    assigneeId: null,
    ackTs: 0,
    clearTs: 0,
    assignTs: 0,
    details: { data: 'warm' },
    propagate: false,
    propagateToOwner: false,
    propagateToTenant: false,
    propagateRelationTypes: [],
    status: 'ACTIVE_UNACK',
  });
  t.ok(a.startTs >= before && a.endTs === a.startTs, 'startTs 0 → now, endTs 0 → startTs');
  const got = await ok<AlarmJson>('GET', `/api/alarm/${a.id.id}`);
  t.same(got, a, 'GET answers what POST did');
  t.notOk('originatorName' in got, 'Alarm has no AlarmInfo fields');
  const info = await ok<AlarmJson>('GET', `/api/alarm/info/${a.id.id}`);
  t.match(info, {
    originatorName: 'freezer-1',
    originatorLabel: 'Freezer by the door',
    originatorDisplayName: 'Freezer by the door',
    assignee: null,
  });
});

t.test('create-or-update: same originator and type → same id; severity set by REST', async (t) => {
  const a = await raise(pump, 'Pressure', 'WARNING', { startTs: 1_000, endTs: 2_000 });
  t.equal(a.startTs, 1_000);
  const b = await raise(pump, 'Pressure', 'CRITICAL', { startTs: 1_000, endTs: 5_000 });
  t.equal(b.id.id, a.id.id, 'same alarm');
  t.equal(b.severity, 'CRITICAL');
  t.equal(b.endTs, 5_000);
  const c = await raise(pump, 'Pressure', 'MINOR', { startTs: 1_000, endTs: 6_000 });
  t.equal(c.severity, 'MINOR', 'REST lowers as TB does');
  const other = await raise(pump, 'Flow', 'MINOR');
  t.not(other.id.id, a.id.id, 'another type, another alarm');
  await fails(
    t,
    api('POST', '/api/alarm', { type: 'x', severity: 'MINOR', originator: pump, startTs: 9, endTs: 5 }),
    400,
    31,
    "Alarm start ts can't be greater than alarm end ts!",
  );
  await fails(
    t,
    api('POST', '/api/alarm', { severity: 'MINOR', originator: pump }),
    400,
    31,
    'Alarm type should be specified!',
  );
  await fails(
    t,
    api('POST', '/api/alarm', { type: 'x', severity: 'MINOR' }),
    400,
    31,
    'Alarm originator should be specified!',
  );
  await fails(
    t,
    api('POST', '/api/alarm', { type: 'x', originator: pump }),
    400,
    31,
    'Alarm severity should be specified!',
  );
  await fails(
    t,
    api('POST', '/api/alarm', { type: 'x', severity: 'LOUD', originator: pump }),
    400,
    31,
    /AlarmSeverity/,
  );
  await fails(
    t,
    api('POST', '/api/alarm', { type: 'x', severity: 'MINOR', originator: { entityType: 'DEVICE', id: UNKNOWN } }),
    404,
    32,
    `Device with id [${UNKNOWN}] is not found`,
  );
  await fails(
    t,
    api('POST', '/api/alarm', {
      id: { entityType: 'ALARM', id: UNKNOWN },
      type: 'x',
      severity: 'MINOR',
      originator: pump,
    }),
    404,
    32,
    `Alarm with id [${UNKNOWN}] is not found`,
  );
  const byId = await ok<AlarmJson>('POST', '/api/alarm', { ...c, severity: 'MAJOR', details: { why: 'edited' } });
  t.match(byId, { id: a.id, severity: 'MAJOR', details: { why: 'edited' } }, 'update by id');
});

t.test('ack, clear, status derivation, errors; a cleared type raises a new alarm', async (t) => {
  const a = await raise(pump, 'Vibration', 'MINOR');
  const acked = await ok<AlarmJson>('POST', `/api/alarm/${a.id.id}/ack`);
  t.match(acked, { acknowledged: true, cleared: false, status: 'ACTIVE_ACK', originatorName: 'pump-1' });
  t.ok(acked.ackTs > 0);
  await fails(t, api('POST', `/api/alarm/${a.id.id}/ack`), 400, 31, 'Alarm was already acknowledged!');
  const raised = await raise(pump, 'Vibration', 'MAJOR');
  t.match(raised, { id: a.id, acknowledged: true, severity: 'MAJOR' }, 'a severity change keeps the ack');
  const cleared = await ok<AlarmJson>('POST', `/api/alarm/${a.id.id}/clear`);
  t.match(cleared, { cleared: true, acknowledged: true, status: 'CLEARED_ACK' });
  await fails(t, api('POST', `/api/alarm/${a.id.id}/clear`), 400, 31, 'Alarm was already cleared!');
  const again = await raise(pump, 'Vibration', 'MINOR');
  t.not(again.id.id, a.id.id, 'a cleared alarm is not updated: a new one');
  const c2 = await ok<AlarmJson>('POST', `/api/alarm/${again.id.id}/clear`);
  t.equal(c2.status, 'CLEARED_UNACK');
  t.equal(
    (await ok<AlarmJson>('POST', `/api/alarm/${again.id.id}/ack`)).status,
    'CLEARED_ACK',
    'a cleared alarm can be acked',
  );
  await fails(t, api('GET', `/api/alarm/${UNKNOWN}`), 404, 32, `Alarm with id [${UNKNOWN}] is not found`);
  await fails(t, api('POST', `/api/alarm/${UNKNOWN}/ack`), 404, 32, `Alarm with id [${UNKNOWN}] is not found`);
  await fails(t, api('GET', '/api/alarm/not-a-uuid'), 400, 31, 'Invalid UUID string: not-a-uuid');
  t.equal((await api('DELETE', `/api/alarm/${again.id.id}`)).text, 'true');
  await fails(t, api('GET', `/api/alarm/${again.id.id}`), 404, 32, /is not found/);
});

t.test('assign and unassign', async (t) => {
  const me = await ok<{ id: IdJson }>('GET', '/api/auth/user');
  const a = await raise(freezer, 'Door open', 'WARNING');
  const assigned = await ok<AlarmJson>('POST', `/api/alarm/${a.id.id}/assign/${me.id.id}`);
  t.match(assigned, { assigneeId: { entityType: 'USER', id: me.id.id } });
  t.ok(assigned.assignTs > 0);
  t.match(await ok<AlarmJson>('GET', `/api/alarm/info/${a.id.id}`), { assignee: { id: me.id } });
  await fails(
    t,
    api('POST', `/api/alarm/${a.id.id}/assign/${me.id.id}`),
    400,
    31,
    'Alarm was already assigned to this user!',
  );
  const byAssignee = await page(`/api/alarms?pageSize=10&page=0&assigneeId=${me.id.id}`);
  t.same(
    byAssignee.data.map((x) => x.id.id),
    [a.id.id],
    'assigneeId filter',
  );
  t.match(await ok<AlarmJson>('DELETE', `/api/alarm/${a.id.id}/assign`), { assigneeId: null });
  await fails(t, api('DELETE', `/api/alarm/${a.id.id}/assign`), 400, 31, 'Alarm was already unassigned!');
  await fails(
    t,
    api('POST', `/api/alarm/${a.id.id}/assign/${UNKNOWN}`),
    404,
    32,
    `User with id [${UNKNOWN}] is not found`,
  );
});

t.test('lists: paging, filters, sort, textSearch, time window, v2, highestSeverity, types', async (t) => {
  const dev = await device('sorter');
  const made: AlarmJson[] = [];
  for (const [type, sev] of [
    ['t-a', 'MINOR'],
    ['t-b', 'CRITICAL'],
    ['t-c', 'WARNING'],
  ] as const)
    made.push(await raise(dev, type, sev));
  await ok('POST', `/api/alarm/${made[0]?.id.id}/clear`);
  await ok('POST', `/api/alarm/${made[1]?.id.id}/ack`);
  const base = `/api/alarm/DEVICE/${dev.id}?pageSize=2&page=0`;
  const p0 = await page(base);
  t.equal(p0.totalElements, 3);
  t.equal(p0.totalPages, 2);
  t.equal(p0.hasNext, true);
  t.same(
    p0.data.map((a) => a.type),
    ['t-c', 't-b'],
    'newest first without sortProperty',
  );
  t.equal(p0.data[0]?.originatorName, 'sorter', 'AlarmInfo in lists');
  const p1 = await page(`/api/alarm/DEVICE/${dev.id}?pageSize=2&page=1`);
  t.same(
    p1.data.map((a) => a.type),
    ['t-a'],
  );
  t.equal(p1.hasNext, false);
  const bySev = await page(`${base.replace('pageSize=2', 'pageSize=10')}&sortProperty=severity&sortOrder=DESC`);
  t.same(
    bySev.data.map((a) => a.severity),
    ['CRITICAL', 'MINOR', 'WARNING'],
    'severity DESC: highest first',
  );
  const byType = await page(`/api/alarm/DEVICE/${dev.id}?pageSize=10&page=0&sortProperty=type&sortOrder=ASC`);
  t.same(
    byType.data.map((a) => a.type),
    ['t-a', 't-b', 't-c'],
  );
  const sel = async (q: string) =>
    (await page(`/api/alarm/DEVICE/${dev.id}?pageSize=10&page=0&sortProperty=type&${q}`)).data.map((a) => a.type);
  t.same(await sel('searchStatus=ACTIVE'), ['t-b', 't-c']);
  t.same(await sel('searchStatus=CLEARED'), ['t-a']);
  t.same(await sel('searchStatus=ACK'), ['t-b']);
  t.same(await sel('searchStatus=UNACK'), ['t-a', 't-c']);
  t.same(await sel('searchStatus=ANY'), ['t-a', 't-b', 't-c']);
  t.same(await sel('status=ACTIVE_UNACK'), ['t-c']);
  t.same(await sel('textSearch=crit'), ['t-b'], 'textSearch on severity');
  t.same(await sel('textSearch=cleared'), ['t-a'], 'textSearch on status');
  t.same(await sel('textSearch=T-C'), ['t-c'], 'textSearch on type, case-insensitive');
  const created = made.map((a) => a.createdTime);
  t.same(
    await sel(`startTime=${created[1]}&endTime=${created[1]}`),
    ['t-b'],
    'startTime/endTime inclusive on createdTime',
  );
  await fails(
    t,
    api('GET', `${base}&searchStatus=ACTIVE&status=ACTIVE_ACK`),
    400,
    31,
    "Invalid alarms search query: Both parameters 'searchStatus' and 'status' can't be specified at the same time!",
  );
  await fails(
    t,
    api('GET', `${base}&searchStatus=LOUD`),
    400,
    31,
    'No enum constant org.thingsboard.server.common.data.alarm.AlarmSearchStatus.LOUD',
  );
  await fails(
    t,
    api('GET', `${base}&status=LOUD`),
    400,
    31,
    'No enum constant org.thingsboard.server.common.data.alarm.AlarmStatus.LOUD',
  );
  await fails(
    t,
    api('GET', `/api/alarm/DEVICE/${dev.id}?page=0`),
    400,
    31,
    "Required request parameter 'pageSize' is not present",
  );
  await fails(
    t,
    api('GET', `/api/alarm/GADGET/${dev.id}?pageSize=1&page=0`),
    400,
    31,
    'No enum constant org.thingsboard.server.common.data.EntityType.GADGET',
  );
  await fails(
    t,
    api('GET', `/api/alarm/DEVICE/${UNKNOWN}?pageSize=1&page=0`),
    404,
    32,
    `Device with id [${UNKNOWN}] is not found`,
  );

  const v2 = async (q: string) =>
    (await page(`/api/v2/alarm/DEVICE/${dev.id}?pageSize=10&page=0&sortProperty=type&${q}`)).data.map((a) => a.type);
  t.same(await v2('statusList=ACTIVE,UNACK'), ['t-c']);
  t.same(await v2('statusList=ACTIVE,CLEARED'), ['t-a', 't-b', 't-c'], 'ACTIVE+CLEARED: no clear filter');
  t.same(await v2('severityList=CRITICAL,MINOR'), ['t-a', 't-b']);
  t.same(await v2('typeList=t-c,t-a'), ['t-a', 't-c']);
  await fails(
    t,
    api('GET', `/api/v2/alarm/DEVICE/${dev.id}?pageSize=1&page=0&severityList=LOUD`),
    400,
    31,
    'No enum constant org.thingsboard.server.common.data.alarm.AlarmSeverity.LOUD',
  );
  const tenantV2 = await page('/api/v2/alarms?pageSize=100&page=0&typeList=t-b');
  t.same(
    tenantV2.data.map((a) => a.id.id),
    [made[1]?.id.id],
  );
  const tenantActive = await page('/api/alarms?pageSize=100&page=0&searchStatus=ACTIVE');
  t.ok(
    tenantActive.data.every((a) => !a.cleared) && tenantActive.data.some((a) => a.type === 't-c'),
    'tenant list, active',
  );

  const hs = await api('GET', `/api/alarm/highestSeverity/DEVICE/${dev.id}`);
  t.equal(hs.text, '"CRITICAL"');
  t.equal((await api('GET', `/api/alarm/highestSeverity/DEVICE/${dev.id}?status=ACTIVE_UNACK`)).text, '"WARNING"');
  const none = await api('GET', `/api/alarm/highestSeverity/DEVICE/${(await device('quiet')).id}`);
  t.equal(none.status, 200);
  t.equal(none.text, '', 'none: an empty body');

  const types = await ok<Page<{ tenantId: IdJson; entityType: string; type: string }>>(
    'GET',
    '/api/alarm/types?pageSize=2&page=0&textSearch=t-',
  );
  t.same(
    types.data.map((x) => x.type),
    ['t-a', 't-b'],
  );
  t.match(types, {
    totalElements: 3,
    hasNext: true,
    data: [{ entityType: 'ALARM', tenantId: { entityType: 'TENANT' } }],
  });
});

t.test("a customer user: its customer's alarms only", async (t) => {
  const ca = await ok<{ id: IdJson }>('POST', '/api/customer', { title: 'Alarm Customer A' });
  const cb = await ok<{ id: IdJson }>('POST', '/api/customer', { title: 'Alarm Customer B' });
  const mine = await device('cu-device');
  const theirs = await device('cb-device');
  await ok('POST', `/api/customer/${ca.id.id}/device/${mine.id}`);
  await ok('POST', `/api/customer/${cb.id.id}/device/${theirs.id}`);
  const a = await raise(mine, 'Leak', 'MAJOR');
  t.same(a.customerId, ca.id, "customerId: the originator's customer at creation");
  const b = await raise(theirs, 'Leak', 'MAJOR');
  await addUser(gw.dataDir, 'cu@alarms.test', 'pw-cu', 'CUSTOMER_USER', 'Alarm Customer A');
  const cu = authHeaders((await login(gw, 'cu@alarms.test', 'pw-cu')).token);
  const listed = await page('/api/alarms?pageSize=100&page=0', cu);
  t.same(
    listed.data.map((x) => x.id.id),
    [a.id.id],
    'only its customer’s',
  );
  t.same(
    (await page('/api/v2/alarms?pageSize=100&page=0', cu)).data.map((x) => x.id.id),
    [a.id.id],
  );
  t.equal((await page(`/api/alarm/DEVICE/${mine.id}?pageSize=10&page=0`, cu)).totalElements, 1);
  await fails(
    t,
    api('GET', `/api/alarm/DEVICE/${theirs.id}?pageSize=10&page=0`, undefined, cu),
    403,
    20,
    "You don't have permission to perform this operation!",
  );
  await fails(
    t,
    api('GET', `/api/alarm/${b.id.id}`, undefined, cu),
    403,
    20,
    "You don't have permission to perform this operation!",
  );
  await fails(t, api('POST', `/api/alarm/${b.id.id}/clear`, undefined, cu), 403, 20, /permission/);
  t.equal((await api('POST', `/api/alarm/${a.id.id}/clear`, undefined, cu)).status, 200, 'clears its own');
  await fails(
    t,
    api('POST', '/api/alarm', { type: 'x', severity: 'MINOR', originator: mine, customerId: cb.id }),
    400,
    31,
    /customer/,
  );
  const cuUser = (await ok<{ id: IdJson }>('GET', '/api/auth/user', undefined, cu)).id;
  await fails(
    t,
    api(
      'POST',
      `/api/alarm/${a.id.id}/assign/${(await ok<{ id: IdJson }>('GET', '/api/auth/user')).id.id}`,
      undefined,
      cu,
    ),
    403,
    20,
    /permission/,
  );
  t.same(
    (await ok<AlarmJson>('POST', `/api/alarm/${a.id.id}/assign/${cuUser.id}`, undefined, cu)).assigneeId,
    cuUser,
    'a customer user assigns to itself',
  );
  // the alarm keeps its customer when the device moves on
  await ok('DELETE', `/api/customer/device/${mine.id}`);
  t.same((await ok<AlarmJson>('GET', `/api/alarm/${a.id.id}`)).customerId, ca.id);
  t.equal((await api('GET', `/api/alarm/${a.id.id}`, undefined, cu)).status, 200);
  t.equal((await api('DELETE', `/api/customer/${ca.id.id}`)).status, 200);
  t.match(
    await ok<AlarmJson>('GET', `/api/alarm/info/${a.id.id}`),
    { assigneeId: null, assignee: null },
    "a deleted user's alarms are unassigned",
  );
});

t.test('the cap per device: oldest cleared purged, refused when all are uncleared', async (t) => {
  const dev = await device('capped');
  const a1 = await raise(dev, 'c1', 'MINOR');
  await raise(dev, 'c2', 'MINOR');
  await raise(dev, 'c3', 'MINOR');
  await fails(
    t,
    api('POST', '/api/alarm', { type: 'c4', severity: 'MINOR', originator: dev }),
    400,
    31,
    /alarms\.maxPerDevice/,
  );
  t.equal((await raise(dev, 'c3', 'MAJOR')).severity, 'MAJOR', 'updating one at the cap is no new alarm');
  await ok('POST', `/api/alarm/${a1.id.id}/clear`);
  const a4 = await raise(dev, 'c4', 'MINOR');
  const left = await page(`/api/alarm/DEVICE/${dev.id}?pageSize=10&page=0&sortProperty=type`);
  t.same(
    left.data.map((a) => a.type),
    ['c2', 'c3', 'c4'],
    'the cleared one went',
  );
  t.ok(a4.id.id);
});

t.test('deleting a device deletes its alarms', async (t) => {
  const dev = await device('doomed');
  const a = await raise(dev, 'Doom', 'CRITICAL');
  t.equal((await api('DELETE', `/api/device/${dev.id}`)).status, 200);
  await fails(t, api('GET', `/api/alarm/${a.id.id}`), 404, 32, `Alarm with id [${a.id.id}] is not found`);
  const all = await page('/api/alarms?pageSize=1000&page=0');
  t.notOk(
    all.data.some((x) => x.id.id === a.id.id),
    'gone from the tenant list',
  );
  t.notOk(
    (await ok<Page<{ type: string }>>('GET', '/api/alarm/types?pageSize=100&page=0')).data.some(
      (x) => x.type === 'Doom',
    ),
  );
});
