/**
 * Device profiles (docs/api.md "Device profiles"): create, update, delete, the default, and the lookups
 * provisioning needs. A device's `type` is its profile's name, so renaming a profile renames its devices' type
 * in the same transaction (TB's DeviceProfileServiceImpl does). Stateless over the entity store: records are
 * read through its cache and written in its transactions.
 */
import { OutpostError } from '../errors.js';
import type { EntityId } from '../types.js';
import type { DeviceRecord, EntityStore } from './entities.js';
import type { StoreEnv } from './env.js';
import { MAX_NAME_LENGTH } from './names.js';
import {
  DEFAULT_PROFILE_META,
  type DeviceProfileRecord,
  PROVISION_TYPES,
  type ProvisionType,
  TRANSPORT_TYPES,
  type TransportType,
  checkProfileName,
  defaultProfile,
  insertProfileTx,
  newProfileRecord,
  profileNameKey,
  provisionKeyKey,
  readProfile,
} from './profile-records.js';

/** A profile as a client sends it (`POST /api/deviceProfile`), already checked for JSON types. */
export interface ProfileInput {
  readonly id?: string | undefined;
  readonly name?: string | undefined;
  readonly description?: string | null | undefined;
  readonly image?: string | null | undefined;
  readonly transportType?: string | undefined;
  readonly provisionType?: string | undefined;
  readonly provisionDeviceKey?: string | null | undefined;
  readonly profileData?: Readonly<Record<string, unknown>> | undefined;
}

const notFound = (id: string): OutpostError =>
  new OutpostError('ENTITY_NOT_FOUND', `Device profile with id [${id}] is not found`);

function oneOf<T extends string>(allowed: readonly T[], v: string | undefined, what: string, dflt: T): T {
  if (v === undefined) return dflt;
  if (!(allowed as readonly string[]).includes(v))
    throw new OutpostError('BAD_PARAM', `${what} must be one of ${allowed.join(', ')}, got '${v}'`);
  return v as T;
}

/**
 * The provisioning part of a profile: TB keeps the strategy and the secret in
 * `profileData.provisionConfiguration` and the key beside it; the top-level `provisionType` is its echo.
 */
function provisioningOf(
  input: ProfileInput,
  prev: DeviceProfileRecord | undefined,
): { provisionType: ProvisionType; key: string | null; secret: string | null } {
  const conf = input.profileData?.['provisionConfiguration'];
  if (conf !== undefined && conf !== null && (typeof conf !== 'object' || Array.isArray(conf)))
    throw new OutpostError('BAD_PARAM', '"profileData.provisionConfiguration" must be a JSON object');
  const c = (conf ?? {}) as Record<string, unknown>;
  const confType = typeof c['type'] === 'string' ? c['type'] : undefined;
  const provisionType = oneOf(
    PROVISION_TYPES,
    confType ?? input.provisionType,
    'provisionType',
    conf === undefined && prev !== undefined ? prev.provisionType : 'DISABLED',
  );
  if (provisionType === 'DISABLED') return { provisionType, key: null, secret: null };
  const secretRaw = conf === undefined ? prev?.provisionDeviceSecret : c['provisionDeviceSecret'];
  const key = input.provisionDeviceKey === undefined ? (prev?.provisionDeviceKey ?? null) : input.provisionDeviceKey;
  if (typeof key !== 'string' || key.trim() === '')
    throw new OutpostError('BAD_PARAM', 'Provision device key should be specified!');
  if (key.length > MAX_NAME_LENGTH || (typeof secretRaw === 'string' && secretRaw.length > MAX_NAME_LENGTH))
    throw new OutpostError(
      'BAD_PARAM',
      `Provision device key and secret must be at most ${MAX_NAME_LENGTH} characters`,
    );
  if (typeof secretRaw !== 'string' || secretRaw.trim() === '')
    throw new OutpostError('BAD_PARAM', 'Provision device secret should be specified!');
  return { provisionType, key, secret: secretRaw };
}

export class DeviceProfileStore {
  constructor(
    private readonly entities: EntityStore,
    private readonly env: StoreEnv,
  ) {}

  get(id: string): DeviceProfileRecord | undefined {
    const r = this.entities.get(id);
    return r?.entityType === 'DEVICE_PROFILE' ? r : undefined;
  }

  require(id: string): DeviceProfileRecord {
    const p = this.get(id);
    if (p === undefined) throw notFound(id);
    return p;
  }

  defaultProfile(): DeviceProfileRecord {
    const p = defaultProfile(this.env);
    if (p === undefined) throw new OutpostError('STORE_FAILED', 'the store has no default device profile');
    return p;
  }

  isDefault(p: DeviceProfileRecord): boolean {
    return this.env.meta.get(DEFAULT_PROFILE_META) === p.id;
  }

  list(): DeviceProfileRecord[] {
    return this.entities.list('DEVICE_PROFILE');
  }

