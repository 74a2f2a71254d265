/**
 * CONNECT (docs/mqtt.md "Logging in"): who the client is, by its credentials (src/device/login.ts, behind the
 * failed-login throttle) or as a provisioning client, and the CONNACK that tells it.
 */
import type { X509Certificate } from 'node:crypto';
import type { Socket } from 'node:net';
import { TLSSocket } from 'node:tls';
import type { IConnackPacket, IConnectPacket } from 'mqtt-packet';
import type { LoginThrottle } from '../../auth/throttle.js';
import type { DeviceActions, DeviceRecord, Refusal } from '../../device/actions.js';
import { peerAddress } from './peer.js';
import { PROVISION_USERNAME } from './provision.js';

/** Who a CONNECT is: a provisioning client, a device or a LAN gateway, or refused. */
export type Connecting =
  | { readonly role: 'provision'; readonly device?: undefined }
  | { readonly role: 'device' | 'gateway'; readonly device: DeviceRecord }
  | { readonly refusal: Refusal };

/** The certificate a TLS client sent (the listener asks for one, never requires it). */
function peerCertificate(socket: Socket): X509Certificate | undefined {
  // getPeerX509Certificate: one parse, not getPeerCertificate's object of every field
  return socket instanceof TLSSocket ? socket.getPeerX509Certificate() : undefined;
}

export function whoConnects(
  p: IConnectPacket,
  socket: Socket,
  devices: Pick<DeviceActions, 'login'>,
  throttle: LoginThrottle,
): Connecting {
  if (p.username === PROVISION_USERNAME || p.clientId === PROVISION_USERNAME) return { role: 'provision' };
  const d = devices.login(
    {
      clientId: p.clientId ?? '',
      username: p.username,
      password: p.password,
      certificate: peerCertificate(socket),
    },
    peerAddress(socket),
    throttle,
  );
  if (!('entityType' in d)) return { refusal: d };
  return { role: d.gateway === true ? 'gateway' : 'device', device: d };
}

/**
 * The CONNACK: a refusal's code (MQTT 5 reason, 3.1.x return code), or acceptance. sessionPresent is always
 * false: nothing is kept between connections, so clients re-subscribe.
 */
export function connack(protocolVersion: number, refusal?: Refusal): IConnackPacket {
  const v5 = protocolVersion === 5;
  if (refusal !== undefined)
    return v5
      ? { cmd: 'connack', sessionPresent: false, reasonCode: refusal.reasonCode }
      : { cmd: 'connack', sessionPresent: false, returnCode: refusal.returnCode };
  return v5
    ? {
        cmd: 'connack',
        sessionPresent: false,
        reasonCode: 0,
        properties: {
          retainAvailable: false,
          wildcardSubscriptionAvailable: false,
          sharedSubscriptionAvailable: false,
          subscriptionIdentifiersAvailable: false,
          maximumQoS: 1,
        },
      }
    : { cmd: 'connack', sessionPresent: false, returnCode: 0 };
}
