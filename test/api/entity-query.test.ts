/**
 * Entity data queries, black-box (docs/api.md "Entity data queries"): `POST /api/entitiesQuery/find`, `/count`,
 * `/find/keys` with each entity filter Outpost answers, entity fields and latest values (time series and each
 * attribute scope) as TB's strings, key filters, paging, sorting and text search, a customer user's scope, and
 * TB's 400 for what Outpost does not answer.
 */
import t from 'tap';
import { type HttpResult, http, startGateway } from '../helpers/server.js';
import { addUser, adminToken, authHeaders, login } from '../helpers/users.js';

interface IdJson {
  entityType: string;
  id: string;
}
interface TsValue {
  ts: number;
  value: string;
}
interface Row {
  entityId: IdJson;
  latest: Record<string, Record<string, TsValue>>;
  timeseries: object;
  aggLatest: object;
}
interface Page {
  data: Row[];
  totalPages: number;
  totalElements: number;
  hasNext: boolean;
}

const gw = await startGateway(t);
const h = authHeaders(await adminToken(gw));
const api = (method: string, path: string, body?: unknown, headers = h): Promise<HttpResult> =>
  http(method, `${gw.url}${path}`, body as object | undefined, headers);
const ok = async (method: string, path: string, body?: unknown): Promise<HttpResult> => {
  const r = await api(method, path, body);
  if (r.status !== 200) throw new Error(`${method} ${path}: ${r.status} ${r.text}`);
  return r;
};

const cust = (await ok('POST', '/api/customer', { title: 'Farm' })).json<{ id: IdJson }>().id.id;
const ids: Record<string, string> = {};
// th-1..th-4 thermometers (temperature 10,20,30,40; th-4 has none), pu-1..pu-2 pumps; th-2 and pu-1 are Farm's
for (const [name, type] of [
  ['th-1', 'thermo'],
  ['th-2', 'thermo'],
  ['th-3', 'thermo'],
  ['th-4', 'thermo'],
  ['pu-1', 'pump'],
  ['pu-2', 'pump'],
] as const) {
  ids[name] = (await ok('POST', '/api/device', { name, type, label: `L ${name}` })).json<{ id: IdJson }>().id.id;
}
const tel = (name: string) => `/api/plugins/telemetry/DEVICE/${ids[name]}`;
for (const [i, name] of ['th-1', 'th-2', 'th-3'].entries()) {
  await ok('POST', `${tel(name)}/timeseries/ANY`, {
    ts: 1_700_000_000_000 + i,
    values: { temperature: (i + 1) * 10 + 0.5 },
  });
  await ok('POST', `${tel(name)}/attributes/SERVER_SCOPE`, { active: i !== 1, model: `M${i}` });
  await ok('POST', `${tel(name)}/attributes/SHARED_SCOPE`, { target: 21 });
}
await ok('POST', `${tel('th-4')}/attributes/SERVER_SCOPE`, { active: true });
await ok('POST', `/api/customer/${cust}/device/${ids['th-2']}`);
await ok('POST', `/api/customer/${cust}/device/${ids['pu-1']}`);
const site = (await ok('POST', '/api/asset', { name: 'Site', type: 'site' })).json<{ id: IdJson }>().id;
for (const n of ['th-1', 'pu-2'])
  await ok('POST', '/api/relation', { from: site, to: { entityType: 'DEVICE', id: ids[n] }, type: 'Contains' });

const names = (p: Page): string[] => p.data.map((r) => r.latest['ENTITY_FIELD']?.['name']?.value ?? '?');
const NAME = { type: 'ENTITY_FIELD', key: 'name' };
const find = async (query: object, headers = h): Promise<Page> => {
  const r = await api('POST', '/api/entitiesQuery/find', query, headers);
  if (r.status !== 200) throw new Error(`find: ${r.status} ${r.text}`);
  return r.json<Page>();
};
const byName = (filter: object, extra: object = {}) => ({
  entityFilter: filter,
  entityFields: [NAME],
  pageLink: { page: 0, pageSize: 50, sortOrder: { key: NAME, direction: 'ASC' } },
  ...extra,
});

