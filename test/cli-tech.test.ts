/**
 * The technician's CLI (CONTRACT §10) against a real daemon, every command in both modes: local (the data dir
 * read-only beside the running daemon) and remote (--url after outpost login). `--json` must be REST's answer
 * byte for byte in both modes, `export` the REST download; errors are one line with exit 1.
 */
import { spawn } from 'node:child_process';
import { readFileSync, statSync, writeFileSync, existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { type CliResult, MAIN, addDevice, cli, cliJson, http, startGateway, tempDir } from './helpers/server.js';
import { addUser, authHeaders, login } from './helpers/users.js';

const HOUR = 3_600_000;

function ok(t: Test, r: CliResult, what: string): string {
  t.equal(r.code, 0, `${what}: exit 0${r.code === 0 ? '' : ` (${r.stderr.trim()})`}`);
  return r.stdout;
}

function failsOneLine(t: Test, r: CliResult, msg: RegExp, what: string): void {
  t.equal(r.code, 1, `${what}: exit 1`);
  const lines = r.stderr.trimEnd().split('\n');
  t.equal(lines.length, 1, `${what}: one line (${r.stderr.trim()})`);
  t.match(lines[0], msg, what);
}

t.test('every command, local and remote, against one daemon', async (t) => {
  const gw = await startGateway(t);
  const cfg = tempDir(t);
  const env = { XDG_CONFIG_HOME: cfg, TZ: 'UTC', NO_COLOR: '1', COLUMNS: '100', OUTPOST_URL: '' };
  const run = (args: string[]): Promise<CliResult> => cli(args, env);
  const L = ['--data-dir', gw.dataDir];
  const R = ['--url', gw.url];

  await addUser(gw.dataDir, 'tech@example.com', 'pw', 'TENANT_ADMIN');
  const acme = await cliJson<{ id: string }>(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'Acme']);
  const pump = await addDevice(gw.dataDir, 'pump-1', ['--customer', 'Acme', '--token', 'PUMP1']);
  await addDevice(gw.dataDir, 'valve-7', ['--token', 'VALVE7']);
  const now = Date.now();
  const points = Array.from({ length: 120 }, (_, i) => ({ ts: now - 2 * HOUR + i * 60_000, values: { t: 20 + (i % 9) / 2, n: i, s: `s${i % 3}` } }));
  t.equal((await http('POST', `${gw.url}/api/v1/PUMP1/telemetry`, points)).status, 200);
  t.equal((await http('POST', `${gw.url}/api/v1/PUMP1/attributes`, { fw: '1.2.3', slot: 4 })).status, 200);
  const { token } = await login(gw, 'tech@example.com', 'pw');
  const H = authHeaders(token);
  t.equal((await http('POST', `${gw.url}/api/plugins/telemetry/DEVICE/${pump.id}/attributes/SHARED_SCOPE`, { target: 21.5 }, H)).status, 200);

  // remote commands before login fail with a hint
  failsOneLine(t, await run(['latest', 'pump-1', ...R]), /^outpost: not logged in to .* outpost login/, 'not logged in');
  failsOneLine(t, await run(['login', ...R, '--username', 'tech@example.com', '--password', 'nope']), /^outpost: 401: Invalid username or password$/, 'bad password');
  t.match(ok(t, await run(['login', ...R, '--username', 'tech@example.com', '--password', 'pw']), 'login'), /logged in to http:\/\/127\.0\.0\.1:\d+ as tech@example\.com/);
  const credFile = join(cfg, 'outpost', 'credentials.json');
  t.equal(statSync(credFile).mode & 0o777, 0o600, 'credentials file is 0600');

  // a stored access token that has expired is refreshed transparently
  const creds = JSON.parse(readFileSync(credFile, 'utf8')) as Record<string, { token: string }>;
  const stored = Object.values(creds)[0] as { token: string };
  const [h, p, s] = stored.token.split('.') as [string, string, string];
  const claims = JSON.parse(Buffer.from(p, 'base64url').toString()) as { exp: number };
  stored.token = `${h}.${Buffer.from(JSON.stringify({ ...claims, exp: Math.floor(Date.now() / 1000) - 10 })).toString('base64url')}.${s}`;
  writeFileSync(credFile, JSON.stringify(creds), { mode: 0o600 });

  // devices --json: the same in both modes
  const [dl, dr] = await Promise.all([run(['devices', ...L, '--json']), run(['devices', ...R, '--json'])]);
  t.equal(ok(t, dl, 'devices local'), ok(t, dr, 'devices remote'), 'devices --json: same bytes in both modes');
  const devs = JSON.parse(dl.stdout) as Array<Record<string, unknown>>;
  t.same(devs.map((d) => Object.keys(d)), [['id', 'name', 'type', 'customer', 'lastActivityTs'], ['id', 'name', 'type', 'customer', 'lastActivityTs']]);
  t.same(devs.map((d) => [d['name'], d['customer'], d['lastActivityTs']]), [['pump-1', 'Acme', (points.at(-1) as { ts: number }).ts], ['valve-7', null, null]]);
  const stillStored = JSON.parse(readFileSync(credFile, 'utf8')) as Record<string, { token: string }>;
  t.not(Object.values(stillStored)[0]?.token, stored.token, 'the expired access token was refreshed and stored');

  // latest --json == REST latest, both modes
  const restLatest = (await http('GET', `${gw.url}/api/plugins/telemetry/DEVICE/${pump.id}/values/timeseries?keys=t,s`, undefined, H)).text;
  // independent read-only commands run side by side (separate processes), in both modes
  const latestRuns = await Promise.all([L, R].flatMap((mode) => [run(['latest', 'pump-1', '--keys', 't,s', ...mode, '--json']), run(['latest', pump.id, ...mode])]));
  for (const [i, mode] of [L, R].entries()) {
    t.equal(ok(t, latestRuns[2 * i] as CliResult, 'latest').trim(), restLatest, `latest --json == REST (${mode[0]})`);
    const human = ok(t, latestRuns[2 * i + 1] as CliResult, 'latest table');
    t.match(human, /^KEY\s+VALUE\s+TIME\s+LAST HOUR\n/, 'latest: a table');
    t.match(human, /\nt\s+\S+\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\S*\s+[▁▂▃▄▅▆▇█ ]+\n/, 'latest: local time and a sparkline');
  }

  // query: --json == REST for raw and aggregated, both modes; csv and chart identical across modes
  const from = now - 3 * HOUR;
  const queries: Array<[string[], string]> = [
    [['--keys', 't,n,s', '--from', String(from), '--to', String(now)], `keys=t,n,s&startTs=${from}&endTs=${now}&interval=0&agg=NONE&orderBy=ASC`],
    [['--keys', 't', '--from', String(from), '--to', String(now), '--limit', '7'], `keys=t&startTs=${from}&endTs=${now}&interval=0&agg=NONE&orderBy=ASC&limit=7`],
    [['--keys', 't,n', '--from', String(from), '--to', String(now), '--agg', 'AVG', '--interval', '20m'], `keys=t,n&startTs=${from}&endTs=${now}&interval=1200000&agg=AVG&orderBy=ASC`],
    [['--keys', 's,n', '--from', String(from), '--to', String(now), '--agg', 'MAX', '--interval', '3600000'], `keys=s,n&startTs=${from}&endTs=${now}&interval=3600000&agg=MAX&orderBy=ASC`],
  ];
  await Promise.all(queries.map(async ([args, qs]) => {
    const rest = (await http('GET', `${gw.url}/api/plugins/telemetry/DEVICE/${pump.id}/values/timeseries?${qs}`, undefined, H)).text;
    const [l, r] = await Promise.all([run(['query', 'pump-1', ...args, ...L, '--json']), run(['query', 'pump-1', ...args, ...R, '--json'])]);
    t.equal(ok(t, l, 'query local').trim(), rest, `query ${args.join(' ')}: local --json == REST`);
    t.equal(ok(t, r, 'query remote').trim(), rest, `query ${args.join(' ')}: remote --json == REST`);
  }));
  const qa = ['query', 'pump-1', '--keys', 't,n', '--from', String(from), '--to', String(now), '--limit', '1000'];
  for (const fmt of ['--csv', '--chart', '--table']) {
    const extra = fmt === '--table' ? [] : [fmt];
    const [l, r] = await Promise.all([run([...qa, ...extra, ...L]), run([...qa, ...extra, ...R])]);
    t.equal(ok(t, l, `query ${fmt} local`), ok(t, r, `query ${fmt} remote`), `query ${fmt}: same output in both modes`);
  }
  const csv = (await run([...qa, '--csv', ...L])).stdout.split('\n');
  t.equal(csv[0], 'ts,t,n');
  t.equal(csv.length, 122, 'csv: header, 120 rows, final newline');
  const chart = (await run([...qa, '--chart', ...L])).stdout.split('\n');
  t.ok(chart.every((l) => [...l].length <= 100), 'chart fits $COLUMNS');
  t.match(chart[0], /^t {2}min 20 {2}max 24 {2}\(120 points\)$/);
  t.ok(chart.some((l) => /[\u2801-\u28ff]/.test(l)), 'braille dots');
  const failures: Array<[string[], RegExp, string]> = [
    [['query', 'pump-1', '--keys', 't', '--from', 'yesterday', ...L], /^outpost: --from "yesterday": expected now, -6h/, 'bad time'],
    [['query', 'pump-1', '--keys', 't', '--agg', 'AVG', ...L], /needs --interval/, 'agg without interval'],
    [['latest', 'pump1', ...L], /^outpost: no device "pump1"; did you mean "pump-1"\?$/, 'did you mean (local)'],
    [['latest', 'valve7', ...R], /^outpost: no device "valve7"; did you mean "valve-7"\?$/, 'did you mean (remote)'],
    [['query', 'pump-1', '--keys', 't', '--from', '0', '--to', String(now), '--agg', 'AVG', '--interval', '1m', ...R], /^outpost: 400: /, 'REST refusal (too many buckets), one line'],
    [['devices', '--data-dir', join(cfg, 'nowhere')], /^outpost: no store in /, 'no store here'],
  ];
  const failed = await Promise.all(failures.map(([args]) => run(args)));
  failures.forEach(([, msg, what], i) => failsOneLine(t, failed[i] as CliResult, msg, what));

  // attributes --json == REST, both modes
  await Promise.all(([[undefined, ''], ['shared', '/SHARED_SCOPE'], ['client', '/CLIENT_SCOPE']] as const).map(async ([scope, path]) => {
    const rest = (await http('GET', `${gw.url}/api/plugins/telemetry/DEVICE/${pump.id}/values/attributes${path}`, undefined, H)).text;
    const sc = scope === undefined ? [] : ['--scope', scope];
    const [l, r] = await Promise.all([L, R].map((mode) => run(['attributes', 'pump-1', ...sc, ...mode, '--json'])));
    t.equal(ok(t, l as CliResult, 'attributes').trim(), rest, `attributes ${scope ?? 'all'} == REST (local)`);
    t.equal(ok(t, r as CliResult, 'attributes').trim(), rest, `attributes ${scope ?? 'all'} == REST (remote)`);
  }));
  t.match(ok(t, await run(['attributes', 'pump-1', ...L]), 'attributes table'), /fw\s+1\.2\.3/);

  // export: the REST download byte for byte, to stdout and to -o
  const restCsv = (await http('GET', `${gw.url}/api/download/deviceSeriesData?deviceId=${pump.id}&type=ts&startValue=${from}&endValue=${now}`, undefined, { Authorization: `Bearer ${token}` })).text;
  const out = tempDir(t);
  await Promise.all([L, R].map(async (mode) => {
    const file = join(out, `e-${mode[0]?.slice(2)}.csv`);
    const [toStdout, toFile] = await Promise.all([
      run(['export', 'pump-1', '--from', String(from), '--to', String(now), ...mode]),
      run(['export', 'pump-1', '--from', String(from), '--to', String(now), ...mode, '-o', file]),
    ]);
    t.equal(ok(t, toStdout, 'export'), restCsv, `export == REST download (${mode[0]})`);
    ok(t, toFile, 'export -o');
    t.equal(readFileSync(file, 'utf8'), restCsv, `export -o FILE == REST download (${mode[0]})`);
  }));
  t.same(readdirSync(out).sort(), ['e-data-dir.csv', 'e-url.csv'], 'no partial files left');

  // status
  const [slr, srr, shr, sll] = await Promise.all([run(['status', ...L, '--json']), run(['status', ...R, '--json']), run(['status', ...R]), run(['status', ...L])]);
  const sl = JSON.parse(ok(t, slr, 'status local')) as Record<string, unknown>;
  const sr = JSON.parse(ok(t, srr, 'status remote')) as Record<string, unknown>;
  t.equal(sl['daemon'], false);
  t.equal(sr['daemon'], true);
  t.match(sr, { version: '0.1.0', ingest: { points: 360 }, sync: { enabled: false, state: 'off' }, longPoll: { openPolls: 0 } });
  t.match(ok(t, shr, 'status human'), /^outpost 0\.1\.0 {2}up .*\nclock .*\ningest .*\nstore /);
  t.match(ok(t, sll, 'status local human'), /data dir only/);

  // rpc: remote two-way through a device long-poll; local refuses with a hint
  const poll = http('GET', `${gw.url}/api/v1/VALVE7/rpc?timeout=20000`);
  const rpc = run(['rpc', 'valve-7', 'setValve', '--params', '{"open":true}', '--timeout', '15s', ...R]);
  const req = (await poll).json<{ id: number; method: string; params: unknown }>();
  t.same([req.method, req.params], ['setValve', { open: true }], 'the device got the RPC');
  t.equal((await http('POST', `${gw.url}/api/v1/VALVE7/rpc/${req.id}`, { done: 1 })).status, 200);
  t.equal(ok(t, await rpc, 'rpc').trim(), '{"done":1}', 'rpc prints the device\'s reply');
  failsOneLine(t, await run(['rpc', 'valve-7', 'x', ...L]), /use --url/, 'local rpc');

  // tail: each new point once, in order, both modes
  for (const mode of [L, R]) {
    const child = spawn(process.execPath, [MAIN, 'tail', 'valve-7', '--keys', 'v', '--json', ...mode], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    const lines: string[] = [];
    let buf = '';
    const got = new Promise<void>((resolve) => child.stdout.on('data', (c: Buffer) => {
      buf += c.toString();
      const parts = buf.split('\n');
      buf = parts.pop() ?? '';
      lines.push(...parts);
      if (lines.length >= 3) resolve();
    }));
    // posts until the tail has shown three points (it may start after the first posts): no sleeps
    let i = 0;
    let done = false;
    void got.then(() => { done = true; });
    while (!done && i < 400) {
      await http('POST', `${gw.url}/api/v1/VALVE7/telemetry`, { ts: now + i, values: { v: i, other: 1 } });
      i++;
      await Promise.race([got, new Promise((r) => setTimeout(r, 20))]);
    }
    t.ok(done, `tail ${mode[0]} showed new points`);
    const pts = lines.slice(0, 3).map((l) => JSON.parse(l) as { ts: number; key: string; value: string });
    t.ok(pts.every((p) => p.key === 'v' && p.value === String(p.ts - now)), `tail ${mode[0]}: {"ts","key","value"} of the posted points`);
    t.ok(pts[1]!.ts > pts[0]!.ts && pts[2]!.ts > pts[1]!.ts, `tail ${mode[0]}: in order, no repeats`);
    child.kill('SIGINT');
    const code = await new Promise<number | null>((r) => child.once('exit', r));
    t.equal(code, 0, `tail ${mode[0]} exits 0 on Ctrl-C`);
  }

  // logout
  t.match(ok(t, await run(['logout', ...R]), 'logout'), /logged out of/);
  t.same(JSON.parse(readFileSync(credFile, 'utf8')), {}, 'the session is gone from the file');
  failsOneLine(t, await run(['devices', ...R]), /not logged in/, 'after logout');
  t.ok(existsSync(credFile));
  void acme;
});
