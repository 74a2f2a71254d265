/**
 * The admin commands' writes (`device add`, `customer add`, ...) and the one-writer rule (src/admin/channel.ts):
 * beside a daemon they are made by the daemon; without one, by the command under the data dir's lock. Two
 * processes writing one store lost acknowledged commits (docs/design/storage.md, "One writer"): ten concurrent
 * `device add`s beside a daemon left a device its command had printed missing from the store, about once in a
 * thousand.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { requestDaemon } from '../../src/admin/channel.js';
import { DEFAULTS } from '../../src/config/index.js';
import { tryLockDataDir } from '../../src/daemon/lock.js';
import { EntityStore } from '../../src/store/entities.js';
import { openStoreEnv } from '../../src/store/env.js';
import { addDevice, cli, cliJson, http, startGateway, tempDir } from '../helpers/server.js';

const DEVICES = 12;

async function storedDevices(dataDir: string, names: string[]): Promise<string[]> {
  const env = openStoreEnv({ dataDir, mapSizeBytes: DEFAULTS.store.mapSizeBytes, readOnly: true });
  try {
    const entities = new EntityStore(env);
    return names.filter((n) => entities.byName('DEVICE', n) !== undefined);
  } finally {
    await env.close();
  }
}

t.test('beside a daemon, concurrent admin commands write through it and every one is kept', async (t) => {
  const gw = await startGateway(t);
  const names = Array.from({ length: DEVICES }, (_, i) => `pump-${i}`);
  const devices = await Promise.all(names.map((n, i) => addDevice(gw.dataDir, n, ['--token', `TOK${i}`])));
  for (const [i, d] of devices.entries()) {
    const r = await http('POST', `${gw.url}/api/v1/TOK${i}/telemetry`, { v: i });
    t.equal(r.status, 200, `${d.name} posts with the token its command printed`);
  }
  // the daemon, stopped, answers nothing: a command that waits for it does not write the store itself
  gw.proc.kill('SIGSTOP');
  let done = false;
  const pending = cliJson(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'Acme']).then((c) => {
    done = true;
    return c;
  });
  await new Promise((r) => setTimeout(r, 1500));
  t.equal(done, false, 'with the daemon stopped, `customer add` waits for it');
  gw.proc.kill('SIGCONT');
  const customer = await pending;
  t.equal(customer.title, 'Acme', 'and is answered once it runs again');
  const dup = await cli(['device', 'add', '--data-dir', gw.dataDir, '--name', 'pump-0']);
  t.equal(dup.code, 1, "the daemon's refusal is the command's");
  t.match(dup.stderr, /Device with such name already exists/);
  t.ok(existsSync(join(gw.dataDir, 'admin.key')), 'a running daemon has its key in the data dir');
  await gw.stop();
  t.notOk(existsSync(join(gw.dataDir, 'admin.key')), 'and takes it away when it stops');
  t.same(await storedDevices(gw.dataDir, names), names, `all ${DEVICES} devices are in the store`);
});

t.test('a request without the key in the data dir is refused and changes nothing', async (t) => {
  const gw = await startGateway(t);
  await t.rejects(
    requestDaemon(gw.dataDir, { op: 'customer.add', title: 'Intruder' }, 'not-the-key'),
    { code: 'AUTH_FAILED' },
    'a wrong key',
  );
  await t.rejects(
    requestDaemon(gw.dataDir, { op: 'customer.add', title: 'Intruder' }, ''),
    { code: 'AUTH_FAILED' },
    'no key',
  );
  const ok = await requestDaemon(gw.dataDir, { op: 'customer.add', title: 'Known' });
  t.match(ok, { title: 'Known' }, 'the key from admin.key is taken');
  await gw.stop();
  const env = openStoreEnv({ dataDir: gw.dataDir, mapSizeBytes: DEFAULTS.store.mapSizeBytes, readOnly: true });
  t.teardown(() => env.close());
  const entities = new EntityStore(env);
  t.equal(entities.findCustomer('Intruder'), undefined, 'no customer from the refused requests');
  t.ok(entities.findCustomer('Known'));
});

t.test('without a daemon, concurrent admin commands take turns under the lock', async (t) => {
  const dataDir = tempDir(t);
  const names = Array.from({ length: 8 }, (_, i) => `valve-${i}`);
  const results = await Promise.all(names.map((n) => cli(['device', 'add', '--data-dir', dataDir, '--name', n])));
  t.same(
    results.map((r) => r.code),
    names.map(() => 0),
    'every command succeeded',
  );
  t.same(await storedDevices(dataDir, names), names, 'all 8 devices are in the store');
  t.notOk(existsSync(join(dataDir, 'admin.key')), 'no daemon, no key');
});

t.test('a daemon starting while an admin command writes waits for it instead of refusing', async (t) => {
  const dataDir = tempDir(t);
  const held = await tryLockDataDir(dataDir, 'admin');
  if (!('lock' in held)) throw new Error('the fresh data dir was locked');
  const started = startGateway(t, { dataDir });
  await new Promise((r) => setTimeout(r, 800));
  await held.lock.release();
  const gw = await started;
  t.ok(gw.port > 0, 'it started once the command let go');
  t.notOk(
    gw.logs.some((l) => /in use/.test(l)),
    'and did not report the data dir in use',
  );
});
