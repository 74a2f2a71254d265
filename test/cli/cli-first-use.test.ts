/**
 * The technician's first hour with the CLI, against a real daemon: login makes later commands remote, errors
 * say which gateway they came from, query shows the newest points and charts the whole range, rpc failures in
 * words, --version, usage and time errors, export -o, HEAD /metrics, and the daemon's first-user hint. The
 * screen-facing parts (tail's waiting line, the query table with its note) run in tmux.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, statSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { outpostCommand } from '../../src/daemon/invocation.js';
import { MAIN, http, startGateway, tempDir } from '../helpers/server.js';
import { HOUR, failsOneLine, ok, techGateway, hasTmux } from '../helpers/tech.js';
import { waitFor } from '../helpers/wait.js';

const VERSION = (
  JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

t.test('login is the current context until logout; errors name the gateway or data dir', async (t) => {
  const { gw, run, L, cfg } = await techGateway(t);
  const empty = tempDir(t);
  // no --url, no --data-dir: the gateway logged in to last
  failsOneLine(
    t,
    await run(['latest', 'nope']),
    new RegExp(`^outpost: no device "nope".*\\(gateway ${gw.url.replace(/\./g, '\\.')}\\)$`),
    'plain command after login',
  );
  t.match(
    ok(t, await run(['devices', '--json']), 'devices after login'),
    /"name":"pump-1"/,
    'plain devices goes to the gateway',
  );
  // --data-dir and OUTPOST_DATA_DIR still mean local
  failsOneLine(t, await run(['latest', 'nope', ...L]), /\(data dir .+\)$/, '--data-dir after login');
  const envLocal = spawnSync(process.execPath, [MAIN, 'latest', 'nope'], {
    env: { ...process.env, XDG_CONFIG_HOME: cfg, OUTPOST_URL: '', OUTPOST_DATA_DIR: gw.dataDir },
    encoding: 'utf8',
  });
  t.match(envLocal.stderr, /\(data dir .+\)\n$/, 'OUTPOST_DATA_DIR after login is local');
  t.match(ok(t, await run(['logout']), 'logout'), /logged out of/);
  const after = spawnSync(process.execPath, [MAIN, 'devices'], {
    cwd: empty,
    env: { ...process.env, XDG_CONFIG_HOME: cfg, OUTPOST_URL: '', OUTPOST_DATA_DIR: '' },
    encoding: 'utf8',
  });
  t.equal(after.status, 1, 'after logout a plain command is local again');
  t.match(after.stderr, /no store in .*data/, 'and says it looked in ./data');
});

t.test('query: all keys by default, the newest raw points, the chart over the whole range', async (t) => {
  const { run, L, R, now, pump, gw, H } = await techGateway(t);
  const from = String(now - 3 * HOUR);
  const all = JSON.parse(
    ok(t, await run(['query', 'pump-1', '--from', from, '--json', ...R]), 'query without --keys'),
  ) as Record<string, unknown>;
  t.same(Object.keys(all).sort(), ['n', 's', 't'], 'query without --keys reads every key');
  // --json with an explicit --limit is REST's answer for the newest points (orderBy=DESC), as the table shows them
  const json = ok(
    t,
    await run(['query', 'pump-1', '--keys', 'n', '--from', from, '--to', String(now), '--limit', '5', '--json', ...L]),
    'json',
  ).trim();
  const rest = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${pump.id}/values/timeseries?keys=n&startTs=${from}&endTs=${now}&interval=0&agg=NONE&orderBy=DESC&limit=5`,
    undefined,
    H,
  );
  t.equal(json, rest.text, '--json --limit 5 == REST');

  for (const mode of [L, R]) {
    const r = await run(['query', 'pump-1', '--keys', 'n', '--from', from, '--limit', '10', ...mode]);
    const rows = ok(t, r, `table ${mode[0]}`)
      .trim()
      .split('\n')
      .slice(1)
      .map((l) =>
        l
          .trim()
          .split(/\s{2,}/)
          .pop(),
      );
    t.same(
      rows,
      ['110', '111', '112', '113', '114', '115', '116', '117', '118', '119'],
      `${mode[0]}: the newest 10, in time order`,
    );
    t.match(
      r.stderr,
      mode[0] === '--url'
        ? /^gateway \S+ \(tech@example\.com\)\nnewest 10 per key shown; 110 older of n left out \(all: --limit 120; whole range: --chart\)\n$/
        : /^newest 10 per key shown; 110 older of n left out \(all: --limit 120; whole range: --chart\)\n$/,
      `${mode[0]}: stderr says what was left out`,
    );
    const chart = ok(
      t,
      await run(['query', 'pump-1', '--keys', 'n', '--from', '-2h', '--chart', ...mode]),
      `chart ${mode[0]}`,
    );
    const title = /n {2}min (\S+) {2}max (\S+) {2}\((\d+) points\)/.exec(chart);
    t.ok(
      title !== null && Number(title[1]) < 5 && Number(title[2]) > 115,
      `${mode[0]}: the chart spans the whole range, not the first 100 points (${title?.[0]})`,
    );
  }
  failsOneLine(
    t,
    await run(['query', 'pump-1', '--from', '-2', ...L]),
    /^outpost: --from "-2" needs a unit: e\.g\. -2m, -2h or -2d$/,
    '--from -2',
  );
});

t.test('rpc failures in words, --version, usage errors, export -o, HEAD /metrics', async (t) => {
  const { gw, run, R, L } = await techGateway(t);
  failsOneLine(
    t,
    await run(['rpc', 'valve-7', 'reboot', '--timeout', '1s', ...R]),
    /^outpost: rpc reboot not delivered: the device did not poll for RPC .*\(gateway /,
    'rpc to a device that does not poll',
  );
  // delivered (the device polls) but never answered
  const poll = http('GET', `${gw.url}/api/v1/VALVE7/rpc?timeout=20000`);
  const unanswered = run(['rpc', 'valve-7', 'reboot', '--timeout', '1s', ...R]);
  t.equal((await poll).status, 200, 'the device took the RPC');
  failsOneLine(
    t,
    await unanswered,
    /^outpost: rpc reboot delivered, but the device sent no reply before the timeout/,
    'rpc without a reply',
  );

  for (const flag of ['--version', '-V']) {
    const v = await run([flag]);
    t.equal(v.code, 0);
    t.equal(v.stdout, `${VERSION}\n`, `${flag} prints the version`);
  }
  const usage = await run(['query']);
  t.equal(usage.code, 2, 'a usage error exits 2 (docs/cli.md)');
  t.match(usage.stderr, /missing required argument 'device'/);

  const file = join(tempDir(t), 'pump.csv');
  const e = await run(['export', 'pump-1', '--from', '-3h', '-o', file, ...L]);
  t.equal(e.code, 0);
  t.equal(e.stdout, '', 'stdout stays empty');
  t.equal(e.stderr, `wrote ${file} (${statSync(file).size} bytes)\n`, 'export -o says what it wrote');

  const head = await fetch(`${gw.url}/metrics`, { method: 'HEAD' });
  const get = await fetch(`${gw.url}/metrics`);
  const body = await get.text();
  t.equal(head.status, 200, 'HEAD /metrics 200');
  t.equal(head.headers.get('content-type'), get.headers.get('content-type'), 'same content type as GET');
  t.equal(await head.text(), '', 'no body');
  t.ok(
    Math.abs(Number(head.headers.get('content-length')) - Buffer.byteLength(body)) < 200,
    `content-length near GET's (${head.headers.get('content-length')} vs ${Buffer.byteLength(body)})`,
  );
});

t.test('the daemon hints the command that works in this install', async (t) => {
  const root = tempDir(t);
  const main = join(root, 'pkg', 'dist', 'src', 'main.js');
  mkdirSync(join(root, 'pkg', 'dist', 'src'), { recursive: true });
  execFileSync('cp', [MAIN, main]);
  execFileSync('sh', ['-c', `echo '{}' > ${join(root, 'pkg', 'package.json')}`]);
  const path = process.env['PATH'];
  t.teardown(() => {
    process.env['PATH'] = path;
  });
  process.env['PATH'] = '/usr/bin:/bin';
  mkdirSync(join(root, 'bin'));
  t.equal(outpostCommand(main, join(root, 'pkg')), 'npx outpost', 'in a clone: npx outpost');
  t.equal(
    outpostCommand(main, root),
    'node pkg/dist/src/main.js',
    "below the clone: node and the entry's path from here",
  );
  t.equal(outpostCommand(main, join(root, 'bin')), `node ${main}`, "beside it: node and the entry's absolute path");
  const bin = join(root, 'bin');
  symlinkSync(main, join(bin, 'outpost'));
  process.env['PATH'] = `${bin}:/usr/bin`;
  t.equal(outpostCommand(main, root), 'outpost', 'linked on PATH (npm link): outpost');

  const gw = await startGateway(t);
  t.match(
    gw.logs[0] ?? '',
    /create the first user with: (outpost|npx outpost|node \S+) user add --data-dir /,
    'the first log line carries it',
  );
});

t.test(
  'on a terminal: tail says what it waits for; query shows the newest points',
  { skip: hasTmux ? false : 'tmux is not installed' },
  async (t) => {
    const { gw, L, R, cfg } = await techGateway(t);
    const sock = `${tempDir(t)}/tmux.sock`;
    const tm = (...args: string[]): string => execFileSync('tmux', ['-S', sock, ...args], { encoding: 'utf8' });
    tm(
      'new-session',
      '-d',
      '-x',
      '100',
      '-y',
      '40',
      '-e',
      'TZ=UTC',
      '-e',
      'NO_COLOR=1',
      '-e',
      'OUTPOST_URL=',
      '-e',
      `XDG_CONFIG_HOME=${cfg}`,
      'sh',
    );
    t.teardown(() => {
      spawnSync('tmux', ['-S', sock, 'kill-server']);
    });
    const node = process.execPath;
    const screenShows = (re: RegExp): Promise<string> => {
      let shown = '';
      return waitFor(
        () => {
          shown = tm('capture-pane', '-p');
          return re.test(shown) && shown;
        },
        { interval: 50, message: () => `${re} on the screen:\n${shown}` },
      );
    };

    for (const mode of [L, R]) {
      // the last run's lines must be gone before this run's are awaited, or its "waiting" line is taken for this one
      tm('send-keys', 'clear', 'Enter');
      await screenShows(/^(?![\s\S]*(waiting for new points|v {2}42))/);
      tm('send-keys', `${node} ${MAIN} tail valve-7 ${mode.join(' ')}`, 'Enter');
      const waiting = await screenShows(/waiting for new points/);
      t.match(
        waiting,
        /waiting for new points from valve-7 on the (data dir|gateway) \S+; Ctrl-C to stop/,
        `tail ${mode[0]} on a TTY says it is waiting`,
      );
      // the line comes once tail is watching (remote: subscribed): one point posted after it shows
      await http('POST', `${gw.url}/api/v1/VALVE7/telemetry`, { v: 42 });
      t.match(await screenShows(/v {2}42/), /v {2}42/, `tail ${mode[0]}: the point posted after the line follows`);
      tm('send-keys', 'C-c', '');
    }

    tm('send-keys', `clear; ${node} ${MAIN} query pump-1 --keys n --from -3h --limit 3 ${L.join(' ')}`, 'Enter');
    const screen = await screenShows(/left out.*\)/);
    t.match(screen, /^TIME +n\n.*\s117\n.*\s118\n.*\s119\n/m, 'the newest three rows on screen');
    t.match(
      screen,
      /\s119\nnewest 3 per key shown; 117 older of n left out \(all: --limit 120; whole range: --chart\)\n/,
      'and the note below the table',
    );
  },
);