  /** The profile whose `provisionDeviceKey` is `key` (whatever its strategy). */
  byProvisionKey(key: string): DeviceProfileRecord | undefined {
    const t = this.entities.requireTenant();
    const id = this.env.names.get(provisionKeyKey(t.id, key));
    return id === undefined ? undefined : this.get(id);
  }

  /** Creates (no id) or updates a profile; a name or provision key taken by another profile → 400. */
  async save(input: ProfileInput): Promise<DeviceProfileRecord> {
    const t = this.entities.requireTenant();
    const prev = input.id === undefined ? undefined : this.require(input.id);
    const name = input.name ?? prev?.name ?? '';
    checkProfileName(name);
    const prov = provisioningOf(input, prev);
    const { provisionConfiguration: _dropped, ...data } = input.profileData ?? prev?.profileData ?? {};
    const base = prev ?? newProfileRecord(t.tenantId, name);
    const next: DeviceProfileRecord = {
      ...base,
      name,
      description: input.description === undefined ? base.description : input.description,
      image: input.image === undefined ? base.image : input.image,
      transportType: oneOf<TransportType>(TRANSPORT_TYPES, input.transportType, 'transportType', base.transportType),
      provisionType: prov.provisionType,
      provisionDeviceKey: prov.key,
      provisionDeviceSecret: prov.secret,
      profileData: data,
    };
    const outcome = await this.entities.transaction(() => {
      const env = this.env;
      if (prev !== undefined && readProfile(env, prev.id) === undefined) return 'gone' as const;
      const byName = env.names.get(profileNameKey(t.id, name));
      if (byName !== undefined && byName !== next.id) return 'name' as const;
      if (next.provisionDeviceKey !== null) {
        const byKey = env.names.get(provisionKeyKey(t.id, next.provisionDeviceKey));
        if (byKey !== undefined && byKey !== next.id) return 'key' as const;
      }
      if (prev === undefined) {
        insertProfileTx(env, next);
        return next;
      }
      if (prev.name !== next.name) {
        void env.names.remove(profileNameKey(t.id, prev.name));
        void env.names.put(profileNameKey(t.id, next.name), next.id);
        this.renameDevicesTx(next);
      }
      if (prev.provisionDeviceKey !== next.provisionDeviceKey) {
        if (prev.provisionDeviceKey !== null) void env.names.remove(provisionKeyKey(t.id, prev.provisionDeviceKey));
        if (next.provisionDeviceKey !== null)
          void env.names.put(provisionKeyKey(t.id, next.provisionDeviceKey), next.id);
      }
      void env.entities.put(next.id, next);
      return next;
    });
    if (outcome === 'gone') throw notFound(next.id);
    if (outcome === 'name') throw new OutpostError('BAD_PARAM', 'Device profile with such name already exists!');
    if (outcome === 'key')
      throw new OutpostError('BAD_PARAM', 'Device profile with such provision device key already exists!');
    await this.env.flushed();
    return outcome;
  }

  /** Every device of the profile takes its (new) name as its type. */
  private renameDevicesTx(p: DeviceProfileRecord): void {
    const renamed: DeviceRecord[] = [];
    for (const { value } of this.env.entities.getRange({})) {
      const d = value as DeviceRecord;
      if (d.entityType === 'DEVICE' && d.deviceProfileId === p.id) renamed.push({ ...d, type: p.name });
    }
    for (const d of renamed) void this.env.entities.put(d.id, d);
  }

  /** Deletes a profile: 404 unknown; 400 for the default or while a device uses it (TB's messages). */
  async delete(id: string): Promise<void> {
    const outcome = await this.entities.transaction(() => {
      const p = readProfile(this.env, id);
      if (p === undefined) return 'gone' as const;
      if (this.env.meta.get(DEFAULT_PROFILE_META) === id) return 'default' as const;
      for (const { value } of this.env.entities.getRange({})) {
        const d = value as DeviceRecord;
        if (d.entityType === 'DEVICE' && d.deviceProfileId === id) return 'used' as const;
      }
      void this.env.entities.remove(id);
      void this.env.names.remove(profileNameKey(p.tenantId, p.name));
      if (p.provisionDeviceKey !== null) void this.env.names.remove(provisionKeyKey(p.tenantId, p.provisionDeviceKey));
      return 'ok' as const;
    });
    if (outcome === 'gone') throw notFound(id);
    if (outcome === 'default') throw new OutpostError('BAD_PARAM', 'Deletion of Default Device Profile is prohibited!');
    if (outcome === 'used')
      throw new OutpostError('BAD_PARAM', 'The device profile referenced by the devices cannot be deleted!');
    await this.env.flushed();
  }

  /** Makes `id` the tenant's default profile (devices created without a type or profile get it). */
  async setDefault(id: string): Promise<DeviceProfileRecord> {
    const p = await this.entities.transaction(() => {
      const found = readProfile(this.env, id);
      if (found !== undefined) void this.env.meta.put(DEFAULT_PROFILE_META, found.id as EntityId);
      return found;
    });
    if (p === undefined) throw notFound(id);
    await this.env.flushed();
    return p;
  }
}
