/**
 * Tenants, customers, devices, assets and users (docs/cli.md, docs/api.md). Written by the daemon's REST API and by
 * the admin CLI from another process; every check-then-write runs inside one LMDB write transaction, which
 * holds LMDB's cross-process writer lock, so two processes can never create the same name twice.
 */
import { randomUUID } from 'node:crypto';
import { OutpostError } from '../errors.js';
import { type AccessToken, type CustomerId, type EntityId, NULL_UUID, type TenantId, type UserId } from '../types.js';
import { type ResolvedCredentials, sameCredentials } from './credentials.js';
import type { StoreEnv } from './env.js';
import { queuePurge } from './background/purge.js';
import { checkLength, checkName, lookupable } from './names.js';
import * as profileTx from './profile-records.js';
import { GATEWAY_CREATED, putRelationTx } from './relations.js';
import { deleteOwnedTx } from './owned.js';

import {
  type AdditionalInfoPatch,
  type AssetRecord,
  type CustomerRecord,
  type DeviceRecord,
  type EntityRecord,
  type NewDevice,
  type NewUser,
  type TenantRecord,
  type UserRecord,
  noCustomer,
  randomAccessToken,
  typeTitle,
  withAdditionalInfo,
} from './entity-records.js';

export * from './entity-records.js';
export * from './paging.js';

const nameKey = (tenantId: string, type: string, name: string): string[] => [tenantId, type, name];

/**
 * meta key rewritten by every EntityStore write transaction, in any process (daemon or CLI), in the same
 * transaction as the change: a reader that sees the same value sees the same entities, tokens and users.
 */
export const ENTITIES_GEN = 'entitiesGen';

/** entries per decoded-record cache (by id, by token); the oldest is dropped beyond this */
export const ENTITY_CACHE_SIZE = 10_000;

export class EntityStore {
  /**
   * Decoded records by id and devices by token, valid while meta[ENTITIES_GEN] reads back as `gen`: one small
   * LMDB read per lookup instead of a read and a msgpack decode per table. Misses are not cached. Records are
   * frozen because they are shared between requests.
   */
  private readonly byId = new Map<string, EntityRecord>();
  private readonly byToken = new Map<string, DeviceRecord>();
  private gen: unknown = undefined;
  private genKnown = false;
  /**
   * true from a generation check until the end of the current event-loop iteration (setImmediate): later
   * lookups in the same iteration skip the read. LMDB's read snapshot itself is kept for at least a timer
   * tick (lmdb-js renews it in a setTimeout), so this adds no staleness beyond what a raw read has.
   */
  private genCheckedThisTurn = false;
  private readonly endTurn = (): void => {
    this.genCheckedThisTurn = false;
  };
  /** > 0 while a write transaction's callback runs: reads then go to the write transaction, never the cache */
  private inTxn = 0;

  constructor(private readonly env: StoreEnv) {}

  /**
   * Runs `fn` in one LMDB write transaction that also bumps ENTITIES_GEN, so every process's caches drop
   * what they hold once the transaction commits.
   */
  private async writeTxn<T>(fn: () => T): Promise<T> {
    try {
      return await this.env.root.transaction(() => {
        this.inTxn++;
        try {
          const out = fn();
          const g = this.env.meta.get(ENTITIES_GEN);
          void this.env.meta.put(ENTITIES_GEN, (typeof g === 'number' ? g : 0) + 1);
          return out;
        } finally {
          this.inTxn--;
        }
      });
    } finally {
      this.invalidate();
    }
  }

  /** One write transaction for stores kept beside this one in the same tables (profiles.ts). */
  transaction<T>(fn: () => T): Promise<T> {
    return this.writeTxn(fn);
  }

  private invalidate(): void {
    this.byId.clear();
    this.byToken.clear();
    this.genKnown = false;
    this.genCheckedThisTurn = false;
  }

  /** Drops the caches when another transaction (this process or another) changed entities since they were filled. */
  private checkGen(): void {
    if (this.genCheckedThisTurn) return;
    this.genCheckedThisTurn = true;
    setImmediate(this.endTurn);
    const g = this.env.meta.get(ENTITIES_GEN);
    if (this.genKnown && g === this.gen) return;
    this.byId.clear();
    this.byToken.clear();
    this.gen = g;
    this.genKnown = true;
  }

