/**
 * Relations REST, black-box (docs/api.md "Relations"): TB's EntityRelation JSON, v1 and v2 save and delete,
 * get, lists from and to an entity with type and group, info, find by query, TB's errors; a customer user sees
 * only relations whose both ends it can read; relations go with their entity (REST and CLI deletes); a
 * gateway's sub-devices get the `Created` relation.
 */
import t from 'tap';
import { mqttClient } from '../helpers/mqtt.js';
import { type HttpResult, addDevice, cli, http, startGateway } from '../helpers/server.js';
import { addUser, adminToken, authHeaders, login } from '../helpers/users.js';

interface IdJson {
  entityType: string;
  id: string;
}
interface RelationJson {
  from: IdJson;
  to: IdJson;
  type: string;
  typeGroup: string;
  version: number;
  additionalInfo: unknown;
  fromName?: string;
  toName?: string;
}
interface TbError {
  status: number;
  message: string;
  errorCode: number;
}

const UNKNOWN = '0b1c2d3e-0000-4000-8000-000000000001';

const gw = await startGateway(t);
const h = authHeaders(await adminToken(gw));
const api = (method: string, path: string, body?: unknown, headers = h): Promise<HttpResult> =>
  http(method, `${gw.url}${path}`, body as object | undefined, headers);
const make = async (kind: 'device' | 'asset', name: string): Promise<IdJson> => {
  const r = await api('POST', `/api/${kind}`, { name, type: 'default' });
  if (r.status !== 200) throw new Error(r.text);
  return r.json<{ id: IdJson }>().id;
};
const q = (from: IdJson, type: string, to: IdJson, group?: string): string =>
  `fromId=${from.id}&fromType=${from.entityType}&relationType=${type}&toId=${to.id}&toType=${to.entityType}` +
  (group === undefined ? '' : `&relationTypeGroup=${group}`);
const rel = (from: IdJson, to: IdJson, type = 'Contains', extra: object = {}) => ({ from, to, type, ...extra });

const building = await make('asset', 'Building');
const room = await make('asset', 'Room 1');
const th1 = await make('device', 'th-1');
const th2 = await make('device', 'th-2');

t.test('save v1 and v2, get, upsert, version, additionalInfo', async (t) => {
  const v1 = await api('POST', '/api/relation', rel(building, room));
  t.equal(v1.status, 200);
  t.equal(v1.text, '', 'v1 answers an empty body');
  const got = await api('GET', `/api/relation?${q(building, 'Contains', room)}`);
  t.equal(got.status, 200);
  t.same(got.json(), {
    from: building,
    to: room,
    type: 'Contains',
    typeGroup: 'COMMON',
    version: 1,
    additionalInfo: null,
  });
  const v2 = await api('POST', '/api/v2/relation', rel(building, room, 'Contains', { additionalInfo: { floor: 2 } }));
  t.equal(v2.status, 200);
  t.match(v2.json(), { from: building, to: room, typeGroup: 'COMMON', version: 2, additionalInfo: { floor: 2 } });
  t.equal((await api('POST', '/api/v2/relation', rel(room, th1))).status, 200);
  t.equal((await api('POST', '/api/v2/relation', rel(room, th2))).status, 200);
  t.equal((await api('POST', '/api/v2/relation', rel(room, th2, 'Manages'))).status, 200);
  const dash = await api('POST', '/api/v2/relation', rel(room, th1, 'Contains', { typeGroup: 'DASHBOARD' }));
  t.equal(dash.json<RelationJson>().typeGroup, 'DASHBOARD');
});

