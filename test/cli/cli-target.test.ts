/**
 * Where a command acts (docs/cli.md "Local and remote"): writes follow the one rule the reads follow, so after a
 * login to gateway B, from a folder holding gateway A's ./data, `device show/rename/delete` all act on B and say
 * so; a data-dir-only command refuses; a local command where there is no store creates none. `attributes set`
 * and `attributes delete`, local and remote, reach a device's long-poll and MQTT subscription as REST's writes.
 * Every CLI run here has its own cwd and HOME: nothing of the runner's folder or home is read.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { Inbox, mqttClient } from '../helpers/mqtt.js';
import { type CliResult, MAIN, addDevice, http, startGateway, tempDir, waitLongPoll } from '../helpers/server.js';
import { failsOneLine, ok } from '../helpers/tech.js';
import { addUser, authHeaders, login } from '../helpers/users.js';
import {
  ACTIVE_KEY,
  INACTIVITY_ALARM_KEY,
  LAST_ACTIVITY_KEY,
  LAST_CONNECT_KEY,
  LAST_DISCONNECT_KEY,
} from '../../src/device/state.js';

const STATE_KEYS = new Set([
  ACTIVE_KEY,
  LAST_CONNECT_KEY,
  LAST_DISCONNECT_KEY,
  LAST_ACTIVITY_KEY,
  INACTIVITY_ALARM_KEY,
]);

/** `outpost ARGS` run in `cwd` with `home` as HOME and no OUTPOST_* of the runner's environment */
function runIn(cwd: string, home: string, args: string[], stdin?: string): Promise<CliResult> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOME: home,
    XDG_CONFIG_HOME: '',
    OUTPOST_URL: '',
    OUTPOST_DATA_DIR: '',
    OUTPOST_CONFIG: '',
    TZ: 'UTC',
    NO_COLOR: '1',
    COLUMNS: '100',
  };
  return new Promise((resolve) => {
    const child = execFile(process.execPath, [MAIN, ...args], { cwd, env }, (err, stdout, stderr) => {
      const code = err
        ? typeof (err as { code?: unknown }).code === 'number'
          ? (err as { code: number }).code
          : 1
        : 0;
      resolve({ code, stdout, stderr });
    });
    child.stdin?.end(stdin ?? '');
  });
}

async function deviceNames(url: string, H: Record<string, string>): Promise<string[]> {
  const r = await http('GET', `${url}/api/tenant/devices?pageSize=100&page=0`, undefined, H);
  return (r.json<{ data: Array<{ name: string }> }>().data ?? []).map((d) => d.name).sort();
}

const esc = (s: string): string => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');

