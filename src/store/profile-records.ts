/**
 * Device profiles as records (docs/api.md "Device profiles"): what one holds, its name and provision-key index
 * entries, and the in-transaction steps the entity store takes when it creates a device (find or create the
 * profile its type names, as ThingsBoard's `findOrCreateDeviceProfile` does) and when it opens a store that
 * predates profiles. Every function here runs inside the caller's LMDB write transaction, or only reads.
 */
import { randomUUID } from 'node:crypto';
import { OutpostError } from '../errors.js';
import type { EntityId, TenantId } from '../types.js';
import type { StoreEnv } from './env.js';
import { checkName } from './names.js';

export const PROVISION_TYPES = ['DISABLED', 'ALLOW_CREATE_NEW_DEVICES', 'CHECK_PRE_PROVISIONED_DEVICES'] as const;
export type ProvisionType = (typeof PROVISION_TYPES)[number];
export const TRANSPORT_TYPES = ['DEFAULT', 'MQTT', 'COAP', 'LWM2M', 'SNMP'] as const;
export type TransportType = (typeof TRANSPORT_TYPES)[number];

export interface DeviceProfileRecord {
  readonly entityType: 'DEVICE_PROFILE';
  readonly id: EntityId;
  readonly createdTime: number;
  readonly tenantId: TenantId;
  readonly name: string;
  readonly description: string | null;
  readonly image: string | null;
  readonly transportType: TransportType;
  readonly provisionType: ProvisionType;
  /** unique in the tenant when set (the provision-key index) */
  readonly provisionDeviceKey: string | null;
  readonly provisionDeviceSecret: string | null;
  /** TB's `profileData` as the client gave it, without `provisionConfiguration` (rebuilt from the two fields above) */
  readonly profileData: Readonly<Record<string, unknown>>;
}

/** meta key: the id of the tenant's default profile (absent: a store that predates profiles, not yet migrated) */
export const DEFAULT_PROFILE_META = 'defaultDeviceProfileId';
export const DEFAULT_PROFILE_NAME = 'default';

/**
 * Refuses (400) a device type or profile name that could not be a profile's name: blank, or not a name by
 * names.ts's rule (over 255 characters, control characters). Called before the write transaction, so a refusal
 * changes nothing.
 */
export function checkProfileName(name: string | undefined, what = 'Device profile name', field = 'name'): void {
  if (name === undefined) return;
  if (name.trim() === '') throw new OutpostError('BAD_PARAM', `${what} should be specified!`);
  checkName(field, name);
}

export const profileNameKey = (tenantId: string, name: string): string[] => [tenantId, 'DEVICE_PROFILE', name];
export const provisionKeyKey = (tenantId: string, key: string): string[] => [tenantId, 'PROVISION_KEY', key];

/** TB's profile data of a profile created by name: default device configuration and transport, no alarms. */
export function defaultProfileData(): Record<string, unknown> {
  return { configuration: { type: 'DEFAULT' }, transportConfiguration: { type: 'DEFAULT' }, alarms: null };
}

export function newProfileRecord(tenantId: TenantId, name: string): DeviceProfileRecord {
  return {
    entityType: 'DEVICE_PROFILE',
    id: randomUUID() as EntityId,
    createdTime: Date.now(),
    tenantId,
    name,
    description: null,
    image: null,
    transportType: 'DEFAULT',
    provisionType: 'DISABLED',
    provisionDeviceKey: null,
    provisionDeviceSecret: null,
    profileData: defaultProfileData(),
  };
}

export function readProfile(env: StoreEnv, id: string): DeviceProfileRecord | undefined {
  const r = env.entities.get(id) as { entityType?: unknown } | undefined;
  return r?.entityType === 'DEVICE_PROFILE' ? (r as DeviceProfileRecord) : undefined;
}

export function profileByName(env: StoreEnv, tenantId: string, name: string): DeviceProfileRecord | undefined {
  const id = env.names.get(profileNameKey(tenantId, name));
  return id === undefined ? undefined : readProfile(env, id);
}

