/**
 * `outpost alarms` (docs/cli.md "Alarms"), local and remote, against a running daemon: the list (active by
 * default, `--all`, `--device`, `--json` the same bytes in both modes), a type with terminal controls shown
 * escaped, severities coloured on a terminal (`script` gives the command one), `ack` and `clear` reaching the
 * daemon at once and refused a second time; `outpost status` and `/metrics` count active alarms by severity.
 */
import { spawnSync } from 'node:child_process';
import t from 'tap';
import { MAIN, cli, http } from '../helpers/server.js';
import { failsOneLine, ok, techGateway } from '../helpers/tech.js';

interface AlarmJson {
  id: { id: string };
  type: string;
  severity: string;
  status: string;
  originatorName: string;
}

t.test('outpost alarms', async (t) => {
  const tg = await techGateway(t);
  const raise = async (type: string, severity: string, device = tg.pump.id): Promise<AlarmJson> => {
    const r = await http(
      'POST',
      `${tg.gw.url}/api/alarm`,
      { type, severity, originator: { entityType: 'DEVICE', id: device } },
      tg.H,
    );
    if (r.status !== 200) throw new Error(r.text);
    return r.json<AlarmJson>();
  };
  const get = async (id: string): Promise<AlarmJson> =>
    (await http('GET', `${tg.gw.url}/api/alarm/info/${id}`, undefined, tg.H)).json<AlarmJson>();
  /** wide enough for every column whole */
  const wide = (args: string[]) => cli(args, { ...tg.env, COLUMNS: '160' });
  const hot = await raise('High Temperature', 'CRITICAL');
  const evil = await raise('Door\x1b[2Jopen', 'MINOR');
  const old = await raise('Old', 'WARNING');
  t.equal((await http('POST', `${tg.gw.url}/api/alarm/${old.id.id}/clear`, undefined, tg.H)).status, 200);

  t.test('list: local and remote, --json the same, controls escaped', async (t) => {
    const local = ok(t, await wide(['alarms', ...tg.L]), 'local list');
    t.match(local, /^SEVERITY +DEVICE +TYPE +STATUS +SINCE +ID$/m);
    t.match(
      local,
      /^CRITICAL +pump-1 +High Temperature +ACTIVE_UNACK +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d {2}[0-9a-f-]{36}$/m,
    );
    t.ok(local.includes('Door\\x1b[2Jopen'), 'the ESC in a type is shown as text');
    t.notOk(local.includes('\x1b'), 'no control reaches the terminal');
    t.notOk(local.includes('Old'), 'cleared alarms only with --all');
    const lines = local.trim().split('\n');
    t.same(
      lines.slice(1).map((l) => l.split(' ')[0]),
      ['MINOR', 'CRITICAL'],
      'newest first',
    );
    const remote = ok(t, await wide(['alarms', ...tg.R]), 'remote list');
    t.equal(remote, local, 'the same table remotely');
    const all = ok(t, await wide(['alarms', ...tg.L, '--all', '--device', 'pump-1']), '--all --device');
    t.match(all, /^WARNING +pump-1 +Old +CLEARED_UNACK/m);
    t.match(ok(t, await wide(['alarms', ...tg.L, '--device', 'valve-7']), 'none'), /^\(no active alarms\)$/m);

    const lj = JSON.parse(ok(t, await wide(['alarms', ...tg.L, '--json']), 'local --json')) as {
      data: AlarmJson[];
      totalElements: number;
    };
    const rj = JSON.parse(ok(t, await wide(['alarms', ...tg.R, '--json']), 'remote --json')) as typeof lj;
    t.same(lj, rj, 'the REST page in both modes');
    t.equal(lj.totalElements, 2);
    t.same(
      lj.data.map((a) => a.type),
      ['Door\x1b[2Jopen', 'High Temperature'],
      '--json keeps the exact text',
    );
    t.equal(lj.data[0]?.originatorName, 'pump-1');
  });

  t.test('severities in colour on a terminal', async (t) => {
    const env: NodeJS.ProcessEnv = { ...process.env, ...tg.env };
    delete env['NO_COLOR'];
    const r = spawnSync(
      'script',
      ['-qec', `stty cols 200; ${process.execPath} ${MAIN} alarms --data-dir ${tg.gw.dataDir}`, '/dev/null'],
      { env, encoding: 'utf8' },
    );
    t.equal(r.status, 0, r.stderr);
    t.ok(r.stdout.includes('\x1b[1;31mCRITICAL\x1b[0m'), 'CRITICAL in bold red');
    t.ok(r.stdout.includes('\x1b[33mMINOR\x1b[0m'), 'MINOR in yellow');
    t.ok(r.stdout.includes('Door\\x1b[2Jopen'), 'the type still escaped');
    t.notOk(r.stdout.includes('\x1b[2J'), 'never the raw control');
  });

  t.test('status and metrics count active alarms by severity', async (t) => {
    const s = JSON.parse(ok(t, await tg.run(['status', ...tg.L, '--json']), 'status --json')) as {
      alarms: { active: Record<string, number> };
    };
    t.same(s.alarms.active, { CRITICAL: 1, MAJOR: 0, MINOR: 1, WARNING: 0, INDETERMINATE: 0 });
    t.match(ok(t, await tg.run(['status', ...tg.R]), 'status'), /^alarms +2 active: 1 CRITICAL, 1 MINOR$/m);
    const metrics = (await http('GET', `${tg.gw.url}/metrics`)).text;
    t.match(metrics, /^# TYPE outpost_alarms_active gauge$/m);
    t.match(metrics, /^outpost_alarms_active\{severity="CRITICAL"\} 1$/m);
    t.match(metrics, /^outpost_alarms_active\{severity="WARNING"\} 0$/m);
  });

  t.test('ack and clear: local through the daemon, remote over REST', async (t) => {
    const acked = ok(t, await tg.run(['alarms', 'ack', hot.id.id, ...tg.L]), 'local ack');
    t.match(
      acked,
      new RegExp(`^alarm ${hot.id.id} acknowledged: CRITICAL High Temperature on pump-1 \\(ACTIVE_ACK\\)`),
    );
    t.equal((await get(hot.id.id)).status, 'ACTIVE_ACK', 'the daemon answers the change at once');
    failsOneLine(
      t,
      await tg.run(['alarms', 'ack', hot.id.id, ...tg.R]),
      /Alarm was already acknowledged!/,
      'remote ack again',
    );
    const cleared = JSON.parse(
      ok(t, await tg.run(['alarms', 'clear', evil.id.id, ...tg.R, '--json']), 'remote clear'),
    ) as AlarmJson;
    t.equal(cleared.status, 'CLEARED_UNACK');
    failsOneLine(
      t,
      await tg.run(['alarms', 'clear', evil.id.id, ...tg.L]),
      /Alarm was already cleared!/,
      'local clear again',
    );
    const human = ok(t, await tg.run(['alarms', 'clear', hot.id.id, ...tg.L]), 'local clear');
    t.match(human, /cleared: CRITICAL High Temperature on pump-1 \(CLEARED_ACK\)/);
    failsOneLine(t, await tg.run(['alarms', 'ack', 'nope', ...tg.L]), /not an alarm id/, 'a bad id');
    t.match(ok(t, await tg.run(['alarms', ...tg.L]), 'after'), /^\(no active alarms\)$/m);
    const metrics = (await http('GET', `${tg.gw.url}/metrics`)).text;
    t.match(metrics, /^outpost_alarms_active\{severity="CRITICAL"\} 0$/m);
  });
});
