/**
 * API keys REST, as ThingsBoard 4.3's ApiKeyController (docs/api.md "API keys"). Every role may call it; who may
 * act for whom is TB's user permission: a tenant admin for any user of its tenant, a customer user for itself
 * (and it may list the keys of any user of its customer). A key's value is answered once, by its creation.
 */
import type { AccessOp, Principal } from '../../auth/index.js';
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import { type ApiKeyRecord, notFound } from '../../store/api-keys.js';
import { apiKeyJson } from './api-key-json.js';
import type { UserRecord } from '../../store/entities.js';
import type { Page } from '../../store/paging.js';
import { checkLength } from '../../store/names.js';
import { type HttpRouter, json } from '../../uws/adapter.js';
import { bodyEntityId, jsonObjectBody, parsePageQuery, parseUuid } from '../entities/params.js';
import { principalOf } from '../principal.js';

/** bytes; an API key's JSON is small */
const MAX_BODY_BYTES = 16 * 1024;
const SORT_PROPERTIES = ['createdTime', 'expirationTime', 'description', 'enabled'] as const;
type SortProperty = (typeof SORT_PROPERTIES)[number];

export function registerApiKeyApi(router: HttpRouter, s: Services): void {
  const opts = { maxBody: MAX_BODY_BYTES };

  /** TB's checkUserId: an unknown user → 404; READ or WRITE as the principal's role allows, else 403. */
  const checkUser = (p: Principal, userId: string, op: AccessOp): UserRecord => {
    const u = s.entities.user(userId);
    if (u === undefined || u.tenantId !== p.tenantId)
      throw new OutpostError('ENTITY_NOT_FOUND', `User with id [${userId}] is not found`);
    if (p.authority === 'TENANT_ADMIN') return u;
    if (op === 'write' ? u.id === p.userId : u.customerId === p.customerId) return u;
    throw new OutpostError('PERMISSION_DENIED');
  };

  /** A key the principal may change: unknown → 404, another's → 403. */
  const writableKey = (p: Principal, rawId: string | undefined): ApiKeyRecord => {
    const id = parseUuid(rawId, 'id');
    const k = s.auth.apiKeys.store.get(id);
    if (k === undefined || k.tenantId !== p.tenantId) throw notFound(id);
    checkUser(p, k.userId, 'write');
    return k;
  };

  /** After a key changed: its cached lookup goes; a key that no longer authenticates ends its websockets. */
  const changed = (id: string, revoked: boolean): void => {
    s.auth.apiKeys.forget(id);
    if (revoked) s.bus.publish('principalsRevoked', { sessionIds: [id], userIds: [], customerIds: [] });
  };

  router.route(
    'post',
    '/api/apiKey',
    async (ctx) => {
      const p = principalOf(s, ctx);
      const body = await jsonObjectBody(ctx);
      const id = bodyEntityId(body);
      const description = body['description'];
      if (typeof description !== 'string' || description.trim() === '')
        throw new OutpostError('BAD_PARAM', 'Validation error: description must not be blank');
      checkLength('description', description);
      const userId = userIdOf(body);
      const enabled = body['enabled'] ?? false;
      if (typeof enabled !== 'boolean') throw new OutpostError('BAD_PAYLOAD', "Field 'enabled' must be a boolean");
      const expirationTime = expirationOf(body);
      if (id !== undefined) {
        const k = writableKey(p, id);
        if (userId !== undefined && userId !== k.userId)
          throw new OutpostError('BAD_PARAM', 'Cannot update API key user id!');
        if (expirationTime !== undefined && expirationTime !== k.expirationTime)
          throw new OutpostError('BAD_PARAM', 'Cannot update API key expiration time!');
        const next = await s.auth.apiKeys.store.update(k.id, { description, enabled });
        changed(k.id, k.enabled && !enabled);
        return json(apiKeyJson(next, s.now(), null));
      }
      if (userId === undefined) throw new OutpostError('BAD_PARAM', 'Validation error: userId must not be null');
      const user = checkUser(p, userId, 'write');
      const { record, value } = await s.auth.apiKeys.store.create({
        tenantId: user.tenantId,
        userId: user.id,
        description,
        enabled,
        expirationTime: expirationTime ?? 0,
      });
      return json(apiKeyJson(record, s.now(), value));
    },
    opts,
  );

  router.route('get', '/api/apiKeys/:userId', (ctx) => {
    const p = principalOf(s, ctx);
    const query = new URLSearchParams(ctx.query);
    const sortRaw = query.get('sortProperty');
    query.delete('sortProperty');
    const q = parsePageQuery(query);
    const userId = parseUuid(ctx.params[0], 'userId');
    let sort: SortProperty = 'createdTime';
    if (sortRaw !== null && sortRaw !== '') {
      if (!(SORT_PROPERTIES as readonly string[]).includes(sortRaw))
        throw new OutpostError(
          'BAD_PARAM',
          `Unsupported sortProperty '${sortRaw}' (one of ${SORT_PROPERTIES.join(', ')})`,
        );
      sort = sortRaw as SortProperty;
    }
    checkUser(p, userId, 'read');
    const now = s.now();
    const page = pageOfKeys(s.auth.apiKeys.store.list(userId), q.textSearch, sort, q.sortOrder, q.page, q.pageSize);
    return json({ ...page, data: page.data.map((k) => apiKeyJson(k, now)) });
  });

  router.route('put', '/api/apiKey/:id/enabled/:enabled', async (ctx) => {
    const p = principalOf(s, ctx);
    const raw = ctx.params[1];
    if (raw !== 'true' && raw !== 'false')
      throw new OutpostError('BAD_PARAM', `Parameter 'enabled' must be true or false, got '${raw ?? ''}'`);
    const k = writableKey(p, ctx.params[0]);
    const enabled = raw === 'true';
    const next = await s.auth.apiKeys.store.update(k.id, { enabled });
    changed(k.id, !enabled);
    return json(apiKeyJson(next, s.now()));
  });

  // the body is the description itself, not JSON (TB: a @RequestBody String)
  router.route(
    'put',
    '/api/apiKey/:id/description',
    async (ctx) => {
      const p = principalOf(s, ctx);
      const k = writableKey(p, ctx.params[0]);
      const description = (await ctx.body()).toString('utf8');
      if (description.trim() === '')
        throw new OutpostError('BAD_PARAM', 'Validation error: description must not be blank');
      checkLength('description', description);
      const next = await s.auth.apiKeys.store.update(k.id, { description });
      changed(k.id, false);
      return json(apiKeyJson(next, s.now()));
    },
    opts,
  );

  router.route('del', '/api/apiKey/:id', async (ctx) => {
    const p = principalOf(s, ctx);
    const k = writableKey(p, ctx.params[0]);
    if (!(await s.auth.apiKeys.store.delete(k.id))) throw notFound(k.id);
    changed(k.id, true);
    return {};
  });
}

