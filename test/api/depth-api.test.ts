import t from 'tap';
import { bearer, csvFixture } from '../helpers/csv-fixture.js';
import { http, startGateway } from '../helpers/server.js';
import { authHeaders } from '../helpers/users.js';

type DsPoints = Record<string, Array<{ ds: number; value: unknown }>>;

t.test('depth series: upload shapes, typing, overwrite, keys, latest, ranges, errors, access', async (t) => {
  const f = await csvFixture(t);
  const up = `${f.gw.url}/api/v1/${f.dev.token}/depth/telemetry`;
  const rest = `${f.gw.url}/api/plugins/telemetry/DEVICE/${f.dev.id}`;
  const admin = authHeaders(f.admin);
  const keys = async (): Promise<string[]> =>
    (await http('GET', `${rest}/keys/depthseries`, undefined, admin)).json<string[]>();

  // Rejected payloads: 400 errorCode 31, nothing stored (all-or-nothing).
  const bad: Array<[string, string]> = [
    ['{"values":{"rop":1}}', 'missing ds'],
    ['{"ds":5}', 'missing values'],
    ['{"ds":"deep","values":{"rop":1}}', 'ds not a number'],
    ['{"ds":true,"values":{"rop":1}}', 'ds boolean'],
    ['{"ds":1e400,"values":{"rop":1}}', 'ds not finite'],
    ['{"ds":1,"values":[1,2]}', 'values not an object'],
    ['[{"ds":1,"values":{"rop":1}},{"ds":2}]', 'one bad element in an array'],
    ['[{"ds":1,"values":{"rop":1}},7]', 'array element not an object'],
    ['"text"', 'not an object'],
    ['{"ds":1,"values":{"rop":1}', 'malformed JSON'],
  ];
  for (const [body, why] of bad) {
    const r = await http('POST', up, body);
    t.equal(r.status, 400, why);
    t.equal(r.json<{ errorCode: number }>().errorCode, 31, `${why}: errorCode`);
  }
  t.same(await keys(), [], 'nothing stored by rejected requests');
  t.equal(
    (await http('POST', `${f.gw.url}/api/v1/nope/depth/telemetry`, '{broken')).status,
    401,
    'unknown token → 401 before parsing',
  );

  // Accepted: an object, an array, string depth, empty values, TB value typing.
  const ok1 = await http(
    'POST',
    up,
    '{"ds":5844.23,"values":{"rop":42.0,"wob":17,"bit":"pdc","ok":true,"cfg":{"a":[1,2]},"n":"12"}}',
  );
  t.equal(ok1.status, 200);
  t.equal(ok1.text, '');
  const ok2 = await http(
    'POST',
    up,
    JSON.stringify([
      { ds: -3.25, values: { rop: 1.5 } },
      { ds: 0, values: { rop: 0 } },
      { ds: '0.5', values: { rop: 2 } },
      { ds: 10, values: {} },
      { ds: 100.125, values: { rop: 'fast, "really"' } },
    ]),
  );
  t.equal(ok2.status, 200);
  t.equal((await http('POST', up, '[]')).status, 200, 'empty array');
  t.equal((await http('POST', up, '{"ds":1,"values":{"wob":null}}')).status, 200, 'null values skipped');

  t.same(await keys(), ['bit', 'cfg', 'n', 'ok', 'rop', 'wob'], 'keys sorted');

  // Latest: the value at the greatest depth.
  const latest = (
    await http('GET', `${rest}/values/depthseries?keys=rop,wob,missing`, undefined, admin)
  ).json<DsPoints>();
  t.same(latest, { rop: [{ ds: 5844.23, value: '42.0' }], wob: [{ ds: 5844.23, value: '17' }] });
  const all = (await http('GET', `${rest}/values/depthseries`, undefined, admin)).json<DsPoints>();
  t.same(Object.keys(all).sort(), ['bit', 'cfg', 'n', 'ok', 'rop', 'wob'], 'no keys → every key');
  t.same(all['cfg'], [{ ds: 5844.23, value: '{"a":[1,2]}' }], 'JSON kept as text');
  t.same(all['n'], [{ ds: 5844.23, value: '12' }], 'numeric string cast');

  // Raw ranges: inclusive bounds, ascending, negative and fractional depths, limit.
  const range = async (q: string): Promise<DsPoints> =>
    (await http('GET', `${rest}/values/depthseries?${q}`, undefined, admin)).json<DsPoints>();
  t.same(
    (await range('keys=rop&startDs=-10&endDs=6000'))['rop']?.map((p) => p.ds),
    [-3.25, 0, 0.5, 100.125, 5844.23],
  );
  t.same(
    (await range('keys=rop&startDs=-3.25&endDs=100.125'))['rop']?.map((p) => p.ds),
    [-3.25, 0, 0.5, 100.125],
    'both bounds inclusive',
  );
  t.same(
    (await range('keys=rop&startDs=-3.24&endDs=0.49'))['rop']?.map((p) => p.ds),
    [0],
  );
  t.same(
    (await range('keys=rop&startDs=-10&endDs=6000&limit=2'))['rop']?.map((p) => p.ds),
    [-3.25, 0],
    'limit keeps the shallowest',
  );
  t.same(await range('keys=rop&startDs=6000&endDs=7000'), {}, 'empty range → no key');
  t.same((await range('keys=rop&startDs=100&endDs=101'))['rop'], [{ ds: 100.125, value: 'fast, "really"' }]);
  t.same(
    (await range('keys=rop,wob&startDs=0&endDs=6000&useStrictDataTypes=true'))['wob'],
    [{ ds: 5844.23, value: 17 }],
    'strict types',
  );

  // Same key+depth overwrites.
  t.equal((await http('POST', up, '{"ds":0.5,"values":{"rop":99}}')).status, 200);
  t.same((await range('keys=rop&startDs=0.5&endDs=0.5'))['rop'], [{ ds: 0.5, value: '99' }]);

  // Bad query parameters.
  for (const q of [
    'startDs=1',
    'endDs=1',
    'startDs=abc&endDs=2',
    'startDs=1&endDs=2&limit=0',
    'startDs=1&endDs=2&limit=x',
    'startDs=1&endDs=2&agg=AVG',
  ]) {
    const r = await http('GET', `${rest}/values/depthseries?keys=rop&${q}`, undefined, admin);
    t.equal(r.status, 400, q);
  }

  // Access rules (docs/api.md).
  t.equal((await http('GET', `${rest}/keys/depthseries`)).status, 401, 'no token');
  t.equal(
    (await http('GET', `${rest}/keys/depthseries`, undefined, authHeaders(f.acmeUser))).status,
    403,
    'customer user, unassigned device',
  );
  t.equal(
    (await http('GET', `${rest}/keys/depthseries`, undefined, bearer(f.admin))).status,
    200,
    'Authorization: Bearer works too',
  );
  const acmeRest = `${f.gw.url}/api/plugins/telemetry/DEVICE/${f.acmeDev.id}`;
  t.equal(
    (await http('GET', `${acmeRest}/values/depthseries`, undefined, authHeaders(f.acmeUser))).status,
    200,
    'own customer device',
  );
  t.equal(
    (await http('GET', `${acmeRest}/values/depthseries`, undefined, authHeaders(f.otherUser))).status,
    403,
    'other customer',
  );
  const unknown = await http(
    'GET',
    `${f.gw.url}/api/plugins/telemetry/DEVICE/00000000-0000-4000-8000-000000000000/keys/depthseries`,
    undefined,
    admin,
  );
  t.equal(unknown.status, 404);
  t.equal(unknown.json<{ errorCode: number }>().errorCode, 32);

  // Acknowledged means durable: kill -9, restart on the same data dir, read back (same signing key, same JWT).
  await f.gw.stop('SIGKILL');
  const gw2 = await startGateway(t, { dataDir: f.gw.dataDir });
  const after = await http(
    'GET',
    `${gw2.url}/api/plugins/telemetry/DEVICE/${f.dev.id}/values/depthseries?keys=rop&startDs=-10&endDs=10`,
    undefined,
    admin,
  );
  t.same(after.json<DsPoints>()['rop'], [
    { ds: -3.25, value: '1.5' },
    { ds: 0, value: '0' },
    { ds: 0.5, value: '99' },
  ]);
});
