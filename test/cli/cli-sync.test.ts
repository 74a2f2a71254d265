/**
 * `outpost sync` (src/cli/sync.ts): a technician's view of the running daemon's sync, remote mode, against a
 * real gateway syncing to a fake ThingsBoard: the backlog and its age while the upstream refuses, a parked
 * device and its reason, the devices furthest behind, `--json` as REST's body, and no daemon to ask refused
 * with a way forward.
 */
import t from 'tap';
import { FakeTb } from '../helpers/fake-tb.js';
import { addDevice, cli, http, tempDir } from '../helpers/server.js';
import { syncGateway, syncStatusOf, syncStatusUntil } from '../helpers/sync.js';
import { addUser, login } from '../helpers/users.js';

t.test('outpost sync shows the backlog, its age, a parked device and who is behind', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  // the upstream is overloaded: telemetry answers 503 (the gateway backs off), and a device without a token parks
  tb.answer = (r) => (r.kind === 'telemetry' ? { status: 503 } : undefined);
  const gw = await syncGateway(t, tb.url);
  await addUser(gw.dataDir, 'tech@site.test', 'secret', 'TENANT_ADMIN');
  const jwt = (await login(gw, 'tech@site.test', 'secret')).token;
  const pump = await addDevice(gw.dataDir, 'pump-1', ['--upstream-token', 'P1']);
  const meter = await addDevice(gw.dataDir, 'meter-7');
  const oldest = Date.now() - 3 * 3_600_000;
  const post = async (token: string, body: unknown): Promise<void> => {
    const r = await http('POST', `${gw.url}/api/v1/${token}/telemetry`, JSON.stringify(body));
    t.equal(r.status, 200);
  };
  type Seen = { state: string; backlogPoints: number; devices: Array<{ name: string; state: string }> };
  // the tokenless device first: it parks at its first send (while backing off, nothing is tried)
  await post(meter.token, { ts: oldest + 5000, values: { kwh: 7 } });
  await syncStatusUntil<Seen>(
    gw,
    jwt,
    (s) => s.devices.some((d) => d.name === 'meter-7' && d.state === 'parked'),
    'meter-7 parked',
    10_000,
    50,
  );
  await post(pump.token, [
    { ts: oldest, values: { p: 1.5 } },
    { ts: oldest + 1000, values: { p: 2.5 } },
    { ts: oldest + 2000, values: { p: 3 } },
  ]);
  await syncStatusUntil<Seen>(
    gw,
    jwt,
    (s) =>
      s.state === 'backoff' &&
      s.backlogPoints === 4 &&
      s.devices.some((d) => d.name === 'meter-7' && d.state === 'parked'),
    'backing off, 4 behind, meter-7 parked',
    10_000,
    50,
  );

  const env = { XDG_CONFIG_HOME: tempDir(t), OUTPOST_URL: '' };
  const li = await cli(['login', '--url', gw.url, '--username', 'tech@site.test', '--password', 'secret'], env);
  t.equal(li.code, 0, li.stderr);
  const shown = await cli(['sync', '--url', gw.url], env);
  t.equal(shown.code, 0, shown.stderr);
  const lines = shown.stdout.trimEnd().split('\n');
  // backing off, or retrying when asked (sync.retryMaxMs is 400 ms here)
  t.match(
    lines[0],
    new RegExp(`^sync +(backoff|sending) to ${tb.url.replace(/[.]/g, '\\.')}; clock `),
    'state and upstream first',
  );
  t.match(shown.stdout, /^last ok +never$/m, 'no upstream answer yet');
  t.match(
    shown.stdout,
    /^backlog +4 points behind, the oldest stamped .* \(3h 0m ago\); 0 sent since the data dir was made$/m,
    'how far behind, and since when',
  );
  t.match(shown.stdout, /^last error \d+m \d+s ago \([^)]*\): HTTP 503 from /m, 'why, and when');
  t.match(
    shown.stdout,
    /^parked +1 device \(their points wait; the others go on\):\n {2}meter-7: no upstream token .*; 1 point behind$/m,
    'the parked device, its reason and what waits',
  );
  t.match(shown.stdout, /^behind +1 device with points to send:\n {2}pump-1: 3 points$/m, 'who else is behind');
  t.notMatch(shown.stdout, /^(dropped|held|set aside) /m, 'no empty sections');

  const asJson = await cli(['sync', '--url', gw.url, '--json'], env);
  t.equal(asJson.code, 0, asJson.stderr);
  const rest = await syncStatusOf<Record<string, unknown>>(gw, jwt);
  t.same(
    Object.keys(JSON.parse(asJson.stdout) as object).sort(),
    [...Object.keys(rest), 'gateway'].sort(),
    "--json is REST's body and the gateway's URL",
  );
  t.equal((JSON.parse(asJson.stdout) as { backlogPoints: number }).backlogPoints, 4);

  const afterLogin = await cli(['sync', '--json'], env);
  t.equal(afterLogin.code, 0, `without --url: the gateway logged in to (${afterLogin.stderr})`);
  t.equal((JSON.parse(afterLogin.stdout) as { gateway: string }).gateway, gw.url);
  const noUrl = await cli(['sync'], { ...env, XDG_CONFIG_HOME: tempDir(t) });
  t.not(noUrl.code, 0, 'without a gateway to ask: an error');
  t.match(noUrl.stderr, /no daemon is running on data dir .*or --url/, 'that says how to ask');

  tb.answer = undefined;
  await tb.waitFor(() => tb.distinct('P1').size === 3, "pump-1's points upstream");
  await syncStatusUntil<Seen>(gw, jwt, (s) => s.backlogPoints === 1, 'only the parked device behind', 10_000, 50);
  const after = await cli(['sync', '--url', gw.url], env);
  t.match(after.stdout, /^backlog +1 point behind, .*; 3 sent since the data dir was made$/m, 'sent counted');
  t.match(after.stdout, /^last ok +.*\(0m \d+s ago\)$/m, 'and when the upstream last answered');
  t.notMatch(after.stdout, /^behind /m, 'nobody but the parked device is behind');
});
