/**
 * The admin commands' writes (`outpost customer add`, `device add`, `device upstream`, `user add`, `apikey`; docs/cli.md),
 * as data: the CLI builds one, and whichever process writes the store runs it. That is the daemon when one holds
 * the data dir (the CLI hands it over, src/admin/channel.ts), else the CLI itself under the data dir's lock: one
 * writing process at a time (docs/design/storage.md, "One writer").
 */
import { OutpostError } from '../errors.js';
import { apiKeyJson } from '../api/auth/api-key-json.js';
import { alarmInfoJson } from '../api/entities/alarm-json.js';
import { AlarmStore } from '../store/alarms.js';
import { ApiKeyStore, notFound as apiKeyNotFound } from '../store/api-keys.js';
import { resolveCredentials } from '../store/credentials.js';
import type { Services } from '../context.js';
import { parseAttributes, parseBody } from '../ingest/payload.js';
import { type AttributeScope, type AttributeStore, isAttributeScope } from '../store/attributes.js';
import type { Authority, EntityStore } from '../store/entities.js';
import type { DeviceRecord, UserRecord } from '../store/entity-records.js';
import type { StoreEnv } from '../store/env.js';
import { type CustomerId, NULL_UUID } from '../types.js';

export type AdminOp =
  | { readonly op: 'customer.add'; readonly title: string }
  | {
      readonly op: 'device.add';
      readonly name: string;
      readonly type: string;
      readonly token?: string | undefined;
      /** instead of a token: MQTT Basic or X.509, as ThingsBoard's REST takes them */
      readonly credentials?: CredentialsInput | undefined;
      readonly customer?: string | undefined;
      readonly gateway: boolean;
      readonly upstreamToken?: string | undefined;
    }
  | { readonly op: 'device.upstream'; readonly device: string; readonly token: string }
  | { readonly op: 'device.rename'; readonly device: string; readonly name: string }
  | { readonly op: 'device.delete'; readonly device: string }
  | { readonly op: 'user.passwd'; readonly email: string; readonly passwordHash: string }
  /** REST's attribute writes (docs/api.md): `body` is the JSON text as a REST client would post it */
  | { readonly op: 'attributes.save'; readonly device: string; readonly scope: string; readonly body: string }
  | { readonly op: 'attributes.delete'; readonly device: string; readonly scope: string; readonly keys: string[] }
  | { readonly op: 'user.delete'; readonly email: string }
  /** API keys (docs/cli.md "API keys"); `user` is an email or an id */
  | {
      readonly op: 'apikey.add';
      readonly user: string;
      readonly description: string;
      readonly enabled: boolean;
      readonly expirationTime: number;
    }
  | { readonly op: 'apikey.enable'; readonly id: string; readonly enabled: boolean }
  | { readonly op: 'apikey.delete'; readonly id: string }
  /** `outpost alarms ack|clear` (docs/cli.md "Alarms"): the alarm's AlarmInfo after the change */
  | { readonly op: 'alarm.ack' | 'alarm.clear'; readonly id: string }
  /** reads only the daemon can answer (its counters live in its memory): `outpost status` and `sync` locally */
  | { readonly op: 'status' }
  | { readonly op: 'sync.status' }
  | {
      readonly op: 'user.add';
      readonly email: string;
      readonly passwordHash: string;
      readonly authority: Authority;
      readonly customer?: string | undefined;
    };

/** Credentials as ThingsBoard's REST takes them; checked by the process that writes (resolveCredentials). */
export interface CredentialsInput {
  readonly credentialsType: 'MQTT_BASIC' | 'X509_CERTIFICATE';
  readonly credentialsValue: string;
}

/** What the command prints: one JSON object. */
export type AdminResult = Record<string, unknown>;

/**
 * The attribute store the op writes through: the daemon's own, whose bus events reach long-polls, MQTT and CoAP
 * subscribers and websockets as a REST write does; without a daemon, one over the store this process holds.
 */
export type AttributeWriter = Pick<AttributeStore, 'save' | 'delete'>;

