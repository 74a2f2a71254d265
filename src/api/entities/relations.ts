/**
 * Relations REST (docs/api.md "Relations"), as ThingsBoard's EntityRelationController: TENANT_ADMIN and
 * CUSTOMER_USER. Saving or deleting needs write access to both ends; reading needs read access to the named
 * entity, and a relation whose other end the caller cannot read is left out of every list.
 */
import type { Principal } from '../../auth/index.js';
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import { type HttpContext, type HttpRouter, type Reply, json } from '../../uws/adapter.js';
import { isEntityType } from '../../types.js';
import {
  type NewRelation,
  type RelationEnd,
  type RelationFilter,
  type RelationRecord,
  type RelationTypeGroup,
  isRelationTypeGroup,
  queryRelations,
} from '../../store/relations.js';
import type { EntityRecord } from '../../store/entities.js';
import { principalOf } from '../principal.js';
import { jsonObjectBody, parseUuid } from './params.js';

/** TB's parseRelationTypeGroup: absent, blank or unknown → COMMON. */
function groupParam(raw: string | null): RelationTypeGroup {
  const g = raw?.trim() ?? '';
  return isRelationTypeGroup(g) ? g : 'COMMON';
}

function required(q: URLSearchParams, name: string): string {
  const v = q.get(name);
  if (v === null) throw new OutpostError('BAD_PARAM', `Required request parameter '${name}' is not present`);
  return v;
}

function endOf(typeRaw: string, idRaw: string, what: string): RelationEnd {
  if (!isEntityType(typeRaw)) throw new OutpostError('BAD_PARAM', `Invalid entity type: ${typeRaw}`);
  return { entityType: typeRaw, id: parseUuid(idRaw, what) };
}

const endParam = (q: URLSearchParams, side: 'from' | 'to' | 'entity'): RelationEnd =>
  endOf(required(q, `${side}Type`), required(q, `${side}Id`), `${side}Id`);

/** An end in a body: `{"entityType","id"}`; absent or null → undefined (the caller reports it). */
function bodyEnd(v: unknown, field: string): RelationEnd | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v))
    throw new OutpostError('BAD_PAYLOAD', `Field '${field}' must be an entity id object`);
  const o = v as Record<string, unknown>;
  return endOf(String(o['entityType'] ?? ''), String(o['id'] ?? ''), `${field}.id`);
}

/** The body of a save, checked as TB's ConstraintValidator does (messages as TB gives them). */
function relationBody(body: Record<string, unknown>): NewRelation {
  const from = bodyEnd(body['from'], 'from');
  const to = bodyEnd(body['to'], 'to');
  const type = body['type'];
  const problems: string[] = [];
  if (from === undefined) problems.push('from must not be null');
  if (to === undefined) problems.push('to must not be null');
  if (type !== undefined && type !== null && typeof type !== 'string')
    throw new OutpostError('BAD_PAYLOAD', "Field 'type' must be a string");
  if (typeof type !== 'string' || type.trim() === '') problems.push('type must not be blank');
  else if (type.includes('\u0000')) problems.push('type should not contain 0x00 symbol');
  else if (type.length > 255) problems.push('type length must be equal or less than 255');
  if (problems.length > 0 || from === undefined || to === undefined || typeof type !== 'string')
    throw new OutpostError('BAD_PARAM', `Validation error: ${problems.join(', ')}`);
  const rawGroup = body['typeGroup'];
  let typeGroup: RelationTypeGroup = 'COMMON';
  if (rawGroup !== undefined && rawGroup !== null) {
    if (typeof rawGroup !== 'string' || !isRelationTypeGroup(rawGroup))
      throw new OutpostError('BAD_PAYLOAD', `Invalid typeGroup: ${String(rawGroup)}`);
    typeGroup = rawGroup;
  }
  const info = body['additionalInfo'];
  return {
    from,
    to,
    type,
    typeGroup,
    ...(info === undefined || info === null ? {} : { additionalInfoJson: JSON.stringify(info) }),
  };
}

export function relationJson(r: RelationRecord): Record<string, unknown> {
  return {
    from: { entityType: r.from.entityType, id: r.from.id },
    to: { entityType: r.to.entityType, id: r.to.id },
    type: r.type,
    typeGroup: r.typeGroup,
    version: r.version,
    additionalInfo: r.additionalInfoJson === undefined ? null : (JSON.parse(r.additionalInfoJson) as unknown),
  };
}

