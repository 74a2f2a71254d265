/**
 * TB's device provisioning (docs/api.md "Device profiles", docs/sync.md): HTTP `POST /api/v1/provision` and MQTT
 * `/provision/request` give the same answers. The profile whose `provisionDeviceKey` the request names decides,
 * by its strategy: ALLOW_CREATE_NEW_DEVICES creates a device of that profile with a fresh token (a name that
 * exists → FAILURE); CHECK_PRE_PROVISIONED_DEVICES hands out the credentials of a device of that profile created
 * beforehand (none → FAILURE); DISABLED, an unknown key or a wrong secret → NOT_FOUND. The config's
 * provision.key/secret are the default profile's, allowing new devices.
 *
 * The key sits on every device of a fleet, so whoever holds one device holds it: requests are limited per source
 * address and per key, and devices created per key per hour (`provision.*` in docs/configuration.md). A refusal
 * is decided before the body is parsed (the address) or the secret compared (the key), writes nothing, answers
 * FAILURE, and is counted and logged (kind `provision`, status/failures.ts) with the address and the key's
 * profile, never the secret.
 */
import { timingSafeEqual } from 'node:crypto';
import type { DeviceDeps } from './deps.js';
import { OutpostError } from '../errors.js';
import { isJsonObject } from '../ingest/json.js';
import { parseBody } from '../ingest/payload.js';
import { kvToString } from '../model/kv.js';
import type { DeviceProfileRecord, ProvisionType } from '../store/profile-records.js';
import { quoted } from '../status/failures.js';
import { DeviceProfileStore } from '../store/profiles.js';
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

const NOT_FOUND: ProvisionAnswer = Object.freeze({ status: 'NOT_FOUND', errorMsg: 'Provision data was not found!' });
const TOO_MANY: ProvisionAnswer = Object.freeze({
  status: 'FAILURE',
  errorMsg: 'Too many provisioning requests, try again later!',
});
const TOO_MANY_DEVICES: ProvisionAnswer = Object.freeze({
  status: 'FAILURE',
  errorMsg: 'Too many devices provisioned with this key, try again later!',
});

/**
 * An answer given before the request proved it holds the key's secret (a wrong key or secret, a refusal of the
 * rate limits): a CoAP listener answers such a datagram with no more bytes than it carried.
 */
export const unproven = (a: ProvisionAnswer): boolean => a === NOT_FOUND || a === TOO_MANY;

/** TB's server attribute marking a pre-provisioned device as handed out */
const PROVISION_STATE = 'provisionState';
const PROVISIONED = 'provisioned';

/** The profile and strategy a key and secret open, or undefined (NOT_FOUND). */
function targetOf(
  s: Pick<DeviceDeps, 'config' | 'entities' | 'env'>,
  key: string,
  secret: string,
): { profile: DeviceProfileRecord; strategy: ProvisionType } | undefined {
  if (key === '' || secret === '') return undefined;
  const profiles = new DeviceProfileStore(s.entities, s.env);
  const owner = profiles.byProvisionKey(key);
  if (owner !== undefined && owner.provisionDeviceSecret !== null) {
    if (owner.provisionType === 'DISABLED' || !sameSecret(secret, owner.provisionDeviceSecret)) return undefined;
    return { profile: owner, strategy: owner.provisionType };
  }
  const conf = s.config.provision;
  if (conf.key === '' || !sameSecret(key, conf.key) || !sameSecret(secret, conf.secret)) return undefined;
  return { profile: profiles.defaultProfile(), strategy: 'ALLOW_CREATE_NEW_DEVICES' };
}

type ProvisionServices = Pick<
  DeviceDeps,
  'config' | 'entities' | 'env' | 'attributes' | 'now' | 'failures' | 'provisionGuard'
>;

/**
 * One provisioning request from `address`: throws BAD_JSON or BAD_PAYLOAD when its body is not a JSON object
 * (after the address was counted); every other outcome is an answer.
 */
