/**
 * The daemon's decoded-entity cache stays coherent (docs/cli.md, docs/api.md): a device the CLI creates works at
 * once, a device deleted by REST or by another process is refused at once, a token moved to another device
 * follows at once, and an assignment change (REST or another process) changes a customer user's access at
 * once. Each check follows a warm-up request, so a stale cache entry would be what answers.
 */
import t, { type Test } from 'tap';
import { EntityStore } from '../../src/store/entities.js';
import type { CustomerId } from '../../src/types.js';
import { NULL_UUID } from '../../src/types.js';
import { type Gateway, addDevice, cliJson, http, startGateway } from '../helpers/server.js';
import { openDaemonEnv } from '../helpers/store.js';
import { addUser, adminHeaders, authHeaders, login } from '../helpers/users.js';

const post = (gw: Gateway, token: string, body = '{"x":1}'): Promise<number> =>
  http('POST', `${gw.url}/api/v1/${token}/telemetry`, body).then((r) => r.status);

/** Opens the daemon's store from this (another) process, as the CLI does; closed at teardown. */
function otherProcessStore(t: Test, dataDir: string): EntityStore {
  return new EntityStore(openDaemonEnv(t, dataDir, { readOnly: false }).env);
}

t.test('device tokens: CLI create, REST delete, delete and re-create from another process', async (t) => {
  const gw = await startGateway(t);
  const d = gw.dataDir;
  t.equal(await post(gw, 'tok-a'), 401, 'unknown token before the device exists');

  const a = await addDevice(d, 'dev-a', ['--token', 'tok-a']);
  t.equal(await post(gw, 'tok-a'), 200, 'CLI-created device works at once');
  t.equal(await post(gw, 'tok-a'), 200, 'and again (cached)');

  const admin = await adminHeaders(gw, 'admin@example.com', 'secret');

  const del = await http('DELETE', `${gw.url}/api/device/${a.id}`, undefined, admin);
  t.equal(del.status, 200, 'REST delete');
  t.equal(await post(gw, 'tok-a'), 401, 'REST-deleted device is refused at once');

  const b = await addDevice(d, 'dev-b', ['--token', 'tok-b']);
  t.equal(await post(gw, 'tok-b'), 200, 'warm');
  const other = otherProcessStore(t, d);
  t.ok(await other.deleteDevice(b.id), 'deleted from another process');
  t.equal(await post(gw, 'tok-b'), 401, 'device deleted by another process is refused at once');

  // the same token on a new device: points must land on the new one
  const c = await addDevice(d, 'dev-c', ['--token', 'tok-b']);
  t.equal(await post(gw, 'tok-b', '{"k":7}'), 200, 're-created token works at once');
  const latest = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${c.id}/values/timeseries?keys=k`,
    undefined,
    admin,
  );
  t.equal(latest.status, 200);
  t.same(latest.json<Record<string, Array<{ value: string }>>>()['k']?.[0]?.value, '7', 'stored under the new device');
});

t.test('access: assignment changes by REST and by another process apply at once', async (t) => {
  const gw = await startGateway(t);
  const d = gw.dataDir;
  const acme = await cliJson<{ id: string }>(['customer', 'add', '--data-dir', d, '--title', 'Acme']);
  const dev = await addDevice(d, 'dev-1');
  await addUser(d, 'admin@example.com', 'secret', 'TENANT_ADMIN');
  await addUser(d, 'cu@example.com', 'pw', 'CUSTOMER_USER', 'Acme');
  const [admin, cu] = await Promise.all([login(gw, 'admin@example.com', 'secret'), login(gw, 'cu@example.com', 'pw')]);
  const read = (): Promise<number> =>
    http(
      'GET',
      `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/values/timeseries?keys=x`,
      undefined,
      authHeaders(cu.token),
    ).then((r) => r.status);

  t.equal(await read(), 403, 'unassigned: customer user refused');
  t.equal(await read(), 403, 'and again (cached)');

  const assign = await http(
    'POST',
    `${gw.url}/api/customer/${acme.id}/device/${dev.id}`,
    undefined,
    authHeaders(admin.token),
  );
  t.equal(assign.status, 200, 'REST assign');
  t.equal(await read(), 200, 'REST assignment applies at once');

  const other = otherProcessStore(t, d);
  await other.setCustomer(dev.id, NULL_UUID);
  t.equal(await read(), 403, 'unassigned by another process: refused at once');
  await other.setCustomer(dev.id, acme.id as CustomerId);
  t.equal(await read(), 200, 'assigned by another process: allowed at once');

  const unassign = await http('DELETE', `${gw.url}/api/customer/device/${dev.id}`, undefined, authHeaders(admin.token));
  t.equal(unassign.status, 200, 'REST unassign');
  t.equal(await read(), 403, 'REST unassignment applies at once');

  t.ok(await other.deleteDevice(dev.id), 'deleted from another process');
  const gone = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/values/timeseries?keys=x`,
    undefined,
    authHeaders(admin.token),
  );
  t.equal(gone.status, 404, 'deleted by another process: 404 at once');
});

t.test('a refused token is not remembered', async (t) => {
  const gw = await startGateway(t);
  const d = gw.dataDir;
  for (let i = 0; i < 50; i++) t.equal(await post(gw, `nope-${i}`), 401);
  await addDevice(d, 'dev-n', ['--token', 'nope-3']);
  t.equal(await post(gw, 'nope-3'), 200, 'a token refused before works once the device exists');
});
