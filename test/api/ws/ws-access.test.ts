/**
 * Websocket subscriptions end with the access that made them (docs/api.md): a device unassigned from the
 * customer, moved to another customer or deleted ends its subscriptions held by users who lost access, with the
 * error frame a new subscription would get; a logged-out session, a deleted customer and its users, and a user
 * whose password changed have their sockets closed 1008. The tenant admin, who keeps access, keeps streaming.
 */
import t, { type Test } from 'tap';
import { addDevice, cli, cliJson, http, startGateway } from '../../helpers/server.js';
import { addUser, adminHeaders, authHeaders, login } from '../../helpers/users.js';
import { waitFor } from '../../helpers/wait.js';
import { WsClient, type WsReply, wsUrl } from '../../helpers/ws.js';

const gw = await startGateway(t);
const admin = await adminHeaders(gw);
const customerA = (await cliJson(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'A'])).id as string;
const customerB = (await cliJson(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'B'])).id as string;
await addUser(gw.dataDir, 'a@x.test', 'pw-a', 'CUSTOMER_USER', customerA);
await addUser(gw.dataDir, 'b@x.test', 'pw-b', 'CUSTOMER_USER', customerB);
const adminJwt = admin['X-Authorization'].slice('Bearer '.length);

async function subscribed(t: Test, token: string, deviceId: string): Promise<WsClient> {
  const c = await WsClient.connect(`${wsUrl(gw, '/api/ws/plugins/telemetry')}?token=${token}`);
  t.teardown(() => c.terminate());
  c.send({
    tsSubCmds: [{ entityType: 'DEVICE', entityId: deviceId, keys: 't', scope: 'LATEST_TELEMETRY', cmdId: 1 }],
    attrSubCmds: [{ entityType: 'DEVICE', entityId: deviceId, scope: 'SERVER_SCOPE', cmdId: 2 }],
  });
  const first = [await c.nextJson(), await c.nextJson()];
  t.same(
    first.map((r) => [r.subscriptionId, r.errorCode]),
    [
      [2, 0],
      [1, 0],
    ],
    'subscribed',
  );
  return c;
}

async function post(token: string, t0: number): Promise<void> {
  const r = await http('POST', `${gw.url}/api/v1/${token}/telemetry`, { ts: t0, values: { t: t0 } });
  if (r.status !== 200) throw new Error(`post ${r.status} ${r.text}`);
}

async function assigned(name: string, customerId: string): Promise<{ id: string; token: string }> {
  const dev = await addDevice(gw.dataDir, name);
  const r = await http('POST', `${gw.url}/api/customer/${customerId}/device/${dev.id}`, undefined, admin);
  if (r.status !== 200) throw new Error(`assign ${r.status} ${r.text}`);
  return dev;
}

/** The next frame of the time-series subscription, past the device's state changes a post makes (docs/api.md "Device state"). */
async function telemetryFrame(c: WsClient): Promise<WsReply> {
  let f = await c.nextJson();
  while (f.subscriptionId === 2) f = await c.nextJson();
  return f;
}

/** The two end frames (attribute then time-series subscription, in either order), sorted by subscription. */
async function endFrames(c: WsClient): Promise<WsReply[]> {
  const frames = [await c.nextJson(), await c.nextJson()];
  return frames.sort((x, y) => x.subscriptionId - y.subscriptionId);
}

const END_FRAMES = [
  { subscriptionId: 1, errorCode: 1, errorMsg: 'Failed to fetch data!', data: null, latestValues: {} },
  { subscriptionId: 2, errorCode: 1, errorMsg: 'Failed to fetch attributes!', data: null, latestValues: {} },
];

t.test('unassigning the device ends the customer user’s subscriptions; the admin keeps its own', async (t) => {
  const dev = await assigned('unassigned-dev', customerA);
  const user = (await login(gw, 'a@x.test', 'pw-a')).token;
  const c = await subscribed(t, user, dev.id);
  const adm = await subscribed(t, adminJwt, dev.id);
  const r = await http('DELETE', `${gw.url}/api/customer/device/${dev.id}`, undefined, admin);
  t.equal(r.status, 200);
  t.same(await endFrames(c), END_FRAMES, 'both subscriptions end with the error frame');
  await post(dev.token, 1000);
  const attr = await http('POST', `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/SERVER_SCOPE`, { s: 1 }, admin);
  t.equal(attr.status, 200);
  // the post also makes the device active: a SERVER_SCOPE change of its own (docs/api.md "Device state")
  const got = new Set<string>();
  while (!got.has('1') || !got.has('2:s')) {
    const f = await adm.nextJson();
    got.add(f.subscriptionId === 2 && f.data?.['s'] !== undefined ? '2:s' : String(f.subscriptionId));
  }
  t.pass('the admin still receives telemetry and attributes');
  t.equal(c.pending(), 0, 'the customer user receives nothing more');
  t.equal(c.socket.readyState, c.socket.OPEN, 'its socket stays open');
});

