/**
 * Black-box tests of the timeseries REST API (docs/api.md): TB's worked examples through HTTP, latest values,
 * raw pages (streamed when large), parameter errors, REST writes and deletes, and access rules.
 */
import t, { type Test } from 'tap';
import { type Gateway, addDevice, cliJson, http, startGateway } from '../helpers/server.js';
import { addUser, adminToken, authHeaders, login } from '../helpers/users.js';

interface Point {
  ts: number;
  value: unknown;
}
type Answer = Record<string, Point[]>;
interface TbError {
  status: number;
  errorCode: number;
  message: string;
}

async function setup(
  t: Test,
): Promise<{ gw: Gateway; h: Record<string, string>; dev: { id: string; token: string }; base: string }> {
  const gw = await startGateway(t);
  const token = await adminToken(gw, 'admin@example.com', 'secret-pw');
  const dev = await addDevice(gw.dataDir, 'dev-q');
  return { gw, h: authHeaders(token), dev, base: `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}` };
}

/** Posts `[{ts, values}]` through the device API and checks the 200. */
async function seed(
  t: Test,
  gw: Gateway,
  token: string,
  points: Array<{ ts: number; values: Record<string, unknown> }>,
): Promise<void> {
  const r = await http('POST', `${gw.url}/api/v1/${token}/telemetry`, JSON.stringify(points));
  t.equal(r.status, 200, 'seeded');
}

t.test('TB worked examples through the API', async (t) => {
  const { gw, h, dev, base } = await setup(t);
  await seed(
    t,
    gw,
    dev.token,
    [100, 200, 300, 400, 500, 600].map((v, i) => ({ ts: 5000 + i * 10000, values: { t: v } })),
  );
  await seed(
    t,
    gw,
    dev.token,
    ['A1', 'A2', 'B1', 'B2', 'C1', 'C2'].map((v, i) => ({ ts: 65000 + i * 10000, values: { s: v } })),
  );
  // -100L and -50.0; 100L, 200.0 (the literal "200.0" stays a double)
  await http(
    'POST',
    `${gw.url}/api/v1/${dev.token}/telemetry`,
    '[{"ts":1000,"values":{"neg":-100,"mix":100}},{"ts":2000,"values":{"neg":-50.0,"mix":200.0}}]',
  );

  const get = async (q: string): Promise<Answer> => {
    const r = await http('GET', `${base}/values/timeseries?${q}`, undefined, h);
    t.equal(r.status, 200, q);
    return r.json<Answer>();
  };
  const range = 'keys=t&startTs=0&endTs=60000&interval=20000';
  t.same(await get(`${range}&agg=AVG`), {
    t: [
      { ts: 10000, value: '150.0' },
      { ts: 30000, value: '350.0' },
      { ts: 50000, value: '550.0' },
    ],
  });
  t.same(await get(`${range}&agg=SUM`), {
    t: [
      { ts: 10000, value: '300' },
      { ts: 30000, value: '700' },
      { ts: 50000, value: '1100' },
    ],
  });
  t.same(await get(`${range}&agg=MIN`), {
    t: [
      { ts: 10000, value: '100' },
      { ts: 30000, value: '300' },
      { ts: 50000, value: '500' },
    ],
  });
  t.same(await get(`${range}&agg=MAX`), {
    t: [
      { ts: 10000, value: '200' },
      { ts: 30000, value: '400' },
      { ts: 50000, value: '600' },
    ],
  });
  t.same(await get(`${range}&agg=COUNT`), {
    t: [
      { ts: 10000, value: '2' },
      { ts: 30000, value: '2' },
      { ts: 50000, value: '2' },
    ],
  });
  t.same(
    await get('keys=t&startTs=0&endTs=60000&agg=NONE&limit=3'),
    {
      t: [
        { ts: 55000, value: '600' },
        { ts: 45000, value: '500' },
        { ts: 35000, value: '400' },
      ],
    },
    'NONE limit 3 DESC',
  );
  t.same(await get('keys=t&startTs=0&endTs=60000&limit=2&orderBy=ASC'), {
    t: [
      { ts: 5000, value: '100' },
      { ts: 15000, value: '200' },
    ],
  });
  t.same(
    await get('keys=t&startTs=0&endTs=60000&agg=AVG&interval=0&limit=1'),
    { t: [{ ts: 55000, value: '600' }] },
    'agg with interval 0 is raw',
  );
  t.same(
    await get(`${range}&agg=SUM&limit=2`),
    {
      t: [
        { ts: 10000, value: '300' },
        { ts: 30000, value: '700' },
      ],
    },
    'explicit limit keeps the first buckets',
  );

  const srange = 'keys=s&startTs=60000&endTs=120000&interval=20000';
  t.same(await get(`${srange}&agg=MIN`), {
    s: [
      { ts: 70000, value: 'A1' },
      { ts: 90000, value: 'B1' },
      { ts: 110000, value: 'C1' },
    ],
  });
  t.same(await get(`${srange}&agg=MAX`), {
    s: [
      { ts: 70000, value: 'A2' },
      { ts: 90000, value: 'B2' },
      { ts: 110000, value: 'C2' },
    ],
  });
  t.same(await get(`${srange}&agg=AVG`), {}, 'AVG of strings: buckets omitted, key absent');

  t.same(await get('keys=neg,mix&startTs=0&endTs=3000&interval=3000&agg=MAX'), {
    neg: [{ ts: 1500, value: '-50.0' }],
    mix: [{ ts: 1500, value: '200.0' }],
  });
  t.same(
    await get('keys=mix&startTs=0&endTs=3000&interval=3000&agg=SUM'),
    { mix: [{ ts: 1500, value: '300.0' }] },
    'mixed long/double → double',
  );

  const strict = await http('GET', `${base}/values/timeseries?${range}&agg=AVG&useStrictDataTypes=true`, undefined, h);
  t.equal(
    strict.text,
    '{"t":[{"ts":10000,"value":150.0},{"ts":30000,"value":350.0},{"ts":50000,"value":550.0}]}',
    'strict: native doubles keep .0',
  );
  const strictRaw = await http(
    'GET',
    `${base}/values/timeseries?keys=s,t&startTs=0&endTs=70000&limit=1&useStrictDataTypes=true`,
    undefined,
    h,
  );
  t.equal(strictRaw.text, '{"s":[{"ts":65000,"value":"A1"}],"t":[{"ts":55000,"value":600}]}', 'keys in request order');

  const hist = await http(
    'GET',
    `${base}/values/timeseries/history?keys=t&startTs=0&endTs=20000&agg=COUNT&interval=20000`,
    undefined,
    h,
  );
  t.same(hist.json(), { t: [{ ts: 10000, value: '2' }] }, 'values/timeseries/history');
  t.same(await get('startTs=0&endTs=20000'), {}, 'history without keys → {}');
});

