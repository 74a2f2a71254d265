/**
 * POST /api/v1/{token}/telemetry against the real daemon (docs/api.md): every shape, TB value typing end to
 * end, overwrite and latest rules (also across a restart), every error with nothing stored, body caps and
 * 404s. Data is read back from the store the daemon leaves behind (test/helpers/readback.ts).
 */
import { request as httpRequest } from 'node:http';
import t from 'tap';
import { type EntityDump, readEntity } from '../../helpers/readback.js';
import { addDevice, cliJson, http, startGateway } from '../../helpers/server.js';

interface TbError {
  status: number;
  message: string;
  errorCode: number;
  timestamp: number;
}

const MIB4 = 4 * 1024 * 1024;

/** A JSON object body of exactly `size` bytes: {"big":"xxx…"} */
function bodyOfSize(size: number): string {
  const overhead = '{"big":""}'.length;
  return `{"big":"${'x'.repeat(size - overhead)}"}`;
}

/**
 * POST through node:http so the body can be sent chunked (no Content-Length) or with a Content-Length.
 * The server may answer (413) before the upload is finished and close the socket; the answer still counts.
 */
function rawPost(url: string, body: Buffer, chunked: boolean): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (!chunked) headers['content-length'] = String(body.length);
    const req = httpRequest(url, { method: 'POST', headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        text += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      res.on('error', reject);
    });
    // EPIPE/ECONNRESET after the server answered early are expected; a missing answer fails via the timeout.
    req.on('error', (err) => setImmediate(() => reject(err)));
    req.setTimeout(20_000, () => req.destroy(new Error('no answer')));
    const piece = 64 * 1024;
    let off = 0;
    const pump = (): void => {
      while (off < body.length) {
        const chunk = body.subarray(off, off + piece);
        off += piece;
        if (!req.write(chunk)) {
          req.once('drain', pump);
          return;
        }
      }
      req.end();
    };
    pump();
  });
}