t.test('lists from and to, by type and group; info; path forms', async (t) => {
  const from = await api('GET', `/api/relations?fromId=${room.id}&fromType=ASSET`);
  t.same(
    from
      .json<RelationJson[]>()
      .map((r) => `${r.type}>${r.to.id}`)
      .sort(),
    [`Contains>${th1.id}`, `Contains>${th2.id}`, `Manages>${th2.id}`].sort(),
    'COMMON only when no group is given',
  );
  const contains = await api('GET', `/api/relations?fromId=${room.id}&fromType=ASSET&relationType=Manages`);
  t.same(
    contains.json<RelationJson[]>().map((r) => r.to.id),
    [th2.id],
  );
  const dash = await api('GET', `/api/relations?fromId=${room.id}&fromType=ASSET&relationTypeGroup=DASHBOARD`);
  t.same(
    dash.json<RelationJson[]>().map((r) => [r.typeGroup, r.to.id]),
    [['DASHBOARD', th1.id]],
  );
  const to = await api('GET', `/api/relations?toId=${th2.id}&toType=DEVICE`);
  t.same(
    to.json<RelationJson[]>().map((r) => r.from.id),
    [room.id, room.id],
  );
  const info = await api('GET', `/api/relations/info?toId=${room.id}&toType=ASSET`);
  t.match(info.json(), [{ from: building, to: room, fromName: 'Building', toName: 'Room 1' }]);
  const path = await api('GET', `/api/relations/from/ASSET/${room.id}/Manages`);
  t.same(
    path.json<RelationJson[]>().map((r) => r.to.id),
    [th2.id],
  );
  const infoPath = await api('GET', `/api/relations/info/to/DEVICE/${th1.id}`);
  t.match(infoPath.json(), [{ fromName: 'Room 1', toName: 'th-1' }]);
});

t.test('find by query: levels, filters, last level only', async (t) => {
  const body = (extra: object, filters: object[] = []) => ({
    parameters: { rootId: building.id, rootType: 'ASSET', direction: 'FROM', maxLevel: 2, ...extra },
    filters,
  });
  const all = await api('POST', '/api/relations', body({}));
  t.equal(all.status, 200);
  t.equal(all.json<RelationJson[]>().length, 4, 'Building>Room and the three COMMON relations of Room');
  const devices = await api(
    'POST',
    '/api/relations',
    body({}, [{ relationType: 'Contains', entityTypes: ['DEVICE'] }]),
  );
  t.same(
    devices
      .json<RelationJson[]>()
      .map((r) => r.to.id)
      .sort(),
    [th1.id, th2.id].sort(),
  );
  const one = await api('POST', '/api/relations', body({ maxLevel: 1 }));
  t.same(
    one.json<RelationJson[]>().map((r) => r.to.id),
    [room.id],
  );
  const last = await api('POST', '/api/relations/info', body({ fetchLastLevelOnly: true }));
  t.equal(last.json<RelationJson[]>().length, 3);
  t.ok(last.json<RelationJson[]>().every((r) => r.fromName === 'Room 1'));
});

t.test("TB's errors", async (t) => {
  const cases: Array<[object, string]> = [
    [{ to: room, type: 'Contains' }, 'Validation error: from must not be null'],
    [{ from: room, type: 'Contains' }, 'Validation error: to must not be null'],
    [{ from: room, to: th1, type: ' ' }, 'Validation error: type must not be blank'],
    [{ from: room, to: th1, type: 'a\u0000b' }, 'Validation error: type should not contain 0x00 symbol'],
    [{ from: room, to: th1, type: 'x'.repeat(256) }, 'Validation error: type length must be equal or less than 255'],
  ];
  for (const [body, message] of cases) {
    const r = await api('POST', '/api/v2/relation', body);
    t.equal(r.status, 400, message);
    t.match(r.json(), { status: 400, errorCode: 31, message });
  }
  const unknown = await api('POST', '/api/v2/relation', rel(room, { entityType: 'DEVICE', id: UNKNOWN }));
  t.equal(unknown.status, 404);
  t.match(unknown.json(), { errorCode: 32, message: `Device with id [${UNKNOWN}] is not found` });
  const none = await api('GET', `/api/relation?${q(room, 'Uses', th1)}`);
  t.equal(none.status, 404);
  t.match(none.json(), { errorCode: 32, message: "Requested item wasn't found!" });
  const noneDel = await api('DELETE', `/api/relation?${q(room, 'Uses', th1)}`);
  t.equal(noneDel.status, 404);
  t.equal((await api('GET', `/api/relations?fromType=ASSET`)).status, 400);
  t.equal((await api('GET', '/api/relations?fromId=x&fromType=ASSET')).status, 400);
  const noAuth = await http('GET', `${gw.url}/api/relations?fromId=${room.id}&fromType=ASSET`);
  t.equal(noAuth.status, 401);
});

