/**
 * User authentication and entity access (docs/api.md). Verified tokens are cached until they expire, so a
 * dashboard polling every second costs one HMAC per token lifetime, not one per request.
 */
import { randomUUID } from 'node:crypto';
import type { Config } from '../config/index.js';
import { OutpostError } from '../errors.js';
import type { EntityStore, EntityRecord, UserRecord, Authority } from '../store/entities.js';
import type { StoreEnv } from '../store/env.js';
import { type EntityType, NULL_UUID } from '../types.js';
import { ApiKeyStore } from '../store/api-keys.js';
import { ApiKeyAuth } from './api-key.js';
import { type AccessClaims, loadSigningKey, signJwt, verifyJwt } from './jwt.js';
import { verifyPassword } from './password.js';
import { LoginThrottle } from './throttle.js';
import { isTicket, verifyTicket } from './ticket.js';

/** meta key prefix: [REVOKED, sessionId] → Unix seconds until which the session stays revoked */
const REVOKED = 'revokedSession';

export interface Principal {
  readonly userId: string;
  readonly email: string;
  readonly authority: Authority;
  readonly tenantId: string;
  readonly customerId: string;
  readonly sessionId: string;
  /** Unix seconds */
  readonly exp: number;
  readonly iat: number;
  /** authenticated by an access ticket (docs/cli.md): userId and sessionId are the ticket's jti */
  readonly ticket?: true;
  /** authenticated by an API key (docs/api.md): sessionId is the key's id */
  readonly apiKey?: true;
}

export interface TokenPair {
  readonly token: string;
  readonly refreshToken: string;
}

export type AccessOp = 'read' | 'write';

export class AuthService {
  private readonly key: Buffer;
  /**
   * Verified tokens, keyed by the token's last CACHE_KEY_CHARS characters (part of its HMAC signature: hashing
   * 32 characters instead of the whole JWT); a hit still compares the whole token. Eviction is CLOCK (second
   * chance): a hit only sets `used`, the evictor moves used entries to the back, so hits never reorder the Map.
   */
  private readonly cache = new Map<string, CachedToken>();

  constructor(
    private readonly config: Readonly<Config>,
    private readonly env: StoreEnv,
    private readonly entities: EntityStore,
    private readonly now: () => number = Date.now,
  ) {
    this.key = loadSigningKey(config.dataDir);
    this.throttle = new LoginThrottle(now);
    this.ticketKeys = config.auth.ticketKeys.map((k) => new Uint8Array(Buffer.from(k, 'base64url')));
    this.apiKeys = new ApiKeyAuth(new ApiKeyStore(env));
  }

  /** users' API keys: their store, and the cache of their lookups (forget a key when it changes) */
  readonly apiKeys: ApiKeyAuth;

  /** trusted operator keys (config auth.ticketKeys) */
  private readonly ticketKeys: readonly Uint8Array[];

  /** failed logins per username and per address (auth/throttle.ts) */
  readonly throttle: LoginThrottle;

  /**
   * Checks a password; 401 "Invalid username or password" on any mismatch, 429 LOGIN_THROTTLED while that
   * username or `address` has failed too often (docs/api.md "Failed logins"), whatever the password.
   */
  async login(username: string, password: string, address = ''): Promise<TokenPair> {
    const lock = this.throttle.locked(username, address);
    if (lock !== undefined) throw throttled(lock.by, lock.retryAfterMs);
    try {
      const pair = await this.checkPassword(username, password);
      this.throttle.succeeded(username, address);
      return pair;
    } catch (err) {
      if (err instanceof OutpostError && err.code === 'BAD_CREDENTIALS') this.throttle.failed(username, address);
      throw err;
    }
  }

  private async checkPassword(username: string, password: string): Promise<TokenPair> {
    const user = typeof username === 'string' ? this.entities.userByEmail(username) : undefined;
    // Hash even for unknown users so timing does not reveal which emails exist.
    const ok = await verifyPassword(
      typeof password === 'string' ? password : '',
      user?.passwordHash ?? 'scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=',
    );
    if (!user || !ok) throw new OutpostError('BAD_CREDENTIALS');
    if (!user.enabled) throw new OutpostError('AUTH_FAILED', 'User account is not active');
    return this.issue(user);
  }