  private remember<V>(map: Map<string, V>, key: string, v: V): void {
    if (map.size >= ENTITY_CACHE_SIZE) {
      const oldest = map.keys().next().value;
      if (oldest !== undefined) map.delete(oldest);
    }
    map.set(key, v);
  }

  /** get() without the generation check; the caller has just made it. */
  private cachedGet(id: string): EntityRecord | undefined {
    let r = this.byId.get(id);
    if (r === undefined) {
      r = this.env.entities.get(id) as EntityRecord | undefined;
      if (r !== undefined) this.remember(this.byId, id, Object.freeze(r));
    }
    return r;
  }

  /** The gateway's one tenant, created on first start (docs/cli.md). */
  async ensureTenant(): Promise<{ tenant: TenantRecord; created: boolean }> {
    const existing = this.tenant();
    if (existing) {
      // a store from before device profiles gets its default profile, its devices' types become profiles
      if (profileTx.defaultProfile(this.env) === undefined) {
        await this.writeTxn(() => profileTx.ensureDefaultProfileTx(this.env, existing.tenantId));
        await this.env.flushed();
      }
      return { tenant: existing, created: false };
    }
    const id = randomUUID() as EntityId;
    const rec: TenantRecord = {
      entityType: 'TENANT',
      id,
      tenantId: id as string as TenantId,
      createdTime: Date.now(),
      title: 'Default tenant',
    };
    const created = await this.writeTxn(() => {
      if (this.env.meta.get('tenantId') !== undefined) return false;
      void this.env.entities.put(rec.id, rec);
      void this.env.meta.put('tenantId', rec.id);
      profileTx.ensureDefaultProfileTx(this.env, rec.tenantId);
      return true;
    });
    await this.env.flushed();
    const t = this.tenant();
    if (!t) throw new OutpostError('STORE_FAILED', 'creating the default tenant failed');
    return { tenant: t, created };
  }

  tenant(): TenantRecord | undefined {
    const id = this.env.meta.get('tenantId') as string | undefined;
    return id === undefined ? undefined : (this.env.entities.get(id) as TenantRecord | undefined);
  }

  requireTenant(): TenantRecord {
    const t = this.tenant();
    if (!t)
      throw new OutpostError(
        'STORE_FAILED',
        'the store has no tenant yet: start `outpost serve` once, or run any CLI command',
      );
    return t;
  }

  /** A fresh view: writes committed by any process are seen as soon as LMDB's read snapshot shows them. */
  get(id: string): EntityRecord | undefined {
    if (!lookupable(id)) return undefined;
    if (this.inTxn > 0) return this.env.entities.get(id) as EntityRecord | undefined;
    this.checkGen();
    return this.cachedGet(id);
  }

  device(id: string): DeviceRecord | undefined {
    const r = this.get(id);
    return r?.entityType === 'DEVICE' ? r : undefined;
  }

  customer(id: string): CustomerRecord | undefined {
    const r = this.get(id);
    return r?.entityType === 'CUSTOMER' ? r : undefined;
  }

  user(id: string): UserRecord | undefined {
    const r = this.get(id);
    return r?.entityType === 'USER' ? r : undefined;
  }

  /** The device an access token belongs to (not MQTT Basic or X.509 ids); as fresh as get(), so CLI changes show at once. */
  deviceByToken(token: string): DeviceRecord | undefined {
    const d = this.deviceByCredentialsId(token);
    return d?.credentials === undefined ? d : undefined;
  }

  /** The device whose credentialsId (token, MQTT Basic id or certificate hash) this is: one read, or a cache hit. */
  deviceByCredentialsId(token: string): DeviceRecord | undefined {
    if (!lookupable(token)) return undefined;
    if (this.inTxn > 0) {
      const id = this.env.tokens.get(token);
      return id === undefined ? undefined : this.device(id);
    }
    this.checkGen();
    const hit = this.byToken.get(token);
    if (hit !== undefined) return hit;
    const id = this.env.tokens.get(token);
    if (id === undefined) return undefined;
    const r = this.cachedGet(id);
    if (r?.entityType !== 'DEVICE') return undefined;
    this.remember(this.byToken, token, r);
    return r;
  }

  userByEmail(email: string): UserRecord | undefined {
    if (!lookupable(email)) return undefined;
    const id = this.env.users.get(email.toLowerCase());
    return id === undefined ? undefined : this.user(id);
  }

