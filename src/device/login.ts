/**
 * Who a CONNECT is, in ThingsBoard's order (docs/mqtt.md "Logging in"):
 * 1. a TLS session with a client certificate: X.509 only. The certificate is looked up by its hash and its
 *    validity dates checked; user name and password are not looked at.
 * 2. otherwise MQTT Basic by client id (no user name), or by client id and user name; a wrong password there is
 *    a refusal, not a reason to try further;
 * 3. then the user name as an access token, or as the user name of MQTT Basic credentials without a client id.
 * A refusal carries ThingsBoard's codes: 0x86 / 5 when a user name or password was given, 0x85 / 2 (identifier
 * rejected) for a client id alone, 0x87 / 5 for a certificate or nothing at all.
 *
 * `guardedLogin` puts that behind the failed-login throttle HTTP logins have (auth/throttle.ts, docs/mqtt.md
 * "Failed logins"): per credential (the user name, else the client id, else the certificate) and per address.
 * While either is locked a CONNECT is refused without a look at its credentials, the right ones too.
 */
import type { X509Certificate } from 'node:crypto';
import type { LoginLock, LoginThrottle } from '../auth/throttle.js';
import { type FailureLog, quoted, tokenPrefix } from '../status/failures.js';
import { type BasicMqttCredentials, basicCredentialsId, certificateId, passwordMatches } from '../store/credentials.js';
import type { DeviceRecord, EntityStore } from '../store/entities.js';

export interface Refusal {
  /** MQTT 5 CONNACK reason code */
  readonly reasonCode: 0x85 | 0x86 | 0x87 | 0x9f;
  /** MQTT 3.1.x CONNACK return code */
  readonly returnCode: 2 | 5;
  /** for the refusal log: never a secret */
  readonly why: string;
}

export interface LoginRequest {
  readonly clientId: string;
  readonly username: string | undefined;
  readonly password: Buffer | undefined;
  /** the client certificate of a TLS session, when it sent one */
  readonly certificate: X509Certificate | undefined;
}

const CERT_REFUSED = (why: string): Refusal => ({ reasonCode: 0x87, returnCode: 5, why });

export function mqttLogin(
  entities: Pick<EntityStore, 'deviceByCredentialsId'>,
  req: LoginRequest,
  now: number = Date.now(),
): DeviceRecord | Refusal {
  if (req.certificate !== undefined) return certificateLogin(entities, req.certificate, now);
  const user = req.username !== undefined && req.username !== '' ? req.username : undefined;
  const refusal = (why: string): Refusal =>
    req.username !== undefined || req.password !== undefined
      ? { reasonCode: 0x86, returnCode: 5, why }
      : req.clientId !== ''
        ? { reasonCode: 0x85, returnCode: 2, why: 'unknown client id' }
        : { reasonCode: 0x87, returnCode: 5, why: 'no credentials' };
  if (user === undefined) {
    if (req.clientId === '') return refusal('no credentials');
    const d = entities.deviceByCredentialsId(basicCredentialsId(req.clientId, null));
    const c = d?.credentials;
    if (d === undefined || c?.type !== 'MQTT_BASIC' || (c.userName ?? '') !== '' || c.clientId !== req.clientId)
      return refusal('unknown client id');
    return passwordMatches(c.password, req.password) ? d : refusal('wrong password');
  }
  if (req.clientId !== '') {
    const d = entities.deviceByCredentialsId(basicCredentialsId(req.clientId, user));
    const c = d?.credentials;
    if (d !== undefined && c?.type === 'MQTT_BASIC' && namesMatch(c, req.clientId, user))
      return passwordMatches(c.password, req.password) ? d : refusal('wrong password');
  }
  const d = entities.deviceByCredentialsId(user);
  if (d === undefined) return refusal('unknown user name or access token');
  const c = d.credentials;
  if (c === undefined) return d;
  if (c.type === 'MQTT_BASIC' && namesMatch(c, req.clientId, user))
    return passwordMatches(c.password, req.password) ? d : refusal('wrong password');
  return refusal('unknown user name or access token');
}

