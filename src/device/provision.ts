/**
 * TB's device provisioning, strategy "allow create new devices" (docs/sync.md, docs/api.md): HTTP `POST /api/v1/provision`
 * and MQTT `/provision/request` give the same answers. A new name creates the device with a fresh token
 * (SUCCESS); a name that exists → FAILURE; a wrong key or secret → NOT_FOUND.
 */
import { timingSafeEqual } from 'node:crypto';
import type { Services } from '../context.js';
import { OutpostError } from '../errors.js';
import { type JsonValue, isJsonObject } from '../ingest/json.js';
import { NULL_UUID } from '../types.js';

/** Equal strings, compared in constant time (a provision secret must not leak through timing). */
function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export type ProvisionAnswer =
  | { readonly status: 'SUCCESS'; readonly credentialsType: 'ACCESS_TOKEN'; readonly credentialsValue: string }
  | { readonly status: 'NOT_FOUND' | 'FAILURE'; readonly errorMsg: string };

/** Throws BAD_PAYLOAD when the request is not a JSON object; every other outcome is an answer. */
export async function provisionDevice(
  s: Pick<Services, 'config' | 'entities'>,
  body: JsonValue,
): Promise<ProvisionAnswer> {
  if (!isJsonObject(body)) throw new OutpostError('BAD_PAYLOAD', 'provisioning request must be a JSON object');
  const str = (k: string): string => {
    const v = body[k];
    return typeof v === 'string' ? v : '';
  };
  const { key, secret } = s.config.provision;
  if (key === '' || !sameSecret(str('provisionDeviceKey'), key) || !sameSecret(str('provisionDeviceSecret'), secret)) {
    return { status: 'NOT_FOUND', errorMsg: 'Provision data was not found!' };
  }
  const name = str('deviceName');
  if (name === '') return { status: 'FAILURE', errorMsg: 'Device name is required!' };
  if (s.entities.byName('DEVICE', name) !== undefined) {
    return { status: 'FAILURE', errorMsg: 'Failed to provision device: device with this name already exists!' };
  }
  const token = str('token');
  try {
    const d = await s.entities.createDevice({
      name,
      type: str('deviceType') || 'default',
      token: token || undefined,
      customerId: NULL_UUID,
      // TB 3.8+: `"gateway": true` provisions a gateway
      gateway: body['gateway'] === true,
    });
    return { credentialsType: 'ACCESS_TOKEN', credentialsValue: d.token, status: 'SUCCESS' };
  } catch (err) {
    // a concurrent request created the same name, or the requested token is taken
    return { status: 'FAILURE', errorMsg: `Failed to provision device: ${(err as Error).message}` };
  }
}
