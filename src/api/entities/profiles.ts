/**
 * Device profiles REST (docs/api.md "Device profiles"), as TB's DeviceProfileController: the whole profile,
 * which carries the provisioning key and secret, is the tenant admin's alone (read and write); every user of the
 * tenant reads the infos and names, which carry neither. Unknown profile → 404, non-UUID id → 400, a taken name
 * or provision key → 400, alarm rules that cannot run → 400, nothing changed.
 */
import type { Principal } from '../../auth/index.js';
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import { type HttpContext, type HttpRouter, json } from '../../uws/adapter.js';
import { pageOf } from '../../store/entities.js';
import type { DeviceProfileRecord } from '../../store/profile-records.js';
import { type ProfileInput, DeviceProfileStore } from '../../store/profiles.js';
import { parseProfileAlarms } from '../../alarms/rules/model.js';
import { principalOf } from '../principal.js';
import { bodyEntityId, jsonObjectBody, optionalString, parsePageQuery, parseUuid } from './params.js';
import { deviceProfileInfoJson, deviceProfileJson, entityId } from './render.js';

/** A field that may be a string or explicitly null (TB clears it). */
function nullableString(body: Record<string, unknown>, field: string): string | null | undefined {
  return body[field] === null ? null : optionalString(body, field);
}

function profileInput(body: Record<string, unknown>): ProfileInput {
  const data = body['profileData'];
  if (data !== undefined && data !== null && (typeof data !== 'object' || Array.isArray(data)))
    throw new OutpostError('BAD_PAYLOAD', "Field 'profileData' must be a JSON object");
  return {
    id: bodyEntityId(body),
    name: optionalString(body, 'name'),
    description: nullableString(body, 'description'),
    image: nullableString(body, 'image'),
    transportType: optionalString(body, 'transportType'),
    provisionType: optionalString(body, 'provisionType'),
    provisionDeviceKey: nullableString(body, 'provisionDeviceKey'),
    profileData: (data ?? undefined) as Record<string, unknown> | undefined,
  };
}

export function registerProfileRoutes(router: HttpRouter, s: Services): void {
  const profiles = new DeviceProfileStore(s.entities, s.env);
  const render = (p: DeviceProfileRecord): Record<string, unknown> => deviceProfileJson(p, profiles.isDefault(p));
  const readable = (p: Principal, rawId: string | undefined): DeviceProfileRecord => {
    const rec = profiles.require(parseUuid(rawId, 'deviceProfileId'));
    if (rec.tenantId !== p.tenantId) throw new OutpostError('PERMISSION_DENIED');
    return rec;
  };
  const ofTenant = (p: Principal): DeviceProfileRecord[] => profiles.list().filter((r) => r.tenantId === p.tenantId);
  // the key and secret create devices (a gateway among them): a customer user holding them could step outside
  // its customer, so the full profile is checked for the role before anything is looked up
  const adminOf = (ctx: HttpContext): Principal => {
    const p = principalOf(s, ctx);
    s.auth.requireTenantAdmin(p);
    return p;
  };

  // the static paths first: `names` and `default` are not ids
  router.route('get', '/api/deviceProfile/names', (ctx) => {
    const p = principalOf(s, ctx);
    return json(ofTenant(p).map((r) => ({ id: entityId('DEVICE_PROFILE', r.id), name: r.name })));
  });
  router.route('get', '/api/deviceProfileInfo/default', (ctx) => {
    principalOf(s, ctx);
    return json(deviceProfileInfoJson(profiles.defaultProfile()));
  });
  router.route('get', '/api/deviceProfile/:id', (ctx) => json(render(readable(adminOf(ctx), ctx.params[0]))));
  router.route('get', '/api/deviceProfileInfo/:id', (ctx) =>
    json(deviceProfileInfoJson(readable(principalOf(s, ctx), ctx.params[0]))),
  );

  router.route('post', '/api/deviceProfile', async (ctx) => {
    const p = adminOf(ctx);
    const input = profileInput(await jsonObjectBody(ctx));
    if (input.id !== undefined) readable(p, input.id);
    // alarm rules are checked here, once: evaluation never meets one it cannot run (docs/api.md "Alarm rules")
    const rules = parseProfileAlarms(input.profileData?.['alarms'], s.config.alarms.maxRulesPerProfile);
    if (!rules.ok) throw new OutpostError('BAD_PARAM', rules.error);
    return json(render(await profiles.save(input)));
  });

  router.route('del', '/api/deviceProfile/:id', async (ctx) => {
    const p = adminOf(ctx);
    await profiles.delete(readable(p, ctx.params[0]).id);
    return {};
  });

  router.route('post', '/api/deviceProfile/:id/default', async (ctx) => {
    const p = adminOf(ctx);
    return json(render(await profiles.setDefault(readable(p, ctx.params[0]).id)));
  });

  router.route('get', '/api/deviceProfiles', (ctx) => {
    const p = adminOf(ctx);
    const page = pageOf(ofTenant(p), parsePageQuery(ctx.query));
    return json({ ...page, data: page.data.map(render) });
  });

  router.route('get', '/api/deviceProfileInfos', (ctx) => {
    const p = principalOf(s, ctx);
    const q = parsePageQuery(ctx.query);
    const transport = ctx.query.get('transportType') || undefined;
    const page = pageOf(
      ofTenant(p).filter((r) => transport === undefined || r.transportType === transport),
      q,
    );
    return json({ ...page, data: page.data.map(deviceProfileInfoJson) });
  });
}
