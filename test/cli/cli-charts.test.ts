/**
 * Charts a technician reads over SSH (docs/cli.md), checked as a person would: `query --chart`, `devices`
 * and `tail` run in a real terminal (tmux), the screen captured and compared with the captures kept in
 * test/fixtures/ (UPDATE_FIXTURES=1 rewrites them). The chart renderer is also compared deterministically,
 * tmux or not.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { hasTmux } from '../helpers/tech.js';
import { lineChart, sparkline } from '../../src/cli/chart.js';
import { MAIN, addDevice, cli, http, startGateway, tempDir } from '../helpers/server.js';

process.env['TZ'] = 'UTC';
const FIXTURES = fileURLToPath(new URL('../../../test/fixtures/', import.meta.url));
const update = process.env['UPDATE_FIXTURES'] === '1';

function fixture(name: string, actual: string): string {
  const file = `${FIXTURES}${name}`;
  if (update) writeFileSync(file, actual);
  return readFileSync(file, 'utf8');
}

const T0 = 1_767_225_600_000; // 2026-01-01T00:00Z
/** a day and a half of a slow sine with a step, every 10 minutes */
const SERIES = Array.from({ length: 216 }, (_, i) => ({
  ts: T0 + i * 600_000,
  v: Math.round((20 + 5 * Math.sin(i / 12) + (i > 150 ? 4 : 0)) * 100) / 100,
}));

t.test('the chart renderer draws the same picture every time', async (t) => {
  const chart = lineChart('temperature', SERIES, { width: 80, height: 10, from: T0, to: T0 + 36 * 3_600_000 }).join(
    '\n',
  );
  t.equal(chart, fixture('chart-render.txt', `${chart}\n`).trimEnd(), 'line chart == fixture');
  t.ok(
    chart.split('\n').every((l) => [...l].length <= 80),
    'fits its width',
  );
  t.equal(sparkline(SERIES, T0, T0 + 36 * 3_600_000, 20).length, 20);
  t.equal(sparkline([], T0, T0 + 1, 20), '', 'no points, no sparkline');
});

t.test(
  'tmux captures of query --chart, devices and tail',
  { skip: hasTmux ? false : 'tmux is not installed (apt-get install -y tmux)' },
  async (t) => {
    const gw = await startGateway(t);
    await addDevice(gw.dataDir, 'boiler-2', ['--token', 'BOILER2', '--type', 'boiler']);
    await addDevice(gw.dataDir, 'pump-1', ['--token', 'PUMP1', '--type', 'pump']);
    const body = SERIES.map((p) => ({ ts: p.ts, values: { temperature: p.v } }));
    t.equal((await http('POST', `${gw.url}/api/v1/BOILER2/telemetry`, body)).status, 200);
    const now = Date.now();
    const recent = Array.from({ length: 60 }, (_, i) => ({
      ts: now - 3_540_000 + i * 60_000,
      values: { flow: 10 + (i % 12) },
    }));
    t.equal((await http('POST', `${gw.url}/api/v1/PUMP1/telemetry`, recent)).status, 200);

    const sock = `${tempDir(t)}/tmux.sock`;
    const tm = (...args: string[]): string => execFileSync('tmux', ['-S', sock, ...args], { encoding: 'utf8' });
    tm('new-session', '-d', '-x', '100', '-y', '45', '-e', 'TZ=UTC', '-e', 'NO_COLOR=1', '-e', 'OUTPOST_URL=', 'sh');
    t.teardown(() => {
      spawnSync('tmux', ['-S', sock, 'kill-server']);
    });
    const node = process.execPath;
    /** runs a command in the pane and waits for it to finish (tmux wait-for), then captures the screen */
    const screen = (cmd: string): string => {
      // `clear` runs after the command line is echoed: the screen holds the output and the next prompt only
      tm('send-keys', `clear; ${cmd}; tmux -S ${sock} wait-for -S done`, 'Enter');
      tm('wait-for', 'done');
      return tm('capture-pane', '-p')
        .split('\n')
        .filter((l) => !/^[#$]\s*$/.test(l))
        .join('\n')
        .trim();
    };

    const chart = screen(
      `${node} ${MAIN} query boiler-2 --keys temperature --from ${T0} --to ${T0 + 36 * 3_600_000} --agg AVG --interval 30m --chart --data-dir ${gw.dataDir}`,
    );
    t.equal(
      chart,
      fixture('tmux-query-chart.txt', `${chart}\n`).trimEnd(),
      'query --chart on a 100-column terminal == the kept capture',
    );
    t.ok(
      chart.split('\n').every((l) => [...l].length <= 100),
      'fits the terminal',
    );

    const devices = screen(`${node} ${MAIN} devices --data-dir ${gw.dataDir}`);
    fixture('tmux-devices.txt', `${devices}\n`);
    t.match(devices, /^NAME\s+TYPE\s+CUSTOMER\s+STATE\s+LAST ACTIVITY\s+LAST HOUR\n/);
    t.match(
      devices,
      /\npump-1\s+pump\s+-\s+active \d+[dhm] \d+[hms]\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\S*\s+[▁▂▃▄▅▆▇█ ]{10,}\s+flow/,
      'a sparkline of the last hour',
    );
    t.match(
      devices,
      /\nboiler-2 +boiler +- +active \d+[dhm] \d+[hms] +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\S*\n/,
      'heard from now (its readings are old): no sparkline without data in the last hour',
    );

    // tail: a live point shows up on the screen while the command runs
    tm('send-keys', `clear; ${node} ${MAIN} tail pump-1 --data-dir ${gw.dataDir}`, 'Enter');
    let shown = '';
    for (let i = 0; i < 200 && !/flow\s+99/.test(shown); i++) {
      await http('POST', `${gw.url}/api/v1/PUMP1/telemetry`, { ts: now + i, values: { flow: 99 } });
      await new Promise((r) => setTimeout(r, 50));
      shown = tm('capture-pane', '-p');
    }
    tm('send-keys', 'C-c', '');
    const tail = shown
      .split('\n')
      .filter((l) => /flow/.test(l))
      .slice(0, 1)
      .join('\n');
    fixture('tmux-tail.txt', `${tail}\n`);
    t.match(tail, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} {2}flow {2}99$/, 'tail prints local time, key and value');
    void cli;
  },
);