export function defaultProfile(env: StoreEnv): DeviceProfileRecord | undefined {
  const id = env.meta.get(DEFAULT_PROFILE_META);
  return typeof id === 'string' ? readProfile(env, id) : undefined;
}

/** Writes a new profile and its index entries (in the caller's transaction; the name must be free). */
export function insertProfileTx(env: StoreEnv, rec: DeviceProfileRecord): void {
  void env.entities.put(rec.id, rec);
  void env.names.put(profileNameKey(rec.tenantId, rec.name), rec.id);
  if (rec.provisionDeviceKey !== null)
    void env.names.put(provisionKeyKey(rec.tenantId, rec.provisionDeviceKey), rec.id);
}

/** The profile named `name`, created with TB's defaults when there is none (in the caller's transaction). */
export function findOrCreateProfileTx(env: StoreEnv, tenantId: TenantId, name: string): DeviceProfileRecord {
  const existing = profileByName(env, tenantId, name);
  if (existing !== undefined) return existing;
  const rec = newProfileRecord(tenantId, name);
  insertProfileTx(env, rec);
  return rec;
}

/**
 * The profile a new or updated device gets, as TB's DeviceServiceImpl picks it: the one its `deviceProfileId`
 * names (undefined when there is no such profile), else the one its `type` names (found or created), else the
 * tenant's default.
 */
export function profileForDeviceTx(
  env: StoreEnv,
  tenantId: TenantId,
  want: { readonly deviceProfileId?: string | undefined; readonly type?: string | undefined },
): DeviceProfileRecord | undefined {
  if (want.deviceProfileId !== undefined) {
    const p = readProfile(env, want.deviceProfileId);
    return p?.tenantId === tenantId ? p : undefined;
  }
  if (want.type !== undefined && want.type.trim() !== '') return findOrCreateProfileTx(env, tenantId, want.type);
  return defaultProfile(env) ?? findOrCreateProfileTx(env, tenantId, DEFAULT_PROFILE_NAME);
}

/**
 * What an update of a device changes of its profile: nothing (undefined) when it names neither a profile nor a
 * type, null when the profile it names does not exist, else the profile's id and name as its type.
 */
export function retypeDeviceTx(
  env: StoreEnv,
  tenantId: TenantId,
  patch: { readonly deviceProfileId?: string | undefined; readonly type?: string | undefined },
): { type: string; deviceProfileId: EntityId } | null | undefined {
  if (patch.deviceProfileId === undefined && patch.type === undefined) return undefined;
  const p = profileForDeviceTx(env, tenantId, patch);
  return p === undefined ? null : { type: p.name, deviceProfileId: p.id };
}

/**
 * Gives a store profiles (in the caller's transaction): a default profile named `default`, then every device
 * without a profile gets the one its type names (created when missing). A no-op once the default exists.
 * Returns whether anything was written.
 */
export function ensureDefaultProfileTx(env: StoreEnv, tenantId: TenantId): boolean {
  if (defaultProfile(env) !== undefined) return false;
  const def = findOrCreateProfileTx(env, tenantId, DEFAULT_PROFILE_NAME);
  void env.meta.put(DEFAULT_PROFILE_META, def.id);
  // read first, write after: the scan never meets a record this loop wrote
  const devices: Array<[string, Record<string, unknown>]> = [];
  for (const { key, value } of env.entities.getRange({})) {
    const d = value as Record<string, unknown>;
    if (d['entityType'] === 'DEVICE' && typeof d['deviceProfileId'] !== 'string') devices.push([key as string, d]);
  }
  for (const [id, d] of devices) {
    const type = typeof d['type'] === 'string' && d['type'].trim() !== '' ? d['type'] : DEFAULT_PROFILE_NAME;
    const profile = findOrCreateProfileTx(env, tenantId, type);
    void env.entities.put(id, { ...d, type: profile.name, deviceProfileId: profile.id });
  }
  return true;
}
