/**
 * A websocket lasts no longer than its token (docs/api.md "What ends a subscription"): at the token's expiry the
 * socket is closed 1011 "Token has expired" on both endpoints, as REST then answers 401; a later `authCmd` with a
 * fresh token of the same user renews it, an invalid token or another user's closes it. Tokens live 3 s here
 * (auth.accessTokenTtlSec); every wait is on the socket's close or on REST's answer, not on time.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { addDevice, http, startGateway, tempDir } from '../../helpers/server.js';
import { addUser, authHeaders, login } from '../../helpers/users.js';
import { WsClient, wsUrl } from '../../helpers/ws.js';

const TTL_SEC = 3;
const dir = tempDir(t);
const cfg = join(dir, 'config.json');
writeFileSync(cfg, JSON.stringify({ auth: { accessTokenTtlSec: TTL_SEC } }));
const gw = await startGateway(t, { args: ['--config', cfg] });
await addUser(gw.dataDir, 'admin@expiry.test', 'pw-admin', 'TENANT_ADMIN');
await addUser(gw.dataDir, 'other@expiry.test', 'pw-other', 'TENANT_ADMIN');
const dev = await addDevice(gw.dataDir, 'expiry-dev');
const token = async (): Promise<string> => (await login(gw, 'admin@expiry.test', 'pw-admin')).token;

/** A socket on `path` (with `?token=` when given), closed at teardown. */
async function open(t: Test, path: string, jwt?: string): Promise<WsClient> {
  const c = await WsClient.connect(`${wsUrl(gw, path)}${jwt === undefined ? '' : `?token=${jwt}`}`);
  t.teardown(() => c.terminate());
  return c;
}

const TS_SUB = { entityType: 'DEVICE', entityId: dev.id, keys: 't', scope: 'LATEST_TELEMETRY', cmdId: 1 };

async function post(t0: number): Promise<void> {
  const r = await http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, { ts: t0, values: { t: t0 } });
  if (r.status !== 200) throw new Error(`post ${r.status} ${r.text}`);
}

/** Until REST refuses `jwt` as expired (the server's clock decides, not the test's). */
async function restRefuses(jwt: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const r = await http('GET', `${gw.url}/api/auth/user`, undefined, authHeaders(jwt));
    if (r.status === 401) return;
    if (r.status !== 200) throw new Error(`GET /api/auth/user ${r.status} ${r.text}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('the token did not expire');
}

t.test('the legacy endpoint closes a subscribed socket at its token’s expiry', async (t) => {
  const jwt = await token();
  const c = await open(t, '/api/ws/plugins/telemetry', jwt);
  c.send({ tsSubCmds: [TS_SUB] });
  t.equal((await c.nextJson()).errorCode, 0, 'subscribed');
  t.same(await c.waitClosed(10_000), { code: 1011, reason: 'Token has expired' });
  const r = await http('GET', `${gw.url}/api/auth/user`, undefined, authHeaders(jwt));
  t.equal(r.status, 401, 'REST refuses the token too');
});

t.test('/api/ws authenticated by authCmd closes at the token’s expiry', async (t) => {
  const c = await open(t, '/api/ws');
  c.send({ authCmd: { cmdId: 0, token: await token() }, cmds: [{ type: 'TIMESERIES', ...TS_SUB }] });
  t.equal((await c.nextJson()).errorCode, 0, 'subscribed');
  t.same(await c.waitClosed(10_000), { code: 1011, reason: 'Token has expired' });
});

t.test('a later authCmd with a fresh token renews the socket; it closes at the new expiry', async (t) => {
  const first = await token();
  const c = await open(t, '/api/ws', first);
  c.send({ cmds: [{ type: 'TIMESERIES', ...TS_SUB }] });
  t.equal((await c.nextJson()).errorCode, 0, 'subscribed');
  // a token issued in a later second expires in a later second
  const second = Math.floor(Date.now() / 1000);
  while (Math.floor(Date.now() / 1000) === second) await new Promise((r) => setTimeout(r, 20));
  const fresh = await token();
  c.send({ authCmd: { cmdId: 0, token: fresh } });
  await restRefuses(first);
  await post(Date.now());
  t.equal((await c.nextJson()).subscriptionId, 1, 'past the first token’s expiry the socket still streams');
  t.same(await c.waitClosed(10_000), { code: 1011, reason: 'Token has expired' }, 'closed at the fresh one’s');
});

t.test('an authCmd with an invalid token or another user’s closes the socket', async (t) => {
  const bad = await open(t, '/api/ws', await token());
  bad.send({ authCmd: { cmdId: 0, token: 'not-a-jwt' } });
  t.equal((await bad.waitClosed()).code, 1007, 'an invalid token: 1007');
  const other = await open(t, '/api/ws', await token());
  other.send({ authCmd: { cmdId: 0, token: (await login(gw, 'other@expiry.test', 'pw-other')).token } });
  t.same(await other.waitClosed(), { code: 1008, reason: 'Auth cmd is for another user' });
});
