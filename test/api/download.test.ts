import t from 'tap';
import { bearer, csvFixture } from '../helpers/csv-fixture.js';
import { csvObjects, parseCsv } from '../helpers/csv-parse.js';
import { http } from '../helpers/server.js';
import { authHeaders } from '../helpers/users.js';

/**
 * Recent timestamps: the store may drop raw points older than its retention (config downsample.rawRetentionMs).
 * A round number, so offsets read well in expectations.
 */
const BASE = Math.floor((Date.now() - 3_600_000) / 1_000_000) * 1_000_000;
const at = (offset: number): number => BASE + offset;
const TRICKY = 'comma, "quotes", new\nline, crlf\r\nend ☃ żółw 𝄞';

t.test('CSV downloads: layout, quoting, bounds, errors, access', async (t) => {
  const f = await csvFixture(t);
  const dl = `${f.gw.url}/api/download`;
  const series = (q: string, h: Record<string, string> = bearer(f.admin)) =>
    http('GET', `${dl}/deviceSeriesData?${q}`, undefined, h);
  const devQ = `deviceId=${f.dev.id}`;

  // Raw JSON text: literals such as 42.0 and 9007199254740993 must reach the gateway as written.
  const tel = await http(
    'POST',
    `${f.gw.url}/api/v1/${f.dev.token}/telemetry`,
    `[
    {"ts":${at(1000)},"values":{"temp":42.0,"note":${JSON.stringify(TRICKY)},"cfg":{"tag":"value","list":[1,2]}}},
    {"ts":${at(2000)},"values":{"temp":21.5,"flag":true}},
    {"ts":${at(3000)},"values":{"big":9007199254740993,"note":""}},
    {"ts":${at(4000)},"values":{"temp":12345678.5}},
    {"ts":${at(500)},"values":{"temp":-1}}
  ]`,
  );
  t.equal(tel.status, 200);

  // Time series, inclusive [1000, 3000].
  const r = await series(`${devQ}&type=ts&startValue=${at(1000)}&endValue=${at(3000)}`);
  t.equal(r.status, 200);
  t.match(r.headers.get('content-type'), /^text\/csv/);
  t.equal(r.headers.get('content-disposition'), 'attachment; filename="device_data.csv"');
  const { header, rows } = csvObjects(r.text);
  t.same(header, ['ts', 'big', 'cfg', 'flag', 'note', 'temp'], 'ts first, then keys sorted');
  t.same(
    rows.map((x) => x['ts']),
    [at(1000), at(2000), at(3000)].map(String),
    'one row per ts, ascending, bounds inclusive',
  );
  t.same(rows[0], {
    ts: String(at(1000)),
    big: '',
    cfg: '{"tag":"value","list":[1,2]}',
    flag: '',
    note: TRICKY,
    temp: '42.0',
  });
  t.same(rows[1], { ts: String(at(2000)), big: '', cfg: '', flag: 'true', note: '', temp: '21.5' });
  t.same(rows[2], { ts: String(at(3000)), big: '9007199254740993', cfg: '', flag: '', note: '', temp: '' });
  t.ok(
    r.text.startsWith(
      `ts,big,cfg,flag,note,temp\n${at(1000)},,"{""tag"":""value"",""list"":[1,2]}",,"comma, ""quotes"", new\nline, crlf\r\nend ☃ żółw 𝄞",42.0\n`,
    ),
    'RFC 4180 quoting on the wire',
  );
  t.ok(r.text.endsWith(`\n${at(3000)},9007199254740993,,,"",\n`), 'an empty string is "" and a missing cell is empty');

  const everything = parseCsv(
    (await series(`${devQ}&type=ts&startValue=-9223372036854775808&endValue=9223372036854775807`)).text,
  );
  t.same(
    everything.map((row) => row[0]),
    ['ts', ...[500, 1000, 2000, 3000, 4000].map((o) => String(at(o)))],
    'long extremes accepted',
  );
  t.same(everything[5], [String(at(4000)), '', '', '', '', '1.23456785E7'], 'doubles rendered the Java way');
  const onlyTemp = await series(`${devQ}&type=ts&startValue=${at(4000)}&endValue=${at(4000)}`);
  t.equal(onlyTemp.text, `ts,temp\n${at(4000)},1.23456785E7\n`, 'only keys with points in range become columns');

  // Empty range → header only.
  t.equal((await series(`${devQ}&type=ts&startValue=${at(5000)}&endValue=${at(6000)}`)).text, 'ts\n');
  t.equal(
    (await series(`${devQ}&type=ts&startValue=${at(3000)}&endValue=${at(1000)}`)).text,
    'ts\n',
    'inverted range is empty',
  );
  t.equal((await series(`${devQ}&type=ds&startValue=0&endValue=1`)).text, 'ds\n', 'no depth data');

  // Depth series: negative and fractional depths, Tempus ds rendering.
  const depth = await http(
    'POST',
    `${f.gw.url}/api/v1/${f.dev.token}/depth/telemetry`,
    `[
    {"ds":4000,"values":{"rop":12.5,"lith":"shale, grey"}},
    {"ds":-2.5,"values":{"rop":1}},
    {"ds":0.125,"values":{"lith":"sand"}},
    {"ds":0,"values":{"rop":0.0}},
    {"ds":5000.75,"values":{"rop":3}}
  ]`,
  );
  t.equal(depth.status, 200);
  const ds = await series(`${devQ}&type=ds&startValue=-2.5&endValue=4000`);
  t.equal(ds.status, 200);
  t.equal(ds.headers.get('content-disposition'), 'attachment; filename="device_data.csv"');
  t.equal(ds.text, 'ds,lith,rop\n-2.5,,1\n0.0,,0.0\n0.125,sand,\n4000.0,"shale, grey",12.5\n');
  t.equal(
    (await series(`${devQ}&type=ds&startValue=-1e3&endValue=Infinity`)).text.split('\n').length - 2,
    5,
    'exponent and Infinity bounds',
  );

  // Bad parameters → 400 TB error JSON; nothing streamed.
  const badQueries = [
    `${devQ}&type=xs&startValue=1&endValue=2`,
    `${devQ}&type=ts&startValue=abc&endValue=2`,
    `${devQ}&type=ts&startValue=1.5&endValue=2`,
    `${devQ}&type=ts&startValue=1&endValue=99999999999999999999`,
    `${devQ}&type=ds&startValue=1&endValue=NaN`,
    `${devQ}&type=ds&startValue=deep&endValue=2`,
    `${devQ}&type=ts&startValue=1`,
    `${devQ}&startValue=1&endValue=2`,
    'type=ts&startValue=1&endValue=2',
  ];
  for (const q of badQueries) {
    const b = await series(q);
    t.equal(b.status, 400, q);
    t.equal(b.json<{ errorCode: number }>().errorCode, 31, `${q}: errorCode`);
  }

  // Auth and access (docs/api.md).
  const okQ = `type=ts&startValue=${at(0)}&endValue=${at(10000)}`;
  t.equal((await series(`${devQ}&${okQ}`, {})).status, 401, 'no credentials');
  t.equal((await series(`${devQ}&${okQ}`, bearer('not.a.jwt'))).status, 401, 'bad token');
  t.equal((await series(`${devQ}&${okQ}`, authHeaders(f.admin))).status, 200, 'X-Authorization accepted');
  t.equal((await series(`${devQ}&${okQ}`, bearer(f.acmeUser))).status, 403, 'customer user, unassigned device');
  const acmeQ = `deviceId=${f.acmeDev.id}&${okQ}`;
  t.equal((await series(acmeQ, bearer(f.otherUser))).status, 403, 'customer user of another customer');
  const own = await series(acmeQ, bearer(f.acmeUser));
  t.equal(own.status, 200, 'customer user, own device');
  t.equal(own.text, 'ts\n');
  const unknown = await series(`deviceId=00000000-0000-4000-8000-000000000000&${okQ}`);
  t.equal(unknown.status, 404);
  t.equal(unknown.json<{ errorCode: number }>().errorCode, 32);
  t.equal(
    (await http('GET', `${dl}/deviceAttributesData?deviceId=${f.acmeDev.id}`, undefined, bearer(f.otherUser))).status,
    403,
  );
  t.equal(
    (
      await http(
        'GET',
        `${dl}/deviceAttributesData?deviceId=00000000-0000-4000-8000-000000000000`,
        undefined,
        bearer(f.admin),
      )
    ).status,
    404,
  );
  t.equal(
    (await http('GET', `${dl}/deviceAttributesData`, undefined, bearer(f.admin))).status,
    400,
    'deviceId required',
  );

  // Attributes: all scopes merged, wide by last_update_ts.
  const empty = await http('GET', `${dl}/deviceAttributesData?deviceId=${f.dev.id}`, undefined, bearer(f.admin));
  t.equal(empty.status, 200);
  t.equal(empty.headers.get('content-disposition'), 'attachment; filename="device_attributes_data.csv"');
  // before any attribute is posted: the device's connectivity state (src/device/state.ts), active at its post
  t.match(empty.text, /^last_update_ts,active,lastActivityTime\n(\d+,(true)?,\d*\n)+$/);
  t.equal(
    (await http('POST', `${f.gw.url}/api/v1/${f.dev.token}/attributes`, { fw: '1.2, beta', serial: 77 })).status,
    200,
  );
  const srv = await http(
    'POST',
    `${f.gw.url}/api/plugins/telemetry/DEVICE/${f.dev.id}/attributes/SERVER_SCOPE`,
    { zone: 'north "A"', active: false },
    authHeaders(f.admin),
  );
  t.equal(srv.status, 200);
  const attrs = await http('GET', `${dl}/deviceAttributesData?deviceId=${f.dev.id}`, undefined, bearer(f.admin));
  t.equal(attrs.status, 200);
  const a = csvObjects(attrs.text);
  t.same(a.header, ['last_update_ts', 'active', 'fw', 'lastActivityTime', 'serial', 'zone']);
  const cells = new Map<string, string[]>();
  for (const row of a.rows) {
    for (const [k, v] of Object.entries(row))
      if (k !== 'last_update_ts' && k !== 'lastActivityTime' && v !== '') cells.set(k, [...(cells.get(k) ?? []), v]);
  }
  t.same(
    Object.fromEntries(cells),
    { active: ['false'], fw: ['1.2, beta'], serial: ['77'], zone: ['north "A"'] },
    'each attribute once',
  );
  const tsCol = a.rows.map((row) => Number(row['last_update_ts']));
  t.ok(
    tsCol.length >= 1 &&
      tsCol.length <= 3 &&
      tsCol.every((x, i) => Number.isInteger(x) && (i === 0 || x > (tsCol[i - 1] as number))),
    `rows ascending by last_update_ts: ${tsCol.join(',')}`,
  );
});

