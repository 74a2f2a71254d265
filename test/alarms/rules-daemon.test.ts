/**
 * Alarm rules in the real daemon (docs/api.md "Alarm rules"): a profile's rules refused at save with a 400 and
 * nothing saved; a DURATION alarm whose progress survives a kill -9; the inactivity rule on `active` across a
 * kill -9 (raised, cleared by the device's next post after the restart, raised again); a customer user's view of
 * a rule-raised alarm.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { type Gateway, type HttpResult, http, startGateway, tempDir, waitStatus } from '../helpers/server.js';
import { addUser, adminToken, authHeaders, login } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';

interface IdJson {
  entityType: string;
  id: string;
}
interface AlarmJson {
  id: IdJson;
  type: string;
  severity: string;
  status: string;
  startTs: number;
  customerId: IdJson | null;
  details: unknown;
}
interface Page<T> {
  data: T[];
}
interface RulesStatus {
  alarms: { rules?: { pending: number; unflushed: number } };
}

const cfg = join(tempDir(t), 'outpost.json');
writeFileSync(cfg, JSON.stringify({ state: { checkIntervalMs: 100 }, alarms: { maxRulesPerProfile: 4 } }));
const dataDir = tempDir(t);
let gw: Gateway = await startGateway(t, { dataDir, args: ['--config', cfg] });
const h = authHeaders(await adminToken(gw));

const api = (method: string, path: string, body?: unknown, headers = h): Promise<HttpResult> =>
  http(method, `${gw.url}${path}`, body as object | undefined, headers);
const ok = async <T>(method: string, path: string, body?: unknown, headers = h): Promise<T> => {
  const r = await api(method, path, body, headers);
  if (r.status !== 200) throw new Error(`${method} ${path} → ${r.status} ${r.text}`);
  return r.json<T>();
};

const pv = (v: unknown): object => ({ defaultValue: v, userValue: null, dynamicValue: null });
const filter = (key: string, keyType: string, valueType: string, type: string, operation: string, v: unknown) => ({
  key: { type: keyType, key },
  valueType,
  value: null,
  predicate: { type, operation, value: pv(v) },
});
const rule = (filters: object[], spec: object = { type: 'SIMPLE' }, details: string | null = null) => ({
  condition: { condition: filters, spec },
  schedule: null,
  alarmDetails: details,
  dashboardId: null,
});

async function profile(name: string, alarms: object[]): Promise<HttpResult> {
  return api('POST', '/api/deviceProfile', {
    name,
    type: 'DEFAULT',
    transportType: 'DEFAULT',
    profileData: {
      configuration: { type: 'DEFAULT' },
      transportConfiguration: { type: 'DEFAULT' },
      alarms,
    },
  });
}

async function device(name: string, type: string): Promise<{ id: string; token: string }> {
  const d = await ok<{ id: IdJson }>('POST', '/api/device', { name, type });
  const c = await ok<{ credentialsId: string }>('GET', `/api/device/${d.id.id}/credentials`);
  return { id: d.id.id, token: c.credentialsId };
}

async function post(token: string, body: object): Promise<void> {
  const r = await http('POST', `${gw.url}/api/v1/${token}/telemetry`, body);
  if (r.status !== 200) throw new Error(`telemetry → ${r.status} ${r.text}`);
}

async function alarmsOf(id: string, headers = h): Promise<AlarmJson[]> {
  return (
    await ok<Page<AlarmJson>>(
      'GET',
      `/api/alarm/DEVICE/${id}?pageSize=50&page=0&sortProperty=createdTime&sortOrder=ASC`,
      undefined,
      headers,
    )
  ).data;
}

/** waits until the device's alarms satisfy `pred`; resolves with them */
async function waitAlarms(id: string, pred: (a: AlarmJson[]) => boolean, what: string): Promise<AlarmJson[]> {
  let last: AlarmJson[] = [];
  return waitFor(
    async () => {
      last = await alarmsOf(id);
      return pred(last) ? last : undefined;
    },
    { timeout: 20_000, message: () => `${what}; the last: ${JSON.stringify(last)}` },
  );
}