/** Runs `op` against the store; resolves once its writes are on disk. */
export async function runAdminOp(
  entities: EntityStore,
  env: StoreEnv,
  op: AdminOp,
  attributes?: () => AttributeWriter,
): Promise<AdminResult> {
  switch (op.op) {
    case 'status':
    case 'sync.status':
      throw new OutpostError('BAD_PARAM', `admin request: "${op.op}" is answered by a running daemon only`);
    case 'customer.add': {
      const c = await entities.createCustomer(op.title);
      return { id: c.id, title: c.title };
    }
    case 'device.add': {
      const d = await entities.createDevice({
        name: op.name,
        type: op.type,
        token: op.token,
        credentials: op.credentials === undefined ? undefined : resolveCredentials({ ...op.credentials }),
        customerId: customerIdOf(entities, op.customer) ?? NULL_UUID,
        gateway: op.gateway,
      });
      if (op.upstreamToken !== undefined) await setUpstreamToken(env, d.id, op.upstreamToken);
      if (d.credentials !== undefined)
        return { id: d.id, name: d.name, credentialsType: d.credentials.type, credentialsId: d.token };
      return { id: d.id, name: d.name, token: d.token };
    }
    case 'device.upstream': {
      const d = deviceOf(entities, op.device);
      await setUpstreamToken(env, d.id, op.token);
      return { id: d.id, name: d.name, upstreamToken: op.token };
    }
    case 'device.rename': {
      const d = deviceOf(entities, op.device);
      const renamed = await entities.updateNamed('DEVICE', d.id, { name: op.name });
      return { id: d.id, oldName: d.name, name: renamed.name };
    }
    case 'device.delete': {
      const d = deviceOf(entities, op.device);
      if (!(await entities.deleteDevice(d.id)))
        throw new OutpostError('ENTITY_NOT_FOUND', `no device with id or name "${op.device}"`);
      return { id: d.id, name: d.name, deleted: true };
    }
    case 'attributes.save':
    case 'attributes.delete': {
      const d = deviceOf(entities, op.device);
      if (attributes === undefined) throw new OutpostError('STORE_FAILED', 'the daemon is starting: try again');
      if (op.op === 'attributes.delete') {
        // as REST's DELETE: any scope, a device's client attributes included
        const scope = scopeOf(op.scope);
        if (op.keys.length === 0) throw new OutpostError('BAD_PARAM', 'Empty keys: []');
        await attributes().delete('DEVICE', d.id, scope, op.keys);
        return { id: d.id, name: d.name, scope, keys: op.keys };
      }
      const scope = scopeOf(op.scope);
      if (scope === 'CLIENT_SCOPE') throw new OutpostError('BAD_PARAM', 'Invalid scope: CLIENT_SCOPE');
      const entries = parseAttributes(parseBody(op.body), true);
      if (entries.length === 0) throw new OutpostError('BAD_PAYLOAD', 'No attributes data found in request body!');
      await attributes().save('DEVICE', d.id, scope, entries, Date.now());
      return { id: d.id, name: d.name, scope, saved: entries.map(([k]) => k) };
    }
    case 'user.passwd': {
      const u = userOf(entities, op.email);
      await entities.setPasswordHash(u.id, op.passwordHash);
      return { id: u.id, email: u.email, passwordChanged: true };
    }
    case 'user.delete': {
      const u = userOf(entities, op.email);
      await entities.deleteUser(u.id);
      // TB unassigns the alarms of a deleted user
      await new AlarmStore(env, (id) => entities.get(id)).unassignUser(u.id, Date.now());
      return { id: u.id, email: u.email, deleted: true };
    }
    case 'apikey.add': {
      const u = entities.userByEmail(op.user) ?? entities.user(op.user);
      if (u === undefined) throw new OutpostError('ENTITY_NOT_FOUND', `no user with email or id "${op.user}"`);
      const { record, value } = await new ApiKeyStore(env).create({
        tenantId: u.tenantId,
        userId: u.id,
        description: op.description,
        enabled: op.enabled,
        expirationTime: op.expirationTime,
      });
      return apiKeyJson(record, Date.now(), value);
    }
    case 'apikey.enable':
      return apiKeyJson(await new ApiKeyStore(env).update(op.id, { enabled: op.enabled }), Date.now());
    case 'apikey.delete':
      if (!(await new ApiKeyStore(env).delete(op.id))) throw apiKeyNotFound(op.id);
      return { id: op.id, deleted: true };
    case 'alarm.ack':
    case 'alarm.clear': {
      const entity = (id: string) => entities.get(id);
      const alarms = new AlarmStore(env, entity);
      const now = Date.now();
      const done = op.op === 'alarm.ack' ? await alarms.ack(op.id, now) : await alarms.clear(op.id, now);
      if (done === undefined)
        throw new OutpostError(
          'BAD_PARAM',
          op.op === 'alarm.ack' ? 'Alarm was already acknowledged!' : 'Alarm was already cleared!',
        );
      return alarmInfoJson(done, entity);
    }
    case 'user.add': {
      const u = await entities.createUser({
        email: op.email,
        passwordHash: op.passwordHash,
        authority: op.authority,
        customerId: customerIdOf(entities, op.customer),
      });
      return { id: u.id, email: u.email, authority: u.authority, customerId: u.customerId };
    }
  }
}