t.test("TB's example: deviceType, entity fields, latest values, a key filter, a page of 2", async (t) => {
  const r = await api('POST', '/api/entitiesQuery/find', {
    entityFilter: { type: 'deviceType', deviceTypes: ['thermo'], deviceNameFilter: '' },
    entityFields: [NAME, { type: 'ENTITY_FIELD', key: 'type' }],
    latestValues: [
      { type: 'TIME_SERIES', key: 'temperature' },
      { type: 'ATTRIBUTE', key: 'nothing' },
    ],
    keyFilters: [
      {
        key: { type: 'TIME_SERIES', key: 'temperature' },
        valueType: 'NUMERIC',
        predicate: { type: 'NUMERIC', operation: 'GREATER', value: { defaultValue: 15, dynamicValue: null } },
      },
    ],
    pageLink: { page: 0, pageSize: 1, sortOrder: { key: NAME, direction: 'ASC' } },
  });
  t.equal(r.status, 200);
  const p = r.json<Page>();
  t.match(p, { totalPages: 2, totalElements: 2, hasNext: true });
  const row = p.data[0] as Row;
  t.same(row.entityId, { entityType: 'DEVICE', id: ids['th-2'] });
  t.same(row.timeseries, {});
  t.same(row.aggLatest, {});
  t.equal(row.latest['ENTITY_FIELD']?.['name']?.value, 'th-2');
  t.equal(row.latest['ENTITY_FIELD']?.['type']?.value, 'thermo');
  t.same(row.latest['TIME_SERIES']?.['temperature'], { ts: 1_700_000_000_001, value: '20.5' });
  t.same(row.latest['ATTRIBUTE']?.['nothing'], { ts: 0, value: '' }, 'a missing value');
  const second = await find({
    entityFilter: { type: 'deviceType', deviceType: 'thermo' },
    entityFields: [NAME],
    keyFilters: [
      {
        key: { type: 'TIME_SERIES', key: 'temperature' },
        valueType: 'NUMERIC',
        predicate: { type: 'NUMERIC', operation: 'GREATER', value: { defaultValue: 15 } },
      },
    ],
    pageLink: { page: 1, pageSize: 1, sortOrder: { key: NAME, direction: 'ASC' } },
  });
  t.same(names(second), ['th-3']);
  t.equal(second.hasNext, false);
});

t.test('each entity filter', async (t) => {
  t.same(names(await find(byName({ type: 'entityType', entityType: 'DEVICE' }))), [
    'pu-1',
    'pu-2',
    'th-1',
    'th-2',
    'th-3',
    'th-4',
  ]);
  t.same(names(await find(byName({ type: 'entityType', entityType: 'ASSET' }))), ['Site']);
  t.same(names(await find(byName({ type: 'entityName', entityType: 'DEVICE', entityNameFilter: 'TH-' }))).length, 4);
  t.same(names(await find(byName({ type: 'entityName', entityType: 'DEVICE', entityNameFilter: '%-2' }))), [
    'pu-2',
    'th-2',
  ]);
  t.same(names(await find(byName({ type: 'singleEntity', singleEntity: { entityType: 'DEVICE', id: ids['th-3'] } }))), [
    'th-3',
  ]);
  t.same(
    names(await find(byName({ type: 'entityList', entityType: 'DEVICE', entityList: [ids['th-4'], ids['pu-1']] }))),
    ['pu-1', 'th-4'],
  );
  t.same(names(await find(byName({ type: 'deviceType', deviceTypes: ['pump'], deviceNameFilter: 'pu-2' }))), ['pu-2']);
  t.same(names(await find(byName({ type: 'assetType', assetTypes: ['site'] }))), ['Site']);
  const rel = {
    type: 'relationsQuery',
    rootEntity: site,
    direction: 'FROM',
    maxLevel: 1,
    filters: [{ relationType: 'Contains', entityTypes: ['DEVICE'] }],
  };
  t.same(names(await find(byName(rel))), ['pu-2', 'th-1']);
  const back = await find(
    byName({ type: 'relationsQuery', rootEntity: { entityType: 'DEVICE', id: ids['th-1'] }, direction: 'TO' }),
  );
  t.same(names(back), ['Site']);
});

