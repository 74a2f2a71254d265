/**
 * What a technician's 80-column terminal shows (tmux): `outpost devices` keeps each sparkline whole while names
 * give way, and says `never` for a device never heard from, as `device list` does; `user passwd` asks for the
 * new password twice and changes nothing when the two differ. The runs have their own cwd and HOME.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import t, { type Test } from 'tap';
import { MAIN, addDevice, cli, http, startGateway, tempDir } from '../helpers/server.js';
import { hasTmux } from '../helpers/tech.js';
import { addUser, login } from '../helpers/users.js';

const skip = hasTmux ? false : 'tmux is not installed (apt-get install -y tmux)';

/** a tmux server of its own, one pane `cols` wide, in `cwd` with `home` as HOME */
function terminal(t: Test, cols: number, cwd: string, home: string) {
  const sock = `${tempDir(t)}/tmux.sock`;
  const tm = (...args: string[]): string => execFileSync('tmux', ['-S', sock, ...args], { encoding: 'utf8' });
  tm(
    'new-session',
    '-d',
    '-x',
    String(cols),
    '-y',
    '30',
    '-c',
    cwd,
    ...['-e', 'TZ=UTC', '-e', 'NO_COLOR=1', '-e', 'OUTPOST_URL=', '-e', `HOME=${home}`, '-e', 'XDG_CONFIG_HOME='],
    'sh',
  );
  t.teardown(() => {
    spawnSync('tmux', ['-S', sock, 'kill-server']);
  });
  const screen = (): string => tm('capture-pane', '-p');
  /** types `keys` and Enter */
  const type = (keys: string): void => {
    tm('send-keys', '-l', keys);
    tm('send-keys', 'Enter');
  };
  /** waits until the screen shows `what` (the command drew it) */
  const until = async (what: RegExp): Promise<string> => {
    for (let i = 0; i < 400; i++) {
      const s = screen();
      if (what.test(s)) return s;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`the screen never showed ${what}:\n${screen()}`);
  };
  /** runs `cmd` to its end, the screen cleared first; the screen after it */
  const run = (cmd: string): string => {
    tm('send-keys', `clear; ${cmd}; tmux -S ${sock} wait-for -S done`, 'Enter');
    tm('wait-for', 'done');
    return screen();
  };
  return { tm, type, until, run };
}

t.test(
  'outpost devices at 80 columns: whole sparklines, and never for a device never heard from',
  { skip },
  async (t) => {
    const gw = await startGateway(t);
    const cwd = tempDir(t);
    const home = tempDir(t);
    await cli(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'Acme Water Utilities Northern Region']);
    const customer = ['--customer', 'Acme Water Utilities Northern Region'];
    await addDevice(gw.dataDir, 'pump-station-north-01', ['--token', 'P1', '--type', 'centrifugal-pump', ...customer]);
    await addDevice(gw.dataDir, 'pump-station-north-02', ['--token', 'P2', '--type', 'centrifugal-pump', ...customer]);
    await addDevice(gw.dataDir, 'spare-sensor', ['--token', 'S9']);
    const now = Date.now();
    for (const token of ['P1', 'P2']) {
      const recent = Array.from({ length: 60 }, (_, i) => ({
        ts: now - 3_540_000 + i * 60_000,
        values: { flow_rate_m3h: 10 + (i % 12) },
      }));
      t.equal((await http('POST', `${gw.url}/api/v1/${token}/telemetry`, recent)).status, 200);
    }
    const term = terminal(t, 80, cwd, home);
    const shown = term.run(`${process.execPath} ${MAIN} devices --data-dir ${gw.dataDir}`);
    const rows = shown.split('\n').filter((l) => l.startsWith('pump-') || l.startsWith('spare'));
    t.equal(rows.length, 3, `three rows:\n${shown}`);
    for (const row of rows.slice(0, 2)) {
      t.ok([...row].length <= 80, `fits 80 columns: ${row}`);
      t.match(row, /\d\d:\d\d:\d\d\S*\s+[▁▂▃▄▅▆▇█ ]{20} \S/, `the whole sparkline: ${row}`);
    }
    t.match(rows[2], /^spare-sensor\s.*\snever\s*$/, 'never heard from: never');
    const listed = term.run(`${process.execPath} ${MAIN} device list --data-dir ${gw.dataDir}`);
    t.match(listed, /\nspare-sensor\s.*\snever\s*\n/, 'device list says never too');
  },
);

t.test('user passwd asks twice; two different answers change nothing', { skip }, async (t) => {
  const gw = await startGateway(t);
  const cwd = tempDir(t);
  const home = tempDir(t);
  await addUser(gw.dataDir, 'tech@example.com', 'old-pw', 'TENANT_ADMIN');
  const term = terminal(t, 80, cwd, home);
  const cmd = `${process.execPath} ${MAIN} user passwd --email tech@example.com --data-dir ${gw.dataDir}`;

  term.tm('send-keys', `clear; ${cmd}; echo "exit=$?"`, 'Enter');
  await term.until(/New password:\s*$/m);
  term.type('first-try');
  await term.until(/Retype the new password:\s*$/m);
  term.type('first-trx');
  const refused = await term.until(/exit=\d/);
  t.match(refused, /outpost: the two passwords differ; nothing was changed\nexit=1/, 'refused in one line');
  t.ok((await login(gw, 'tech@example.com', 'old-pw')).token, 'the old password still logs in');

  // the first run's prompts must be gone from the screen before the second run's are awaited
  term.tm('send-keys', 'clear', 'Enter');
  await term.until(/^(?![\s\S]*exit=)/);
  term.tm('send-keys', `${cmd}; echo "exit=$?"`, 'Enter');
  await term.until(/New password:\s*$/m);
  term.type('new-pw-7');
  await term.until(/Retype the new password:\s*$/m);
  term.type('new-pw-7');
  const done = await term.until(/exit=\d/);
  // the JSON line wraps at 80 columns
  t.match(done.replace(/\n/g, ''), /"passwordChanged":true.*exit=0/, 'changed');
  t.notMatch(done, /new-pw-7/, 'the password is not echoed');
  t.ok((await login(gw, 'tech@example.com', 'new-pw-7')).token, 'the new password logs in');
});