t.test('latest values and keys', async (t) => {
  const { gw, h, dev, base } = await setup(t);
  await seed(t, gw, dev.token, [
    { ts: 1000, values: { b: 1, a: 'x' } },
    { ts: 3000, values: { b: 2.5, c: true } },
    { ts: 2000, values: { b: 7 } },
  ]);
  const before = Date.now();
  const r = await http('GET', `${base}/values/timeseries?keys=b,nope`, undefined, h);
  const after = Date.now();
  const body = r.json<Answer>();
  t.same(body.b, [{ ts: 3000, value: '2.5' }], 'newest ts wins, not the last written');
  t.equal(body.nope?.[0]?.value, null, 'unknown key → value null');
  const nowTs = body.nope?.[0]?.ts ?? 0;
  t.ok(nowTs >= before - 1000 && nowTs <= after + 1000, 'unknown key reported at now');
  t.same(
    (await http('GET', `${base}/values/timeseries`, undefined, h)).json(),
    { a: [{ ts: 1000, value: 'x' }], b: [{ ts: 3000, value: '2.5' }], c: [{ ts: 3000, value: 'true' }] },
    'no keys → all latest',
  );
  const strict = await http('GET', `${base}/values/timeseries?keys=c,b&useStrictDataTypes=true`, undefined, h);
  t.equal(strict.text, '{"c":[{"ts":3000,"value":true}],"b":[{"ts":3000,"value":2.5}]}');
  t.same(
    (await http('GET', `${base}/values/timeseries?keys=b&startTs=0`, undefined, h)).json(),
    { b: [{ ts: 3000, value: '2.5' }] },
    'only startTs → latest (TB routing)',
  );
  t.same((await http('GET', `${base}/keys/timeseries`, undefined, h)).json(), ['a', 'b', 'c']);
});