/** What TB's UI shows for an entity: a device's or asset's name, a customer's title, a user's email. */
function nameOf(rec: EntityRecord | undefined): string | null {
  if (rec === undefined) return null;
  if ('name' in rec) return rec.name;
  if ('title' in rec) return rec.title;
  return rec.email;
}

export function registerRelationRoutes(router: HttpRouter, s: Services): void {
  const canRead = (p: Principal, end: RelationEnd): boolean => {
    try {
      s.auth.checkAccess(p, end.entityType, end.id, 'read');
      return true;
    } catch {
      return false;
    }
  };
  /** TB's filterRelationsByReadPermission: the named end is checked already, the other end here */
  const readable = (p: Principal, rels: RelationRecord[], named: 'from' | 'to'): RelationRecord[] =>
    p.authority === 'TENANT_ADMIN' ? rels : rels.filter((r) => canRead(p, named === 'from' ? r.to : r.from));
  const writeBoth = (p: Principal, from: RelationEnd, to: RelationEnd): void => {
    s.auth.checkAccess(p, from.entityType, from.id, 'write');
    s.auth.checkAccess(p, to.entityType, to.id, 'write');
  };
  const info = (r: RelationRecord): Record<string, unknown> => ({
    ...relationJson(r),
    fromName: nameOf(s.entities.get(r.from.id)),
    toName: nameOf(s.entities.get(r.to.id)),
  });

  const save = async (ctx: HttpContext, v2: boolean): Promise<Reply> => {
    const p = principalOf(s, ctx);
    const r = relationBody(await jsonObjectBody(ctx));
    writeBoth(p, r.from, r.to);
    const saved = await s.relations.save(r);
    return v2 ? json(relationJson(saved)) : {};
  };
  router.route('post', '/api/relation', (ctx) => save(ctx, false));
  router.route('post', '/api/v2/relation', (ctx) => save(ctx, true));

  /** the relation a `?fromId&fromType&relationType[&relationTypeGroup]&toId&toType` names */
  const named = (ctx: HttpContext) => {
    const from = endParam(ctx.query, 'from');
    const type = required(ctx.query, 'relationType');
    const to = endParam(ctx.query, 'to');
    return { from, to, type, group: groupParam(ctx.query.get('relationTypeGroup')) };
  };

  const remove = async (ctx: HttpContext, v2: boolean): Promise<Reply> => {
    const p = principalOf(s, ctx);
    const { from, to, type, group } = named(ctx);
    writeBoth(p, from, to);
    const gone = await s.relations.delete(from.id, to.id, group, type);
    if (gone === undefined) throw new OutpostError('NOT_FOUND');
    return v2 ? json(relationJson(gone)) : {};
  };
  router.route('del', '/api/relation', (ctx) => remove(ctx, false));
  router.route('del', '/api/v2/relation', (ctx) => remove(ctx, true));

  router.route('del', '/api/relations', async (ctx) => {
    const p = principalOf(s, ctx);
    const e = endParam(ctx.query, 'entity');
    s.auth.checkAccess(p, e.entityType, e.id, 'write');
    await s.relations.deleteAll(e.id, 'COMMON');
    return {};
  });

  router.route('get', '/api/relation', (ctx) => {
    const p = principalOf(s, ctx);
    const { from, to, type, group } = named(ctx);
    s.auth.checkAccess(p, from.entityType, from.id, 'read');
    s.auth.checkAccess(p, to.entityType, to.id, 'read');
    const r = s.relations.get(from.id, to.id, group, type);
    if (r === undefined) throw new OutpostError('NOT_FOUND');
    return json(relationJson(r));
  });

  /** relations from or to one entity, optionally of one type; group from the query (COMMON by default) */
  const list = (p: Principal, side: 'from' | 'to', end: RelationEnd, q: URLSearchParams, type?: string) => {
    s.auth.checkAccess(p, end.entityType, end.id, 'read');
    const group = groupParam(q.get('relationTypeGroup'));
    const relType = type ?? (q.get('relationType') || undefined);
    const rels = side === 'from' ? s.relations.from(end.id, group, relType) : s.relations.to(end.id, group, relType);
    return readable(p, rels, side);
  };
  /** `?fromId&fromType` or `?toId&toType` */
  const listByQuery = (ctx: HttpContext) => {
    const p = principalOf(s, ctx);
    const side = ctx.query.has('fromId') ? 'from' : ctx.query.has('toId') ? 'to' : undefined;
    if (side === undefined)
      throw new OutpostError('BAD_PARAM', "Required request parameter 'fromId' (or 'toId') is not present");
    return list(p, side, endParam(ctx.query, side), ctx.query);
  };
  router.route('get', '/api/relations', (ctx) => json(listByQuery(ctx).map(relationJson)));
  router.route('get', '/api/relations/info', (ctx) => json(listByQuery(ctx).map(info)));
  for (const side of ['from', 'to'] as const) {
    const byPath = (ctx: HttpContext, render: (r: RelationRecord) => unknown): Reply => {
      const p = principalOf(s, ctx);
      const end = endOf(ctx.params[0] ?? '', ctx.params[1] ?? '', `${side}Id`);
      return json(list(p, side, end, ctx.query, ctx.params[2]).map(render));
    };
    router.route('get', `/api/relations/${side}/:type/:id`, (ctx) => byPath(ctx, relationJson));
    router.route('get', `/api/relations/${side}/:type/:id/:relationType`, (ctx) => byPath(ctx, relationJson));
    router.route('get', `/api/relations/info/${side}/:type/:id`, (ctx) => byPath(ctx, info));
  }

  const byQuery = async (ctx: HttpContext, render: (r: RelationRecord) => unknown): Promise<Reply> => {
    const p = principalOf(s, ctx);
    const body = await jsonObjectBody(ctx);
    const q = relationsQueryOf(body['parameters'], body['filters']);
    s.auth.checkAccess(p, q.root.entityType, q.root.id, 'read');
    const rels = queryRelations(s.relations, { ...q, rootId: q.root.id });
    // deeper levels pass through entities the root does not vouch for: both ends are checked
    const shown = p.authority === 'TENANT_ADMIN' ? rels : rels.filter((r) => canRead(p, r.from) && canRead(p, r.to));
    return json(shown.map(render));
  };
  router.route('post', '/api/relations', (ctx) => byQuery(ctx, relationJson));
  router.route('post', '/api/relations/info', (ctx) => byQuery(ctx, info));
}

