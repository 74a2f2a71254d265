/**
 * Auth REST, black-box (docs/api.md): login, refresh, logout, current user, header
 * variants, TB error JSON for every failure, signing key persisted across restarts.
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { type HttpResult, cliJson, http, startGateway } from '../helpers/server.js';
import { addUser, authHeaders, login } from '../helpers/users.js';

const NULL_UUID = '13814000-1dd2-11b2-8080-808080808080';

function claimsOf(jwt: string): Record<string, unknown> {
  const payload = jwt.split('.')[1] ?? '';
  return JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
}

interface TbError {
  status: number;
  message: string;
  errorCode: number;
  timestamp: number;
}

function isTbError(t: Test, r: HttpResult, status: number, errorCode: number, message?: string): void {
  t.equal(r.status, status, `status ${status}`);
  const body = r.json<TbError>();
  t.equal(body.status, status);
  t.equal(body.errorCode, errorCode, `errorCode ${errorCode}`);
  if (message !== undefined) t.equal(body.message, message);
  t.type(body.timestamp, 'number');
  t.same(Object.keys(body), ['status', 'message', 'errorCode', 'timestamp'], 'TB error JSON shape');
}

t.test('auth REST', async (t) => {
  const gw = await startGateway(t);
  const admin = await addUser(gw.dataDir, 'Admin@Example.com', 'secret-1', 'TENANT_ADMIN');
  const customer = await cliJson(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'Acme']);
  const cuser = await addUser(gw.dataDir, 'user@acme.com', 'secret-2', 'CUSTOMER_USER', 'Acme');
  const url = (p: string): string => `${gw.url}${p}`;

  await t.test('login: TB claims and lifetimes', async (t) => {
    const pair = await login(gw, 'admin@example.com', 'secret-1');
    const c = claimsOf(pair.token);
    t.equal(c['sub'], 'Admin@Example.com');
    t.equal(c['userId'], admin.id);
    t.same(c['scopes'], ['TENANT_ADMIN']);
    t.equal(c['customerId'], NULL_UUID);
    t.match(c['tenantId'], /^[0-9a-f-]{36}$/);
    t.match(c['sessionId'], /^[0-9a-f-]{36}$/);
    t.equal(c['enabled'], true);
    t.equal(c['isPublic'], false);
    t.equal(c['iss'], 'thingsboard.io');
    t.equal((c['exp'] as number) - (c['iat'] as number), 9000);
    const r = claimsOf(pair.refreshToken);
    t.same(r['scopes'], ['REFRESH_TOKEN']);
    t.equal((r['exp'] as number) - (r['iat'] as number), 604800);
    t.equal(r['sessionId'], c['sessionId']);
    const header = JSON.parse(Buffer.from(pair.token.split('.')[0] ?? '', 'base64url').toString()) as { alg: string };
    t.equal(header.alg, 'HS512');

    const cu = claimsOf((await login(gw, 'user@acme.com', 'secret-2')).token);
    t.same(cu['scopes'], ['CUSTOMER_USER']);
    t.equal(cu['customerId'], customer['id']);
  });

  await t.test('login failures are 401 TB errors', async (t) => {
    isTbError(
      t,
      await http('POST', url('/api/auth/login'), { username: 'admin@example.com', password: 'wrong' }),
      401,
      10,
      'Invalid username or password',
    );
    isTbError(
      t,
      await http('POST', url('/api/auth/login'), { username: 'nobody@example.com', password: 'secret-1' }),
      401,
      10,
      'Invalid username or password',
    );
    isTbError(t, await http('POST', url('/api/auth/login'), '{not json'), 401, 10, 'Authentication failed');
    isTbError(
      t,
      await http('POST', url('/api/auth/login'), { username: 'admin@example.com' }),
      401,
      10,
      'Authentication failed',
    );
    isTbError(
      t,
      await http('POST', url('/api/auth/login'), { username: '', password: 'x' }),
      401,
      10,
      'Authentication failed',
    );
    isTbError(t, await http('POST', url('/api/auth/login'), '[1,2]'), 401, 10, 'Authentication failed');
    isTbError(t, await http('GET', url('/api/auth/login')), 401, 10, 'Authentication method not supported');
  });

  await t.test('GET /api/auth/user with either header', async (t) => {
    const { token } = await login(gw, 'user@acme.com', 'secret-2');
    for (const headers of [authHeaders(token), { Authorization: `Bearer ${token}` }]) {
      const r = await http('GET', url('/api/auth/user'), undefined, headers);
      t.equal(r.status, 200);
      const u = r.json<Record<string, unknown>>();
      t.same(u['id'], { entityType: 'USER', id: cuser.id });
      t.same(u['customerId'], { entityType: 'CUSTOMER', id: customer['id'] });
      t.equal((u['tenantId'] as { entityType: string }).entityType, 'TENANT');
      t.equal(u['email'], 'user@acme.com');
      t.equal(u['name'], 'user@acme.com');
      t.equal(u['authority'], 'CUSTOMER_USER');
      t.type(u['createdTime'], 'number');
      t.ok('firstName' in u && 'lastName' in u && 'additionalInfo' in u);
      t.notOk('passwordHash' in u, 'no password hash on the wire');
    }
    isTbError(t, await http('GET', url('/api/auth/user')), 401, 10, 'Authentication failed');
    isTbError(t, await http('GET', url('/api/auth/user'), undefined, { 'X-Authorization': `Basic ${token}` }), 401, 10);
    isTbError(
      t,
      await http('GET', url('/api/auth/user'), undefined, { 'X-Authorization': 'Bearer not-a-jwt' }),
      401,
      10,
      'Invalid username or password',
    );
    const [h, p, sig] = token.split('.') as [string, string, string];
    const flipped = sig.slice(0, 10) + (sig[10] === 'A' ? 'B' : 'A') + sig.slice(11);
    isTbError(
      t,
      await http('GET', url('/api/auth/user'), undefined, authHeaders(`${h}.${p}.${flipped}`)),
      401,
      11,
      'Token has expired',
    );
    const forged = Buffer.from(JSON.stringify({ ...claimsOf(token), scopes: ['TENANT_ADMIN'] })).toString('base64url');
    isTbError(
      t,
      await http('GET', url('/api/auth/user'), undefined, authHeaders(`${h}.${forged}.${sig}`)),
      401,
      11,
      'Token has expired',
    );
  });

  await t.test('refresh gives a new working pair; access token is no refresh token', async (t) => {
    const first = await login(gw, 'admin@example.com', 'secret-1');
    const r = await http('POST', url('/api/auth/token'), { refreshToken: first.refreshToken });
    t.equal(r.status, 200);
    const next = r.json<{ token: string; refreshToken: string }>();
    t.not(claimsOf(next.token)['sessionId'], claimsOf(first.token)['sessionId'], 'a new session');
    t.equal((await http('GET', url('/api/auth/user'), undefined, authHeaders(next.token))).status, 200);
    t.equal(r.json<Record<string, unknown>>()['scope'], undefined, 'no scope member');

    isTbError(t, await http('POST', url('/api/auth/token'), { refreshToken: first.token }), 401, 10);
    isTbError(t, await http('POST', url('/api/auth/token'), {}), 401, 10, 'Authentication failed');
    isTbError(t, await http('POST', url('/api/auth/token'), 'nope'), 401, 10, 'Authentication failed');
    // a refresh token is no access token either
    isTbError(t, await http('GET', url('/api/auth/user'), undefined, authHeaders(first.refreshToken)), 401, 10);
  });

  await t.test('logout revokes the session (access and refresh), not others', async (t) => {
    const a = await login(gw, 'admin@example.com', 'secret-1');
    const b = await login(gw, 'admin@example.com', 'secret-1');
    // warm the verified-token cache first: logout must evict it
    t.equal((await http('GET', url('/api/auth/user'), undefined, authHeaders(a.token))).status, 200);
    const out = await http('POST', url('/api/auth/logout'), undefined, authHeaders(a.token));
    t.equal(out.status, 200);
    t.equal(out.text, '');
    isTbError(
      t,
      await http('GET', url('/api/auth/user'), undefined, authHeaders(a.token)),
      401,
      11,
      'Token has expired',
    );
    isTbError(
      t,
      await http('POST', url('/api/auth/token'), { refreshToken: a.refreshToken }),
      401,
      11,
      'Token has expired',
    );
    t.equal(
      (await http('GET', url('/api/auth/user'), undefined, authHeaders(b.token))).status,
      200,
      'other session unaffected',
    );
    isTbError(t, await http('POST', url('/api/auth/logout')), 401, 10);
  });

  await t.test('signing key kept in the data dir: tokens survive a restart', async (t) => {
    const pair = await login(gw, 'admin@example.com', 'secret-1');
    t.equal(statSync(join(gw.dataDir, 'jwt.key')).mode & 0o777, 0o600, 'key file is private');
    t.equal(await gw.stop('SIGTERM'), 0);
    const again = await startGateway(t, { dataDir: gw.dataDir });
    const r = await http('GET', `${again.url}/api/auth/user`, undefined, authHeaders(pair.token));
    t.equal(r.status, 200);
  });
});

t.test('a separate install has its own key', async (t) => {
  const one = await startGateway(t);
  const two = await startGateway(t);
  await addUser(one.dataDir, 'a@example.com', 'pw', 'TENANT_ADMIN');
  const { token } = await login(one, 'a@example.com', 'pw');
  const r = await http('GET', `${two.url}/api/auth/user`, undefined, authHeaders(token));
  t.equal(r.status, 401);
  t.equal(r.json<TbError>().errorCode, 11, 'foreign signature reported as expired (TB quirk)');
});