export async function provisionDevice(s: ProvisionServices, raw: Buffer, address: string): Promise<ProvisionAnswer> {
  const guard = s.provisionGuard;
  const t = s.now();
  if (guard !== undefined && !guard.address(address, t)) return refused(s, address, 'too many from this address');
  const body = parseBody(raw);
  if (!isJsonObject(body)) throw new OutpostError('BAD_PAYLOAD', 'provisioning request must be a JSON object');
  const str = (k: string): string => {
    const v = body[k];
    return typeof v === 'string' ? v : '';
  };
  const key = str('provisionDeviceKey');
  const owner = guard === undefined ? undefined : keyOwner(s, key);
  if (guard !== undefined && owner !== undefined && !guard.key(owner.id, t))
    return refused(s, address, `too many for the key of ${owner.name}`);
  const target = targetOf(s, key, str('provisionDeviceSecret'));
  if (target === undefined) return NOT_FOUND;
  const name = str('deviceName').trim();
  if (name === '') return { status: 'FAILURE', errorMsg: 'Device name is required!' };
  const existing = s.entities.byName('DEVICE', name);
  if (target.strategy === 'CHECK_PRE_PROVISIONED_DEVICES') {
    if (existing?.entityType !== 'DEVICE' || existing.deviceProfileId !== target.profile.id)
      return { status: 'FAILURE', errorMsg: 'Failed to find pre provisioned device!' };
    const state = s.attributes.get(existing.id, 'SERVER_SCOPE', [PROVISION_STATE])[0]?.value;
    if (state !== undefined && kvToString(state) !== PROVISIONED)
      return { status: 'FAILURE', errorMsg: 'The device could not be provisioned in its current state!' };
    await s.attributes.save(
      'DEVICE',
      existing.id,
      'SERVER_SCOPE',
      [[PROVISION_STATE, { type: 'STRING', v: PROVISIONED }]],
      s.now(),
    );
    return { credentialsType: 'ACCESS_TOKEN', credentialsValue: existing.token, status: 'SUCCESS' };
  }
  if (existing !== undefined) {
    return { status: 'FAILURE', errorMsg: 'Failed to provision device: device with this name already exists!' };
  }
  if (guard !== undefined && owner !== undefined && !guard.mayCreate(owner.id, t)) {
    refused(s, address, `the key of ${owner.name} created its hourly share of devices`);
    return TOO_MANY_DEVICES;
  }
  const token = str('token');
  try {
    const d = await s.entities.createDevice({
      name,
      deviceProfileId: target.profile.id,
      token: token || undefined,
      customerId: NULL_UUID,
      // TB 3.8+: `"gateway": true` provisions a gateway
      gateway: body['gateway'] === true,
    });
    if (owner !== undefined) guard?.createdOne(owner.id, t);
    return { credentialsType: 'ACCESS_TOKEN', credentialsValue: d.token, status: 'SUCCESS' };
  } catch (err) {
    // a concurrent request created the same name, or the requested token is taken
    return { status: 'FAILURE', errorMsg: `Failed to provision device: ${(err as Error).message}` };
  }
}

/**
 * What a key belongs to, by id and by a name fit for a log line (never the key or the secret): a profile, or
 * the config's provision.key; undefined for a key nothing owns (NOT_FOUND, limited per address only).
 */
function keyOwner(
  s: Pick<DeviceDeps, 'config' | 'entities' | 'env'>,
  key: string,
): { id: string; name: string } | undefined {
  if (key === '') return undefined;
  const profile = new DeviceProfileStore(s.entities, s.env).byProvisionKey(key);
  if (profile !== undefined && profile.provisionDeviceSecret !== null)
    return { id: profile.id, name: `profile ${quoted(profile.name)}` };
  const conf = s.config.provision.key;
  return conf !== '' && sameSecret(key, conf) ? { id: 'provision.key', name: 'provision.key' } : undefined;
}

function refused(s: Pick<DeviceDeps, 'failures'>, address: string, why: string): ProvisionAnswer {
  s.failures?.note('provision', `provision: refused a request from ${address}: ${why}`, `${address} (${why})`);
  return TOO_MANY;
}