/** TB's RelationsSearchParameters and filters, as `POST /api/relations` and entity queries' relationsQuery send them. */
function relationsQueryOf(
  params: unknown,
  filtersRaw: unknown,
): {
  root: RelationEnd;
  direction: 'FROM' | 'TO';
  group: RelationTypeGroup;
  maxLevel: number;
  fetchLastLevelOnly: boolean;
  filters: RelationFilter[];
} {
  if (params === null || typeof params !== 'object' || Array.isArray(params))
    throw new OutpostError('BAD_PAYLOAD', "Field 'parameters' must be an object");
  const o = params as Record<string, unknown>;
  const root = endOf(String(o['rootType'] ?? ''), String(o['rootId'] ?? ''), 'rootId');
  return { root, ...walkOf(o, filtersRaw) };
}

/** direction, group, levels and filters of a relations query or a relationsQuery entity filter */
function walkOf(o: Record<string, unknown>, filtersRaw: unknown) {
  const direction = o['direction'] ?? 'FROM';
  if (direction !== 'FROM' && direction !== 'TO')
    throw new OutpostError('BAD_PAYLOAD', `Invalid direction: ${String(direction)} (FROM or TO)`);
  const maxLevel = o['maxLevel'] ?? 1;
  if (typeof maxLevel !== 'number' || !Number.isInteger(maxLevel))
    throw new OutpostError('BAD_PAYLOAD', "Field 'maxLevel' must be an integer");
  const filters: RelationFilter[] = [];
  if (filtersRaw !== undefined && filtersRaw !== null) {
    if (!Array.isArray(filtersRaw)) throw new OutpostError('BAD_PAYLOAD', "Field 'filters' must be an array");
    for (const f of filtersRaw as unknown[]) {
      if (f === null || typeof f !== 'object')
        throw new OutpostError('BAD_PAYLOAD', 'A relation filter must be an object');
      const rf = f as Record<string, unknown>;
      const rt = rf['relationType'];
      const et = rf['entityTypes'];
      filters.push({
        relationType: typeof rt === 'string' ? rt : undefined,
        entityTypes: Array.isArray(et) ? et.map(String) : undefined,
      });
    }
  }
  return {
    direction: direction as 'FROM' | 'TO',
    group: groupParam(typeof o['relationTypeGroup'] === 'string' ? o['relationTypeGroup'] : null),
    maxLevel,
    fetchLastLevelOnly: o['fetchLastLevelOnly'] === true,
    filters,
  };
}
