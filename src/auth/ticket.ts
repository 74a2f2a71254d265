/**
 * Access tickets (docs/cli.md): JWTs signed with an operator's Ed25519 key (RFC 8037, header
 * `{"alg":"EdDSA","typ":"JWT"}`), accepted offline by every gateway whose `auth.ticketKeys` lists the public
 * key. The gateway verifies with node:crypto (~0.1 ms; tweetnacl's pure-JS verify held the event loop ~8 ms);
 * issuing is the CLI's (ticket-issue.ts), so the daemon never loads tweetnacl. AuthService still caches verified
 * tickets beside its JWTs.
 */
import { type KeyObject, createPublicKey, verify } from 'node:crypto';
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

/** an Ed25519 signature's length (RFC 8032) */
const SIGNATURE_BYTES = 64;

/** node:crypto's key object for a raw 32-byte Ed25519 public key, made once per trusted key */
const keyObjects = new WeakMap<Uint8Array, KeyObject>();
function publicKeyObject(raw: Uint8Array): KeyObject {
  let k = keyObjects.get(raw);
  if (k === undefined) {
    k = createPublicKey({
      key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(raw).toString('base64url') },
      format: 'jwk',
    });
    keyObjects.set(raw, k);
  }
  return k;
}

export type TicketResult =
  | { readonly ok: true; readonly claims: TicketClaims }
  | { readonly ok: false; readonly reason: 'malformed' | 'signature' | 'expired' };

/** Checks the signature against each trusted key, then the claims' shape and expiry (`nowSec` Unix seconds). */
export function verifyTicket(token: string, trusted: readonly Uint8Array[], nowSec: number): TicketResult {
  const parts = token.split('.');
  if (parts.length !== 3 || parts[0] !== TICKET_HEADER) return { ok: false, reason: 'malformed' };
  const sig = Buffer.from(parts[2] as string, 'base64url');
  if (sig.length !== SIGNATURE_BYTES) return { ok: false, reason: 'signature' };
  const msg = Buffer.from(`${parts[0]}.${parts[1]}`);
  if (!trusted.some((pk) => verify(null, msg, publicKeyObject(pk), sig))) return { ok: false, reason: 'signature' };
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