async function restartAfterKill(): Promise<void> {
  await gw.stop('SIGKILL');
  gw = await startGateway(t, { dataDir, args: ['--config', cfg] });
}

t.test('bad rules are refused at save with a 400, nothing saved', async (t) => {
  const cases: Array<[string, object[], RegExp]> = [
    [
      'an unknown key type',
      [
        {
          alarmType: 'X',
          createRules: { MAJOR: rule([filter('t', 'SERVER_ATTRIBUTE', 'NUMERIC', 'NUMERIC', 'GREATER', 1)]) },
        },
      ],
      /AlarmConditionKeyType/,
    ],
    [
      'a DURATION without a value',
      [
        {
          alarmType: 'X',
          createRules: {
            MAJOR: rule([filter('t', 'TIME_SERIES', 'NUMERIC', 'NUMERIC', 'GREATER', 1)], {
              type: 'DURATION',
              unit: 'MINUTES',
            }),
          },
        },
      ],
      /DURATION condition needs/,
    ],
    [
      'the same alarm type twice',
      [
        { alarmType: 'X', createRules: {} },
        { alarmType: 'X', createRules: {} },
      ],
      /^Can't create device profile with the same alarm rule types: "X"!$/,
    ],
    [
      'more rules than alarms.maxRulesPerProfile',
      ['CRITICAL', 'MAJOR', 'MINOR', 'WARNING', 'INDETERMINATE'].map((s) => ({
        alarmType: s,
        createRules: { [s]: rule([filter('t', 'TIME_SERIES', 'NUMERIC', 'NUMERIC', 'GREATER', 1)]) },
      })),
      /at most 4 alarm rules/,
    ],
  ];
  for (const [what, alarms, message] of cases) {
    const r = await profile(`bad-${what}`, alarms);
    t.equal(r.status, 400, `${what}: 400 (${r.text.slice(0, 160)})`);
    t.match(r.json(), { status: 400, errorCode: 31, message }, what);
  }
  const names = await ok<Array<{ name: string }>>('GET', '/api/deviceProfile/names');
  t.notOk(
    names.some((n) => n.name.startsWith('bad-')),
    'no refused profile was saved',
  );
});

t.test('DURATION: the progress survives a kill -9; raised with the reading that passes the time', async (t) => {
  const r = await profile('freezer', [
    {
      id: 'warm-1',
      alarmType: 'Freezer warm',
      createRules: {
        CRITICAL: rule(
          [filter('temperature', 'TIME_SERIES', 'NUMERIC', 'NUMERIC', 'GREATER', -10)],
          { type: 'DURATION', unit: 'MINUTES', predicate: pv(1) },
          // biome-ignore lint/suspicious/noTemplateCurlyInString: TB's placeholder syntax, not a template
          'Temperature ${temperature} for over a minute',
        ),
      },
      clearRule: rule([filter('temperature', 'TIME_SERIES', 'NUMERIC', 'NUMERIC', 'LESS', -15)]),
    },
  ]);
  t.equal(r.status, 200, r.text.slice(0, 200));
  const dev = await device('freezer-1', 'freezer');
  const t0 = Date.now() - 300_000;
  await post(dev.token, { ts: t0, values: { temperature: -5 } });
  await post(dev.token, { ts: t0 + 30_000, values: { temperature: -4 } });
  // the progress (held since t0) is on disk before the kill
  await waitStatus<RulesStatus>(gw, h, (s) => s.alarms.rules?.pending === 1 && s.alarms.rules.unflushed === 0);
  t.same(await alarmsOf(dev.id), [], 'not yet: held 30 s');
  await restartAfterKill();
  await post(dev.token, { ts: t0 + 61_000, values: { temperature: -3 } });
  const [a] = await waitAlarms(dev.id, (l) => l.length === 1, 'the CRITICAL alarm after the restart');
  t.match(a, {
    type: 'Freezer warm',
    severity: 'CRITICAL',
    status: 'ACTIVE_UNACK',
    startTs: t0 + 61_000,
    details: { data: 'Temperature -3 for over a minute' },
  });
  await post(dev.token, { ts: t0 + 62_000, values: { temperature: -20 } });
  await waitAlarms(dev.id, (l) => l[0]?.status === 'CLEARED_UNACK', 'cleared below -15');
  await waitStatus<RulesStatus>(gw, h, (s) => s.alarms.rules?.pending === 0 && s.alarms.rules.unflushed === 0);
});