  byName(type: 'DEVICE' | 'ASSET' | 'CUSTOMER', name: string): EntityRecord | undefined {
    const t = this.requireTenant();
    if (!lookupable(name)) return undefined;
    const id = this.env.names.get(nameKey(t.id, type, name));
    return id === undefined ? undefined : this.get(id);
  }

  /** Whether a device or asset may be given this customerId: none, the null UUID (unassigned) or a customer's. */
  private customerExists(customerId: string | undefined): boolean {
    return customerId === undefined || customerId === NULL_UUID || this.customer(customerId) !== undefined;
  }

  /** A customer by UUID or by title (CLI `--customer ID|TITLE`). */
  findCustomer(idOrTitle: string): CustomerRecord | undefined {
    const byId = this.customer(idOrTitle);
    if (byId) return byId;
    const r = this.byName('CUSTOMER', idOrTitle);
    return r?.entityType === 'CUSTOMER' ? r : undefined;
  }

  /** Every entity of a type in the tenant, sorted by creation time then id. Gateway scale: a scan is fine. */
  list<T extends EntityRecord['entityType']>(
    type: T,
    filter?: (r: Extract<EntityRecord, { entityType: T }>) => boolean,
  ): Array<Extract<EntityRecord, { entityType: T }>> {
    const out: Array<Extract<EntityRecord, { entityType: T }>> = [];
    for (const { value } of this.env.entities.getRange({})) {
      const r = value as EntityRecord;
      if (r.entityType !== type) continue;
      const typed = r as Extract<EntityRecord, { entityType: T }>;
      if (!filter || filter(typed)) out.push(typed);
    }
    return out.sort((a, b) => a.createdTime - b.createdTime || (a.id < b.id ? -1 : 1));
  }

  async createCustomer(title: string): Promise<CustomerRecord> {
    if (typeof title !== 'string' || title.trim() === '')
      throw new OutpostError('BAD_PARAM', 'Customer title should be specified!');
    checkName('title', title);
    const t = this.requireTenant();
    const rec: CustomerRecord = {
      entityType: 'CUSTOMER',
      id: randomUUID() as EntityId,
      tenantId: t.id as string as TenantId,
      createdTime: Date.now(),
      title,
    };
    const ok = await this.writeTxn(() => {
      if (this.env.names.get(nameKey(t.id, 'CUSTOMER', title)) !== undefined) return false;
      void this.env.entities.put(rec.id, rec);
      void this.env.names.put(nameKey(t.id, 'CUSTOMER', title), rec.id);
      return true;
    });
    if (!ok) throw new OutpostError('BAD_PARAM', 'Customer with such title already exists!');
    await this.env.flushed();
    return rec;
  }