  issue(user: UserRecord): TokenPair {
    const iat = Math.floor(this.now() / 1000);
    const sessionId = randomUUID();
    const claims: AccessClaims = {
      sub: user.email,
      userId: user.id,
      scopes: [user.authority],
      sessionId,
      enabled: user.enabled,
      isPublic: false,
      tenantId: user.tenantId,
      customerId: user.customerId,
      firstName: user.firstName,
      lastName: user.lastName,
      iss: this.config.auth.issuer,
      iat,
      exp: iat + this.config.auth.accessTokenTtlSec,
    };
    const refresh = {
      sub: user.email,
      userId: user.id,
      scopes: ['REFRESH_TOKEN'],
      sessionId,
      isPublic: false,
      jti: randomUUID(),
      iss: this.config.auth.issuer,
      iat,
      exp: iat + this.config.auth.refreshTokenTtlSec,
    };
    return { token: signJwt(claims, this.key), refreshToken: signJwt(refresh, this.key) };
  }

  /** A new pair for a valid refresh token (docs/api.md). */
  refresh(refreshToken: unknown): TokenPair {
    if (typeof refreshToken !== 'string' || refreshToken === '') throw new OutpostError('AUTH_FAILED');
    const r = verifyJwt(refreshToken, this.key, Math.floor(this.now() / 1000));
    if (!r.ok) throw this.failure(r.reason);
    if (r.claims.scopes?.[0] !== 'REFRESH_TOKEN') throw new OutpostError('AUTH_FAILED', 'Invalid refresh token');
    const user = this.entities.user(r.claims.userId);
    if (!user?.enabled || this.isRevoked(r.claims.sessionId) || outdated(r.claims.iat, user))
      throw new OutpostError('TOKEN_EXPIRED');
    return this.issue(user);
  }

  /** The session's access and refresh tokens stop working (TB "outdated" tokens → 401 code 11). */
  async logout(p: Principal): Promise<void> {
    // Kept until the session's refresh token would expire; later entries are useless and pruned here, so the
    // revocation list stays bounded by the sessions logged out within one refresh lifetime.
    // (a ticket's own expiry may lie beyond that: its revocation stays until then)
    const keepUntilSec = Math.max(p.exp, p.iat + this.config.auth.refreshTokenTtlSec);
    const nowSec = Math.floor(this.now() / 1000);
    await this.env.root.transaction(() => {
      for (const { key, value } of this.env.meta.getRange({ start: [REVOKED] })) {
        if (!Array.isArray(key) || key[0] !== REVOKED) break;
        if (typeof value !== 'number' || value <= nowSec) void this.env.meta.remove(key);
      }
      void this.env.meta.put([REVOKED, p.sessionId], keepUntilSec);
    });
    await this.env.flushed();
    for (const [k, cached] of this.cache) if (cached.p.sessionId === p.sessionId) this.cache.delete(k);
  }

  /**
   * The principal behind `X-Authorization: Bearer <jwt>` or `Authorization: Bearer <jwt>` (or a raw token
   * for the websocket `?token=`). Missing → 401 "Authentication failed"; expired, tampered or logged out →
   * 401 "Token has expired" (errorCode 11, as TB reports bad signatures); not a JWT → 401 code 10.
   * `ApiKey <value>` in the same header (case-sensitive, as ThingsBoard's filter): the key's user.
   */
  authenticateHeader(xAuthorization: string | undefined, authorization: string | undefined): Principal {
    const header = xAuthorization && !isBlank(xAuthorization) ? xAuthorization : authorization;
    if (header?.startsWith(API_KEY_PREFIX)) return this.authenticateApiKey(header.slice(API_KEY_PREFIX.length));
    if (!header?.startsWith('Bearer ')) throw new OutpostError('AUTH_FAILED');
    const last = header.charCodeAt(header.length - 1);
    const first = header.charCodeAt(7);
    // trim() only when there is something to trim (it copies)
    return this.authenticateToken(
      first > 32 && first < 127 && last > 32 && last < 127 ? header.slice(7) : header.slice(7).trim(),
    );
  }

