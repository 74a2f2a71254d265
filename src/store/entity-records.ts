/**
 * The records the entity store keeps (store/entities.ts): tenants, customers, devices, assets, users, and what
 * creating a device or a user takes.
 */
import { randomBytes } from 'node:crypto';
import { OutpostError } from '../errors.js';
import type { AccessToken, CustomerId, EntityId, TenantId, UserId } from '../types.js';
import type { ResolvedCredentials, StoredCredentials } from './credentials.js';
import type { DeviceProfileRecord } from './profile-records.js';

export type Authority = 'TENANT_ADMIN' | 'CUSTOMER_USER';

interface Base {
  readonly id: EntityId;
  readonly createdTime: number;
  readonly tenantId: TenantId;
}
export interface TenantRecord extends Base {
  readonly entityType: 'TENANT';
  readonly title: string;
}
export interface CustomerRecord extends Base {
  readonly entityType: 'CUSTOMER';
  readonly title: string;
}
export interface DeviceRecord extends Base {
  readonly entityType: 'DEVICE';
  readonly customerId: CustomerId;
  readonly name: string;
  /** its profile's name (docs/api.md "Device profiles") */
  readonly type: string;
  readonly label: string | null;
  readonly deviceProfileId: EntityId;
  /** its credentialsId (store/credentials.ts): the access token, or the id of its `credentials` */
  readonly token: AccessToken;
  /** MQTT Basic or X.509 credentials; absent = the device logs in with its access token `token` */
  readonly credentials?: StoredCredentials;
  /** TB's `additionalInfo.gateway`: may speak the MQTT Gateway API for sub-devices (absent = false) */
  readonly gateway?: boolean;
  /** the gateway device that last created or connected it over the MQTT Gateway API (TB's lastConnectedGateway) */
  readonly gatewayId?: EntityId;
  /**
   * TB's `additionalInfo` as the client gave it, serialized, without `lastConnectedGateway` (which is `gatewayId`);
   * absent when none was given, as in records written before it was kept
   */
  readonly additionalInfoJson?: string;
}
export interface AssetRecord extends Base {
  readonly entityType: 'ASSET';
  readonly customerId: CustomerId;
  readonly name: string;
  readonly type: string;
  readonly label: string | null;
  /** TB's `additionalInfo` as the client gave it, serialized; absent when none was given */
  readonly additionalInfoJson?: string;
}
export interface UserRecord extends Base {
  readonly entityType: 'USER';
  readonly id: EntityId & UserId;
  readonly customerId: CustomerId;
  readonly email: string;
  readonly authority: Authority;
  readonly firstName: string | null;
  readonly lastName: string | null;
  /** scrypt$N$r$p$salt$hash (see auth/password.ts) */
  readonly passwordHash: string;
  readonly enabled: boolean;
  /**
   * Unix seconds of the last password change: the user's tokens issued in an earlier second stop working, as
   * ThingsBoard outdates a user's tokens when the credentials change (absent: never changed)
   */
  readonly credentialsChangedSec?: number;
}
export type EntityRecord =
  | TenantRecord
  | CustomerRecord
  | DeviceRecord
  | AssetRecord
  | UserRecord
  | DeviceProfileRecord;

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** TB's random access token: 20 alphanumerics (docs/api.md). */
export function randomAccessToken(): AccessToken {
  const bytes = randomBytes(40);
  let out = '';
  for (const b of bytes) {
    if (b < 248) out += ALNUM[b % 62];
    if (out.length === 20) break;
  }
  return (out.length === 20 ? out : out + randomAccessToken().slice(out.length)) as AccessToken;
}

/** "DEVICE" → "Device", for TB's messages ("Device with id [..] is not found"). */
export function typeTitle(type: string): string {
  return type.charAt(0) + type.slice(1).toLowerCase();
}

export interface NewDevice {
  readonly name: string;
  /** the profile's name; found or created (profile-records.ts); absent: the default profile */
  readonly type?: string | undefined;
  /** takes precedence over `type` */
  readonly deviceProfileId?: string | undefined;
  readonly label?: string | null | undefined;
  readonly token?: string | undefined;
  readonly customerId?: CustomerId | undefined;
  readonly gateway?: boolean | undefined;
  readonly gatewayId?: EntityId | undefined;
  /** DeviceRecord.additionalInfoJson */
  readonly additionalInfoJson?: string | undefined;
  /** credentials other than a token (resolveCredentials); `token` is then ignored */
  readonly credentials?: ResolvedCredentials | undefined;
}

/**
 * TB's `additionalInfo.overwriteActivityTime` of a gateway device: its own activity (PINGREQ included) counts for
 * the sub-devices it connected. Set through the REST API only, as in TB (provisioning never sets it).
 */
export function overwritesActivityTime(r: DeviceRecord | undefined): boolean {
  if (r?.additionalInfoJson === undefined) return false;
  try {
    return (JSON.parse(r.additionalInfoJson) as { overwriteActivityTime?: unknown }).overwriteActivityTime === true;
  } catch {
    return false;
  }
}

/** A client's `additionalInfo` for a device or an asset. */
export interface AdditionalInfoPatch {
  /** the object's JSON (a device's without `lastConnectedGateway`); null: the client cleared it */
  readonly json: string | null;
  /** a device's `gateway`: it may speak the MQTT Gateway API (false for an asset) */
  readonly gateway: boolean;
}

/**
 * The entity with `info` applied: the kept object changes, and a device's gateway flag follows it; undefined
 * changes nothing.
 */
export function withAdditionalInfo(
  r: DeviceRecord | AssetRecord,
  info: AdditionalInfoPatch | undefined,
): DeviceRecord | AssetRecord {
  if (info === undefined) return r;
  const kept = info.json !== null ? { additionalInfoJson: info.json } : {};
  if (r.entityType === 'ASSET') {
    const { additionalInfoJson: _json, ...rest } = r;
    return { ...rest, ...kept };
  }
  const { gateway: _gateway, additionalInfoJson: _json, ...rest } = r;
  return { ...rest, ...(info.gateway ? { gateway: true } : {}), ...kept };
}

export interface NewUser {
  readonly email: string;
  readonly passwordHash: string;
  readonly authority: Authority;
  readonly customerId?: CustomerId | undefined;
  readonly firstName?: string | null;
  readonly lastName?: string | null;
}

/** ThingsBoard's Device/AssetDataValidator answer to a customerId that names no customer of the tenant. */
export function noCustomer(type: 'DEVICE' | 'ASSET'): OutpostError {
  return new OutpostError('BAD_PARAM', `Can't assign ${type.toLowerCase()} to non-existent customer!`);
}