t.test("logged in to B from a folder holding A's ./data: every command acts on B and names it", async (t) => {
  const cwd = tempDir(t);
  const home = tempDir(t);
  const a = await startGateway(t, { dataDir: join(cwd, 'data') });
  const b = await startGateway(t);
  await Promise.all([
    addUser(a.dataDir, 'admin@a.test', 'pw-a', 'TENANT_ADMIN'),
    addUser(b.dataDir, 'admin@b.test', 'pw-b', 'TENANT_ADMIN'),
  ]);
  await Promise.all([addDevice(a.dataDir, 'victim'), addDevice(b.dataDir, 'victim'), addDevice(a.dataDir, 'keep')]);
  const HA = authHeaders((await login(a, 'admin@a.test', 'pw-a')).token);
  const HB = authHeaders((await login(b, 'admin@b.test', 'pw-b')).token);
  const run = (...args: string[]): Promise<CliResult> => runIn(cwd, home, args);
  ok(t, await run('login', '--url', b.url, '--username', 'admin@b.test', '--password', 'pw-b'), 'login to B');
  const onB = new RegExp(`gateway ${esc(b.url)}`);

  const shown = await run('device', 'show', 'victim');
  t.match(shown.stderr, onB, 'show names B');
  const renamed = await run('device', 'rename', 'victim', 'victim-b');
  t.match(renamed.stderr, onB, 'rename names B on stderr');
  t.match(JSON.parse(ok(t, renamed, 'rename')), { oldName: 'victim', name: 'victim-b', gateway: b.url });
  t.same(await deviceNames(b.url, HB), ['victim-b'], "B's device renamed");
  t.same(await deviceNames(a.url, HA), ['keep', 'victim'], "A's untouched");

  // the confirmation names where it acts; without a terminal it asks for --yes, and names it too
  failsOneLine(
    t,
    await run('device', 'delete', 'victim-b'),
    new RegExp(`delete device "victim-b" and all its data on gateway ${esc(b.url)}\\? Give --yes`),
    'delete asks, naming B',
  );
  const deleted = await run('device', 'delete', 'victim-b', '--yes');
  t.match(JSON.parse(ok(t, deleted, 'delete')), { name: 'victim-b', deleted: true, gateway: b.url });
  t.same(await deviceNames(b.url, HB), [], "B's device deleted");
  t.same(await deviceNames(a.url, HA), ['keep', 'victim'], "A's victim is still there");
  failsOneLine(t, await run('device', 'delete', 'victim', '--yes'), onB, "A's name alone does not reach A");
  t.same(await deviceNames(a.url, HA), ['keep', 'victim'], 'still there');

  // a command that acts on a data dir only refuses while the rule points at B, and changes nothing
  for (const args of [
    ['user', 'add', '--email', 'x@a.test', '--password', 'x', '--authority', 'TENANT_ADMIN'],
    ['user', 'passwd', '--email', 'admin@a.test', '--password', 'x'],
    ['device', 'upstream', 'keep', '--token', 'UP'],
    ['user', 'list'],
  ]) {
    failsOneLine(
      t,
      await run(...args),
      new RegExp(
        `^outpost: ${args[0]} ${args[1]} acts on a local data dir only, and commands go to gateway ${esc(b.url)} \\(the current login`,
      ),
      `${args.slice(0, 2).join(' ')} refuses`,
    );
  }
  t.same(await deviceNames(a.url, HA), ['keep', 'victim'], 'nothing added to A');
  // the adds go to B over REST, their lines as locally
  const customer = await run('customer', 'add', '--title', 'Acme');
  t.same(Object.keys(JSON.parse(ok(t, customer, 'customer add on B'))), ['id', 'title']);
  t.match(customer.stderr, onB, 'customer add names B');
  const added = await run('device', 'add', '--name', 'new-one', '--token', 'NEW1', '--customer', 'acme');
  t.same(JSON.parse(ok(t, added, 'device add on B')), {
    id: (JSON.parse(added.stdout) as { id: string }).id,
    name: 'new-one',
    token: 'NEW1',
  });
  t.match(added.stderr, onB, 'device add names B');
  t.same(await deviceNames(b.url, HB), ['new-one'], 'added to B');
  t.equal((await http('POST', `${b.url}/api/v1/NEW1/telemetry`, { v: 1 })).status, 200, 'its token works on B');
  const assigned = await http(
    'GET',
    `${b.url}/api/customer/${JSON.parse(customer.stdout).id}/devices?pageSize=10&page=0`,
    undefined,
    HB,
  );
  t.match(assigned.text, /"name":"new-one"/, 'assigned to the customer found by title');
  failsOneLine(
    t,
    await run('device', 'add', '--name', 'plc', '--mqtt-basic', 'plc::pw'),
    new RegExp(
      `--mqtt-basic, --cert and --upstream-token act on a local data dir only, and commands go to gateway ${esc(b.url)}`,
    ),
    'credentials other than a token: local only',
  );
  t.same(await deviceNames(a.url, HA), ['keep', 'victim'], 'A untouched by the adds');
  t.equal((await login(a, 'admin@a.test', 'pw-a')).token.length > 0, true, "A's password unchanged");

  // the same commands with --data-dir act on A, and name its data dir
  const local = await run('device', 'rename', 'victim', 'victim-a', '--data-dir', 'data');
  t.match(JSON.parse(ok(t, local, 'rename --data-dir')), { name: 'victim-a', dataDir: join(cwd, 'data') });
  t.match(local.stderr, new RegExp(`^data dir ${esc(join(cwd, 'data'))}\\n$`), 'stderr names the data dir');
  failsOneLine(
    t,
    await run('device', 'delete', 'victim-a', '--data-dir', 'data'),
    new RegExp(`in data dir ${esc(join(cwd, 'data'))}\\? Give --yes`),
    'local delete asks, naming the data dir',
  );
  const addedA = await run('device', 'add', '--name', 'added', '--data-dir', 'data');
  t.same(
    Object.keys(JSON.parse(ok(t, addedA, 'device add --data-dir'))),
    ['id', 'name', 'token'],
    'add: its line as before',
  );
  t.match(addedA.stderr, /^data dir .*\/data\n$/, 'add names the data dir on stderr');
  t.same(await deviceNames(a.url, HA), ['added', 'keep', 'victim-a'], 'A changed by --data-dir only');
});

t.test('in a folder with no store, no command creates one', async (t) => {
  const cwd = tempDir(t);
  const home = tempDir(t);
  for (const args of [
    ['device', 'rename', 'x', 'y'],
    ['device', 'delete', 'x', '--yes'],
    ['device', 'upstream', 'x', '--token', 'T'],
    ['attributes', 'set', 'x', '--scope', 'shared', '{"a":1}'],
    ['attributes', 'delete', 'x', 'a', '--scope', 'shared'],
    ['user', 'passwd', '--email', 'a@b.c', '--password', 'p'],
    ['user', 'delete', '--email', 'a@b.c', '--yes'],
    ['user', 'list'],
    ['customer', 'list'],
    ['devices'],
  ]) {
    failsOneLine(
      t,
      await runIn(cwd, home, args),
      new RegExp(`^outpost: no store in ${esc(join(cwd, 'data'))}: give --data-dir DIR .* or outpost login --url URL`),
      args.slice(0, 2).join(' '),
    );
  }
  t.same(readdirSync(cwd), [], 'no ./data was created');
});