/** The stored client id (when there is one) and user name are the ones given. */
function namesMatch(c: BasicMqttCredentials, clientId: string, userName: string): boolean {
  return ((c.clientId ?? '') === '' || c.clientId === clientId) && c.userName === userName;
}

function certificateLogin(
  entities: Pick<EntityStore, 'deviceByCredentialsId'>,
  cert: X509Certificate,
  now: number,
): DeviceRecord | Refusal {
  const d = entities.deviceByCredentialsId(certificateId(cert.raw));
  if (d === undefined || d.credentials?.type !== 'X509_CERTIFICATE') return CERT_REFUSED('unknown client certificate');
  if (now < Date.parse(cert.validFrom) || now > Date.parse(cert.validTo))
    return CERT_REFUSED('client certificate outside its validity');
  return d;
}

/**
 * Refused while locked: MQTT 5 0x9F "connection rate exceeded" (the spec's code for a client to back off, which
 * tells a lock from a wrong password), 3.1.x 5 "not authorized". ThingsBoard drops a blocked address's TCP
 * connection without a CONNACK, which a client cannot tell from a network fault.
 */
const throttledRefusal = (lock: LoginLock): Refusal => ({
  reasonCode: 0x9f,
  returnCode: 5,
  why: `too many failed logins ${lock.by === 'user' ? 'for this credential' : 'from this address'}; try again in ${Math.max(1, Math.ceil(lock.retryAfterMs / 1000))} s`,
});

export interface LoginGuard {
  readonly throttle: LoginThrottle;
  /** absent in unit tests */
  readonly failures: Pick<FailureLog, 'note'> | undefined;
}

/** mqttLogin behind the throttle; every refusal counted and logged with the address, client id and user name. */
export function guardedLogin(
  entities: Pick<EntityStore, 'deviceByCredentialsId'>,
  guard: LoginGuard,
  req: LoginRequest,
  address: string,
  now: number = Date.now(),
): DeviceRecord | Refusal {
  const credential =
    req.certificate !== undefined
      ? `x509 ${req.certificate.fingerprint256}`
      : req.username !== undefined && req.username !== ''
        ? req.username
        : req.clientId;
  const lock = guard.throttle.locked(credential, address);
  if (lock !== undefined) {
    const refusal = throttledRefusal(lock);
    const who = describe(req, address, false);
    guard.failures?.note('mqttLoginThrottled', `mqtt: refused a CONNECT from ${who}: ${refusal.why}`, who);
    return refusal;
  }
  const d = mqttLogin(entities, req, now);
  if ('entityType' in d) {
    guard.throttle.succeeded(credential, address);
    return d;
  }
  const started = guard.throttle.failed(credential, address);
  const locked =
    started === undefined
      ? ''
      : `; too many failed logins ${started.by === 'user' ? 'for this credential' : 'from this address'}: CONNECTs refused for ${Math.ceil(started.retryAfterMs / 1000)} s`;
  // a wrong password names MQTT Basic credentials, whose user name is no secret; any other user name may be an
  // access token (or a mistyped one): only its first characters, as the HTTP device API logs tokens
  const who = describe(req, address, d.why === 'wrong password');
  guard.failures?.note('mqttLogin', `mqtt: refused a CONNECT from ${who}: ${d.why}${locked}`, who);
  return d;
}

/** Where a CONNECT came from and whom it named, for the log: escaped, bounded, never a password or a token. */
function describe(req: LoginRequest, address: string, wholeUserName: boolean): string {
  let who = `${address || '?'}, client id ${quoted(req.clientId)}`;
  if (req.certificate !== undefined) return `${who}, certificate ${req.certificate.fingerprint256.slice(0, 11)}…`;
  if (req.username !== undefined)
    who += `, user name ${quoted(wholeUserName ? req.username : tokenPrefix(req.username))}`;
  return who;
}