  /**
   * An API key acts as its user, as that user is now (docs/api.md "API keys"): a deleted user's keys answer 401
   * "Invalid username or password" (ThingsBoard deletes them with the user), a disabled user's "User account is
   * not active".
   */
  authenticateApiKey(value: string): Principal {
    const now = this.now();
    const key = this.apiKeys.authenticate(value, now);
    const user = this.entities.user(key.userId);
    if (user === undefined) throw new OutpostError('BAD_CREDENTIALS');
    if (!user.enabled) throw new OutpostError('AUTH_FAILED', 'User account is not active');
    return {
      userId: user.id,
      email: user.email,
      authority: user.authority,
      tenantId: user.tenantId,
      customerId: user.customerId,
      sessionId: key.id,
      exp: key.expirationTime === 0 ? Number.MAX_SAFE_INTEGER : Math.floor(key.expirationTime / 1000),
      iat: Math.floor(key.createdTime / 1000),
      apiKey: true,
    };
  }

  authenticateToken(token: string): Principal {
    const nowSec = Math.floor(this.now() / 1000);
    const key = token.slice(-CACHE_KEY_CHARS);
    const cached = this.cache.get(key);
    if (cached !== undefined && cached.token === token) {
      if (cached.p.exp > nowSec) {
        cached.used = true;
        return cached.p;
      }
      this.cache.delete(key);
    }
    const p = isTicket(token) ? this.ticketPrincipal(token, nowSec) : this.jwtPrincipal(token, nowSec);
    this.cache.delete(key);
    this.cache.set(key, { token, p, used: false });
    if (this.cache.size > this.config.auth.tokenCacheSize) this.evictOne();
    return p;
  }

  private jwtPrincipal(token: string, nowSec: number): Principal {
    const r = verifyJwt(token, this.key, nowSec);
    if (!r.ok) throw this.failure(r.reason);
    const c = r.claims;
    const authority = c.scopes?.[0];
    if (authority !== 'TENANT_ADMIN' && authority !== 'CUSTOMER_USER') throw new OutpostError('AUTH_FAILED');
    const user = this.entities.user(c.userId);
    if (!user?.enabled || this.isRevoked(c.sessionId) || outdated(c.iat, user)) throw new OutpostError('TOKEN_EXPIRED');
    return {
      userId: c.userId,
      email: c.sub,
      authority,
      tenantId: c.tenantId,
      customerId: c.customerId,
      sessionId: c.sessionId,
      exp: c.exp,
      iat: c.iat,
    };
  }

  /**
   * Access tickets (docs/cli.md): a ticket signed by a key of `auth.ticketKeys` stands for its email with its authority on
   * this gateway's tenant, whether or not such a user exists here. A customer ticket names its customer by id
   * or title (ids differ between gateways); a customer this gateway does not know grants nothing (401).
   * Tampered, untrusted, expired or logged-out tickets → 401 "Token has expired", as a bad JWT signature.
   */
  private ticketPrincipal(token: string, nowSec: number): Principal {
    if (this.ticketKeys.length === 0) throw new OutpostError('TOKEN_EXPIRED');
    const r = verifyTicket(token, this.ticketKeys, nowSec);
    if (!r.ok) throw this.failure(r.reason);
    const c = r.claims;
    if (this.isRevoked(c.jti)) throw new OutpostError('TOKEN_EXPIRED');
    const tenant = this.entities.requireTenant();
    let customerId: string = NULL_UUID;
    if (c.scopes[0] === 'CUSTOMER_USER') {
      const customer = this.entities.findCustomer(c.customerId ?? '');
      if (!customer)
        throw new OutpostError(
          'AUTH_FAILED',
          `the ticket's customer "${c.customerId ?? ''}" is not known on this gateway`,
        );
      customerId = customer.id;
    }
    return {
      userId: c.jti,
      email: c.sub,
      authority: c.scopes[0],
      tenantId: tenant.id,
      customerId,
      sessionId: c.jti,
      exp: c.exp,
      iat: c.iat,
      ticket: true,
    };
  }

