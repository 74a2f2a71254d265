/**
 * Issuing access tickets, the operator's side (`outpost ticket keygen/issue`, docs/cli.md): Ed25519 with tweetnacl,
 * whose 64-byte secret key holds the public key in its last 32 bytes. Gateways verify with ticket.ts.
 */
import { randomUUID } from 'node:crypto';
import nacl from 'tweetnacl';
import type { Authority } from '../store/entities.js';
import { MAX_TICKET_TTL_SEC, TICKET_HEADER, type TicketClaims } from './ticket.js';

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
