/**
 * Websocket limits per user (docs/api.md): at most ws.maxSessionsPerUser open sockets (one more is closed 1008
 * "Max user sessions limit reached"), at most ws.maxSubscriptionsPerUser subscriptions over all of them (one
 * more answers errorCode 2). Room comes back when a socket closes or a subscription is cancelled, and one
 * user's count never limits another user.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { addDevice, startGateway, tempDir } from '../../helpers/server.js';
import { addUser, login } from '../../helpers/users.js';
import { WsClient, wsUrl } from '../../helpers/ws.js';

const dir = tempDir(t);
const cfg = join(dir, 'config.json');
writeFileSync(cfg, JSON.stringify({ ws: { maxSessionsPerUser: 2, maxSubscriptionsPerUser: 3 } }));
const gw = await startGateway(t, { args: ['--config', cfg] });
await addUser(gw.dataDir, 'one@limits.test', 'pw-1', 'TENANT_ADMIN');
await addUser(gw.dataDir, 'two@limits.test', 'pw-2', 'TENANT_ADMIN');
const dev = await addDevice(gw.dataDir, 'limits-dev');

async function open(t: Test, token: string): Promise<WsClient> {
  const c = await WsClient.connect(`${wsUrl(gw, '/api/ws/plugins/telemetry')}?token=${token}`);
  t.teardown(() => c.terminate());
  return c;
}

/** Subscribes cmdId on the device; the reply's errorCode and message. */
async function subscribe(c: WsClient, cmdId: number): Promise<[number, string | null]> {
  c.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, keys: 't', cmdId }] });
  const r = await c.nextJson();
  return [r.errorCode, r.errorMsg];
}

t.test('sockets per user: one more is closed 1008; a closed one gives its place back', async (t) => {
  const token = (await login(gw, 'one@limits.test', 'pw-1')).token;
  const a = await open(t, token);
  const b = await open(t, token);
  t.same(await subscribe(b, 1), [0, null], 'the second socket works');
  const c = await open(t, token);
  t.same(await c.waitClosed(), { code: 1008, reason: 'Max user sessions limit reached' });
  // the limit is the user's, whichever session (login) the token belongs to
  const again = await open(t, (await login(gw, 'one@limits.test', 'pw-1')).token);
  t.same(await again.waitClosed(), { code: 1008, reason: 'Max user sessions limit reached' });
  // /api/ws with authCmd counts the same
  const general = await open(t, '');
  general.send({ authCmd: { cmdId: 0, token } });
  t.same(await general.waitClosed(), { code: 1008, reason: 'Max user sessions limit reached' });
  const other = await open(t, (await login(gw, 'two@limits.test', 'pw-2')).token);
  t.same(await subscribe(other, 1), [0, null], 'another user is not limited by this one');
  a.close();
  await a.waitClosed();
  const d = await open(t, token);
  t.same(await subscribe(d, 1), [0, null], 'room again once a socket closed');
  b.close();
  d.close();
  other.close();
  await Promise.all([b.waitClosed(), d.waitClosed(), other.waitClosed()]);
});

t.test('subscriptions per user, over all its sockets: one more answers errorCode 2', async (t) => {
  const token = (await login(gw, 'two@limits.test', 'pw-2')).token;
  const a = await open(t, token);
  const b = await open(t, token);
  t.same(await subscribe(a, 1), [0, null]);
  t.same(await subscribe(a, 2), [0, null]);
  t.same(await subscribe(b, 1), [0, null]);
  t.same(await subscribe(b, 2), [2, 'Max user subscriptions limit reached: 3 per user!']);
  t.same(await subscribe(a, 2), [0, null], 'replacing a subscription it holds is not one more');
  a.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, cmdId: 2, unsubscribe: true }] });
  t.same(await subscribe(b, 2), [0, null], 'room again once one is cancelled');
  a.close();
  await a.waitClosed();
  t.same(await subscribe(b, 3), [0, null], "a closed socket's subscriptions give their places back");
  t.same(await subscribe(b, 4), [2, 'Max user subscriptions limit reached: 3 per user!']);
});