/** The request's `userId`: TB's `{"entityType":"USER","id"}` (only `id` is read), or a bare UUID string. */
function userIdOf(body: Record<string, unknown>): string | undefined {
  const v = body['userId'];
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'string') return parseUuid(v, 'userId');
  if (typeof v === 'object' && !Array.isArray(v))
    return parseUuid(String((v as Record<string, unknown>)['id'] ?? ''), 'userId.id');
  throw new OutpostError('BAD_PAYLOAD', "Field 'userId' must be an entity id object");
}

/** `expirationTime`: epoch ms, 0 for never; absent or null → undefined. */
function expirationOf(body: Record<string, unknown>): number | undefined {
  const v = body['expirationTime'];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
    throw new OutpostError('BAD_PAYLOAD', "Field 'expirationTime' must be epoch milliseconds (0: never)");
  return v;
}

/** TB's PageData of a user's keys: textSearch is a case-insensitive substring of the description. */
function pageOfKeys(
  keys: ApiKeyRecord[],
  textSearch: string | undefined,
  sort: SortProperty,
  order: 'ASC' | 'DESC' | undefined,
  page: number,
  pageSize: number,
): Page<ApiKeyRecord> {
  const needle = textSearch?.toLowerCase() ?? '';
  const matching = needle === '' ? keys : keys.filter((k) => k.description.toLowerCase().includes(needle));
  const sign = order === 'DESC' ? -1 : 1;
  const value = (k: ApiKeyRecord): string | number => (sort === 'enabled' ? Number(k.enabled) : k[sort]);
  matching.sort((a, b) => {
    const va = value(a);
    const vb = value(b);
    return sign * (va < vb ? -1 : va > vb ? 1 : 0) || a.createdTime - b.createdTime || (a.id < b.id ? -1 : 1);
  });
  const start = page * pageSize;
  return {
    data: matching.slice(start, start + pageSize),
    totalPages: Math.ceil(matching.length / pageSize),
    totalElements: matching.length,
    hasNext: start + pageSize < matching.length,
  };
}