t.test('inactivity rule on active: raised, survives a kill -9, cleared by the next post, raised again', async (t) => {
  const active = (v: boolean) => filter('active', 'ATTRIBUTE', 'BOOLEAN', 'BOOLEAN', 'EQUAL', v);
  const r = await profile('pumps', [
    {
      id: 'inactive-1',
      alarmType: 'Inactivity',
      createRules: { WARNING: rule([active(false)]) },
      clearRule: rule([active(true)]),
    },
  ]);
  t.equal(r.status, 200, r.text.slice(0, 200));
  const dev = await device('pump-7', 'pumps');
  const set = await api('POST', `/api/plugins/telemetry/DEVICE/${dev.id}/attributes/SERVER_SCOPE`, {
    inactivityTimeout: 1500,
  });
  t.equal(set.status, 200, 'inactivityTimeout set');
  await post(dev.token, { flow: 1 });
  const [first] = await waitAlarms(dev.id, (l) => l.length === 1, 'the inactivity alarm');
  t.match(first, { type: 'Inactivity', severity: 'WARNING', status: 'ACTIVE_UNACK' });
  await restartAfterKill();
  await post(dev.token, { flow: 2 });
  await waitAlarms(
    dev.id,
    (l) => l.length === 1 && l[0]?.status === 'CLEARED_UNACK',
    'the same alarm cleared by the post',
  );
  const again = await waitAlarms(
    dev.id,
    (l) => l.length === 2 && l[1]?.status === 'ACTIVE_UNACK',
    'a new inactivity alarm once silent again',
  );
  t.not(again[1]?.id.id, first?.id.id, 'a new alarm after the clear');
});

t.test("a customer user sees its device's rule-raised alarm", async (t) => {
  const r = await profile('tanks', [
    {
      id: 'level-1',
      alarmType: 'Tank low',
      createRules: { MAJOR: rule([filter('level', 'TIME_SERIES', 'NUMERIC', 'NUMERIC', 'LESS', 10)]) },
    },
  ]);
  t.equal(r.status, 200, r.text.slice(0, 200));
  const cust = await ok<{ id: IdJson }>('POST', '/api/customer', { title: 'Tank Farm' });
  await ok('POST', '/api/customer', { title: 'Elsewhere' });
  const dev = await device('tank-1', 'tanks');
  await ok('POST', `/api/customer/${cust.id.id}/device/${dev.id}`);
  await post(dev.token, { level: 5 });
  const [a] = await waitAlarms(dev.id, (l) => l.length === 1, 'the rule-raised alarm');
  t.same(a?.customerId, cust.id, "the device's customer");
  await addUser(gw.dataDir, 'farmer@rules.test', 'pw-farmer', 'CUSTOMER_USER', 'Tank Farm');
  await addUser(gw.dataDir, 'else@rules.test', 'pw-else', 'CUSTOMER_USER', 'Elsewhere');
  const mine = authHeaders((await login(gw, 'farmer@rules.test', 'pw-farmer')).token);
  const theirs = authHeaders((await login(gw, 'else@rules.test', 'pw-else')).token);
  const listed = await ok<Page<AlarmJson>>('GET', '/api/alarms?pageSize=50&page=0', undefined, mine);
  t.same(
    listed.data.map((x) => x.id.id),
    [a?.id.id],
    'its customer’s alarm',
  );
  t.equal((await api('GET', `/api/alarm/${a?.id.id}`, undefined, theirs)).status, 403, 'not another customer’s user');
  t.same((await ok<Page<AlarmJson>>('GET', '/api/alarms?pageSize=50&page=0', undefined, theirs)).data, []);
});