t.test('a device moved to another customer stops streaming to the old one', async (t) => {
  const dev = await assigned('moved-dev', customerA);
  const a = await subscribed(t, (await login(gw, 'a@x.test', 'pw-a')).token, dev.id);
  const r = await http('POST', `${gw.url}/api/customer/${customerB}/device/${dev.id}`, undefined, admin);
  t.equal(r.status, 200);
  t.same(await endFrames(a), END_FRAMES);
  const b = await subscribed(t, (await login(gw, 'b@x.test', 'pw-b')).token, dev.id);
  await post(dev.token, 2000);
  t.equal((await telemetryFrame(b)).subscriptionId, 1, 'the new customer receives');
  t.equal(a.pending(), 0, 'the old one does not');
});

t.test('a deleted device ends its subscriptions with the error frame', async (t) => {
  const dev = await assigned('deleted-dev', customerA);
  const c = await subscribed(t, (await login(gw, 'a@x.test', 'pw-a')).token, dev.id);
  const r = await http('DELETE', `${gw.url}/api/device/${dev.id}`, undefined, admin);
  t.equal(r.status, 200);
  t.same(await endFrames(c), END_FRAMES);
});

t.test('logout closes the session’s sockets, not the same user’s other sessions', async (t) => {
  const dev = await assigned('logout-dev', customerA);
  const first = (await login(gw, 'a@x.test', 'pw-a')).token;
  const second = (await login(gw, 'a@x.test', 'pw-a')).token;
  const c = await subscribed(t, first, dev.id);
  const other = await subscribed(t, second, dev.id);
  const r = await http('POST', `${gw.url}/api/auth/logout`, undefined, authHeaders(first));
  t.equal(r.status, 200);
  t.same(await c.waitClosed(), { code: 1008, reason: 'Token has expired' });
  await post(dev.token, 3000);
  t.equal((await telemetryFrame(other)).subscriptionId, 1, 'the other session keeps streaming');
});

t.test('deleting the customer closes its users’ sockets', async (t) => {
  const customerC = (await cliJson(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'C'])).id as string;
  await addUser(gw.dataDir, 'c@x.test', 'pw-c', 'CUSTOMER_USER', customerC);
  const dev = await assigned('customer-deleted-dev', customerC);
  const c = await subscribed(t, (await login(gw, 'c@x.test', 'pw-c')).token, dev.id);
  const r = await http('DELETE', `${gw.url}/api/customer/${customerC}`, undefined, admin);
  t.equal(r.status, 200);
  t.same(await c.waitClosed(), { code: 1008, reason: 'Token has expired' });
});

t.test('a changed password outdates the user’s tokens and closes its sockets; the new password logs in', async (t) => {
  await addUser(gw.dataDir, 'p@x.test', 'pw-old', 'CUSTOMER_USER', customerA);
  const dev = await assigned('passwd-dev', customerA);
  const pair = await login(gw, 'p@x.test', 'pw-old');
  const c = await subscribed(t, pair.token, dev.id);
  // the change lands in a later second than the login (its token's iat), as a technician's would
  const { iat } = JSON.parse(Buffer.from(pair.token.split('.')[1] ?? '', 'base64url').toString()) as { iat: number };
  await waitFor(() => Date.now() >= (iat + 1) * 1000, { message: 'the second after the login' });
  const changed = await cli([
    'user',
    'passwd',
    '--email',
    'p@x.test',
    '--password',
    'pw-new',
    '--data-dir',
    gw.dataDir,
  ]);
  t.equal(changed.code, 0, changed.stderr);
  t.same(await c.waitClosed(), { code: 1008, reason: 'Token has expired' });
  const old = await http('GET', `${gw.url}/api/auth/user`, undefined, authHeaders(pair.token));
  t.equal(old.status, 401, 'the old access token is outdated');
  t.equal(old.json<{ errorCode: number }>().errorCode, 11);
  const refreshed = await http('POST', `${gw.url}/api/auth/token`, { refreshToken: pair.refreshToken });
  t.equal(refreshed.status, 401, 'and so is its refresh token');
  const fresh = await login(gw, 'p@x.test', 'pw-new');
  t.equal((await http('GET', `${gw.url}/api/auth/user`, undefined, authHeaders(fresh.token))).status, 200);
  await subscribed(t, fresh.token, dev.id);
});
