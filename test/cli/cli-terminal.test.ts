/**
 * What a technician's 80-column terminal shows (tmux): `outpost devices` keeps each sparkline whole while names
 * give way, and says `never` for a device never heard from, as `device list` does; `user passwd` asks for the
 * new password twice and changes nothing when the two differ; `outpost status` and `outpost tail` never wrap a
 * line, however long the sync's URL and error, a device's name or a value. The runs have their own cwd and HOME.
 */
import { spawn } from 'node:child_process';
import t from 'tap';
import { MAIN, addDevice, cli, http, startGateway, tempDir } from '../helpers/server.js';
import { syncGateway } from '../helpers/sync.js';
import { hasTmux } from '../helpers/tech.js';
import { terminal } from '../helpers/terminal.js';
import { addUser, login } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';

const skip = hasTmux ? false : 'tmux is not installed (apt-get install -y tmux)';

/** lines wider than 80 columns */
const over80 = (text: string): string[] => text.split('\n').filter((l) => [...l].length > 80);

t.test(
  'the terminal helper finds a line the terminal wrapped (what the no-wrap checks below rely on)',
  { skip },
  (t) => {
    const term = terminal(t, { cols: 40 });
    term.run(`printf '%060d\\n' 7`);
    t.same(term.wrapped(), [`${'0'.repeat(59)}7`], 'a 60-character line at 40 columns');
    term.run(`printf '%040d\\n' 7`);
    t.same(term.wrapped(), [], 'a line of exactly 40 columns is not wrapped');
    t.end();
  },
);

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
    const term = terminal(t, { cols: 80, cwd, home });
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
  const term = terminal(t, { cols: 80, cwd, home });
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

t.test('outpost status at 80 columns: a long sync URL and error break or are cut, never wrap', { skip }, async (t) => {
  // nothing listens on port 1: every request of the sync fails, and its error names the long URL
  const upstream = 'http://127.0.0.1:1/upstream/north-region/pumping-station-12/thingsboard-gateway-api-v1';
  const gw = await syncGateway(t, upstream);
  const dev = await addDevice(gw.dataDir, 'pump-station-north-01', ['--upstream-token', 'UP1']);
  t.equal((await http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, { flow: 1 })).status, 200);
  const full = await waitFor(
    async () => {
      const r = await cli(['status', '--data-dir', gw.dataDir, '--json']);
      const s = JSON.parse(r.stdout) as { sync: { lastError: string | null; url: string } };
      return s.sync.lastError === null ? undefined : s.sync;
    },
    { interval: 100, message: 'a sync error in the status' },
  );
  t.match(full.lastError, upstream, '--json: the whole error, naming the URL');
  t.equal(full.url, upstream, '--json: the whole URL');

  const piped = await cli(['status', '--data-dir', gw.dataDir], { COLUMNS: '80', TZ: 'UTC' });
  t.equal(piped.code, 0, piped.stderr);
  t.same(over80(piped.stdout), [], `no line over 80 columns:\n${piped.stdout}`);
  t.match(piped.stdout, /\nsync {7}\S+ to http:\/\/127\.0\.0\.1:1\/upstream\/\S*…\n {11}\d+ points behind, \d+ sent/);
  t.match(piped.stdout, /\nlast error \d+m \d+s ago \([^)]+\): .*…\n/, 'the error on a line of its own, cut');
  t.match(piped.stdout, /\ncoap {7}port \d+: /, 'the other lines are there');

  const term = terminal(t, { cols: 80 });
  const shown = term.run(`${process.execPath} ${MAIN} status --data-dir ${gw.dataDir}`);
  t.match(shown, /\nlast error /, `status on the screen:\n${shown}`);
  t.same(term.wrapped(), [], 'no screen line is a wrapped one');
});

t.test('outpost tail at 80 columns: a long name and value are cut, escaped, never wrapped', { skip }, async (t) => {
  const gw = await startGateway(t);
  const name = 'pump-station-north-region-district-7-building-12-basement-east-wing-sensor-04';
  const dev = await addDevice(gw.dataDir, name, ['--token', 'LONG1']);
  const value = `\x1b]0;PWNED\x07 ${'check valve V-12 reports intermittent backflow on the discharge side; '.repeat(3)}`;
  const term = terminal(t, { cols: 80 });
  term.tm('send-keys', `clear; ${process.execPath} ${MAIN} tail ${name} --data-dir ${gw.dataDir}`, 'Enter');
  await term.until(/waiting for new points/);
  // the same tail piped, with COLUMNS=80, and its --json
  const follow = (extra: string[]): (() => string) => {
    let out = '';
    const proc = spawn(process.execPath, [MAIN, 'tail', name, '--data-dir', gw.dataDir, ...extra], {
      env: { ...process.env, COLUMNS: '80', TZ: 'UTC' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    proc.stdout.on('data', (b: Buffer) => {
      out += b.toString();
    });
    t.teardown(() => {
      proc.kill('SIGKILL');
    });
    return () => out;
  };
  const piped = follow([]);
  const json = follow(['--json']);
  // the piped tails say nothing when they are ready: post until each has shown a point
  const screen = await waitFor(
    async () => {
      const s = term.tm('capture-pane', '-p');
      if (s.includes('PWNED') && piped().includes('PWNED') && json().includes('PWNED')) return s;
      await http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, { valve_note: value });
      return undefined;
    },
    { interval: 200, message: () => `the point on the screen and in both pipes: ${piped()} ${json()}` },
  );
  t.match(
    screen,
    /\n\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\S* {2}valve_note {2}\\x1b\]0;PWNED\\x07 check valve .*…\n/,
    'escaped, cut',
  );
  t.same(term.wrapped(), [], `no screen line is a wrapped one:\n${screen}`);
  const line = piped().split('\n')[0] ?? '';
  t.same(over80(piped()), [], `piped with COLUMNS=80, no line over 80: ${line}`);
  t.match(line, /^\S+ \S+ {2}valve_note {2}\\x1b\]0;PWNED\\x07 check valve .*…$/, 'piped: escaped, cut');
  t.equal((JSON.parse(json().split('\n')[0] ?? '') as { value: string }).value, value, '--json: the whole value');
});