t.test(
  'CSV download of many rows: complete, ordered, chunked, and the server survives a client that leaves',
  async (t) => {
    const f = await csvFixture(t, false);
    const N = 30_000;
    // 0.7 s apart over ~5.8 hours ending before BASE: several store windows (some old enough to be compacted),
    // so pages are cut at window boundaries.
    const tsOf = (n: number): number => BASE - 6 * 3_600_000 + n * 700;
    for (let base = 0; base < N; base += 1000) {
      const batch = Array.from({ length: 1000 }, (_, i) => {
        const n = base + i;
        return { ts: tsOf(n), values: n % 3 === 0 ? { a: n, b: `v${n}` } : { a: n } };
      });
      const r = await http('POST', `${f.gw.url}/api/v1/${f.dev.token}/telemetry`, JSON.stringify(batch));
      if (r.status !== 200) t.fail(`seed failed: ${r.status} ${r.text}`);
    }
    const url = `${f.gw.url}/api/download/deviceSeriesData?deviceId=${f.dev.id}&type=ts&startValue=${tsOf(0)}&endValue=${tsOf(N)}`;
    const full = await http('GET', url, undefined, bearer(f.admin));
    const rows = parseCsv(full.text);
    t.same(rows[0], ['ts', 'a', 'b']);
    t.equal(rows.length - 1, N, 'every row');
    let bad = 0;
    for (let i = 1; i < rows.length; i++) {
      const n = i - 1;
      const want = n % 3 === 0 ? [String(tsOf(n)), String(n), `v${n}`] : [String(tsOf(n)), String(n), ''];
      if (JSON.stringify(rows[i]) !== JSON.stringify(want)) bad++;
    }
    t.equal(bad, 0, 'rows ascending with the right cells across page boundaries');

    // A client that reads one chunk and goes away.
    const ac = new AbortController();
    const res = await fetch(url, { headers: bearer(f.admin), signal: ac.signal });
    if (res.body === null) throw new Error('the download answered without a body');
    const reader = res.body.getReader();
    const first = await reader.read();
    t.ok(first.value && first.value.length > 0, 'got a first chunk');
    ac.abort();
    await reader.read().catch(() => undefined);
    const after = await http(
      'GET',
      `${f.gw.url}/api/download/deviceSeriesData?deviceId=${f.dev.id}&type=ts&startValue=${tsOf(0)}&endValue=${tsOf(2)}`,
      undefined,
      bearer(f.admin),
    );
    t.equal(
      after.text,
      `ts,a,b\n${tsOf(0)},0,v0\n${tsOf(1)},1,\n${tsOf(2)},2,\n`,
      'server still serves after an aborted download',
    );
  },
);