t.test('attributes set and delete, local and remote, reach the device as REST writes do', async (t) => {
  const cwd = tempDir(t);
  const home = tempDir(t);
  const gw = await startGateway(t);
  await addUser(gw.dataDir, 'admin@attr.test', 'pw', 'TENANT_ADMIN');
  const dev = await addDevice(gw.dataDir, 'thermo', ['--token', 'THERMO']);
  const H = authHeaders((await login(gw, 'admin@attr.test', 'pw')).token);
  const L = ['--data-dir', gw.dataDir];
  const R = ['--url', gw.url];
  const run = (...args: string[]): Promise<CliResult> => runIn(cwd, home, args);
  ok(t, await run('login', ...R, '--username', 'admin@attr.test', '--password', 'pw'), 'login');
  const attrs = async (scope: string): Promise<Record<string, unknown>> => {
    const r = await http(
      'GET',
      `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/values/attributes/${scope}`,
      undefined,
      H,
    );
    // what the CLI wrote, without the connectivity state the daemon keeps in SERVER_SCOPE itself
    return Object.fromEntries(
      r
        .json<Array<{ key: string; value: unknown }>>()
        .filter((x) => !STATE_KEYS.has(x.key))
        .map((x) => [x.key, x.value]),
    );
  };
  const mqtt = await mqttClient(t, gw, 'THERMO');
  await mqtt.subscribeAsync('v1/devices/me/attributes', { qos: 1 });
  const inbox = new Inbox(mqtt);

  // local, beside the daemon: the daemon writes it, and its device's long-poll and MQTT subscription hear it
  const poll = http('GET', `${gw.url}/api/v1/THERMO/attributes/updates?timeout=20000`);
  await waitLongPoll(gw, H, (s) => s.attributePolls === 1);
  const set = await run('attributes', 'set', 'thermo', '--scope', 'SHARED_SCOPE', '{"target":22}', ...L);
  t.match(JSON.parse(ok(t, set, 'local set')), { name: 'thermo', scope: 'SHARED_SCOPE', saved: ['target'] });
  const woke = await poll;
  t.equal(woke.status, 200, 'the long-poll woke');
  t.equal(woke.text, '{"target":22}', 'with the new attribute');
  t.equal((await inbox.next((m) => m.text.includes('"target"'))).text, '{"target":22}', 'MQTT subscriber told');
  t.same(await attrs('SHARED_SCOPE'), { target: 22 });

  // remote (the login), SERVER_SCOPE by its short name
  const srv = await run('attributes', 'set', 'thermo', '--scope', 'server', '{"site":"north","n":2.5}');
  t.match(JSON.parse(ok(t, srv, 'remote set')), { scope: 'SERVER_SCOPE', gateway: gw.url });
  t.match(await attrs('SERVER_SCOPE'), { site: 'north', n: 2.5 });

  // refusals: one line, exit 1, nothing written
  failsOneLine(
    t,
    await run('attributes', 'set', 'thermo', '--scope', 'client', '{"a":1}'),
    /Invalid scope: CLIENT_SCOPE/,
    'client scope',
  );
  failsOneLine(t, await run('attributes', 'set', 'thermo', '--scope', 'shared', '{"a":'), /not JSON/, 'bad JSON');
  failsOneLine(t, await run('attributes', 'set', 'thermo', '--scope', 'shared', '[1]'), /JSON object/, 'not an object');
  failsOneLine(
    t,
    await run('attributes', 'set', 'thermo', '--scope', 'shared', '{"a":1,"b":null}', ...L),
    /^outpost: .*\(data dir /,
    'a null value refused by the daemon, naming the data dir',
  );
  failsOneLine(
    t,
    await run('attributes', 'set', 'thermo', '--scope', 'shared', '{"a":null}'),
    /^outpost: 400/,
    'remote null',
  );
  t.same(await attrs('SHARED_SCOPE'), { target: 22 }, 'nothing written by the refusals');

  // delete: remote then local
  ok(t, await run('attributes', 'delete', 'thermo', 'site', '--scope', 'server'), 'remote delete');
  t.same(await attrs('SERVER_SCOPE'), { n: 2.5 });
  ok(t, await run('attributes', 'delete', 'thermo', 'target', '--scope', 'shared', ...L), 'local delete');
  t.same(await attrs('SHARED_SCOPE'), {});
  // reading still works, its own --scope before and after the device
  t.match(ok(t, await run('attributes', 'thermo', '--scope', 'server', ...R), 'read'), /\nserver\s+n\s+2\.5/);
  t.notOk(existsSync(join(cwd, 'data')), 'nothing created in the cwd');
});
