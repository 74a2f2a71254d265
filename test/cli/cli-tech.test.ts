/**
 * The technician's CLI (docs/cli.md) against a real daemon, local (the data dir read-only beside the running
 * daemon) and remote (--url after outpost login): login, the stored session and its transparent refresh,
 * devices, latest, attributes, one-line errors with "did you mean", logout. `--json` must be REST's answer byte
 * for byte in both modes. (query/export/status: cli-query.test.ts; rpc/tail: cli-live.test.ts.)
 */
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import type { CliResult } from '../helpers/server.js';
import { http } from '../helpers/server.js';
import { failsOneLine, ok, techGateway } from '../helpers/tech.js';

t.test('login, devices, latest, attributes and errors, local and remote', async (t) => {
  const { gw, cfg, credFile, run, L, R, pump, now, points, H } = await techGateway(t, { login: false });
  // remote commands before login fail with a hint
  failsOneLine(
    t,
    await run(['latest', 'pump-1', ...R]),
    /^outpost: not logged in to .* outpost login/,
    'not logged in',
  );
  failsOneLine(
    t,
    await run(['login', ...R, '--username', 'tech@example.com', '--password', 'nope']),
    /^outpost: 401: Invalid username or password$/,
    'bad password',
  );
  t.match(
    ok(t, await run(['login', ...R, '--username', 'tech@example.com', '--password', 'pw']), 'login'),
    /logged in to http:\/\/127\.0\.0\.1:\d+ as tech@example\.com/,
  );
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
  // the same but for the last activity: local reads the disk, where the daemon writes it up to 4 minutes late
  // (docs/api.md "Device state"), remote what the daemon holds
  const devs = JSON.parse(ok(t, dl, 'devices local')) as Array<Record<string, unknown>>;
  const remoteDevs = JSON.parse(ok(t, dr, 'devices remote')) as Array<Record<string, unknown>>;
  const noActivity = (rows: Array<Record<string, unknown>>): unknown[] =>
    rows.map(({ lastActivityTs, ...rest }) => rest);
  t.same(noActivity(devs), noActivity(remoteDevs), 'devices --json: the same in both modes');
  t.ok(Number(devs[0]?.['lastActivityTs']) <= Number(remoteDevs[0]?.['lastActivityTs']), 'local is not ahead');
  t.same(
    devs.map((d) => Object.keys(d)),
    [
      ['id', 'name', 'type', 'profile', 'customer', 'lastActivityTs', 'active', 'activeSinceTs'],
      ['id', 'name', 'type', 'profile', 'customer', 'lastActivityTs', 'active', 'activeSinceTs'],
    ],
  );
  t.equal(devs[0]?.['active'], true, 'pump-1 active');
  // false from the state service's first check after its creation, null before
  t.not(devs[1]?.['active'], true, 'valve-7 never heard from');
  t.same(
    devs.map((d) => [d['name'], d['customer']]),
    [
      ['pump-1', 'Acme'],
      ['valve-7', null],
    ],
  );
  // last activity: when the device was heard from (its post), not its newest point's timestamp
  t.ok(Number(devs[0]?.['lastActivityTs']) > (points.at(-1) as { ts: number }).ts, 'pump-1 heard from at its post');
  t.equal(devs[1]?.['lastActivityTs'], null, 'valve-7 never heard from');
  const stillStored = JSON.parse(readFileSync(credFile, 'utf8')) as Record<string, { token: string }>;
  t.not(Object.values(stillStored)[0]?.token, stored.token, 'the expired access token was refreshed and stored');

  // latest --json == REST latest, both modes
  const restLatest = (
    await http('GET', `${gw.url}/api/plugins/telemetry/DEVICE/${pump.id}/values/timeseries?keys=t,s`, undefined, H)
  ).text;
  // independent read-only commands run side by side (separate processes), in both modes
  const latestRuns = await Promise.all(
    [L, R].flatMap((mode) => [
      run(['latest', 'pump-1', '--keys', 't,s', ...mode, '--json']),
      run(['latest', pump.id, ...mode]),
    ]),
  );
  for (const [i, mode] of [L, R].entries()) {
    t.equal(ok(t, latestRuns[2 * i] as CliResult, 'latest').trim(), restLatest, `latest --json == REST (${mode[0]})`);
    const human = ok(t, latestRuns[2 * i + 1] as CliResult, 'latest table');
    t.match(human, /^KEY\s+VALUE\s+TIME\s+LAST HOUR\n/, 'latest: a table');
    t.match(
      human,
      /\nt\s+\S+\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\S*\s+[▁▂▃▄▅▆▇█ ]+\n/,
      'latest: local time and a sparkline',
    );
  }

  const failures: Array<[string[], RegExp, string]> = [
    [
      ['query', 'pump-1', '--keys', 't', '--from', 'yesterday', ...L],
      /^outpost: --from "yesterday": expected now, -6h/,
      'bad time',
    ],
    [['query', 'pump-1', '--keys', 't', '--agg', 'AVG', ...L], /needs --interval/, 'agg without interval'],
    [
      ['latest', 'pump1', ...L],
      /^outpost: no device "pump1"; did you mean "pump-1"\? \(data dir \S+\)$/,
      'did you mean (local)',
    ],
    [
      ['latest', 'valve7', ...R],
      /^outpost: no device "valve7"; did you mean "valve-7"\? \(gateway http:\/\/127\.0\.0\.1:\d+\)$/,
      'did you mean (remote)',
    ],
    [
      ['query', 'pump-1', '--keys', 't', '--from', '0', '--to', String(now), '--agg', 'AVG', '--interval', '1m', ...R],
      /^outpost: 400: /,
      'REST refusal (too many buckets), one line',
    ],
    [['devices', '--data-dir', join(cfg, 'nowhere')], /^outpost: no store in /, 'no store here'],
  ];
  const failed = await Promise.all(failures.map(([args]) => run(args)));
  for (const [i, [, msg, what]] of failures.entries()) failsOneLine(t, failed[i] as CliResult, msg, what);

  // attributes --json == REST, both modes
  await Promise.all(
    (
      [
        [undefined, ''],
        ['shared', '/SHARED_SCOPE'],
        ['client', '/CLIENT_SCOPE'],
      ] as const
    ).map(async ([scope, path]) => {
      const rest = (
        await http('GET', `${gw.url}/api/plugins/telemetry/DEVICE/${pump.id}/values/attributes${path}`, undefined, H)
      ).text;
      const sc = scope === undefined ? [] : ['--scope', scope];
      const [l, r] = await Promise.all([L, R].map((mode) => run(['attributes', 'pump-1', ...sc, ...mode, '--json'])));
      // the last activity aside, as for devices above
      const noActivity = (text: string): unknown =>
        (JSON.parse(text) as Array<{ key: string }>).filter((a) => a.key !== 'lastActivityTime');
      t.same(
        noActivity(ok(t, l as CliResult, 'attributes')),
        noActivity(rest),
        `attributes ${scope ?? 'all'} == REST (local)`,
      );
      t.equal(ok(t, r as CliResult, 'attributes').trim(), rest, `attributes ${scope ?? 'all'} == REST (remote)`);
    }),
  );
  t.match(ok(t, await run(['attributes', 'pump-1', ...L]), 'attributes table'), /fw\s+1\.2\.3/);

  // logout
  t.match(ok(t, await run(['logout', ...R]), 'logout'), /logged out of/);
  t.same(JSON.parse(readFileSync(credFile, 'utf8')), {}, 'the session is gone from the file');
  failsOneLine(t, await run(['devices', ...R]), /not logged in/, 'after logout');
  t.ok(existsSync(credFile));
});