/**
 * The op a request carries, checked field by field: it comes over a socket (from a process that proved it can
 * read the data dir, but of any version).
 */
export function parseAdminOp(v: unknown): AdminOp {
  const o = (typeof v === 'object' && v !== null ? v : {}) as Record<string, unknown>;
  const str = (k: string): string => {
    if (typeof o[k] !== 'string') throw new OutpostError('BAD_PAYLOAD', `admin request: "${k}" must be a string`);
    return o[k] as string;
  };
  const opt = (k: string): string | undefined => (o[k] === undefined ? undefined : str(k));
  switch (o.op) {
    case 'customer.add':
      return { op: 'customer.add', title: str('title') };
    case 'device.add':
      return {
        op: 'device.add',
        name: str('name'),
        type: str('type'),
        token: opt('token'),
        credentials: credentialsOf(o['credentials']),
        customer: opt('customer'),
        gateway: o.gateway === true,
        upstreamToken: opt('upstreamToken'),
      };
    case 'device.upstream':
      return { op: 'device.upstream', device: str('device'), token: str('token') };
    case 'device.rename':
      return { op: 'device.rename', device: str('device'), name: str('name') };
    case 'device.delete':
      return { op: 'device.delete', device: str('device') };
    case 'user.passwd':
      return { op: 'user.passwd', email: str('email'), passwordHash: str('passwordHash') };
    case 'attributes.save':
      return { op: 'attributes.save', device: str('device'), scope: str('scope'), body: str('body') };
    case 'attributes.delete': {
      const keys = o['keys'];
      if (!Array.isArray(keys) || !keys.every((k): k is string => typeof k === 'string'))
        throw new OutpostError('BAD_PAYLOAD', 'admin request: "keys" must be an array of strings');
      return { op: 'attributes.delete', device: str('device'), scope: str('scope'), keys };
    }
    case 'user.delete':
      return { op: 'user.delete', email: str('email') };
    case 'apikey.add': {
      if (typeof o['enabled'] !== 'boolean' || typeof o['expirationTime'] !== 'number')
        throw new OutpostError('BAD_PAYLOAD', 'admin request: "enabled" and "expirationTime" are required');
      return {
        op: 'apikey.add',
        user: str('user'),
        description: str('description'),
        enabled: o['enabled'],
        expirationTime: o['expirationTime'],
      };
    }
    case 'apikey.enable':
      return { op: 'apikey.enable', id: str('id'), enabled: o['enabled'] === true };
    case 'apikey.delete':
      return { op: 'apikey.delete', id: str('id') };
    case 'alarm.ack':
    case 'alarm.clear':
      return { op: o.op, id: str('id') };
    case 'status':
      return { op: 'status' };
    case 'sync.status':
      return { op: 'sync.status' };
    case 'user.add': {
      const authority = str('authority');
      if (authority !== 'TENANT_ADMIN' && authority !== 'CUSTOMER_USER')
        throw new OutpostError('BAD_PAYLOAD', `admin request: no authority "${authority}"`);
      return {
        op: 'user.add',
        email: str('email'),
        passwordHash: str('passwordHash'),
        authority,
        customer: opt('customer'),
      };
    }
    default:
      throw new OutpostError('BAD_PAYLOAD', `admin request: no op ${JSON.stringify(o.op)}`);
  }
}

