/**
 * Access tickets (docs/cli.md): JWTs signed with an operator's Ed25519 key (RFC 8037, header
 * `{"alg":"EdDSA","typ":"JWT"}`), accepted offline by every gateway whose `auth.ticketKeys` lists the public
 * key. tweetnacl is the Ed25519 implementation: a verify costs ~8 ms here, so AuthService caches verified
 * tickets beside its JWTs and verifies only on a miss.
 */
import { randomUUID } from 'node:crypto';
import nacl from 'tweetnacl';
import type { Authority } from '../store/entities.js';

export const TICKET_HEADER = Buffer.from(JSON.stringify({ alg: 'EdDSA', typ: 'JWT' })).toString('base64url');
/** a ticket lives at most 7 days (docs/cli.md) */
export const MAX_TICKET_TTL_SEC = 7 * 86_400;

export interface TicketClaims {
  readonly sub: string;
  readonly scopes: [Authority];
  /** the customer's id or title as the operator gave it (ids differ between gateways; titles need not) */
  readonly customerId?: string;
  readonly iat: number;
  readonly exp: number;
  readonly jti: string;
}

export function isTicket(token: string): boolean {
  return token.startsWith(`${TICKET_HEADER}.`);
}

/** A new operator key pair: the 64-byte secret key (it holds the public key in its last 32 bytes). */
export function generateTicketKey(): { secretKey: Buffer; publicKey: string } {
  const kp = nacl.sign.keyPair();
  return { secretKey: Buffer.from(kp.secretKey), publicKey: Buffer.from(kp.publicKey).toString('base64url') };
}

export function publicKeyOf(secretKey: Buffer): string {
  return Buffer.from(secretKey.subarray(32)).toString('base64url');
}

export interface IssueRequest {
  readonly email: string;
  readonly authority: Authority;
  readonly customer?: string | undefined;
  readonly ttlSec: number;
  /** Unix seconds */
  readonly nowSec: number;
}

export function issueTicket(secretKey: Buffer, r: IssueRequest): string {
  if (!(r.ttlSec > 0 && r.ttlSec <= MAX_TICKET_TTL_SEC))
    throw new Error(`ticket ttl must be between 1 s and 7 days, got ${r.ttlSec} s`);
  if (r.authority === 'CUSTOMER_USER' && !r.customer) throw new Error('a CUSTOMER_USER ticket needs --customer');
  const claims: TicketClaims = {
    sub: r.email,
    scopes: [r.authority],
    ...(r.authority === 'CUSTOMER_USER' ? { customerId: r.customer } : {}),
    iat: r.nowSec,
    exp: r.nowSec + r.ttlSec,
    jti: randomUUID(),
  };
  const signingInput = `${TICKET_HEADER}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`;
  const sig = nacl.sign.detached(Buffer.from(signingInput), new Uint8Array(secretKey));
  return `${signingInput}.${Buffer.from(sig).toString('base64url')}`;
}

export type TicketResult =
  | { readonly ok: true; readonly claims: TicketClaims }
  | { readonly ok: false; readonly reason: 'malformed' | 'signature' | 'expired' };

/** Checks the signature against each trusted key, then the claims' shape and expiry (`nowSec` Unix seconds). */
export function verifyTicket(token: string, trusted: readonly Uint8Array[], nowSec: number): TicketResult {
  const parts = token.split('.');
  if (parts.length !== 3 || parts[0] !== TICKET_HEADER) return { ok: false, reason: 'malformed' };
  const sig = Buffer.from(parts[2] as string, 'base64url');
  if (sig.length !== nacl.sign.signatureLength) return { ok: false, reason: 'signature' };
  const msg = Buffer.from(`${parts[0]}.${parts[1]}`);
  if (!trusted.some((pk) => nacl.sign.detached.verify(msg, sig, pk))) return { ok: false, reason: 'signature' };
  let c: Partial<TicketClaims>;
  try {
    c = JSON.parse(Buffer.from(parts[1] as string, 'base64url').toString('utf8')) as Partial<TicketClaims>;
  } catch {
    return { ok: false, reason: 'malformed' };
  }
  const authority = c.scopes?.[0];
  if (
    typeof c.sub !== 'string' ||
    (authority !== 'TENANT_ADMIN' && authority !== 'CUSTOMER_USER') ||
    typeof c.jti !== 'string' ||
    typeof c.iat !== 'number' ||
    typeof c.exp !== 'number' ||
    (authority === 'CUSTOMER_USER' && typeof c.customerId !== 'string')
  ) {
    return { ok: false, reason: 'malformed' };
  }
  // a ticket signed for longer than 7 days (the most a ticket may live) is refused whoever signed it
  if (c.exp <= nowSec || c.exp - c.iat > MAX_TICKET_TTL_SEC) return { ok: false, reason: 'expired' };
  return { ok: true, claims: c as TicketClaims };
}
