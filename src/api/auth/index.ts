/**
 * Login, refresh, logout and current user (docs/api.md). Handlers are thin: parse the
 * body, call AuthService, render TB JSON. Every failure is an OutpostError, so it leaves as TB error JSON.
 */
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import { type HttpContext, type HttpRouter, json } from '../../uws/adapter.js';
import { entityId, userJson } from '../entities/render.js';
import type { Principal } from '../../auth/index.js';
import { principalOf } from '../principal.js';
import { quoted } from '../../status/failures.js';
import { registerApiKeyApi } from './api-keys.js';

/** bytes; auth bodies are tiny, so a small cap keeps a flood of huge bodies from costing memory. */
const AUTH_MAX_BODY_BYTES = 16 * 1024;

/**
 * The JSON object body of a login/refresh request. TB answers 401 "Authentication failed" (errorCode 10) for
 * an unparsable body, not 400: its security filter rejects before any controller runs (a TB quirk).
 */
async function authBody(ctx: HttpContext): Promise<Record<string, unknown>> {
  const raw = await ctx.body();
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch {
    throw new OutpostError('AUTH_FAILED');
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new OutpostError('AUTH_FAILED');
  return parsed as Record<string, unknown>;
}

const methodNotSupported = (): never => {
  throw new OutpostError('AUTH_FAILED', 'Authentication method not supported');
};

export function registerAuthApi(router: HttpRouter, s: Services): void {
  const opts = { maxBody: AUTH_MAX_BODY_BYTES };

  // Bad credentials → 401 "Invalid username or password"; missing fields → 401 "Authentication failed".
  router.route(
    'post',
    '/api/auth/login',
    async (ctx) => {
      const address = ctx.remoteAddress();
      const { username, password } = await authBody(ctx);
      if (typeof username !== 'string' || typeof password !== 'string' || username.trim() === '' || password === '') {
        throw new OutpostError('AUTH_FAILED');
      }
      try {
        return json(await s.auth.login(username, password, address));
      } catch (err) {
        noteLoginFailure(s, err, username, address);
        throw err;
      }
    },
    opts,
  );

  // A refresh token → a brand-new pair (new session). An access token here → 401.
  router.route(
    'post',
    '/api/auth/token',
    async (ctx) => {
      const { refreshToken } = await authBody(ctx);
      return json(s.auth.refresh(refreshToken));
    },
    opts,
  );

  // TB: login and refresh are filters that answer any other method with 401.
  router.route('get', '/api/auth/login', methodNotSupported);
  router.route('get', '/api/auth/token', methodNotSupported);

  // 200 with an empty body; the session's access and refresh tokens then answer 401 "Token has expired".
  router.route(
    'post',
    '/api/auth/logout',
    async (ctx) => {
      const p = principalOf(s, ctx);
      // an API key has no session to end: it works until it is disabled, deleted or expires
      if (p.apiKey) return {};
      await s.auth.logout(p);
      s.bus.publish('principalsRevoked', { sessionIds: [p.sessionId], userIds: [], customerIds: [] });
      return {};
    },
    opts,
  );

  router.route('get', '/api/auth/user', (ctx) => {
    const p = principalOf(s, ctx);
    // A ticket's holder (docs/cli.md) need not be a user of this gateway; it is described from the ticket
    if (p.ticket) return json(ticketUserJson(p));
    const user = s.entities.user(p.userId);
    // Deleted users' tokens are dropped from the cache; this only races with a concurrent deletion.
    if (!user) throw new OutpostError('TOKEN_EXPIRED');
    return json(userJson(user));
  });

  registerApiKeyApi(router, s);
}

/** A wrong password or a throttled login, counted and logged (at most a line a minute of each: status/failures.ts). */
function noteLoginFailure(s: Services, err: unknown, username: string, address: string): void {
  if (s.failures === undefined || !(err instanceof OutpostError)) return;
  const who = `${quoted(username)} from ${address}`;
  if (err.code === 'LOGIN_THROTTLED') {
    s.failures.note('loginThrottled', `auth: refused a login of ${who}: ${err.message}`, who);
  } else if (err.code === 'BAD_CREDENTIALS') {
    const lock = s.auth.throttle.locked(username, address);
    const locked =
      lock === undefined
        ? ''
        : `; too many failed logins ${lock.by === 'user' ? 'for this user' : 'from this address'}: logins refused for ${Math.ceil(lock.retryAfterMs / 1000)} s`;
    s.failures.note('login', `auth: failed login of ${who}${locked}`, who);
  }
}

/** `GET /api/auth/user` for a ticket holder: TB's user shape from the ticket's claims. */
function ticketUserJson(p: Principal): Record<string, unknown> {
  return {
    id: entityId('USER', p.userId),
    createdTime: p.iat * 1000,
    tenantId: entityId('TENANT', p.tenantId),
    customerId: entityId('CUSTOMER', p.customerId),
    email: p.email,
    name: p.email,
    authority: p.authority,
    firstName: null,
    lastName: null,
    additionalInfo: { ticket: true, expiresTs: p.exp * 1000 },
  };
}
