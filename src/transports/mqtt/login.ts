/**
 * Who a CONNECT is, in ThingsBoard's order (docs/mqtt.md "Logging in"):
 * 1. a TLS session with a client certificate: X.509 only. The certificate is looked up by its hash and its
 *    validity dates checked; user name and password are not looked at.
 * 2. otherwise MQTT Basic by client id (no user name), or by client id and user name; a wrong password there is
 *    a refusal, not a reason to try further;
 * 3. then the user name as an access token, or as the user name of MQTT Basic credentials without a client id.
 * A refusal carries ThingsBoard's codes: 0x86 / 5 when a user name or password was given, 0x85 / 2 (identifier
 * rejected) for a client id alone, 0x87 / 5 for a certificate or nothing at all.
 */
import type { X509Certificate } from 'node:crypto';
import {
  type BasicMqttCredentials,
  basicCredentialsId,
  certificateId,
  passwordMatches,
} from '../../store/credentials.js';
import type { DeviceRecord, EntityStore } from '../../store/entities.js';

export interface Refusal {
  /** MQTT 5 CONNACK reason code */
  readonly reasonCode: 0x85 | 0x86 | 0x87;
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
