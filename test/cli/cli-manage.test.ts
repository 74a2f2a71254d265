/**
 * Managing what one created (docs/cli.md): `device list` / `show` / `rename` / `delete`, `user list` / `passwd` /
 * `delete`, `customer list`, the writes going through the running daemon; LAST ACTIVITY is when the device was
 * last heard from (not its newest point's timestamp) and is never cut at 60 columns (tmux); `--help` marks the
 * required options.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import t from 'tap';
import { MAIN, http, tempDir } from '../helpers/server.js';
import { failsOneLine, hasTmux, ok, techGateway } from '../helpers/tech.js';
import { login } from '../helpers/users.js';

const DAY = 86_400_000;
const TIME = /\d{4}-\d\d-\d\d \d\d:\d\d:\d\d/;

t.test('device list, show, rename, delete; users and customers', async (t) => {
  const tg = await techGateway(t);
  // a device posting a stored reading of yesterday was heard from now
  const before = Date.now();
  t.equal(
    (await http('POST', `${tg.gw.url}/api/v1/VALVE7/telemetry`, { ts: before - DAY, values: { p: 1 } })).status,
    200,
  );

  for (const mode of [tg.L, tg.R]) {
    const rows = JSON.parse(ok(t, await tg.run(['device', 'list', '--json', ...mode]), 'device list --json')) as Array<{
      name: string;
      type: string;
      profile: string;
      customer: string | null;
      lastActivityTs: number | null;
    }>;
    const valve = rows.find((r) => r.name === 'valve-7');
    t.ok((valve?.lastActivityTs ?? 0) >= before, `${mode[0]}: valve-7 heard from now, not yesterday`);
    const pump = rows.find((r) => r.name === 'pump-1');
    t.ok((pump?.lastActivityTs ?? 0) >= tg.now, `${mode[0]}: pump-1 heard from at its post, after its newest point`);
    t.match(pump, { type: 'default', profile: 'default', customer: 'Acme' });
    const human = ok(t, await tg.run(['device', 'list', ...mode]), 'device list');
    t.match(human, /^NAME\s+TYPE\s+PROFILE\s+CUSTOMER\s+LAST ACTIVITY\n/);
    t.match(human, new RegExp(`\\npump-1\\s+default\\s+default\\s+Acme\\s+${TIME.source}`));
  }
  const shown = ok(t, await tg.run(['device', 'show', 'PUMP-1', ...tg.R]), 'device show');
  t.match(shown, /^name {10}pump-1\nid {12}[0-9a-f-]{36}\n/);
  t.match(shown, /\ncredentials {3}ACCESS_TOKEN\ntoken {9}PUMP1\n$/);

  // writes go through the running daemon
  t.match(JSON.parse(ok(t, await tg.run(['device', 'rename', 'pump-1', 'pump-01', ...tg.L]), 'rename')), {
    name: 'pump-01',
    oldName: 'pump-1',
  });
  t.match(ok(t, await tg.run(['devices', ...tg.R]), 'devices after rename'), /\npump-01 /);
  failsOneLine(t, await tg.run(['device', 'delete', 'valve-7', ...tg.L]), /Give --yes/, 'delete without --yes');
  ok(t, await tg.run(['device', 'delete', 'VALVE-7', '--yes', ...tg.L]), 'delete --yes');
  t.notMatch(ok(t, await tg.run(['device', 'list', ...tg.R]), 'list after delete'), /valve-7/);
  failsOneLine(t, await tg.run(['query', 'valve-7', ...tg.R]), /no device "valve-7"/, 'its data left queries');

  const users = ok(t, await tg.run(['user', 'list', ...tg.L]), 'user list');
  t.match(users, /^EMAIL\s+AUTHORITY\s+CUSTOMER\ntech@example\.com\s+TENANT_ADMIN\s+-\n$/);
  ok(
    t,
    await tg.run([
      'user',
      'add',
      ...tg.L,
      '--email',
      'c@acme.test',
      '--password',
      'x',
      '--authority',
      'CUSTOMER_USER',
      '--customer',
      'acme',
    ]),
    'user add, customer title in another case',
  );
  ok(t, await tg.run(['user', 'passwd', '--email', 'c@acme.test', '--password', 'y2', ...tg.L]), 'user passwd');
  t.ok((await login(tg.gw, 'c@acme.test', 'y2')).token, 'the new password logs in');
  ok(t, await tg.run(['user', 'delete', '--email', 'c@acme.test', '--yes', ...tg.L]), 'user delete');
  t.notMatch(ok(t, await tg.run(['user', 'list', ...tg.L]), 'user list'), /c@acme/);
  t.match(
    ok(t, await tg.run(['customer', 'list', ...tg.L]), 'customer list'),
    /^TITLE\s+ID\s+DEVICES\s+USERS\nAcme\s+[0-9a-f-]{36}\s+1\s+0\n$/,
  );

  for (const cmd of [
    ['user', 'add'],
    ['device', 'add'],
    ['customer', 'add'],
  ]) {
    const help = ok(t, await tg.run([...cmd, '--help']), `${cmd.join(' ')} --help`);
    t.match(help, /--(email|name|title) <\w+>\s+\(required\)/, `${cmd.join(' ')} --help marks the required options`);
  }
});

t.test(
  'at 60 columns (tmux): LAST ACTIVITY keeps the whole time',
  { skip: hasTmux ? false : 'tmux is not installed (apt-get install -y tmux)' },
  async (t) => {
    const tg = await techGateway(t, { login: false });
    const sock = `${tempDir(t)}/tmux.sock`;
    const tm = (...args: string[]): string => execFileSync('tmux', ['-S', sock, ...args], { encoding: 'utf8' });
    tm('new-session', '-d', '-x', '60', '-y', '20', '-e', 'TZ=UTC', '-e', 'OUTPOST_URL=', 'sh');
    t.teardown(() => {
      spawnSync('tmux', ['-S', sock, 'kill-server']);
    });
    for (const cmd of ['device list', 'devices']) {
      tm(
        'send-keys',
        `clear; ${process.execPath} ${MAIN} ${cmd} --data-dir ${tg.gw.dataDir}; tmux -S ${sock} wait-for -S done`,
        'Enter',
      );
      tm('wait-for', 'done');
      const screen = tm('capture-pane', '-p');
      // the name may give way too (devices has a STATE column besides)
      const row = screen.split('\n').find((l) => l.startsWith('pum')) ?? '';
      t.match(row, TIME, `${cmd}: the whole time on a 60-column terminal (${row})`);
    }
  },
);