  /** CLOCK: the oldest entry not used since it was last passed over; bounded by one pass over the cache. */
  private evictOne(): void {
    for (let n = this.cache.size; n > 0; n--) {
      const first = this.cache.entries().next().value;
      if (first === undefined) return;
      const [k, e] = first;
      this.cache.delete(k);
      if (!e.used) return;
      e.used = false;
      this.cache.set(k, e);
    }
    const oldest = this.cache.keys().next().value;
    if (oldest !== undefined) this.cache.delete(oldest);
  }

  /**
   * The access rules (docs/api.md). Tenant admin: any entity of its tenant. Customer user: devices and assets
   * assigned to its customer, and its own customer (read only). Unknown entity → 404, otherwise 403.
   */
  checkAccess(p: Principal, entityType: EntityType | string, entityId: string, op: AccessOp = 'read'): EntityRecord {
    const rec = this.entities.get(entityId);
    if (!rec || rec.entityType !== entityType) {
      throw new OutpostError('ENTITY_NOT_FOUND', `${titleCase(String(entityType))} with id [${entityId}] is not found`);
    }
    if (rec.tenantId !== p.tenantId) throw new OutpostError('PERMISSION_DENIED');
    if (p.authority === 'TENANT_ADMIN') return rec;
    switch (rec.entityType) {
      case 'DEVICE':
      case 'ASSET':
        if (rec.customerId === p.customerId) return rec;
        break;
      case 'CUSTOMER':
        if (rec.id === p.customerId && op === 'read') return rec;
        break;
      case 'USER':
        if (rec.id === p.userId && op === 'read') return rec;
        break;
      default:
        break;
    }
    throw new OutpostError('PERMISSION_DENIED');
  }

  /** Drops cached tokens of deleted users, so their next request re-verifies and fails (401 code 11). */
  forgetUsers(userIds: readonly string[]): void {
    if (userIds.length === 0) return;
    const gone = new Set(userIds);
    for (const [k, cached] of this.cache) if (gone.has(cached.p.userId)) this.cache.delete(k);
  }

  requireTenantAdmin(p: Principal): void {
    if (p.authority !== 'TENANT_ADMIN') throw new OutpostError('PERMISSION_DENIED');
  }

  private isRevoked(sessionId: string): boolean {
    return this.env.meta.get([REVOKED, sessionId]) !== undefined;
  }

  private failure(reason: 'malformed' | 'signature' | 'expired'): OutpostError {
    return reason === 'malformed' ? new OutpostError('BAD_CREDENTIALS') : new OutpostError('TOKEN_EXPIRED');
  }
}

/** ThingsBoard's API_KEY_HEADER_PREFIX: capital A, one space */
const API_KEY_PREFIX = 'ApiKey ';

/** characters of a token's end used as its cache key: all signature (HS512: 86 base64url characters) */
const CACHE_KEY_CHARS = 32;

interface CachedToken {
  readonly token: string;
  readonly p: Principal;
  /** hit since the evictor last passed it */
  used: boolean;
}

/** String.prototype.trim() === '' without the copy in the common case. */
function isBlank(s: string): boolean {
  const c = s.charCodeAt(0);
  if (c > 32 && c < 127) return false;
  return s.trim() === '';
}

function titleCase(s: string): string {
  return s.charAt(0) + s.slice(1).toLowerCase();
}

/** The answer to a login while locked: why, and when to retry (also in the Retry-After header). */
export function throttled(by: 'user' | 'address', retryAfterMs: number): OutpostError {
  const s = Math.max(1, Math.ceil(retryAfterMs / 1000));
  return new OutpostError(
    'LOGIN_THROTTLED',
    `Too many failed logins ${by === 'user' ? 'for this user' : 'from this address'}; try again in ${s} s`,
    { retryAfterS: s },
  );
}

/**
 * Issued before the user's last password change (in an earlier second: a token's iat has whole seconds, and one
 * issued in the same second as the change is most likely the login that followed it).
 */
function outdated(iat: number | undefined, user: UserRecord): boolean {
  return user.credentialsChangedSec !== undefined && (iat ?? 0) < user.credentialsChangedSec;
}
