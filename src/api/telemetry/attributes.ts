/**
 * Attribute REST under /api/plugins/telemetry (docs/api.md), user JWT, access checked on every call:
 * - GET  /{entityType}/{entityId}/keys/attributes[/{scope}]        → ["k",..] (CLIENT, SERVER, SHARED order)
 * - GET  /{entityType}/{entityId}/values/attributes[/{scope}]?keys= → [{"lastUpdateTs","key","value"}] typed
 * - POST /{entityType}/{entityId}/attributes/{scope}, /{entityType}/{entityId}/{scope}, /{deviceId}/{scope}
 *   body {k:v}: SERVER_SCOPE or SHARED_SCOPE; CLIENT_SCOPE, empty body, null value, blank key → 400
 * - DELETE /{entityType}/{entityId}/{scope}?keys=, /{deviceId}/{scope}?keys= ; keys required
 * Errors use the TB error JSON (docs/api.md) rather than TB's plain-text bodies here.
 */
import type { Principal } from '../../auth/index.js';
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import type { HttpContext, HttpRouter, Reply } from '../../uws/adapter.js';
import { jsonText } from '../../uws/adapter.js';
import { parseAttributes, parseBody } from '../../ingest/payload.js';
import { renderAttributeValues } from '../../query/render.js';
import { type AttributeScope, isAttributeScope } from '../../store/attributes.js';
import { type EntityType, isEntityType } from '../../types.js';
import { principalOf } from '../principal.js';

const BASE = '/api/plugins/telemetry';

interface Target {
  readonly principal: Principal;
  readonly entityType: EntityType;
  readonly entityId: string;
}

/** Authenticates, validates the entity type and checks access (404 unknown, 403 not allowed). */
function target(s: Services, ctx: HttpContext, entityType: string, entityId: string, op: 'read' | 'write'): Target {
  const principal = principalOf(s, ctx);
  if (!isEntityType(entityType)) throw new OutpostError('BAD_PARAM', `Invalid entity type: ${entityType}`);
  s.auth.checkAccess(principal, entityType, entityId, op);
  return { principal, entityType, entityId };
}

function scopeParam(raw: string): AttributeScope {
  if (!isAttributeScope(raw)) throw new OutpostError('BAD_PARAM', `Invalid attribute scope: ${raw}`);
  return raw;
}

/** `keys=a,b` (split on ',', no trimming) or repeated `key=a&key=b` (wins when present). Absent → undefined. */
function keysParam(ctx: HttpContext): string[] | undefined {
  const repeated = ctx.query.getAll('key');
  if (repeated.length > 0) return repeated;
  const raw = ctx.query.get('keys');
  if (raw === null || raw === '') return undefined;
  return raw.split(',');
}

const param = (ctx: HttpContext, i: number): string => ctx.params[i] ?? '';

function keysReply(s: Services, ctx: HttpContext, rawScope: string | undefined): Reply {
  const t = target(s, ctx, param(ctx, 0), param(ctx, 1), 'read');
  const scope = rawScope === undefined ? undefined : scopeParam(rawScope);
  return jsonText(JSON.stringify(s.attributes.keys(t.entityId, scope)));
}

function valuesReply(s: Services, ctx: HttpContext, rawScope: string | undefined): Reply {
  const t = target(s, ctx, param(ctx, 0), param(ctx, 1), 'read');
  const scope = rawScope === undefined ? undefined : scopeParam(rawScope);
  const attrs = s.attributes.get(t.entityId, scope, keysParam(ctx));
  return jsonText(renderAttributeValues(attrs));
}

/** Writes (docs/api.md): nothing is stored unless the whole body is valid. */
async function save(
  s: Services,
  ctx: HttpContext,
  entityType: string,
  entityId: string,
  rawScope: string,
): Promise<void> {
  const t = target(s, ctx, entityType, entityId, 'write');
  const scope = scopeParam(rawScope);
  if (scope === 'CLIENT_SCOPE') throw new OutpostError('BAD_PARAM', 'Invalid scope: CLIENT_SCOPE');
  const entries = parseAttributes(parseBody(await ctx.body()), true);
  if (entries.length === 0) throw new OutpostError('BAD_PAYLOAD', 'No attributes data found in request body!');
  await s.attributes.save(t.entityType, t.entityId, scope, entries, s.now());
}

async function remove(
  s: Services,
  ctx: HttpContext,
  entityType: string,
  entityId: string,
  rawScope: string,
): Promise<void> {
  const t = target(s, ctx, entityType, entityId, 'write');
  const scope = scopeParam(rawScope);
  const keys = keysParam(ctx);
  if (keys === undefined) throw new OutpostError('BAD_PARAM', 'Empty keys: []');
  await s.attributes.delete(t.entityType, t.entityId, scope, keys);
}

export function registerAttributeRoutes(router: HttpRouter, s: Services): void {
  router.route('get', `${BASE}/:entityType/:entityId/keys/attributes`, (ctx) => keysReply(s, ctx, undefined));
  router.route('get', `${BASE}/:entityType/:entityId/keys/attributes/:scope`, (ctx) =>
    keysReply(s, ctx, param(ctx, 2)),
  );
  router.route('get', `${BASE}/:entityType/:entityId/values/attributes`, (ctx) => valuesReply(s, ctx, undefined));
  router.route('get', `${BASE}/:entityType/:entityId/values/attributes/:scope`, (ctx) =>
    valuesReply(s, ctx, param(ctx, 2)),
  );

  router.route('post', `${BASE}/:entityType/:entityId/attributes/:scope`, (ctx) =>
    save(s, ctx, param(ctx, 0), param(ctx, 1), param(ctx, 2)),
  );
  router.route('post', `${BASE}/:entityType/:entityId/:scope`, (ctx) =>
    save(s, ctx, param(ctx, 0), param(ctx, 1), param(ctx, 2)),
  );
  // TB's legacy device forms: /{deviceId}/{scope}
  router.route('post', `${BASE}/:deviceId/:scope`, (ctx) => save(s, ctx, 'DEVICE', param(ctx, 0), param(ctx, 1)));
  router.route('del', `${BASE}/:entityType/:entityId/:scope`, (ctx) =>
    remove(s, ctx, param(ctx, 0), param(ctx, 1), param(ctx, 2)),
  );
  router.route('del', `${BASE}/:deviceId/:scope`, (ctx) => remove(s, ctx, 'DEVICE', param(ctx, 0), param(ctx, 1)));
}