function credentialsOf(v: unknown): CredentialsInput | undefined {
  if (v === undefined) return undefined;
  const c = (typeof v === 'object' && v !== null ? v : {}) as Record<string, unknown>;
  const type = c['credentialsType'];
  if ((type !== 'MQTT_BASIC' && type !== 'X509_CERTIFICATE') || typeof c['credentialsValue'] !== 'string')
    throw new OutpostError('BAD_PAYLOAD', 'admin request: "credentials" must be MQTT_BASIC or X509_CERTIFICATE');
  return { credentialsType: type, credentialsValue: c['credentialsValue'] };
}

/** A customer by id or title (exact, then case-insensitive, as device names); undefined when `ref` is. */
function customerIdOf(entities: EntityStore, ref: string | undefined): CustomerId | undefined {
  if (ref === undefined) return undefined;
  const folded = ref.toLowerCase();
  const c = entities.findCustomer(ref) ?? entities.list('CUSTOMER').find((x) => x.title.toLowerCase() === folded);
  if (!c) throw new OutpostError('ENTITY_NOT_FOUND', `no customer with id or title "${ref}"`);
  return c.id as string as CustomerId;
}

/** Stores `token` as the device's upstream token (docs/sync.md); resolves once it is on disk. */
async function setUpstreamToken(env: StoreEnv, deviceId: string, token: string): Promise<void> {
  if (token === '') throw new OutpostError('BAD_PAYLOAD', 'the upstream token must not be empty');
  // imported here: the outbox's modules load at start only with a sync URL (docs/design/memory-budget.md)
  const { tokenKey } = await import('../store/outbox.js');
  await env.outbox.put(tokenKey(deviceId), { token, provisioned: false });
  await env.flushed();
}

/** A device by id or name (exact, then case-insensitive, as the technician's commands find it). */
function deviceOf(entities: EntityStore, ref: string): DeviceRecord {
  const exact = entities.device(ref) ?? entities.byName('DEVICE', ref);
  if (exact !== undefined && exact.entityType === 'DEVICE') return exact;
  const folded = ref.toLowerCase();
  const d = entities.list('DEVICE').find((x) => x.name.toLowerCase() === folded);
  if (d === undefined) throw new OutpostError('ENTITY_NOT_FOUND', `no device with id or name "${ref}"`);
  return d;
}

function scopeOf(raw: string): AttributeScope {
  if (!isAttributeScope(raw)) throw new OutpostError('BAD_PARAM', `Invalid attribute scope: ${raw}`);
  return raw;
}

function userOf(entities: EntityStore, email: string): UserRecord {
  const u = entities.userByEmail(email);
  if (u === undefined) throw new OutpostError('ENTITY_NOT_FOUND', `no user with email "${email}"`);
  return u;
}

/**
 * What the daemon does after it ran an op for the CLI, as after the same change over REST: a deleted device's
 * sessions, long-polls and subscriptions end; a deleted user's sessions end, and so do those of a user whose
 * password changed (their tokens are outdated: auth/index.ts).
 */
export function adminOpDone(s: Pick<Services, 'bus' | 'auth'>, op: AdminOp, result: AdminResult): void {
  if (op.op === 'device.delete')
    s.bus.publish('entityDeleted', { entityType: 'DEVICE', entityId: String(result['id']) });
  // as REST does after the same change: the key's cached lookup goes, a refused key's websockets close
  if (op.op === 'apikey.enable' || op.op === 'apikey.delete') {
    s.auth.apiKeys.forget(op.id);
    if (op.op === 'apikey.delete' || !op.enabled)
      s.bus.publish('principalsRevoked', { sessionIds: [op.id], userIds: [], customerIds: [] });
  }
  if (op.op === 'user.delete' || op.op === 'user.passwd') {
    const id = String(result['id']);
    s.auth.forgetUsers([id]);
    s.bus.publish('principalsRevoked', { sessionIds: [], userIds: [id], customerIds: [] });
  }
}
