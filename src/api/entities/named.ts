/**
 * Devices and assets REST (docs/api.md). Both are "named" entities of the tenant that can be
 * assigned to a customer, so one set of handlers serves both, parameterised by type.
 *
 * Roles: create, delete, assign and unassign are TENANT_ADMIN only (403 for customer users,
 * checked before the id is parsed, as TB's @PreAuthorize runs first); read and update reach a customer user's
 * own assigned entities, but not a device's gateway flag (a gateway creates devices) nor its customer. Unknown
 * entity → 404, non-UUID id → 400. A `customerId` in the body is kept on create and update (unknown → 400).
 */
import type { Principal } from '../../auth/index.js';
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import { type HttpContext, type HttpRouter, type Reply, json } from '../../uws/adapter.js';
import type { AssetRecord, DeviceRecord } from '../../store/entities.js';
import { pageOf, typeTitle } from '../../store/entities.js';
import { type CustomerId, NULL_UUID } from '../../types.js';
import { principalOf } from '../principal.js';
import { bodyEntityId, jsonObjectBody, optionalString, parsePageQuery, parseUuid } from './params.js';
import { readAdditionalInfo } from './additional-info.js';
import { assetJson, deviceJson } from './render.js';

type NamedType = 'DEVICE' | 'ASSET';
type NamedRecord = DeviceRecord | AssetRecord;

const render = (r: NamedRecord): Record<string, unknown> => (r.entityType === 'DEVICE' ? deviceJson(r) : assetJson(r));

/** A label may be explicitly null (TB clears it); any other non-string → 400. */
export function labelOf(body: Record<string, unknown>): string | null | undefined {
  if (body['label'] === null) return null;
  return optionalString(body, 'label');
}

/** A device's `deviceProfileId`: TB's `{"entityType":"DEVICE_PROFILE","id"}` object, or a bare UUID string. */
export function profileIdOf(body: Record<string, unknown>): string | undefined {
  const v = body['deviceProfileId'];
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'string') return parseUuid(v, 'deviceProfileId');
  if (typeof v === 'object' && !Array.isArray(v))
    return parseUuid(String((v as Record<string, unknown>)['id'] ?? ''), 'deviceProfileId.id');
  throw new OutpostError('BAD_PAYLOAD', "Field 'deviceProfileId' must be an entity id object");
}

/**
 * The body's `customerId` (TB reads only its `id`; a bare UUID string is taken too): absent → undefined (an
 * update keeps the customer), null or the null UUID → unassigned.
 */
export function customerIdOf(body: Record<string, unknown>): CustomerId | undefined {
  const v = body['customerId'];
  if (v === undefined) return undefined;
  if (v === null) return NULL_UUID;
  if (typeof v === 'string') return parseUuid(v, 'customerId') as CustomerId;
  if (typeof v === 'object' && !Array.isArray(v))
    return parseUuid(String((v as Record<string, unknown>)['id'] ?? ''), 'customerId.id') as CustomerId;
  throw new OutpostError('BAD_PAYLOAD', "Field 'customerId' must be an entity id object");
}

/** The path segment of a type: `/api/device`, `/api/asset`. */
const segment = (type: NamedType): string => type.toLowerCase();

