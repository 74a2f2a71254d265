/**
 * The admin CLI and `outpost serve` lifecycle (docs/cli.md): JSON lines, `--customer` by id and by title,
 * one-line errors with a non-zero exit, use with and without the daemon (which sees new entities at once),
 * env defaults, the listening log line, SIGTERM/SIGINT → 0, and HTTPS through --tls-cert/--tls-key.
 */
import { existsSync, readFileSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { open as openLmdb } from 'lmdb';
import t, { type Test } from 'tap';
import { hasOpenssl, selfSignedCert } from '../helpers/tls.js';
import { DEFAULTS } from '../../src/config/index.js';
import { EntityStore } from '../../src/store/entities.js';
import { openStoreEnv } from '../../src/store/env.js';
import { NULL_UUID } from '../../src/types.js';
import { outpostCommand } from '../../src/daemon/invocation.js';
import { type CliResult, MAIN, addDevice, cli, cliJson, http, startGateway, tempDir } from '../helpers/server.js';

interface DeviceLine {
  id: string;
  name: string;
  token: string;
}
interface CustomerLine {
  id: string;
  title: string;
}
interface UserLine {
  id: string;
  email: string;
  authority: string;
  customerId: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A failed command: non-zero exit and exactly one line on stderr, nothing on stdout. */
function failsWithOneLine(t: Test, r: CliResult, msg: RegExp, what: string): void {
  t.not(r.code, 0, `${what}: non-zero exit`);
  t.equal(r.stdout, '', `${what}: nothing on stdout`);
  const lines = r.stderr.trimEnd().split('\n');
  t.equal(lines.length, 1, `${what}: one-line error (${r.stderr.trim()})`);
  t.match(lines[0], msg, what);
}

/** The customer a device is assigned to, read from the store with the daemon stopped or running. */
async function deviceCustomer(dataDir: string, deviceId: string): Promise<string | undefined> {
  const env = openStoreEnv({ dataDir, mapSizeBytes: DEFAULTS.store.mapSizeBytes, readOnly: true });
  try {
    return new EntityStore(env).device(deviceId)?.customerId;
  } finally {
    await env.close();
  }
}

t.test('admin commands without a daemon', async (t) => {
  const dir = tempDir(t);
  const dd = ['--data-dir', dir];

  const cust = await cliJson<CustomerLine>(['customer', 'add', ...dd, '--title', 'Acme']);
  t.match(cust.id, UUID);
  t.same(Object.keys(cust), ['id', 'title']);
  t.equal(cust.title, 'Acme');
  failsWithOneLine(
    t,
    await cli(['customer', 'add', ...dd, '--title', 'Acme']),
    /^outpost: .*already exists/,
    'duplicate customer title',
  );

  // Independent creations run side by side (separate processes; LMDB serialises the writers).
  const [plain, byId, byTitle, admin, cu, cuById] = await Promise.all([
    cliJson<DeviceLine>(['device', 'add', ...dd, '--name', 'pump-1']),
    cliJson<DeviceLine>([
      'device',
      'add',
      ...dd,
      '--name',
      'pump-2',
      '--customer',
      cust.id,
      '--token',
      'tok-2',
      '--type',
      'pump',
    ]),
    cliJson<DeviceLine>(['device', 'add', ...dd, '--name', 'pump-3', '--customer', 'Acme']),
    cliJson<UserLine>([
      'user',
      'add',
      ...dd,
      '--email',
      'admin@example.com',
      '--password',
      'secret',
      '--authority',
      'TENANT_ADMIN',
    ]),
    cliJson<UserLine>([
      'user',
      'add',
      ...dd,
      '--email',
      'cu@example.com',
      '--password',
      'pw',
      '--authority',
      'CUSTOMER_USER',
      '--customer',
      'Acme',
    ]),
    cliJson<UserLine>([
      'user',
      'add',
      ...dd,
      '--email',
      'cu2@example.com',
      '--password',
      'pw',
      '--authority',
      'CUSTOMER_USER',
      '--customer',
      cust.id,
    ]),
  ]);
  t.same(Object.keys(plain), ['id', 'name', 'token'], 'device add prints {id,name,token}');
  t.match(plain.id, UUID);
  t.equal(plain.name, 'pump-1');
  t.match(plain.token, /^[A-Za-z0-9]{20}$/, 'random token: 20 alphanumerics');
  t.equal(await deviceCustomer(dir, plain.id), NULL_UUID, 'unassigned device has the null customer');
  t.equal(byId.token, 'tok-2', '--token is used as given');
  t.equal(await deviceCustomer(dir, byId.id), cust.id, '--customer by id');
  t.equal(await deviceCustomer(dir, byTitle.id), cust.id, '--customer by title');
  t.match(admin.id, UUID);
  t.equal(admin.email, 'admin@example.com');
  t.equal(admin.authority, 'TENANT_ADMIN');
  t.equal(admin.customerId, NULL_UUID);
  t.equal(cu.customerId, cust.id, 'customer user by customer title');
  t.equal(cuById.customerId, cust.id, 'customer user by customer id');

  // Failures change nothing, so they run side by side (each is a separate process).
  const failures: Array<[string[], RegExp, string]> = [
    [
      ['device', 'add', '--name', 'pump-1'],
      /^outpost: Device with such name already exists!$/,
      'duplicate device name',
    ],
    [
      ['device', 'add', '--name', 'pump-9', '--token', 'tok-2'],
      /^outpost: .*credentials are already assigned/,
      'duplicate token',
    ],
    [
      ['device', 'add', '--name', 'pump-9', '--customer', 'Nobody'],
      /^outpost: no customer with id or title "Nobody"$/,
      'unknown customer',
    ],
    [['device', 'add', '--name', 'pump-9', '--token', 'has space'], /^outpost: .*access token/, 'bad token'],
    [
      ['user', 'add', '--email', 'ADMIN@example.com', '--password', 'x', '--authority', 'TENANT_ADMIN'],
      /^outpost: .*already present/,
      'duplicate email (case-insensitive)',
    ],
    [
      ['user', 'add', '--email', 'c2@example.com', '--password', 'x', '--authority', 'CUSTOMER_USER'],
      /^outpost: .*customer/,
      'customer user without a customer',
    ],
    [
      ['user', 'add', '--email', 'not-an-email', '--password', 'x', '--authority', 'TENANT_ADMIN'],
      /^outpost: Invalid email/,
      'bad email',
    ],
    [['device', 'add'], /required option '--name/, 'missing required option'],
    [
      ['user', 'add', '--email', 'x@example.com', '--password', 'x', '--authority', 'ROOT'],
      /ROOT/,
      'unknown authority',
    ],
    [['frobnicate'], /unknown command 'frobnicate'/, 'unknown command'],
  ];
  const results = await Promise.all(failures.map(([args]) => cli([...args, ...dd])));
  for (const [i, [, msg, what]] of failures.entries()) failsWithOneLine(t, results[i] as CliResult, msg, what);

  // OUTPOST_DATA_DIR is the CLI's default data dir too
  const viaEnv = await cli(['device', 'add', '--name', 'env-dev'], { OUTPOST_DATA_DIR: dir });
  t.equal(viaEnv.code, 0);
  t.equal(
    await deviceCustomer(dir, (JSON.parse(viaEnv.stdout) as { id: string }).id),
    NULL_UUID,
    'created in the env data dir',
  );
});

t.test('admin commands while the daemon runs; the daemon sees them at once', async (t) => {
  const gw = await startGateway(t);
  t.equal(gw.logs.filter((l) => /listening on/.test(l)).length, 1, 'one log line when listening');
  // the command as this install runs it from the daemon's cwd (`npx outpost` only in a clone's folder)
  const command = `${outpostCommand(MAIN, process.cwd())} user add`;
  t.ok(
    gw.logs.some((l) => l.includes(command)),
    `first start says how to create the first user (${command})`,
  );

  const user = await cliJson<UserLine>([
    'user',
    'add',
    '--data-dir',
    gw.dataDir,
    '--email',
    'live@example.com',
    '--password',
    'pw1',
    '--authority',
    'TENANT_ADMIN',
  ]);
  t.match(user.id, UUID);
  const login = await http('POST', `${gw.url}/api/auth/login`, { username: 'live@example.com', password: 'pw1' });
  t.equal(login.status, 200, 'a user created by the CLI can log in without a restart');
  t.match(login.json<{ token: string }>().token, /^[\w-]+\.[\w-]+\.[\w-]+$/);

  const cust = await cliJson<CustomerLine>(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'Live']);
  const dev = await addDevice(gw.dataDir, 'live-dev', ['--customer', cust.id]);
  const r = await http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, '{"a":1}');
  t.equal(r.status, 200, 'a device created by the CLI posts at once');
  failsWithOneLine(
    t,
    await cli(['device', 'add', '--data-dir', gw.dataDir, '--name', 'live-dev']),
    /already exists/,
    'duplicate while running',
  );
  t.equal(await deviceCustomer(gw.dataDir, dev.id), cust.id, 'readable from another process while the daemon runs');

  t.equal(await gw.stop('SIGTERM'), 0, 'SIGTERM → exit 0');
  t.ok(gw.logs.some((l) => /SIGTERM received/.test(l)));
  const again = await startGateway(t, { dataDir: gw.dataDir });
  t.notOk(
    again.logs.some((l) => /outpost user add/.test(l)),
    'second start does not create the tenant again',
  );
  t.equal(await again.stop('SIGINT'), 0, 'SIGINT → exit 0');
});

t.test('a data dir whose LMDB file is not an Outpost store: a clear error, read-only or from the CLI', async (t) => {
  const dir = tempDir(t);
  const other = openLmdb({ path: join(dir, 'outpost.mdb'), maxDbs: 4 });
  await other.openDB({ name: 'meta' }).put('k', 1);
  await other.close();
  t.throws(
    () => openStoreEnv({ dataDir: dir, mapSizeBytes: DEFAULTS.store.mapSizeBytes, readOnly: true }),
    { code: 'STORE_FAILED', message: /has no entities, names, .* databases: not an Outpost store/ },
    'opening it read-only',
  );
  const r = await cli(['status', '--data-dir', dir]);
  t.not(r.code, 0);
  t.match(r.stderr, /^outpost: .*not an Outpost store\n$/, 'one line, no TypeError');
});

t.test('serve rejects bad configuration with a one-line error, before touching the store', async (t) => {
  const dir = tempDir(t);
  const [badPort, noTlsFile, certOnly] = await Promise.all([
    cli(['serve', '--data-dir', dir, '--port', 'abc']),
    cli([
      'serve',
      '--data-dir',
      dir,
      '--port',
      '0',
      '--tls-cert',
      join(dir, 'nope.pem'),
      '--tls-key',
      join(dir, 'nope.key'),
    ]),
    cli(['serve', '--data-dir', dir, '--port', '0', '--tls-cert', join(dir, 'nope.pem')]),
  ]);
  failsWithOneLine(t, badPort, /^outpost: .*port must be an integer/, 'bad port');
  failsWithOneLine(t, noTlsFile, /^outpost: TLS file not found/, 'missing TLS file');
  failsWithOneLine(t, certOnly, /both a certificate and a key/, 'cert without key');
  t.notOk(existsSync(join(dir, 'outpost.mdb')), 'no store was created');
});

t.test('HTTPS with --tls-cert/--tls-key', { skip: hasOpenssl ? false : 'openssl is not available' }, async (t) => {
  const dir = tempDir(t);
  const { cert, key } = selfSignedCert(dir);
  const gw = await startGateway(t, { args: ['--tls-cert', cert, '--tls-key', key] });
  t.match(gw.url, /^https:/);
  t.ok(gw.logs.some((l) => /listening on https:\/\//.test(l)));
  const dev = await addDevice(gw.dataDir, 'tls-dev');
  const ca = readFileSync(cert);
  const res = await new Promise<{ status: number; text: string }>((resolve, reject) => {
    const req = httpsRequest(
      `${gw.url}/api/v1/${dev.token}/telemetry`,
      { method: 'POST', ca, headers: { 'content-type': 'application/json' } },
      (r) => {
        let text = '';
        r.on('data', (c: Buffer) => {
          text += c.toString();
        });
        r.on('end', () => resolve({ status: r.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.end('{"ts":1,"values":{"secure":true}}');
  });
  t.equal(res.status, 200, 'telemetry over HTTPS, certificate verified against its own CA');
  t.equal(res.text, '');
  const plain = await http('POST', `http://127.0.0.1:${gw.port}/api/v1/${dev.token}/telemetry`, '{"a":1}').then(
    (r) => `status ${r.status}`,
    (err: unknown) => `error ${String(err)}`,
  );
  t.match(plain, /^error/, 'plain HTTP on the TLS port does not get an answer');
  t.equal(await gw.stop('SIGTERM'), 0);
});
