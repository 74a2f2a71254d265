/**
 * The admin commands' writes (`outpost customer add`, `device add`, `device upstream`, `user add`; docs/cli.md),
 * as data: the CLI builds one, and whichever process writes the store runs it. That is the daemon when one holds
 * the data dir (the CLI hands it over, src/admin/channel.ts), else the CLI itself under the data dir's lock: one
 * writing process at a time (docs/design/storage.md, "One writer").
 */
import { OutpostError } from '../errors.js';
import { resolveCredentials } from '../store/credentials.js';
import type { Authority, EntityStore } from '../store/entities.js';
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

/** Runs `op` against the store; resolves once its writes are on disk. */
export async function runAdminOp(entities: EntityStore, env: StoreEnv, op: AdminOp): Promise<AdminResult> {
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
      const d = entities.device(op.device) ?? entities.byName('DEVICE', op.device);
      if (d === undefined || d.entityType !== 'DEVICE')
        throw new OutpostError('ENTITY_NOT_FOUND', `no device with id or name "${op.device}"`);
      await setUpstreamToken(env, d.id, op.token);
      return { id: d.id, name: d.name, upstreamToken: op.token };
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

/** A customer by id or title; undefined when `ref` is. */
function customerIdOf(entities: EntityStore, ref: string | undefined): CustomerId | undefined {
  if (ref === undefined) return undefined;
  const c = entities.findCustomer(ref);
  if (!c) throw new OutpostError('ENTITY_NOT_FOUND', `no customer with id or title "${ref}"`);
  return c.id as string as CustomerId;
}

/** Stores `token` as the device's upstream token (docs/sync.md); resolves once it is on disk. */
async function setUpstreamToken(env: StoreEnv, deviceId: string, token: string): Promise<void> {
  if (token === '') throw new OutpostError('BAD_PAYLOAD', 'the upstream token must not be empty');
  await env.outbox.put(['t', deviceId], { token, provisioned: false });
  await env.flushed();
}