t.test(
  'key filters: STRING, BOOLEAN, COMPLEX, attribute scopes, OR; an entity without the key never matches',
  async (t) => {
    const kf = (key: object, valueType: string, predicate: object) => ({ key, valueType, predicate });
    const thermo = { type: 'deviceType', deviceTypes: ['thermo'] };
    const active = kf({ type: 'ATTRIBUTE', key: 'active' }, 'BOOLEAN', {
      type: 'BOOLEAN',
      operation: 'EQUAL',
      value: { defaultValue: true },
    });
    t.same(names(await find(byName(thermo, { keyFilters: [active] }))), ['th-1', 'th-3', 'th-4']);
    const model = kf({ type: 'SERVER_ATTRIBUTE', key: 'model' }, 'STRING', {
      type: 'STRING',
      operation: 'STARTS_WITH',
      value: { defaultValue: 'm' },
      ignoreCase: true,
    });
    t.same(names(await find(byName(thermo, { keyFilters: [model] }))), ['th-1', 'th-2', 'th-3']);
    const wrongScope = kf({ type: 'CLIENT_ATTRIBUTE', key: 'model' }, 'STRING', {
      type: 'STRING',
      operation: 'EQUAL',
      value: { defaultValue: 'M0' },
    });
    t.same(names(await find(byName(thermo, { keyFilters: [wrongScope] }))), []);
    const complex = kf({ type: 'TIME_SERIES', key: 'temperature' }, 'NUMERIC', {
      type: 'COMPLEX',
      operation: 'OR',
      predicates: [
        { type: 'NUMERIC', operation: 'LESS', value: { defaultValue: 11 } },
        { type: 'NUMERIC', operation: 'GREATER_OR_EQUAL', value: { defaultValue: 30.5 } },
      ],
    });
    t.same(names(await find(byName(thermo, { keyFilters: [complex] }))), ['th-1', 'th-3']);
    t.same(names(await find(byName(thermo, { keyFilters: [complex, active] }))), ['th-1', 'th-3'], 'AND');
    const inactive = kf({ type: 'SERVER_ATTRIBUTE', key: 'active' }, 'BOOLEAN', {
      type: 'BOOLEAN',
      operation: 'EQUAL',
      value: { defaultValue: false },
    });
    t.same(names(await find(byName(thermo, { keyFilters: [complex, inactive], keyFiltersOperation: 'OR' }))), [
      'th-1',
      'th-2',
      'th-3',
    ]);
    const count = await api('POST', '/api/entitiesQuery/count', { entityFilter: thermo, keyFilters: [active] });
    t.equal(count.status, 200);
    t.equal(count.text, '3', 'a bare number');
  },
);

t.test('sorting by a latest value, DESC; text search; paging figures; SHARED and CLIENT scopes', async (t) => {
  const temp = { type: 'TIME_SERIES', key: 'temperature' };
  const q = (pageLink: object, latestValues: object[] = [temp]) => ({
    entityFilter: { type: 'entityType', entityType: 'DEVICE' },
    entityFields: [NAME, { type: 'ENTITY_FIELD', key: 'label' }],
    latestValues,
    pageLink,
  });
  const desc = await find(q({ page: 0, pageSize: 3, sortOrder: { key: temp, direction: 'DESC' } }));
  t.same(names(desc), ['th-3', 'th-2', 'th-1']);
  t.match(desc, { totalElements: 6, totalPages: 2, hasNext: true });
  const search = await find(
    q({ page: 0, pageSize: 10, textSearch: '20.', sortOrder: { key: NAME, direction: 'ASC' } }),
  );
  t.same(names(search), ['th-2'], 'text search over latest values');
  const byLabel = await find(
    q({ page: 0, pageSize: 10, textSearch: 'l pu', sortOrder: { key: NAME, direction: 'ASC' } }),
  );
  t.same(names(byLabel), ['pu-1', 'pu-2'], 'and entity fields');
  const empty = await find(q({ page: 0, pageSize: 10, textSearch: 'zzz' }));
  t.same(empty, { data: [], totalPages: 0, totalElements: 0, hasNext: false });
  const scopes = await find(
    q({ page: 0, pageSize: 1, sortOrder: { key: NAME, direction: 'DESC' } }, [
      { type: 'SHARED_ATTRIBUTE', key: 'target' },
      { type: 'CLIENT_ATTRIBUTE', key: 'target' },
    ]),
  );
  t.same(names(scopes), ['th-4']);
  const rowTh3 = await find(
    byName(
      { type: 'singleEntity', singleEntity: { entityType: 'DEVICE', id: ids['th-3'] } },
      {
        latestValues: [
          { type: 'SHARED_ATTRIBUTE', key: 'target' },
          { type: 'CLIENT_ATTRIBUTE', key: 'target' },
          { type: 'SERVER_ATTRIBUTE', key: 'active' },
        ],
      },
    ),
  );
  const latest = rowTh3.data[0]?.latest ?? {};
  t.equal(latest['SHARED_ATTRIBUTE']?.['target']?.value, '21');
  t.same(latest['CLIENT_ATTRIBUTE']?.['target'], { ts: 0, value: '' });
  t.equal(latest['SERVER_ATTRIBUTE']?.['active']?.value, 'true');
});