t.test('delete v1 and v2; DELETE /api/relations removes COMMON both ways', async (t) => {
  const x = await make('device', 'x-1');
  await api('POST', '/api/relation', rel(room, x, 'Uses'));
  await api('POST', '/api/relation', rel(x, th1, 'Uses'));
  await api('POST', '/api/relation', rel(x, th2, 'Uses', { typeGroup: 'EDGE' }));
  const v2 = await api('DELETE', `/api/v2/relation?${q(room, 'Uses', x)}`);
  t.equal(v2.status, 200);
  t.match(v2.json(), { from: room, to: x, type: 'Uses' });
  await api('POST', '/api/relation', rel(room, x, 'Uses'));
  const v1 = await api('DELETE', `/api/relation?${q(room, 'Uses', x)}`);
  t.equal(v1.status, 200);
  t.equal(v1.text, '');
  await api('POST', '/api/relation', rel(room, x, 'Uses'));
  t.equal((await api('DELETE', `/api/relations?entityId=${x.id}&entityType=DEVICE`)).status, 200);
  t.same((await api('GET', `/api/relations?toId=${x.id}&toType=DEVICE`)).json(), []);
  t.same((await api('GET', `/api/relations?fromId=${x.id}&fromType=DEVICE`)).json(), []);
  const edge = await api('GET', `/api/relations?fromId=${x.id}&fromType=DEVICE&relationTypeGroup=EDGE`);
  t.equal(edge.json<RelationJson[]>().length, 1, 'other groups stay');
});

t.test('deleting an entity deletes its relations: REST device and asset, CLI device', async (t) => {
  const a = await make('asset', 'gone-asset');
  const d = await make('device', 'gone-dev');
  const c = await addDevice(gw.dataDir, 'gone-cli');
  const cId = { entityType: 'DEVICE', id: c.id };
  await api('POST', '/api/relation', rel(room, a));
  await api('POST', '/api/relation', rel(a, th1));
  await api('POST', '/api/relation', rel(d, room, 'Uses', { typeGroup: 'EDGE' }));
  await api('POST', '/api/relation', rel(room, cId));
  t.equal((await api('DELETE', `/api/asset/${a.id}`)).status, 200);
  t.equal((await api('DELETE', `/api/device/${d.id}`)).status, 200);
  const del = await cli(['device', 'delete', '--data-dir', gw.dataDir, '--yes', c.id]);
  t.equal(del.code, 0, del.stderr);
  const fromRoom = (await api('GET', `/api/relations?fromId=${room.id}&fromType=ASSET`)).json<RelationJson[]>();
  t.notOk(
    fromRoom.some((r) => r.to.id === a.id || r.to.id === c.id),
    'relations to the deleted asset and device are gone',
  );
  const toTh1 = (await api('GET', `/api/relations?toId=${th1.id}&toType=DEVICE`)).json<RelationJson[]>();
  t.notOk(toTh1.some((r) => r.from.id === a.id));
  const edge = await api('GET', `/api/relations?toId=${room.id}&toType=ASSET&relationTypeGroup=EDGE`);
  t.same(edge.json(), [], 'every group');
});

t.test("deleting a customer deletes its relations and its users'", async (t) => {
  const c = (await api('POST', '/api/customer', { title: 'Short-lived' })).json<{ id: IdJson }>().id;
  const u = await addUser(gw.dataDir, 'gone@outpost.test', 'pw-gone-1', 'CUSTOMER_USER', c.id);
  t.equal((await api('POST', '/api/relation', rel(c, th2, 'Manages'))).text, '');
  await api('POST', '/api/relation', rel({ entityType: 'USER', id: u.id }, th2, 'Uses'));
  const before = (await api('GET', `/api/relations?toId=${th2.id}&toType=DEVICE`)).json<RelationJson[]>();
  t.equal(before.filter((r) => r.from.id === c.id || r.from.id === u.id).length, 2);
  t.equal((await api('DELETE', `/api/customer/${c.id}`)).status, 200);
  const left = (await api('GET', `/api/relations?toId=${th2.id}&toType=DEVICE`)).json<RelationJson[]>();
  t.notOk(
    left.some((r) => r.from.id === c.id || r.from.id === u.id),
    'the relations from the customer and from its deleted user are gone',
  );
});