t.test('a large raw page streams in order', async (t) => {
  const { gw, h, dev, base } = await setup(t);
  const n = 6000;
  await seed(
    t,
    gw,
    dev.token,
    Array.from({ length: n }, (_, i) => ({ ts: 1_000_000 + i, values: { v: i * 1.5 } })),
  );
  const r = await http(
    'GET',
    `${base}/values/timeseries?keys=v&startTs=0&endTs=2000000&limit=${n}&orderBy=ASC`,
    undefined,
    h,
  );
  t.equal(r.status, 200);
  const pts = r.json<Answer>().v ?? [];
  t.equal(pts.length, n);
  t.ok(
    pts.every((p, i) => p.ts === 1_000_000 + i),
    'ascending, none missing',
  );
  t.equal(pts[3]?.value, '4.5');
  t.equal(pts[2]?.value, '3', 'JSON 3 (from 2 × 1.5) is a long');
});

t.test('bad input → 400 TB JSON, errorCode 31', async (t) => {
  const { h, base, gw, dev } = await setup(t);
  const bad = async (path: string, why: string, method = 'GET'): Promise<void> => {
    const r = await http(method, `${path}`, undefined, h);
    t.equal(r.status, 400, why);
    const e = r.json<TbError>();
    t.equal(e.errorCode, 31, `${why}: errorCode`);
    t.equal(e.status, 400);
  };
  await bad(`${base}/values/timeseries?keys=t&startTs=0&endTs=100&agg=FOO&interval=10`, 'unknown agg');
  await bad(`${base}/values/timeseries?keys=t&startTs=abc&endTs=100`, 'non-numeric startTs');
  await bad(`${base}/values/timeseries?keys=t&startTs=0&endTs=100&interval=x&agg=AVG`, 'non-numeric interval');
  await bad(`${base}/values/timeseries?keys=t&startTs=0&endTs=100&limit=1.5`, 'non-numeric limit');
  await bad(`${base}/values/timeseries?keys=t&startTs=0&endTs=100&orderBy=SIDEWAYS`, 'bad orderBy');
  await bad(
    `${base}/values/timeseries?keys=t&startTs=0&endTs=100000&interval=100&agg=AVG`,
    'too many buckets (1000 > 700)',
  );
  await bad(`${base}/values/timeseries?keys=t&startTs=0&endTs=100&interval=-5&agg=AVG`, 'negative interval with agg');
  await bad(`${base}/values/timeseries/history?keys=t&startTs=0`, 'history endpoint needs endTs');
  await bad(`${gw.url}/api/plugins/telemetry/GADGET/${dev.id}/values/timeseries?keys=t`, 'bad entity type');
  await bad(`${gw.url}/api/plugins/telemetry/DEVICE/not-a-uuid/keys/timeseries`, 'bad entity id');
  const ok = await http(
    'GET',
    `${base}/values/timeseries?keys=t&startTs=0&endTs=100000&interval=100&agg=AVG&limit=5`,
    undefined,
    h,
  );
  t.equal(ok.status, 200, 'an explicit limit lifts the bucket cap');
});

