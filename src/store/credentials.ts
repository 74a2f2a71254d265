/**
 * Device credentials as ThingsBoard models them (docs/api.md "Device credentials"): an access token, MQTT Basic
 * (client id / user name / password) or an X.509 certificate. Every kind has a `credentialsId`, and all of them
 * share one namespace, the store's credentials index (`tokens`: credentialsId → device id), which is what a
 * CONNECT is looked up by: one LMDB read (or a cache hit) whatever the kind.
 *
 * - ACCESS_TOKEN: credentialsId = the token.
 * - MQTT_BASIC: credentialsId = userName alone (no client id), sha3-256(clientId) (no user name), or
 *   sha3-256(clientId|userName); the value keeps the three fields as given, the password in clear, because
 *   ThingsBoard's clients read it back and post it again (a hash in its place would become the password).
 * - X509_CERTIFICATE: the value is the PEM's base64 body without its header lines and line breaks (the base64
 *   of the DER), credentialsId its sha3-256 in lowercase hex. A certificate is not judged when it is set, as
 *   in ThingsBoard: its validity is checked when a device presents it.
 */
import * as crypto from 'node:crypto';
import { OutpostError } from '../errors.js';

export type CredentialsType = 'ACCESS_TOKEN' | 'MQTT_BASIC' | 'X509_CERTIFICATE';
export const CREDENTIALS_TYPES: readonly CredentialsType[] = ['ACCESS_TOKEN', 'MQTT_BASIC', 'X509_CERTIFICATE'];

export interface BasicMqttCredentials {
  readonly type: 'MQTT_BASIC';
  readonly clientId: string | null;
  readonly userName: string | null;
  readonly password: string | null;
}
export interface X509Credentials {
  readonly type: 'X509_CERTIFICATE';
  /** the certificate's base64 body (ThingsBoard's credentialsValue) */
  readonly certificate: string;
}
/** What a device record keeps of credentials other than an access token (absent = an access token). */
export type StoredCredentials = BasicMqttCredentials | X509Credentials;

/** Credentials ready to be stored: the key in the index, and what the record keeps. */
export interface ResolvedCredentials {
  readonly credentialsId: string;
  readonly stored?: StoredCredentials | undefined;
}

/**
 * One-shot digests: `crypto.hash` (Node ≥ 20.12) costs half of a `createHash` object, and a CONNECT pays up to
 * three of them; older Node (the engines range starts at 18) takes the object.
 */
const hasOneShot = typeof (crypto as { hash?: unknown }).hash === 'function';
const digestHex = (alg: string, data: string | Buffer): string =>
  hasOneShot ? crypto.hash(alg, data, 'hex') : crypto.createHash(alg).update(data).digest('hex');
const digestBuffer = (alg: string, data: string | Buffer): Buffer =>
  hasOneShot ? crypto.hash(alg, data, 'buffer') : crypto.createHash(alg).update(data).digest();

export const sha3Hex = (s: string): string => digestHex('sha3-256', s);

const nonEmpty = (s: string | null | undefined): s is string => s !== null && s !== undefined && s !== '';

/** ThingsBoard's credentialsId of MQTT Basic credentials. */
export function basicCredentialsId(clientId: string | null, userName: string | null): string {
  if (!nonEmpty(clientId)) return userName ?? '';
  return sha3Hex(nonEmpty(userName) ? `${clientId}|${userName}` : clientId);
}

/** The base64 body of a PEM certificate (or of what is already one), without header lines and line breaks. */
export function certificateBody(pem: string): string {
  return pem
    .replace(/-----BEGIN CERTIFICATE-----/g, '')
    .replace(/-----END CERTIFICATE-----/g, '')
    .replace(/[\r\n]/g, '');
}

/** The credentialsId of a certificate presented in a TLS handshake (its DER bytes). */
export const certificateId = (der: Buffer): string => sha3Hex(der.toString('base64'));

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
const CONTROL = /[\u0000-\u001f\u007f]/;

/** The `{"clientId","userName","password"}` string ThingsBoard returns as credentialsValue (nulls kept). */
export function basicValueJson(c: BasicMqttCredentials): string {
  return JSON.stringify({ clientId: c.clientId, userName: c.userName, password: c.password });
}

const BAD_BASIC = 'Invalid credentials body for simple mqtt credentials!';

