/**
 * Unit tests of the auth core (docs/api.md): HS512 sign/verify, scrypt passwords, and AuthService's
 * verified-token cache against a real LMDB store in a temp dir, with a hand-driven clock.
 */
import { createHmac } from 'node:crypto';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { AuthService } from '../../src/auth/index.js';
import { loadSigningKey, signJwt, verifyJwt } from '../../src/auth/jwt.js';
import { hashPassword, verifyPassword } from '../../src/auth/password.js';
import { loadConfig } from '../../src/config/index.js';
import { OutpostError } from '../../src/errors.js';
import { EntityStore } from '../../src/store/entities.js';
import { tempDir } from '../helpers/server.js';
import { openTestEnv } from '../helpers/store.js';

const KEY = Buffer.alloc(64, 7);
const NOW_SEC = 1_700_000_000;

t.test('verifyJwt: table of tokens', async (t) => {
  const good = signJwt({ sub: 'a', exp: NOW_SEC + 10 }, KEY);
  const [h, p, s] = good.split('.') as [string, string, string];
  const cases: Array<[string, string, ReturnType<typeof verifyJwt>['ok'], string?]> = [
    ['valid', good, true],
    ['expires exactly now', signJwt({ exp: NOW_SEC }, KEY), false, 'expired'],
    ['expired', signJwt({ exp: NOW_SEC - 1 }, KEY), false, 'expired'],
    ['no exp claim', signJwt({ sub: 'a' }, KEY), false, 'expired'],
    ['other key', signJwt({ exp: NOW_SEC + 10 }, Buffer.alloc(64, 8)), false, 'signature'],
    [
      'payload changed',
      `${h}.${Buffer.from('{"sub":"b","exp":9999999999}').toString('base64url')}.${s}`,
      false,
      'signature',
    ],
    ['signature truncated', `${h}.${p}.${s.slice(0, -4)}`, false, 'signature'],
    ['alg none', `${Buffer.from('{"alg":"none"}').toString('base64url')}.${p}.`, false, 'signature'],
    ['two parts', `${h}.${p}`, false, 'malformed'],
    ['garbage', 'not-a-jwt', false, 'malformed'],
    [
      'signed non-JSON payload',
      (() => {
        const bad = Buffer.from('not json').toString('base64url');
        const sig = createHmac('sha512', KEY).update(`${h}.${bad}`).digest('base64url');
        return `${h}.${bad}.${sig}`;
      })(),
      false,
      'malformed',
    ],
  ];
  for (const [name, token, ok, reason] of cases) {
    const r = verifyJwt(token, KEY, NOW_SEC);
    t.equal(r.ok, ok, name);
    if (!r.ok) t.equal(r.reason, reason, `${name}: ${reason}`);
  }
  const r = verifyJwt(good, KEY, NOW_SEC);
  t.ok(r.ok && r.claims.sub === 'a', 'claims come back');
  t.same(JSON.parse(Buffer.from(h, 'base64url').toString()), { alg: 'HS512', typ: 'JWT' });
});

t.test('signing key: generated once, private, stable', async (t) => {
  const dir = tempDir(t);
  const k1 = loadSigningKey(dir);
  const k2 = loadSigningKey(dir);
  t.equal(k1.length, 64);
  t.ok(k1.equals(k2), 'same key on the second load');
  t.equal(statSync(join(dir, 'jwt.key')).mode & 0o777, 0o600);
  t.notOk(loadSigningKey(tempDir(t)).equals(k1), 'another install, another key');
});

t.test('scrypt passwords', async (t) => {
  const stored = await hashPassword('correct horse');
  t.match(stored, /^scrypt\$16384\$8\$1\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+$/);
  t.equal(await verifyPassword('correct horse', stored), true);
  t.equal(await verifyPassword('correct horsE', stored), false);
  t.equal(await verifyPassword('', stored), false);
  t.not(await hashPassword('correct horse'), stored, 'salted');
  t.equal(await verifyPassword('x', 'plain-text'), false, 'unknown format never matches');
});