t.test('REST writes (any entity type) and deletes', async (t) => {
  const { gw, h, dev, base } = await setup(t);
  const assetRes = await http('POST', `${gw.url}/api/asset`, { name: 'pump-house', type: 'building' }, h);
  t.equal(assetRes.status, 200, 'asset created');
  const asset = assetRes.json<{ id: { id: string } }>().id.id;
  const abase = `${gw.url}/api/plugins/telemetry/ASSET/${asset}`;

  const w = await http(
    'POST',
    `${abase}/timeseries/ANY`,
    '[{"ts":1000,"values":{"flow":1.0,"state":"on"}},{"ts":2000,"values":{"flow":2}}]',
    h,
  );
  t.equal(w.status, 200);
  t.equal(w.text, '');
  t.same(
    (await http('GET', `${abase}/values/timeseries?keys=flow&startTs=0&endTs=5000&orderBy=ASC`, undefined, h)).json(),
    {
      flow: [
        { ts: 1000, value: '1.0' },
        { ts: 2000, value: '2' },
      ],
    },
  );
  const plain = await http('POST', `${abase}/timeseries/ANY`, '{"pressure":3}', h);
  t.equal(plain.status, 200, 'object shape with server ts');

  const rejects: Array<[string, string]> = [
    ['{"flow":null,"other":5}', 'null value rejected'],
    ['{}', 'empty object'],
    ['[]', 'empty array'],
    ['{not json', 'malformed JSON'],
    ['42', 'not an object'],
  ];
  for (const [body, why] of rejects) {
    const r = await http('POST', `${abase}/timeseries/ANY`, body, h);
    t.equal(r.status, 400, why);
    t.equal(r.json<TbError>().errorCode, 31, `${why}: errorCode`);
  }
  const empty = await http('POST', `${abase}/timeseries/ANY`, '{}', h);
  t.match(empty.json<TbError>().message, 'No time series data found in request body!');
  t.same(
    (await http('GET', `${abase}/values/timeseries?keys=other`, undefined, h)).json<Answer>().other?.[0]?.value,
    null,
    'nothing of a rejected write stored',
  );

  // Deletes on the device.
  await seed(
    t,
    gw,
    dev.token,
    [1, 2, 3, 4, 5].map((v) => ({ ts: v * 1000, values: { d: v, e: v } })),
  );
  const del = async (q: string): Promise<number> =>
    (await http('DELETE', `${base}/timeseries/delete?${q}`, undefined, h)).status;
  t.equal(await del('startTs=0&endTs=10'), 400, 'keys required');
  t.equal(await del('keys=d'), 400, 'range required without deleteAllDataForKeys');
  t.equal(await del('keys=d&startTs=2000&endTs=4000'), 200);
  const raw = (
    await http('GET', `${base}/values/timeseries?keys=d&startTs=0&endTs=10000&orderBy=ASC`, undefined, h)
  ).json<Answer>();
  t.same(
    raw.d?.map((p) => p.ts),
    [1000, 4000, 5000],
    '[startTs, endTs) removed',
  );
  t.equal(await del('keys=d&startTs=5000&endTs=6000&rewriteLatestIfDeleted=true'), 200);
  t.same(
    (await http('GET', `${base}/values/timeseries?keys=d`, undefined, h)).json(),
    { d: [{ ts: 4000, value: '4' }] },
    'latest rewritten to the newest remaining point',
  );
  t.equal(await del('keys=d&startTs=0&endTs=10000&deleteLatest=false'), 200);
  t.same(
    (await http('GET', `${base}/values/timeseries?keys=d`, undefined, h)).json(),
    { d: [{ ts: 4000, value: '4' }] },
    'deleteLatest=false keeps the latest',
  );
  t.equal(await del('keys=e&deleteAllDataForKeys=true'), 200);
  t.equal(
    (await http('GET', `${base}/values/timeseries?keys=e`, undefined, h)).json<Answer>().e?.[0]?.value,
    null,
    'all data and latest gone',
  );
  t.same((await http('GET', `${base}/values/timeseries?keys=e&startTs=0&endTs=10000`, undefined, h)).json(), {});
});

t.test('access: 401 without a token, 404 unknown entity, 403 for another customer', async (t) => {
  const { gw, h, dev, base } = await setup(t);
  const cust = await cliJson<{ id: string }>(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'Acme']);
  await addUser(gw.dataDir, 'cu@example.com', 'secret-pw', 'CUSTOMER_USER', cust.id);
  const cu = authHeaders((await login(gw, 'cu@example.com', 'secret-pw')).token);
  t.equal((await http('GET', `${base}/keys/timeseries`)).status, 401);
  t.equal(
    (
      await http(
        'GET',
        `${gw.url}/api/plugins/telemetry/DEVICE/0b6f5e10-0000-4000-8000-000000000000/keys/timeseries`,
        undefined,
        h,
      )
    ).status,
    404,
  );
  t.equal(
    (await http('GET', `${base}/values/timeseries?keys=a`, undefined, cu)).status,
    403,
    'customer user, unassigned device',
  );
  t.equal((await http('POST', `${base}/timeseries/ANY`, '{"a":1}', cu)).status, 403, 'customer user cannot write');
  const assign = await http('POST', `${gw.url}/api/customer/${cust.id}/device/${dev.id}`, undefined, h);
  t.equal(assign.status, 200, 'assigned');
  t.equal(
    (await http('POST', `${base}/timeseries/ANY`, '{"a":1}', cu)).status,
    200,
    'assigned: customer user may write',
  );
  t.same((await http('GET', `${base}/values/timeseries?keys=a`, undefined, cu)).json<Answer>().a?.[0]?.value, '1');
});