export function registerNamedRoutes(router: HttpRouter, s: Services, type: NamedType): void {
  const seg = segment(type);
  const lookupParam = type === 'DEVICE' ? 'deviceName' : 'assetName';

  const readable = (p: Principal, rawId: string | undefined): NamedRecord => {
    const id = parseUuid(rawId, `${seg}Id`);
    return s.auth.checkAccess(p, type, id, 'read') as NamedRecord;
  };

  // Create (no id) or update (TB: body with `id`). docs/api.md: duplicate name → 400.
  router.route('post', `/api/${seg}`, async (ctx) => {
    const p = principalOf(s, ctx);
    const body = await jsonObjectBody(ctx);
    const id = bodyEntityId(body);
    const name = optionalString(body, 'name');
    const subtype = optionalString(body, 'type');
    const label = labelOf(body);
    const deviceProfileId = type === 'DEVICE' ? profileIdOf(body) : undefined;
    const additionalInfo = readAdditionalInfo(body, type);
    const customerId = customerIdOf(body);
    if (id !== undefined) {
      const current = s.auth.checkAccess(p, type, id, 'write') as NamedRecord;
      // the flag lets a device create sub-devices, and creating devices is the tenant admin's
      const gatewayBefore = current.entityType === 'DEVICE' && current.gateway === true;
      if (additionalInfo !== undefined && additionalInfo.gateway !== gatewayBefore) s.auth.requireTenantAdmin(p);
      // a customer user may keep its entity its customer's, not hand it to another nor to the tenant
      if (customerId !== undefined && customerId !== current.customerId) s.auth.requireTenantAdmin(p);
      const patch = { name, type: subtype, label, deviceProfileId, additionalInfo, customerId };
      const updated = await s.entities.updateNamed(type, id, patch);
      if (updated.customerId !== current.customerId) s.bus.publish('accessChanged', { entityType: type, entityId: id });
      return json(render(updated));
    }
    s.auth.requireTenantAdmin(p);
    if (name === undefined || name.trim() === '')
      throw new OutpostError('BAD_PARAM', `${typeTitle(type)} name should be specified!`);
    if (type === 'DEVICE') {
      const accessToken = ctx.query.get('accessToken');
      return json(
        deviceJson(
          await s.entities.createDevice({
            name,
            type: subtype,
            deviceProfileId,
            label,
            token: accessToken ?? undefined,
            customerId,
            gateway: additionalInfo?.gateway,
            additionalInfoJson: additionalInfo?.json ?? undefined,
          }),
        ),
      );
    }
    const additionalInfoJson = additionalInfo?.json ?? undefined;
    return json(
      assetJson(await s.entities.createAsset({ name, type: subtype, label, additionalInfoJson, customerId })),
    );
  });

  router.route('get', `/api/${seg}/:id`, (ctx) => json(render(readable(principalOf(s, ctx), ctx.params[0]))));

  router.route('del', `/api/${seg}/:id`, async (ctx) => {
    const p = principalOf(s, ctx);
    s.auth.requireTenantAdmin(p);
    const rec = s.auth.checkAccess(p, type, parseUuid(ctx.params[0], `${seg}Id`), 'write');
    const deleted = type === 'DEVICE' ? await s.entities.deleteDevice(rec.id) : await s.entities.deleteAsset(rec.id);
    if (!deleted) throw new OutpostError('ENTITY_NOT_FOUND', `${typeTitle(type)} with id [${rec.id}] is not found`);
    s.bus.publish('entityDeleted', { entityType: type, entityId: rec.id });
    return {};
  });

  // Tenant list, or one entity by name (`?deviceName=` / `?assetName=`): TENANT_ADMIN only.
  const tenantList = (ctx: HttpContext): Reply => {
    const p = principalOf(s, ctx);
    s.auth.requireTenantAdmin(p);
    const byName = ctx.query.get(lookupParam);
    if (byName !== null) {
      const rec = s.entities.byName(type, byName);
      if (!rec || rec.entityType !== type || rec.tenantId !== p.tenantId) throw new OutpostError('ENTITY_NOT_FOUND');
      return json(render(rec));
    }
    const q = parsePageQuery(ctx.query);
    const typeFilter = ctx.query.get('type') || undefined;
    const all = s.entities.list(
      type,
      (r) => r.tenantId === p.tenantId && (typeFilter === undefined || r.type === typeFilter),
    );
    const page = pageOf<NamedRecord>(all, q);
    return json({ ...page, data: page.data.map(render) });
  };
  router.route('get', `/api/tenant/${seg}s`, tenantList);
  router.route('get', `/api/tenant/${seg}`, tenantList);

  // A customer's entities: the tenant admin, or a user of that very customer.
  router.route('get', `/api/customer/:customerId/${seg}s`, (ctx) => {
    const p = principalOf(s, ctx);
    const customer = s.auth.checkAccess(p, 'CUSTOMER', parseUuid(ctx.params[0], 'customerId'), 'read');
    const q = parsePageQuery(ctx.query);
    const typeFilter = ctx.query.get('type') || undefined;
    const all = s.entities.list(
      type,
      (r) => r.customerId === (customer.id as string) && (typeFilter === undefined || r.type === typeFilter),
    );
    const page = pageOf<NamedRecord>(all, q);
    return json({ ...page, data: page.data.map(render) });
  });

  router.route('post', `/api/customer/:customerId/${seg}/:id`, async (ctx) => {
    const p = principalOf(s, ctx);
    s.auth.requireTenantAdmin(p);
    const customerId = parseUuid(ctx.params[0], 'customerId');
    const id = parseUuid(ctx.params[1], `${seg}Id`);
    s.auth.checkAccess(p, 'CUSTOMER', customerId, 'write');
    s.auth.checkAccess(p, type, id, 'write');
    const rec = await s.entities.assignToCustomer(type, id, customerId);
    s.bus.publish('accessChanged', { entityType: type, entityId: rec.id });
    return json(render(rec));
  });

  router.route('del', `/api/customer/${seg}/:id`, async (ctx) => {
    const p = principalOf(s, ctx);
    s.auth.requireTenantAdmin(p);
    const rec = s.auth.checkAccess(p, type, parseUuid(ctx.params[0], `${seg}Id`), 'write');
    const unassigned = await s.entities.unassignFromCustomer(type, rec.id);
    s.bus.publish('accessChanged', { entityType: type, entityId: rec.id });
    return json(render(unassigned));
  });
}
