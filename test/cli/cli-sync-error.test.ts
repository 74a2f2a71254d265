/**
 * The sync's last error carries its time (docs/sync.md "Status"): `lastErrorTs` in the status, "last error 2m 3s
 * ago (...)" in `outpost sync`; and after a restart a healthy sync does not show the previous run's error as its
 * current one: it is `previousRunError`, and `outpost sync` says it was before this start. CLI runs have their
 * own cwd and HOME.
 */
import { execFile } from 'node:child_process';
import t from 'tap';
import { FakeTb } from '../helpers/fake-tb.js';
import { type CliResult, MAIN, addDevice, tempDir } from '../helpers/server.js';
import { postTelemetry, syncGateway, syncStatusUntil } from '../helpers/sync.js';
import { ok } from '../helpers/tech.js';
import { addUser, login } from '../helpers/users.js';

interface Status {
  backlogPoints: number;
  lastError: string | null;
  lastErrorTs: number | null;
  previousRunError: { message: string; ts: number | null } | null;
}

function runIn(cwd: string, home: string, args: string[]): Promise<CliResult> {
  const env = { ...process.env, HOME: home, XDG_CONFIG_HOME: '', OUTPOST_URL: '', OUTPOST_DATA_DIR: '', TZ: 'UTC' };
  return new Promise((resolve) => {
    execFile(process.execPath, [MAIN, ...args], { cwd, env }, (err, stdout, stderr) => {
      const code = err
        ? typeof (err as { code?: unknown }).code === 'number'
          ? (err as { code: number }).code
          : 1
        : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

t.test("the last error has its time; after a restart the previous run's error is not shown as current", async (t) => {
  const cwd = tempDir(t);
  const home = tempDir(t);
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  await tb.down();
  const before = Date.now();
  const gw = await syncGateway(t, tb.url);
  await addUser(gw.dataDir, 'admin@err.test', 'secret', 'TENANT_ADMIN');
  const jwt = (await login(gw, 'admin@err.test', 'secret')).token;
  const dev = await addDevice(gw.dataDir, 'd1', ['--upstream-token', 'UP1']);
  await postTelemetry(gw, dev.token, { v: 1 });
  const failing = await syncStatusUntil<Status>(gw, jwt, (s) => s.lastError !== null, 'an error', 20_000, 100);
  t.ok(
    failing.lastErrorTs !== null && failing.lastErrorTs >= before && failing.lastErrorTs <= Date.now(),
    `lastErrorTs is when it happened (${failing.lastErrorTs})`,
  );
  t.equal(failing.previousRunError, null, 'no error of an earlier run');
  ok(
    t,
    await runIn(cwd, home, ['login', '--url', gw.url, '--username', 'admin@err.test', '--password', 'secret']),
    'login',
  );
  const shown = ok(t, await runIn(cwd, home, ['sync']), 'outpost sync');
  t.match(shown, /\nlast error \d+m \d+s ago \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?\): /, 'its age and time');
  const status = ok(t, await runIn(cwd, home, ['status']), 'outpost status');
  t.match(status, /\nlast error \d+m \d+s ago \(/, 'status says its age too');

  // restarted with the upstream back: healthy, and the old error is marked as from before this start
  await gw.stop('SIGTERM');
  await tb.up();
  const gw2 = await syncGateway(t, tb.url, {}, {}, gw.dataDir);
  const jwt2 = (await login(gw2, 'admin@err.test', 'secret')).token;
  const healthy = await syncStatusUntil<Status>(gw2, jwt2, (s) => s.backlogPoints === 0, 'drained', 20_000, 100);
  t.equal(healthy.lastError, null, 'no current error');
  t.equal(healthy.lastErrorTs, null);
  t.match(healthy.previousRunError?.message, /refused|ECONNREFUSED|connect/i, 'the earlier error, apart');
  // retries went on failing until the stop: the last of them
  t.ok((healthy.previousRunError?.ts ?? 0) >= (failing.lastErrorTs ?? Infinity), 'with its time');
  ok(
    t,
    await runIn(cwd, home, ['login', '--url', gw2.url, '--username', 'admin@err.test', '--password', 'secret']),
    'login 2',
  );
  const after = ok(t, await runIn(cwd, home, ['sync']), 'outpost sync after the restart');
  t.notMatch(after, /^last error/m, 'no "last error" line');
  t.match(after, /\nearlier {4}before this start, \d+m \d+s ago \(/, 'the old one said to be from before this start');
});

t.test('the downlink line counts in words: 1 shared attribute, 2 shared attributes', async (t) => {
  const { linkLines } = await import('../../src/cli/sync.js');
  const { DOWNLINK_OFF } = await import('../../src/upstream/session/upstream-session.js');
  const line = (n: number): string =>
    linkLines(
      { transport: 'mqtt', session: null, downlink: { ...DOWNLINK_OFF, enabled: true, attributesApplied: n } },
      0,
    ).find((l) => l.startsWith('downlink')) ?? '';
  t.match(line(1), /^downlink {3}1 shared attribute applied, /);
  t.match(line(2), /^downlink {3}2 shared attributes applied, /);
  t.match(line(0), /^downlink {3}0 shared attributes applied, /);
});
