/**
 * Units and identities as types. Branded strings cannot be mixed up by accident:
 * an AccessToken is never passed where a DeviceId is expected.
 */
declare const brand: unique symbol;
export type Brand<T, B extends string> = T & { readonly [brand]: B };

/** Unix time in milliseconds. */
export type EpochMs = number;
/** A duration in milliseconds. */
export type DurationMs = number;

export type EntityId = Brand<string, 'EntityId'>;
export type TenantId = Brand<string, 'TenantId'>;
export type CustomerId = Brand<string, 'CustomerId'>;
export type UserId = Brand<string, 'UserId'>;
/** A device's credentialsId of type ACCESS_TOKEN (docs/api.md). */
export type AccessToken = Brand<string, 'AccessToken'>;

/** ThingsBoard's "unassigned" customer id (docs/api.md). */
export const NULL_UUID = '13814000-1dd2-11b2-8080-808080808080' as CustomerId;

export const ENTITY_TYPES = [
  'TENANT',
  'CUSTOMER',
  'USER',
  'RULE',
  'PLUGIN',
  'DASHBOARD',
  'ASSET',
  'DEVICE',
  'ALARM',
  'ENTITY_VIEW',
] as const;
export type EntityType = (typeof ENTITY_TYPES)[number];

export function isEntityType(s: string): s is EntityType {
  return (ENTITY_TYPES as readonly string[]).includes(s);
}