t.test('find/keys', async (t) => {
  const r = await api('POST', '/api/entitiesQuery/find/keys?timeseries=true&attributes=true&scope=SERVER_SCOPE', {
    entityFilter: { type: 'deviceType', deviceTypes: ['thermo'] },
  });
  t.equal(r.status, 200);
  const keys = r.json<{ entityTypes: string[]; timeseries: string[]; attribute: string[] }>();
  t.same(keys.entityTypes, ['DEVICE']);
  t.same(keys.timeseries, ['temperature']);
  t.same(
    keys.attribute.filter((k) => k === 'active' || k === 'model' || k === 'target'),
    ['active', 'model'],
    'server attributes only, sorted',
  );
  t.same([...keys.attribute].sort(), keys.attribute);
});

t.test("a customer user sees its customer's entities only", async (t) => {
  await addUser(gw.dataDir, 'farmer@outpost.test', 'pw-farm-1', 'CUSTOMER_USER', cust);
  const ch = authHeaders((await login(gw, 'farmer@outpost.test', 'pw-farm-1')).token);
  t.same(names(await find(byName({ type: 'entityType', entityType: 'DEVICE' }), ch)), ['pu-1', 'th-2']);
  t.same(names(await find(byName({ type: 'entityType', entityType: 'CUSTOMER' }), ch)), ['Farm']);
  const rel = { type: 'relationsQuery', rootEntity: site, direction: 'FROM', maxLevel: 1 };
  t.same(names(await find(byName(rel), ch)), [], "the site's devices are the tenant's");
  const count = await api(
    'POST',
    '/api/entitiesQuery/count',
    { entityFilter: { type: 'deviceType', deviceType: 'thermo' } },
    ch,
  );
  t.equal(count.text, '1');
  t.equal(
    (
      await api(
        'POST',
        '/api/entitiesQuery/count',
        { entityFilter: { type: 'entityType', entityType: 'DEVICE' } },
        {} as typeof h,
      )
    ).status,
    401,
  );
});

t.test('what Outpost does not answer: a clear 400', async (t) => {
  const cases: Array<[object, RegExp]> = [
    [
      { entityFilter: { type: 'apiUsageState' }, pageLink: { pageSize: 10 } },
      /Unsupported entity filter type: apiUsageState/,
    ],
    [
      { entityFilter: { type: 'entityType', entityType: 'DASHBOARD' }, pageLink: { pageSize: 10 } },
      /Unsupported entity type/,
    ],
    [{ entityFilter: { type: 'entityType', entityType: 'DEVICE' } }, /pageLink must be an object/],
    [
      { entityFilter: { type: 'entityType', entityType: 'DEVICE' }, pageLink: { pageSize: 0 } },
      /pageSize must be an integer of at least 1/,
    ],
    [
      {
        entityFilter: { type: 'entityType', entityType: 'DEVICE' },
        keyFilters: [{ key: { type: 'ALARM_FIELD', key: 'x' }, predicate: {} }],
        pageLink: { pageSize: 10 },
      },
      /Unsupported key type/,
    ],
    [
      {
        entityFilter: { type: 'entityType', entityType: 'DEVICE' },
        keyFilters: [
          {
            key: { type: 'ATTRIBUTE', key: 'x' },
            valueType: 'NUMERIC',
            predicate: {
              type: 'NUMERIC',
              operation: 'GREATER',
              value: { dynamicValue: { sourceType: 'CURRENT_USER' } },
            },
          },
        ],
        pageLink: { pageSize: 10 },
      },
      /dynamicValue/,
    ],
  ];
  for (const [body, message] of cases) {
    const r = await api('POST', '/api/entitiesQuery/find', body);
    t.equal(r.status, 400, String(message));
    t.match(r.json(), { status: 400, errorCode: 31, message });
  }
});

t.test('answers follow entity writes made after a query: create, rename, retype, delete', async (t) => {
  const filter = { type: 'entityName', entityType: 'DEVICE', entityNameFilter: 'late' };
  t.same(names(await find(byName(filter))), []);
  const id = (await ok('POST', '/api/device', { name: 'late-1', type: 'thermo' })).json<{ id: IdJson }>().id.id;
  t.same(names(await find(byName(filter))), ['late-1']);
  await ok('POST', '/api/device', { id: { entityType: 'DEVICE', id }, name: 'late-2', type: 'pump' });
  t.same(names(await find(byName(filter))), ['late-2']);
  t.same(names(await find(byName({ type: 'deviceType', deviceTypes: ['pump'], deviceNameFilter: 'late' }))), [
    'late-2',
  ]);
  await ok('DELETE', `/api/device/${id}`);
  t.same(names(await find(byName(filter))), []);
});
