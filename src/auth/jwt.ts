/**
 * HS512 JWTs with ThingsBoard's claims (docs/api.md), signed with node:crypto HMAC (microseconds; pure-JS
 * crypto stays off the hot path). The signing key is generated per install and kept in the data dir.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface AccessClaims {
  sub: string;
  userId: string;
  scopes: string[];
  sessionId: string;
  enabled: boolean;
  isPublic: boolean;
  tenantId: string;
  customerId: string;
  firstName: string | null;
  lastName: string | null;
  iss: string;
  iat: number;
  exp: number;
  jti?: string;
}

const HEADER = Buffer.from(JSON.stringify({ alg: 'HS512', typ: 'JWT' })).toString('base64url');

/** Loads `<dataDir>/jwt.key`, creating it (64 random bytes, mode 0600) on first use. */
export function loadSigningKey(dataDir: string): Buffer {
  const file = join(dataDir, 'jwt.key');
  if (!existsSync(file)) {
    try {
      writeFileSync(file, randomBytes(64).toString('base64'), { flag: 'wx', mode: 0o600 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    chmodSync(file, 0o600);
  }
  return Buffer.from(readFileSync(file, 'utf8').trim(), 'base64');
}

export function signJwt(claims: object, key: Buffer): string {
  const payload = Buffer.from(JSON.stringify(claims)).toString('base64url');
  const sig = createHmac('sha512', key).update(`${HEADER}.${payload}`).digest('base64url');
  return `${HEADER}.${payload}.${sig}`;
}

export type VerifyResult =
  | { readonly ok: true; readonly claims: AccessClaims }
  | { readonly ok: false; readonly reason: 'malformed' | 'signature' | 'expired' };

/** Verifies signature and expiry; `nowSec` is Unix seconds. */
export function verifyJwt(token: string, key: Buffer, nowSec: number): VerifyResult {
  const parts = token.split('.');
  if (parts.length !== 3) return { ok: false, reason: 'malformed' };
  const [h, p, s] = parts as [string, string, string];
  const expected = createHmac('sha512', key).update(`${h}.${p}`).digest();
  const given = Buffer.from(s, 'base64url');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return { ok: false, reason: 'signature' };
  let claims: AccessClaims;
  try {
    claims = JSON.parse(Buffer.from(p, 'base64url').toString('utf8')) as AccessClaims;
  } catch {
    return { ok: false, reason: 'malformed' };
  }
  if (typeof claims.exp !== 'number' || claims.exp <= nowSec) return { ok: false, reason: 'expired' };
  return { ok: true, claims };
}