t.test('telemetry shapes, typing, overwrite rules, errors and caps', async (t) => {
  const gw = await startGateway(t);
  const shapes = await addDevice(gw.dataDir, 'shapes');
  const typing = await addDevice(gw.dataDir, 'typing');
  const overwrite = await addDevice(gw.dataDir, 'overwrite');
  const rejects = await addDevice(gw.dataDir, 'rejects');
  const big = await addDevice(gw.dataDir, 'big');
  let base = gw.url;
  const post = (dev: { token: string }, body: string | Buffer): ReturnType<typeof http> =>
    http('POST', `${base}/api/v1/${dev.token}/telemetry`, body);
  const expect200 = async (dev: { token: string }, body: string): Promise<void> => {
    const r = await post(dev, body);
    t.equal(r.status, 200, `200 for ${body.slice(0, 60)}`);
    t.equal(r.text, '', 'empty body on success');
  };

  // --- shapes (server ts recorded around the posts that use it) ---
  const before = Date.now();
  await expect200(shapes, '{"a":1}');
  await expect200(shapes, '{"ts":1000,"values":{"b":2.5}}');
  await expect200(shapes, '[{"ts":2000,"values":{"c":"x"}},{"d":true},{"ts":3000,"values":{"c":"y","e":null}}]');
  await expect200(shapes, '{"ts":5000}');
  await expect200(shapes, '{"values":{"f":1}}');
  await expect200(shapes, '{"ts":"7000","values":{"g":1}}');
  await expect200(shapes, '{}');
  await expect200(shapes, '[]');
  await expect200(shapes, '{"ts":6000,"values":{}}');
  await expect200(shapes, '{"h":null}');
  await expect200(shapes, ' \n {"ts":-5,"values":{"neg":1}} \n');
  const after = Date.now();

  // --- typing, end to end ---
  await expect200(
    typing,
    `{"ts":1000,"values":{"dbl":42.0,"lng":11,"exp":1E+1,"dexp":101E-1,"numstr":"17","decstr":"-1.5",
    "str":"abc","big":1E19,"maxlong":9223372036854775807,"bool":true,"json":{"x":[1.0,null]},"arr":[1,"a"],"nul":null,"sci":1.0E10}}`,
  );

  // --- overwrite and latest ---
  await expect200(overwrite, '{"ts":1000,"values":{"k":1}}');
  await expect200(overwrite, '{"ts":1000,"values":{"k":2}}');
  await expect200(overwrite, '{"ts":3000,"values":{"k":3}}');
  await expect200(overwrite, '{"ts":2000,"values":{"k":99}}');
  await expect200(overwrite, '[{"ts":4000,"values":{"m":1}},{"ts":4000,"values":{"m":2}}]');
  await expect200(overwrite, '[{"ts":6000,"values":{"n":6}},{"ts":5000,"values":{"n":5}}]');

  // --- every error; none may store anything on the `rejects` device ---
  const bad: Array<[string, RegExp]> = [
    ['{abc', /Invalid JSON/],
    ['', /Invalid JSON/],
    ['{"a":1} trailing', /Invalid JSON/],
    ['42', /JSON object or an array/],
    ['"str"', /JSON object or an array/],
    ['null', /JSON object or an array/],
    ['true', /JSON object or an array/],
    ['[{"a":1},5]', /array element 1 is not a JSON object/],
    ['[{"a":1},[{"b":2}]]', /array element 1/],
    ['{"ts":1,"values":5}', /"values" must be a JSON object/],
    ['{"ts":1,"values":[1]}', /"values" must be a JSON object/],
    ['{"ts":1,"values":null}', /"values" must be a JSON object/],
    ['{"":1}', /blank/],
    ['{"  ":1}', /blank/],
    ['{"ts":1,"values":{"":1}}', /blank/],
    [`{"${'k'.repeat(256)}":1}`, /longer than 255/],
    ['{"ts":"abc","values":{"a":1}}', /"ts"/],
    ['{"ts":1E400,"values":{"a":1}}', /"ts"/],
    ['{"a":1E999999999}', /out of range/],
    // all-or-nothing: good elements before a bad last one are not stored
    ['[{"ts":1,"values":{"ok":1}},{"ts":2,"values":{"ok":2}},{"ts":3,"values":7}]', /"values" must be a JSON object/],
    ['[{"ts":1,"values":{"ok":1}},{"ok":2},{"":3}]', /blank/],
  ];
  for (const [body, msg] of bad) {
    const r = await post(rejects, body);
    t.equal(r.status, 400, `400 for ${body.slice(0, 50)}`);
    t.match(r.headers.get('content-type'), /application\/json/);
    const e = r.json<TbError>();
    t.equal(e.status, 400);
    t.equal(e.errorCode, 31, 'TB errorCode 31');
    t.match(e.message, msg);
    t.ok(Math.abs(e.timestamp - Date.now()) < 60_000, 'timestamp is now (ms)');
  }

  // 401 before the body is looked at: bad JSON, wrong shape and an oversized body all answer 401
  for (const body of ['{abc', '42', '{"ok":1}']) {
    const r = await http('POST', `${gw.url}/api/v1/no-such-token/telemetry`, body);
    t.equal(r.status, 401, `401 for an unknown token with body ${body}`);
    t.equal(r.json<TbError>().errorCode, 10);
  }
  const unauthBig = await rawPost(`${gw.url}/api/v1/no-such-token/telemetry`, Buffer.from(bodyOfSize(MIB4 + 1)), false);
  t.equal(unauthBig.status, 401, '401 (not 413) for an unknown token with an oversized body');

  // 413 over the 4 MiB cap, declared (Content-Length) and undeclared (chunked); exactly 4 MiB is accepted
  const tooBig = Buffer.from(bodyOfSize(MIB4 + 1));
  for (const chunked of [false, true]) {
    const r = await rawPost(`${gw.url}/api/v1/${rejects.token}/telemetry`, tooBig, chunked);
    t.equal(r.status, 413, `413 over the cap (${chunked ? 'chunked' : 'content-length'})`);
    const e = JSON.parse(r.text) as TbError;
    t.equal(e.message, `Payload size exceeds the limit of ${MIB4} bytes`);
  }
  const atCap = await rawPost(`${gw.url}/api/v1/${big.token}/telemetry`, Buffer.from(bodyOfSize(MIB4)), true);
  t.equal(atCap.status, 200, 'a body of exactly 4 MiB is accepted');

  // 404 for unknown paths and methods, as TB error JSON
  for (const [method, path] of [
    ['POST', `/api/v1/${shapes.token}/nothing-here`],
    ['GET', `/api/v1/${shapes.token}/telemetry`],
    ['PUT', `/api/v1/${shapes.token}/telemetry`],
    ['DELETE', `/api/v1/${shapes.token}/telemetry`],
    ['GET', '/no/such/path'],
    ['POST', '/api/v2/x/telemetry'],
  ] as const) {
    const r = await http(method, `${gw.url}${path}`, method === 'GET' ? undefined : '{"a":1}');
    t.equal(r.status, 404, `404 for ${method} ${path}`);
    t.equal(r.json<TbError>().errorCode, 32);
  }

  // the daemon is still healthy and the connection reuse after 413s works
  await expect200(shapes, '{"ts":8000,"values":{"after":1}}');

  t.equal(await gw.stop('SIGTERM'), 0, 'SIGTERM → exit 0');

  // --- read back ---
  const s = await readEntity(gw.dataDir, shapes.id);
  const serverTs = (p: { ts: number } | undefined): boolean => p !== undefined && p.ts >= before && p.ts <= after;
  t.same(
    Object.keys(s.latest).sort(),
    ['a', 'after', 'b', 'c', 'd', 'g', 'neg', 'ts', 'values'],
    'exactly the posted keys; nulls skipped',
  );
  t.ok(serverTs(s.latest['a']), 'object shape gets the server ts');
  t.same(s.points['b'], [{ ts: 1000, type: 'DOUBLE', value: '2.5' }]);
  t.same(
    s.points['c'],
    [
      { ts: 2000, type: 'STRING', value: 'x' },
      { ts: 3000, type: 'STRING', value: 'y' },
    ],
    'array mixing both shapes',
  );
  t.ok(serverTs(s.latest['d']), 'plain object inside an array gets the server ts');
  t.equal(s.latest['ts']?.value, '5000', 'an object with only "ts" is a plain key');
  t.equal(s.latest['ts']?.type, 'LONG');
  t.ok(serverTs(s.latest['ts']));
  t.same(
    { type: s.latest['values']?.type, value: s.latest['values']?.value },
    { type: 'JSON', value: '{"f":1}' },
    'an object with only "values" is a plain key',
  );
  t.same(s.points['g'], [{ ts: 7000, type: 'LONG', value: '1' }], 'a numeric-string ts is accepted');
  t.same(s.points['neg'], [{ ts: -5, type: 'LONG', value: '1' }], 'negative ts');

  const ty = await readEntity(gw.dataDir, typing.id);
  const typed = Object.fromEntries(Object.entries(ty.latest).map(([k, p]) => [k, [p.type, p.value, p.ts]]));
  t.same(
    typed,
    {
      dbl: ['DOUBLE', '42.0', 1000],
      lng: ['LONG', '11', 1000],
      exp: ['LONG', '10', 1000],
      dexp: ['DOUBLE', '10.1', 1000],
      numstr: ['LONG', '17', 1000],
      decstr: ['DOUBLE', '-1.5', 1000],
      str: ['STRING', 'abc', 1000],
      big: ['STRING', '10000000000000000000', 1000],
      maxlong: ['LONG', '9223372036854775807', 1000],
      bool: ['BOOLEAN', 'true', 1000],
      json: ['JSON', '{"x":[1.0,null]}', 1000],
      arr: ['JSON', '[1,"a"]', 1000],
      sci: ['LONG', '10000000000', 1000],
    },
    'TB typing survives the store',
  );

  const o = await readEntity(gw.dataDir, overwrite.id);
  t.same(
    o.points['k'],
    [
      { ts: 1000, type: 'LONG', value: '2' },
      { ts: 2000, type: 'LONG', value: '99' },
      { ts: 3000, type: 'LONG', value: '3' },
    ],
    'same (key, ts) overwrites; an older point is stored',
  );
  t.same(o.latest['k'], { ts: 3000, type: 'LONG', value: '3' }, 'latest never moves back to an older ts');
  t.same(o.points['m'], [{ ts: 4000, type: 'LONG', value: '2' }], 'within one request the later element wins');
  t.same(o.latest['m'], { ts: 4000, type: 'LONG', value: '2' });
  t.same(
    o.latest['n'],
    { ts: 6000, type: 'LONG', value: '6' },
    'an older element later in the array does not move latest back',
  );

  const r = await readEntity(gw.dataDir, rejects.id);
  t.same(r, { latest: {}, points: {} }, 'nothing from any rejected request was stored');

  const b = await readEntity(gw.dataDir, big.id);
  t.equal(b.latest['big']?.value.length, MIB4 - '{"big":""}'.length, 'the 4 MiB value is stored whole');

  // --- latest survives a restart: an older point posted afterwards still does not replace it ---
  const gw2 = await startGateway(t, { dataDir: gw.dataDir });
  base = gw2.url;
  await expect200(overwrite, '{"ts":2500,"values":{"k":7}}');
  await expect200(overwrite, '{"ts":9000,"values":{"m":9}}');
  t.equal(await gw2.stop('SIGTERM'), 0);
  const o2 = await readEntity(gw.dataDir, overwrite.id);
  t.same(
    o2.latest['k'],
    { ts: 3000, type: 'LONG', value: '3' },
    'after a restart an older point still does not move latest back',
  );
  t.same(o2.latest['m'], { ts: 9000, type: 'LONG', value: '9' }, 'a newer point after a restart does');
  t.equal(o2.points['k']?.length, 4);
});

