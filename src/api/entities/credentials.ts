/**
 * Device credentials REST, as ThingsBoard's UI and clients use it (docs/api.md "Device credentials"): read them,
 * post the whole object back changed, or create a device with its credentials in one go. Changes are for the
 * tenant admin only; a change closes the device's MQTT sessions (they logged in with what is no longer valid).
 */
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import { type HttpRouter, json } from '../../uws/adapter.js';
import { credentialsRowId, resolveCredentials } from '../../store/credentials.js';
import type { DeviceRecord } from '../../store/entities.js';
import { principalOf } from '../principal.js';
import { readAdditionalInfo } from './additional-info.js';
import { customerIdOf, labelOf, profileIdOf } from './named.js';
import { jsonObjectBody, optionalString, parseUuid } from './params.js';
import { deviceCredentialsJson, deviceJson } from './render.js';

/** A field that must be a JSON object, or TB's "must not be null" 400. */
function objectField(body: Record<string, unknown>, key: string): Record<string, unknown> {
  const v = body[key];
  if (v === undefined || v === null) throw new OutpostError('BAD_PARAM', `Validation error: ${key} must not be null`);
  if (typeof v !== 'object' || Array.isArray(v)) throw new OutpostError('BAD_PARAM', `"${key}" must be a JSON object`);
  return v as Record<string, unknown>;
}

/** The `id` of an `{"id": ...}` object, or undefined when absent. */
function innerId(v: unknown, what: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v)) throw new OutpostError('BAD_PARAM', `"${what}" must be a JSON object`);
  const id = (v as Record<string, unknown>)['id'];
  return typeof id === 'string' ? parseUuid(id, what) : parseUuid(undefined, what);
}

export function registerCredentialsRoutes(router: HttpRouter, s: Services): void {
  router.route('get', '/api/device/:id/credentials', (ctx) => {
    const id = parseUuid(ctx.params[0], 'deviceId');
    const d = s.auth.checkAccess(principalOf(s, ctx), 'DEVICE', id, 'read') as DeviceRecord;
    return json(deviceCredentialsJson(d));
  });

  router.route('post', '/api/device/credentials', async (ctx) => {
    const p = principalOf(s, ctx);
    s.auth.requireTenantAdmin(p);
    const body = await jsonObjectBody(ctx);
    const deviceId = innerId(body['deviceId'], 'deviceId');
    if (deviceId === undefined)
      throw new OutpostError('CREDENTIALS_INVALID', 'Device credentials should be assigned to device!');
    const device = s.auth.checkAccess(p, 'DEVICE', deviceId, 'write') as DeviceRecord;
    // TB creates credentials only with a device: a post without the row's id is a second set for it
    const rowId = innerId(body['id'], 'id');
    if (rowId === undefined)
      throw new OutpostError('CREDENTIALS_INVALID', 'Credentials for this device are already specified!');
    if (rowId !== credentialsRowId(device.id))
      throw new OutpostError('CREDENTIALS_INVALID', 'Unable to update non-existent device credentials!');
    const { device: saved, changed } = await s.entities.setCredentials(device.id, resolveCredentials(body));
    if (changed) s.bus.publish('credentialsUpdated', { deviceId: saved.id });
    return json(deviceCredentialsJson(saved));
  });

  // All or nothing: credentials refused → no device either (they are checked first, and written together).
  router.route('post', '/api/device-with-credentials', async (ctx) => {
    const p = principalOf(s, ctx);
    s.auth.requireTenantAdmin(p);
    const body = await jsonObjectBody(ctx);
    const device = objectField(body, 'device');
    const credentials = resolveCredentials(objectField(body, 'credentials'));
    const name = optionalString(device, 'name');
    const additionalInfo = readAdditionalInfo(device, 'DEVICE');
    if (name === undefined || name.trim() === '')
      throw new OutpostError('BAD_PARAM', 'Device name should be specified!');
    const created = await s.entities.createDevice({
      name,
      type: optionalString(device, 'type'),
      deviceProfileId: profileIdOf(device),
      label: labelOf(device),
      customerId: customerIdOf(device),
      gateway: additionalInfo?.gateway,
      additionalInfoJson: additionalInfo?.json ?? undefined,
      credentials,
    });
    return json(deviceJson(created));
  });
}
