/**
 * ThingsBoard JSON shapes of entities (docs/api.md): ids are `{"entityType","id"}` objects, an
 * unassigned customer is the null UUID. Pure functions from store records; nothing here knows HTTP.
 */
import type { AssetRecord, CustomerRecord, DeviceRecord, UserRecord } from '../../store/entities.js';
import { credentialsRowId, credentialsTypeAndValue } from '../../store/credentials.js';
import type { DeviceProfileRecord } from '../../store/profile-records.js';
import type { EntityType } from '../../types.js';
import { additionalInfoJson, assetAdditionalInfoJson } from './additional-info.js';

export interface EntityIdJson {
  readonly entityType: EntityType | 'DEVICE_PROFILE';
  readonly id: string;
}

export const entityId = (entityType: EntityIdJson['entityType'], id: string): EntityIdJson => ({ entityType, id });

/** TB's `deviceData` of a device of a DEFAULT profile: nothing configured per device. */
const DEVICE_DATA = { configuration: { type: 'DEFAULT' }, transportConfiguration: { type: 'DEFAULT' } };

export function deviceJson(d: DeviceRecord): Record<string, unknown> {
  return {
    id: entityId('DEVICE', d.id),
    createdTime: d.createdTime,
    additionalInfo: additionalInfoJson(d),
    tenantId: entityId('TENANT', d.tenantId),
    customerId: entityId('CUSTOMER', d.customerId),
    name: d.name,
    type: d.type,
    label: d.label,
    deviceProfileId: entityId('DEVICE_PROFILE', d.deviceProfileId),
    deviceData: DEVICE_DATA,
    firmwareId: null,
    softwareId: null,
  };
}

/** TB's DeviceProfile JSON; `provisionConfiguration` is rebuilt from the record's provisioning fields. */
export function deviceProfileJson(p: DeviceProfileRecord, isDefault: boolean): Record<string, unknown> {
  return {
    id: entityId('DEVICE_PROFILE', p.id),
    createdTime: p.createdTime,
    tenantId: entityId('TENANT', p.tenantId),
    name: p.name,
    description: p.description,
    image: p.image,
    type: 'DEFAULT',
    transportType: p.transportType,
    provisionType: p.provisionType,
    default: isDefault,
    defaultRuleChainId: null,
    defaultDashboardId: null,
    defaultQueueName: null,
    defaultEdgeRuleChainId: null,
    firmwareId: null,
    softwareId: null,
    provisionDeviceKey: p.provisionDeviceKey,
    profileData: {
      configuration: { type: 'DEFAULT' },
      transportConfiguration: { type: 'DEFAULT' },
      alarms: null,
      ...p.profileData,
      provisionConfiguration: { type: p.provisionType, provisionDeviceSecret: p.provisionDeviceSecret },
    },
  };
}

/** TB's DeviceProfileInfo: what a device list needs of a profile. */
export function deviceProfileInfoJson(p: DeviceProfileRecord): Record<string, unknown> {
  return {
    id: entityId('DEVICE_PROFILE', p.id),
    tenantId: entityId('TENANT', p.tenantId),
    name: p.name,
    image: p.image,
    defaultDashboardId: null,
    type: 'DEFAULT',
    transportType: p.transportType,
  };
}

/** TB's DeviceCredentials; an MQTT Basic password is in it in clear, as in TB (docs/api.md "Device credentials"). */
export function deviceCredentialsJson(d: DeviceRecord): Record<string, unknown> {
  const { credentialsType, credentialsValue } = credentialsTypeAndValue(d.credentials);
  return {
    id: { id: credentialsRowId(d.id) },
    createdTime: d.createdTime,
    deviceId: entityId('DEVICE', d.id),
    credentialsType,
    credentialsId: d.token,
    credentialsValue,
    version: null,
  };
}

export function assetJson(a: AssetRecord): Record<string, unknown> {
  return {
    id: entityId('ASSET', a.id),
    createdTime: a.createdTime,
    additionalInfo: assetAdditionalInfoJson(a),
    tenantId: entityId('TENANT', a.tenantId),
    customerId: entityId('CUSTOMER', a.customerId),
    name: a.name,
    type: a.type,
    label: a.label,
  };
}

export function customerJson(c: CustomerRecord): Record<string, unknown> {
  return {
    id: entityId('CUSTOMER', c.id),
    createdTime: c.createdTime,
    additionalInfo: null,
    country: null,
    state: null,
    city: null,
    address: null,
    address2: null,
    zip: null,
    phone: null,
    email: null,
    title: c.title,
    tenantId: entityId('TENANT', c.tenantId),
    name: c.title,
  };
}

/** TB's User JSON (`GET /api/auth/user`); `name` is the email, as in TB. The password hash never leaves the store. */
export function userJson(u: UserRecord): Record<string, unknown> {
  return {
    id: entityId('USER', u.id),
    createdTime: u.createdTime,
    additionalInfo: {},
    tenantId: entityId('TENANT', u.tenantId),
    customerId: entityId('CUSTOMER', u.customerId),
    email: u.email,
    authority: u.authority,
    firstName: u.firstName,
    lastName: u.lastName,
    phone: null,
    name: u.email,
  };
}