t.test('a device created by the CLI while the daemon runs is usable at once', async (t) => {
  const gw = await startGateway(t);
  const before = await http('POST', `${gw.url}/api/v1/late-token/telemetry`, '{"a":1}');
  t.equal(before.status, 401);
  const dev = await addDevice(gw.dataDir, 'late', ['--token', 'late-token']);
  const r = await http('POST', `${gw.url}/api/v1/late-token/telemetry`, '{"ts":1,"values":{"a":1}}');
  t.equal(r.status, 200, 'no restart needed');

  // README "Try it": a CLI user logs in and reads the point back through the REST API
  await cliJson([
    'user',
    'add',
    '--data-dir',
    gw.dataDir,
    '--email',
    'try@example.com',
    '--password',
    'secret',
    '--authority',
    'TENANT_ADMIN',
  ]);
  const login = await http('POST', `${gw.url}/api/auth/login`, { username: 'try@example.com', password: 'secret' });
  t.equal(login.status, 200);
  const values = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/values/timeseries?keys=a`,
    undefined,
    { 'X-Authorization': `Bearer ${login.json<{ token: string }>().token}` },
  );
  t.equal(values.status, 200);
  t.same(values.json(), { a: [{ ts: 1, value: '1' }] }, 'the posted point, as TB renders it');
  t.equal(await gw.stop(), 0);
  const dump: EntityDump = await readEntity(gw.dataDir, dev.id);
  t.same(dump.points['a'], [{ ts: 1, type: 'LONG', value: '1' }]);
});

t.test('batches arrive whole: one buffer of the declared length, or chunks collected past 256 KiB', async (t) => {
  const gw = await startGateway(t);
  const dev = await addDevice(gw.dataDir, 'batches', ['--token', 'batch-token']);
  const url = `${gw.url}/api/v1/batch-token/telemetry`;
  const batch = (from: number, n: number): string =>
    `[${Array.from({ length: n }, (_, i) => `{"ts":${from + i},"values":{"t":${(i % 997) / 4},"c":${from + i},"s":"v${i % 5}"}}`).join(',')}]`;
  const sizes: Array<[from: number, n: number]> = [
    [1_000_000, 1000],
    [2_000_000, 6000],
  ];
  for (const [from, n] of sizes) {
    const body = Buffer.from(batch(from, n));
    for (const chunked of [false, true]) {
      const r = await rawPost(url, body, chunked);
      t.equal(r.status, 200, `${n} records, ${body.length} bytes, ${chunked ? 'chunked' : 'with a Content-Length'}`);
    }
  }
  t.equal(await gw.stop(), 0);
  const dump = await readEntity(gw.dataDir, dev.id);
  t.equal(dump.points['c']?.length, 7000, 'every record of both batches is stored once (the re-post overwrote)');
  // "t" posts 0, 0.25, 0.5, …, 1, 1.25: a LONG among DOUBLEs, each typed as posted
  t.same(
    dump.points['t']?.slice(0, 3),
    [
      { ts: 1_000_000, type: 'LONG', value: '0' },
      { ts: 1_000_001, type: 'DOUBLE', value: '0.25' },
      { ts: 1_000_002, type: 'DOUBLE', value: '0.5' },
    ],
    'a column mixing LONG and DOUBLE keeps each type',
  );
  t.same(dump.points['s']?.at(-1), { ts: 2_005_999, type: 'STRING', value: 'v4' });
  t.same(dump.points['c']?.at(-1), { ts: 2_005_999, type: 'LONG', value: '2005999' });
});