  async createDevice(d: NewDevice): Promise<DeviceRecord> {
    if (typeof d.name !== 'string' || d.name.trim() === '')
      throw new OutpostError('BAD_PARAM', 'Device name should be specified!');
    checkName('name', d.name);
    checkLength('label', d.label);
    if (d.token !== undefined && (d.token === '' || d.token.length > 255 || /[\s/?#]/.test(d.token))) {
      throw new OutpostError(
        'BAD_PARAM',
        'Device access token must be 1..255 characters without spaces, "/", "?" or "#"',
      );
    }
    if (d.type !== '') profileTx.checkProfileName(d.type, 'Device type', 'type');
    if (!this.customerExists(d.customerId)) throw noCustomer('DEVICE');
    const t = this.requireTenant();
    let rec: DeviceRecord = {
      entityType: 'DEVICE',
      id: randomUUID() as EntityId,
      tenantId: t.id as string as TenantId,
      createdTime: Date.now(),
      customerId: d.customerId ?? NULL_UUID,
      name: d.name,
      type: d.type ?? 'default',
      label: d.label ?? null,
      deviceProfileId: '' as EntityId,
      token: (d.credentials?.credentialsId ?? d.token ?? randomAccessToken()) as AccessToken,
      ...(d.credentials?.stored !== undefined ? { credentials: d.credentials.stored } : {}),
      ...(d.gateway === true ? { gateway: true } : {}),
      ...(d.gatewayId !== undefined ? { gatewayId: d.gatewayId } : {}),
      ...(d.additionalInfoJson !== undefined ? { additionalInfoJson: d.additionalInfoJson } : {}),
    };
    const outcome = await this.writeTxn(() => {
      if (this.env.names.get(nameKey(t.id, 'DEVICE', d.name)) !== undefined) return 'name';
      if (this.env.tokens.get(rec.token) !== undefined) return 'token';
      const profile = profileTx.profileForDeviceTx(this.env, rec.tenantId, d);
      if (profile === undefined) return 'profile';
      rec = { ...rec, type: profile.name, deviceProfileId: profile.id };
      void this.env.entities.put(rec.id, rec);
      void this.env.names.put(nameKey(t.id, 'DEVICE', d.name), rec.id);
      void this.env.tokens.put(rec.token, rec.id);
      if (rec.gatewayId !== undefined) createdByGatewayTx(this.env, rec.gatewayId, rec.id);
      return 'ok';
    });
    if (outcome === 'name') throw new OutpostError('BAD_PARAM', 'Device with such name already exists!');
    if (outcome === 'token') throw new OutpostError('CREDENTIALS_TAKEN');
    if (outcome === 'profile') throw new OutpostError('BAD_PARAM', "Can't assign non-existent device profile!");
    await this.env.flushed();
    return rec;
  }

  /**
   * Gives a device new credentials (docs/api.md "Device credentials"): its old credentialsId leaves the index in
   * the same transaction, so the old token or id stops working at once. `changed` is false when they were
   * already these (nothing is written). A credentialsId of another device → 400.
   */
  async setCredentials(id: string, next: ResolvedCredentials): Promise<{ device: DeviceRecord; changed: boolean }> {
    const current = this.device(id);
    // the same credentials posted back: not even a transaction
    if (current?.token === next.credentialsId && sameCredentials(current.credentials, next.stored))
      return { device: current, changed: false };
    const outcome = await this.writeTxn(() => {
      const r = this.device(id);
      if (r === undefined) return 'entity' as const;
      const owner = this.env.tokens.get(next.credentialsId);
      if (owner !== undefined && owner !== id) return 'taken' as const;
      const { credentials: _old, ...rest } = r;
      const updated: DeviceRecord = {
        ...rest,
        token: next.credentialsId as AccessToken,
        ...(next.stored !== undefined ? { credentials: next.stored } : {}),
      };
      void this.env.tokens.remove(r.token);
      void this.env.tokens.put(next.credentialsId, id);
      void this.env.entities.put(id, updated);
      return { device: updated, changed: true };
    });
    if (outcome === 'entity') throw new OutpostError('ENTITY_NOT_FOUND', `Device with id [${id}] is not found`);
    if (outcome === 'taken') throw new OutpostError('CREDENTIALS_TAKEN');
    await this.env.flushed();
    return outcome;
  }

  /**
   * Makes a device the sub-device of `gatewayId` (the MQTT Gateway API reusing a device of the name it gave,
   * docs/mqtt.md "Access"); its customer, profile and credentials stay. undefined when there is no such device
   * or it is a gateway itself: one gateway never acts for another.
   */
  async setGateway(id: string, gatewayId: EntityId): Promise<DeviceRecord | undefined> {
    const current = this.device(id);
    if (current === undefined || current.gateway === true) return undefined;
    if (current.gatewayId === gatewayId) return current;
    const updated = await this.writeTxn(() => {
      const r = this.device(id);
      if (r === undefined || r.gateway === true) return undefined;
      const next: DeviceRecord = { ...r, gatewayId };
      void this.env.entities.put(id, next);
      createdByGatewayTx(this.env, gatewayId, id);
      return next;
    });
    if (updated !== undefined) await this.env.flushed();
    return updated;
  }

  async createAsset(a: {
    name: string;
    type?: string | undefined;
    label?: string | null | undefined;
    additionalInfoJson?: string | undefined;
    customerId?: CustomerId | undefined;
  }): Promise<AssetRecord> {
    if (typeof a.name !== 'string' || a.name.trim() === '')
      throw new OutpostError('BAD_PARAM', 'Asset name should be specified!');
    checkName('name', a.name);
    checkLength('type', a.type);
    checkLength('label', a.label);
    if (!this.customerExists(a.customerId)) throw noCustomer('ASSET');
    const t = this.requireTenant();
    const rec: AssetRecord = {
      entityType: 'ASSET',
      id: randomUUID() as EntityId,
      tenantId: t.id as string as TenantId,
      createdTime: Date.now(),
      customerId: a.customerId ?? NULL_UUID,
      name: a.name,
      type: a.type ?? 'default',
      label: a.label ?? null,
      ...(a.additionalInfoJson !== undefined ? { additionalInfoJson: a.additionalInfoJson } : {}),
    };
    const ok = await this.writeTxn(() => {
      if (this.env.names.get(nameKey(t.id, 'ASSET', a.name)) !== undefined) return false;
      void this.env.entities.put(rec.id, rec);
      void this.env.names.put(nameKey(t.id, 'ASSET', a.name), rec.id);
      return true;
    });
    if (!ok) throw new OutpostError('BAD_PARAM', 'Asset with such name already exists!');
    await this.env.flushed();
    return rec;
  }

  async createUser(u: NewUser): Promise<UserRecord> {
    const email = u.email.trim();
    checkName('email', email);
    if (!/^[^\s@]+@[^\s@]+$/.test(email))
      throw new OutpostError('BAD_PARAM', `Invalid email address format '${u.email}'!`);
    if (u.authority === 'CUSTOMER_USER' && (u.customerId === undefined || !this.customer(u.customerId))) {
      throw new OutpostError('BAD_PARAM', 'A customer user needs an existing customer');
    }
    const t = this.requireTenant();
    const rec: UserRecord = {
      entityType: 'USER',
      id: randomUUID() as EntityId & UserId,
      tenantId: t.id as string as TenantId,
      createdTime: Date.now(),
      customerId: u.authority === 'CUSTOMER_USER' ? (u.customerId as CustomerId) : NULL_UUID,
      email,
      authority: u.authority,
      firstName: u.firstName ?? null,
      lastName: u.lastName ?? null,
      passwordHash: u.passwordHash,
      enabled: true,
    };
    const ok = await this.writeTxn(() => {
      if (this.env.users.get(email.toLowerCase()) !== undefined) return false;
      void this.env.entities.put(rec.id, rec);
      void this.env.users.put(email.toLowerCase(), rec.id);
      return true;
    });
    if (!ok) throw new OutpostError('BAD_PARAM', `User with email '${email}'  already present in database!`);
    await this.env.flushed();
    return rec;
  }

  /** Assigns (customerId) or unassigns (NULL_UUID) a device or asset. */
  async setCustomer(id: string, customerId: CustomerId): Promise<DeviceRecord | AssetRecord> {
    const updated = await this.writeTxn(() => {
      const r = this.get(id);
      if (!r || (r.entityType !== 'DEVICE' && r.entityType !== 'ASSET')) return undefined;
      const next = { ...r, customerId };
      void this.env.entities.put(id, next);
      return next;
    });
    if (!updated) throw new OutpostError('ENTITY_NOT_FOUND', `Entity with id [${id}] is not found`);
    await this.env.flushed();
    return updated;
  }

  /**
   * Assigns a device or asset to a customer (docs/api.md). 404 when either is missing. Re-assigning to the
   * customer it already has is a no-op that still answers the record (TB behaviour).
   */
  async assignToCustomer(
    type: 'DEVICE' | 'ASSET',
    id: string,
    customerId: string,
  ): Promise<DeviceRecord | AssetRecord> {
    const outcome = await this.writeTxn(() => {
      const r = this.get(id);
      if (!r || r.entityType !== type) return 'entity' as const;
      if (!this.customer(customerId)) return 'customer' as const;
      const next = { ...r, customerId: customerId as CustomerId };
      void this.env.entities.put(id, next);
      return next;
    });
    if (outcome === 'entity')
      throw new OutpostError('ENTITY_NOT_FOUND', `${typeTitle(type)} with id [${id}] is not found`);
    if (outcome === 'customer')
      throw new OutpostError('ENTITY_NOT_FOUND', `Customer with id [${customerId}] is not found`);
    await this.env.flushed();
    return outcome;
  }

  /** Unassigns a device or asset: 400 "<Type> isn't assigned to any customer!" when it has none (TB). */
  async unassignFromCustomer(type: 'DEVICE' | 'ASSET', id: string): Promise<DeviceRecord | AssetRecord> {
    const outcome = await this.writeTxn(() => {
      const r = this.get(id);
      if (!r || r.entityType !== type) return 'entity' as const;
      if (r.customerId === NULL_UUID) return 'unassigned' as const;
      const next = { ...r, customerId: NULL_UUID };
      void this.env.entities.put(id, next);
      return next;
    });
    if (outcome === 'entity')
      throw new OutpostError('ENTITY_NOT_FOUND', `${typeTitle(type)} with id [${id}] is not found`);
    if (outcome === 'unassigned')
      throw new OutpostError('BAD_PARAM', `${typeTitle(type)} isn't assigned to any customer!`);
    await this.env.flushed();
    return outcome;
  }

  /**
   * Renames / retypes / relabels an existing device or asset (TB `POST /api/device` with an `id`). The name
   * index moves in the same transaction; a name taken by another entity → 400.
   */
  async updateNamed(
    type: 'DEVICE' | 'ASSET',
    id: string,
    patch: {
      name?: string | undefined;
      type?: string | undefined;
      label?: string | null | undefined;
      deviceProfileId?: string | undefined;
      /** replaces the kept additionalInfo; a device's gateway flag follows it */
      additionalInfo?: AdditionalInfoPatch | undefined;
      /** NULL_UUID unassigns */
      customerId?: CustomerId | undefined;
    },
  ): Promise<DeviceRecord | AssetRecord> {
    if (patch.name !== undefined && (typeof patch.name !== 'string' || patch.name.trim() === '')) {
      throw new OutpostError('BAD_PARAM', `${typeTitle(type)} name should be specified!`);
    }
    if (patch.name !== undefined) checkName('name', patch.name);
    if (type === 'DEVICE' && patch.type !== '') profileTx.checkProfileName(patch.type, 'Device type', 'type');
    else checkLength('type', patch.type);
    checkLength('label', patch.label);
    const outcome = await this.writeTxn(() => {
      const r = this.get(id);
      if (!r || r.entityType !== type) return 'entity' as const;
      const name = patch.name ?? r.name;
      if (name !== r.name && this.env.names.get(nameKey(r.tenantId, type, name)) !== undefined) return 'name' as const;
      if (!this.customerExists(patch.customerId)) return 'customer' as const;
      const retyped = r.entityType === 'DEVICE' ? profileTx.retypeDeviceTx(this.env, r.tenantId, patch) : undefined;
      if (retyped === null) return 'profile' as const;
      if (name !== r.name) {
        void this.env.names.remove(nameKey(r.tenantId, type, r.name));
        void this.env.names.put(nameKey(r.tenantId, type, name), r.id);
      }
      const label = patch.label === undefined ? r.label : patch.label;
      const next = withAdditionalInfo(
        { ...r, name, label, type: patch.type ?? r.type, customerId: patch.customerId ?? r.customerId, ...retyped },
        patch.additionalInfo,
      );
      void this.env.entities.put(id, next);
      return next;
    });
    if (outcome === 'entity')
      throw new OutpostError('ENTITY_NOT_FOUND', `${typeTitle(type)} with id [${id}] is not found`);
    if (outcome === 'name') throw new OutpostError('BAD_PARAM', `${typeTitle(type)} with such name already exists!`);
    if (outcome === 'profile') throw new OutpostError('BAD_PARAM', "Can't assign non-existent device profile!");
    if (outcome === 'customer') throw noCustomer(type);
    await this.env.flushed();
    return outcome;
  }

  /** Changes a customer's title (TB `POST /api/customer` with an `id`); a title taken by another → 400. */
  async updateCustomer(id: string, title: string): Promise<CustomerRecord> {
    if (typeof title !== 'string' || title.trim() === '')
      throw new OutpostError('BAD_PARAM', 'Customer title should be specified!');
    checkName('title', title);
    const outcome = await this.writeTxn(() => {
      const r = this.customer(id);
      if (!r) return 'entity' as const;
      if (title !== r.title) {
        if (this.env.names.get(nameKey(r.tenantId, 'CUSTOMER', title)) !== undefined) return 'name' as const;
        void this.env.names.remove(nameKey(r.tenantId, 'CUSTOMER', r.title));
        void this.env.names.put(nameKey(r.tenantId, 'CUSTOMER', title), r.id);
      }
      const next: CustomerRecord = { ...r, title };
      void this.env.entities.put(id, next);
      return next;
    });
    if (outcome === 'entity') throw new OutpostError('ENTITY_NOT_FOUND', `Customer with id [${id}] is not found`);
    if (outcome === 'name') throw new OutpostError('BAD_PARAM', 'Customer with such title already exists!');
    await this.env.flushed();
    return outcome;
  }

  /** Deletes an asset and its name index entry, and queues its data for removal (store/background/purge.ts); false when there was none. */
  async deleteAsset(id: string): Promise<boolean> {
    const done = await this.writeTxn(() => {
      const r = this.get(id);
      if (r?.entityType !== 'ASSET') return false;
      void this.env.entities.remove(id);
      void this.env.names.remove(nameKey(r.tenantId, 'ASSET', r.name));
      deleteOwnedTx(this.env, id);
      queuePurge(this.env, id);
      return true;
    });
    await this.env.flushed();
    return done;
  }

  /**
   * Deletes a customer as TB does: its devices and assets become unassigned and its users are deleted, all in
   * one transaction, which also queues the data of the customer and its users for removal (store/background/purge.ts). Returns
   * the ids of the deleted users (their sessions must stop working), or undefined when there was no such
   * customer.
   */
  async deleteCustomer(id: string): Promise<string[] | undefined> {
    const deletedUsers = await this.writeTxn(() => {
      const c = this.customer(id);
      if (!c) return undefined;
      const users: string[] = [];
      for (const { value } of this.env.entities.getRange({})) {
        const r = value as EntityRecord;
        if ((r.entityType === 'DEVICE' || r.entityType === 'ASSET') && r.customerId === id) {
          void this.env.entities.put(r.id, { ...r, customerId: NULL_UUID });
        } else if (r.entityType === 'USER' && r.customerId === id) {
          void this.env.entities.remove(r.id);
          void this.env.users.remove(r.email.toLowerCase());
          deleteOwnedTx(this.env, r.id);
          queuePurge(this.env, r.id);
          users.push(r.id);
        }
      }
      void this.env.entities.remove(id);
      void this.env.names.remove(nameKey(c.tenantId, 'CUSTOMER', c.title));
      deleteOwnedTx(this.env, id);
      queuePurge(this.env, id);
      return users;
    });
    await this.env.flushed();
    return deletedUsers;
  }

  /** Deletes a device, its name and token entries, and queues its data for removal (store/background/purge.ts); false when there was none. */
  async deleteDevice(id: string): Promise<boolean> {
    const done = await this.writeTxn(() => {
      const r = this.device(id);
      if (!r) return false;
      void this.env.entities.remove(id);
      void this.env.names.remove(nameKey(r.tenantId, 'DEVICE', r.name));
      void this.env.tokens.remove(r.token);
      deleteOwnedTx(this.env, id);
      queuePurge(this.env, id);
      return true;
    });
    await this.env.flushed();
    return done;
  }

  /** Deletes a user and its email entry (`outpost user delete`); false when there was none. */
  async deleteUser(id: string): Promise<boolean> {
    const done = await this.writeTxn(() => {
      const u = this.user(id);
      if (!u) return false;
      void this.env.entities.remove(id);
      void this.env.users.remove(u.email.toLowerCase());
      deleteOwnedTx(this.env, id);
      queuePurge(this.env, id);
      return true;
    });
    await this.env.flushed();
    return done;
  }

  /**
   * Replaces a user's password hash (`outpost user passwd`) and outdates the tokens issued before this second
   * (UserRecord.credentialsChangedSec); false when there is no such user.
   */
  async setPasswordHash(id: string, passwordHash: string, nowMs: number = Date.now()): Promise<boolean> {
    const done = await this.writeTxn(() => {
      const u = this.user(id);
      if (!u) return false;
      void this.env.entities.put(id, { ...u, passwordHash, credentialsChangedSec: Math.floor(nowMs / 1000) });
      return true;
    });
    await this.env.flushed();
    return done;
  }
}

/** TB's `Created` relation (group COMMON) from a gateway to a device it created or took over. */
function createdByGatewayTx(env: StoreEnv, gatewayId: string, deviceId: string): void {
  const end = (id: string) => ({ entityType: 'DEVICE' as const, id });
  putRelationTx(env, { from: end(gatewayId), to: end(deviceId), type: GATEWAY_CREATED, typeGroup: 'COMMON' });
}