t.test('a customer user: its own ends only', async (t) => {
  const cust = await api('POST', '/api/customer', { title: 'Cust A' });
  const customerId = cust.json<{ id: IdJson }>().id.id;
  const mine = await make('asset', 'cust-asset');
  const myDev = await make('device', 'cust-dev');
  for (const e of [mine, myDev]) await api('POST', `/api/customer/${customerId}/${e.entityType.toLowerCase()}/${e.id}`);
  await api('POST', '/api/relation', rel(mine, myDev));
  await api('POST', '/api/relation', rel(mine, th1));
  await addUser(gw.dataDir, 'cu@outpost.test', 'pw-cu-1', 'CUSTOMER_USER', customerId);
  const ch = authHeaders((await login(gw, 'cu@outpost.test', 'pw-cu-1')).token);
  const list = await api('GET', `/api/relations?fromId=${mine.id}&fromType=ASSET`, undefined, ch);
  t.equal(list.status, 200);
  t.same(
    list.json<RelationJson[]>().map((r) => r.to.id),
    [myDev.id],
    "the relation to the tenant's device is left out",
  );
  const byQuery = await api(
    'POST',
    '/api/relations',
    { parameters: { rootId: mine.id, rootType: 'ASSET', direction: 'FROM', maxLevel: 1 }, filters: [] },
    ch,
  );
  t.same(
    byQuery.json<RelationJson[]>().map((r) => r.to.id),
    [myDev.id],
  );
  const other = await api('GET', `/api/relations?fromId=${room.id}&fromType=ASSET`, undefined, ch);
  t.equal(other.status, 403);
  t.match(other.json<TbError>(), { errorCode: 20 });
  const write = await api('POST', '/api/v2/relation', rel(mine, th2), ch);
  t.equal(write.status, 403, "no relation to the tenant's device");
  const own = await api('POST', '/api/v2/relation', rel(myDev, mine, 'Uses'), ch);
  t.equal(own.status, 200, 'between its own entities');
  const del = await api('DELETE', `/api/relation?${q(mine, 'Contains', th1)}`, undefined, ch);
  t.equal(del.status, 403);
  t.equal((await api('GET', `/api/relation?${q(mine, 'Contains', th1)}`)).status, 200, 'still there');
});

t.test("a gateway's sub-devices get TB's Created relation, on create and on take-over", async (t) => {
  const gwDev = await addDevice(gw.dataDir, 'rel-gw', ['--gateway']);
  const existing = await make('device', 'Pre-existing');
  const c = await mqttClient(t, gw, gwDev.token, { protocolVersion: 5 });
  await c.publishAsync('v1/gateway/connect', '{"device":"Sub 1"}', { qos: 1 });
  await c.publishAsync('v1/gateway/connect', '{"device":"Pre-existing"}', { qos: 1 });
  const list = await api('GET', `/api/relations/info?fromId=${gwDev.id}&fromType=DEVICE`);
  t.equal(list.status, 200);
  const rels = list.json<RelationJson[]>();
  t.same(rels.map((r) => [r.type, r.typeGroup, r.from.id, r.toName]).sort(), [
    ['Created', 'COMMON', gwDev.id, 'Pre-existing'],
    ['Created', 'COMMON', gwDev.id, 'Sub 1'],
  ]);
  t.ok(rels.some((r) => r.to.id === existing.id));
  await c.endAsync();
  t.equal((await api('DELETE', `/api/device/${gwDev.id}`)).status, 200, 'the gateway deleted');
  const left = await api('GET', `/api/relations?toId=${existing.id}&toType=DEVICE`);
  t.same(left.json(), [], 'its Created relations went with it');
});