t.test('AuthService: cache, expiry, logout, revocation pruning', async (t) => {
  const { env, dataDir: dir } = openTestEnv(t);
  const config = loadConfig({ dataDir: dir }, {});
  const entities = new EntityStore(env);
  await entities.ensureTenant();
  const user = await entities.createUser({
    email: 'u@example.com',
    passwordHash: await hashPassword('pw'),
    authority: 'TENANT_ADMIN',
  });
  let nowMs = NOW_SEC * 1000;
  const auth = new AuthService(config, env, entities, () => nowMs);

  const pair = await auth.login('U@example.com', 'pw');
  const p1 = auth.authenticateToken(pair.token);
  t.equal(p1.userId, user.id);
  t.equal(p1.exp - p1.iat, 9000);
  t.equal(auth.authenticateToken(pair.token), p1, 'second call answered from the cache (same object)');
  t.equal(auth.authenticateHeader(undefined, `Bearer ${pair.token}`), p1, 'Authorization header');
  t.equal(auth.authenticateHeader('', `Bearer ${pair.token}`), p1, 'blank X-Authorization falls back');

  const code = (fn: () => unknown): string | undefined => {
    try {
      fn();
    } catch (err) {
      return err instanceof OutpostError ? `${err.status}/${err.tbCode}/${err.message}` : String(err);
    }
    return undefined;
  };
  t.equal(
    code(() => auth.authenticateHeader(undefined, undefined)),
    '401/10/Authentication failed',
  );
  t.equal(
    code(() => auth.authenticateHeader(`Basic ${pair.token}`, undefined)),
    '401/10/Authentication failed',
  );

  nowMs = (p1.exp - 1) * 1000;
  t.equal(auth.authenticateToken(pair.token), p1, 'valid until the last second');
  nowMs = p1.exp * 1000;
  t.equal(
    code(() => auth.authenticateToken(pair.token)),
    '401/11/Token has expired',
    'a cached token expires with its exp',
  );

  nowMs = NOW_SEC * 1000;
  const fresh = auth.refresh(pair.refreshToken);
  t.not(auth.authenticateToken(fresh.token).sessionId, p1.sessionId, 'refresh opens a new session');
  t.equal(
    code(() => auth.refresh(pair.token)),
    '401/10/Invalid refresh token',
    'access token is no refresh token',
  );
  t.equal(
    code(() => auth.refresh(undefined)),
    '401/10/Authentication failed',
  );

  const second = await auth.login('u@example.com', 'pw');
  const p2 = auth.authenticateToken(second.token);
  await auth.logout(p2);
  t.equal(
    code(() => auth.authenticateToken(second.token)),
    '401/11/Token has expired',
    'logged out, even though it was cached',
  );
  t.equal(
    code(() => auth.refresh(second.refreshToken)),
    '401/11/Token has expired',
    'the refresh token of the session too',
  );
  t.ok(auth.authenticateToken(fresh.token), 'other sessions keep working');

  // A revocation is kept for one refresh lifetime, then pruned by a later logout.
  const revokedKeys = (): number =>
    [...env.meta.getKeys({ start: ['revokedSession'] })].filter((k) => Array.isArray(k) && k[0] === 'revokedSession')
      .length;
  t.equal(revokedKeys(), 1);
  nowMs = (p2.iat + config.auth.refreshTokenTtlSec + 1) * 1000;
  const later = await auth.login('u@example.com', 'pw');
  await auth.logout(auth.authenticateToken(later.token));
  t.equal(revokedKeys(), 1, 'the outdated revocation is gone, the new one kept');

  await t.rejects(auth.login('u@example.com', 'nope'), {
    status: 401,
    tbCode: 10,
    message: 'Invalid username or password',
  });
  await t.rejects(auth.login('nobody@example.com', 'pw'), {
    status: 401,
    tbCode: 10,
    message: 'Invalid username or password',
  });
});

t.test('AuthService: token cache stays bounded', async (t) => {
  const { env, dataDir: dir } = openTestEnv(t);
  const config = loadConfig({ dataDir: dir }, {}, { auth: { tokenCacheSize: 3 } });
  const entities = new EntityStore(env);
  await entities.ensureTenant();
  const user = await entities.createUser({ email: 'c@example.com', passwordHash: 'x', authority: 'TENANT_ADMIN' });
  const auth = new AuthService(config, env, entities, () => NOW_SEC * 1000);
  const tokens = Array.from({ length: 5 }, () => auth.issue(user).token);
  const principals = tokens.map((tok) => auth.authenticateToken(tok));
  t.equal(auth.authenticateToken(tokens[4] as string), principals[4], 'newest still cached');
  t.not(auth.authenticateToken(tokens[0] as string), principals[0], 'oldest evicted: verified again (new object)');
});