function parseBasicValue(value: unknown): BasicMqttCredentials {
  if (typeof value !== 'string') throw new OutpostError('CREDENTIALS_INVALID', BAD_BASIC);
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    throw new OutpostError('CREDENTIALS_INVALID', BAD_BASIC);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new OutpostError('CREDENTIALS_INVALID', BAD_BASIC);
  const o = parsed as Record<string, unknown>;
  const field = (k: string): string | null => {
    const v = o[k];
    if (v === undefined || v === null) return null;
    if (typeof v !== 'string') throw new OutpostError('CREDENTIALS_INVALID', BAD_BASIC);
    if (CONTROL.test(v))
      throw new OutpostError('CREDENTIALS_INVALID', `Mqtt ${k} should not contain control characters!`);
    return v;
  };
  for (const k of Object.keys(o))
    if (k !== 'clientId' && k !== 'userName' && k !== 'password')
      throw new OutpostError('CREDENTIALS_INVALID', BAD_BASIC);
  const c: BasicMqttCredentials = {
    type: 'MQTT_BASIC',
    clientId: field('clientId'),
    userName: field('userName'),
    password: field('password'),
  };
  if (!nonEmpty(c.clientId) && !nonEmpty(c.userName))
    throw new OutpostError('CREDENTIALS_INVALID', 'Both mqtt client id and user name are empty!');
  if (nonEmpty(c.clientId) && !nonEmpty(c.userName) && nonEmpty(c.password))
    throw new OutpostError('CREDENTIALS_INVALID', 'Password cannot be specified along with client id');
  return c;
}

/** An access token's rules (docs/api.md): 1..255 characters without white space, "/", "?" or "#". */
export function checkAccessToken(token: string): void {
  if (token === '' || token.length > 255 || /[\s/?#]/.test(token) || CONTROL.test(token))
    throw new OutpostError(
      'BAD_PARAM',
      'Device access token must be 1..255 characters without spaces, "/", "?" or "#"',
    );
}

/**
 * Checks credentials as posted in ThingsBoard's JSON (`credentialsType`, `credentialsId`, `credentialsValue`) and
 * derives their credentialsId; a 400 with ThingsBoard's message otherwise. The posted credentialsId counts only
 * for an access token (ThingsBoard overwrites it for the other kinds).
 */
export function resolveCredentials(body: Record<string, unknown>): ResolvedCredentials {
  const type = body['credentialsType'];
  if (type === undefined || type === null || type === '')
    throw new OutpostError('CREDENTIALS_INVALID', 'Device credentials type should be specified');
  if (typeof type !== 'string' || !(CREDENTIALS_TYPES as readonly string[]).includes(type))
    throw new OutpostError('CREDENTIALS_INVALID', `Unsupported device credentials type: ${String(type)}`);
  const value = body['credentialsValue'];
  if (type === 'ACCESS_TOKEN') {
    const id = body['credentialsId'];
    if (id === undefined || id === null || id === '')
      throw new OutpostError('CREDENTIALS_INVALID', 'Device credentials id should be specified!');
    if (typeof id !== 'string') throw new OutpostError('CREDENTIALS_INVALID', 'Device credentials id must be a string');
    checkAccessToken(id);
    return { credentialsId: id };
  }
  if (type === 'MQTT_BASIC') {
    const stored = parseBasicValue(value);
    return { credentialsId: basicCredentialsId(stored.clientId, stored.userName), stored };
  }
  if (typeof value !== 'string' || certificateBody(value).trim() === '')
    throw new OutpostError('CREDENTIALS_INVALID', 'Device credentials value should be specified!');
  const certificate = certificateBody(value);
  return { credentialsId: sha3Hex(certificate), stored: { type: 'X509_CERTIFICATE', certificate } };
}

/** The type and value ThingsBoard shows for a device's credentials. */
export function credentialsTypeAndValue(stored: StoredCredentials | undefined): {
  credentialsType: CredentialsType;
  credentialsValue: string | null;
} {
  if (stored === undefined) return { credentialsType: 'ACCESS_TOKEN', credentialsValue: null };
  if (stored.type === 'MQTT_BASIC') return { credentialsType: 'MQTT_BASIC', credentialsValue: basicValueJson(stored) };
  return { credentialsType: 'X509_CERTIFICATE', credentialsValue: stored.certificate };
}

/** Whether two stored credentials are the same (posting the same object back changes nothing). */
export function sameCredentials(a: StoredCredentials | undefined, b: StoredCredentials | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  if (a.type === 'MQTT_BASIC' && b.type === 'MQTT_BASIC')
    return a.clientId === b.clientId && a.userName === b.userName && a.password === b.password;
  return a.type === 'X509_CERTIFICATE' && b.type === 'X509_CERTIFICATE' && a.certificate === b.certificate;
}

/**
 * The id of a device's credentials row (ThingsBoard's `DeviceCredentials.id`): derived from the device's id,
 * so every device has one, stable across changes of its credentials, with nothing more to store.
 */
export function credentialsRowId(deviceId: string): string {
  const h = digestHex('sha256', `credentials:${deviceId}`);
  const variant = ((Number.parseInt(h[16] as string, 16) & 0x3) | 0x8).toString(16);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-${variant}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/**
 * ThingsBoard's password rule: a stored non-empty password needs an equal one, a stored empty one accepts any.
 * Compared in constant time (digests of equal length, so the length of the password is not told either).
 */
export function passwordMatches(stored: string | null, given: Buffer | string | undefined): boolean {
  if (!nonEmpty(stored)) return true;
  if (given === undefined || given.length === 0) return false;
  return crypto.timingSafeEqual(digestBuffer('sha256', stored), digestBuffer('sha256', given));
}
