/**
 * Alarms REST (docs/api.md "Alarms"), as ThingsBoard's AlarmController (comments aside): TENANT_ADMIN and
 * CUSTOMER_USER. A customer user reaches an alarm only when the alarm's customer (its originator's when it was
 * created) is its own; listing an entity needs read access to it.
 */
import type { Principal } from '../../auth/index.js';
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import { type HttpContext, type HttpRouter, type Reply, json } from '../../uws/adapter.js';
import { type EntityType, isEntityType } from '../../types.js';
import {
  ALARM_SEVERITIES,
  type AlarmRecord,
  type AlarmSeverity,
  type RaiseOptions,
  notFound,
  severityRank,
} from '../../store/alarms.js';
import { principalOf } from '../principal.js';
import { alarmInfoJson, alarmJson } from './alarm-json.js';
import { type AlarmFilter, alarmPage, alarmPageQuery, matches, v1Filter, v2Filter } from './alarm-query.js';
import { jsonObjectBody, parseUuid } from './params.js';

function bool(body: Record<string, unknown>, field: string): boolean | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw new OutpostError('BAD_PAYLOAD', `Field '${field}' must be a boolean`);
  return v;
}

function ts(body: Record<string, unknown>, field: string): number {
  const v = body[field];
  if (v === undefined || v === null) return 0;
  if (typeof v !== 'number' || !Number.isInteger(v))
    throw new OutpostError('BAD_PAYLOAD', `Field '${field}' must be an integer (ms)`);
  return v;
}

function idOf(v: unknown, field: string): string | null | undefined {
  if (v === undefined) return undefined;
  if (v === null) return null;
  if (typeof v === 'object' && !Array.isArray(v))
    return parseUuid(String((v as Record<string, unknown>)['id'] ?? ''), `${field}.id`);
  throw new OutpostError('BAD_PAYLOAD', `Field '${field}' must be an entity id object`);
}

/** The body of `POST /api/alarm`, checked as TB's AlarmDataValidator and validateAlarmRequest do. */
function alarmBody(body: Record<string, unknown>) {
  const type = body['type'];
  if (typeof type !== 'string' || type.trim() === '')
    throw new OutpostError('BAD_PARAM', 'Alarm type should be specified!');
  const o = body['originator'];
  if (o === undefined || o === null) throw new OutpostError('BAD_PARAM', 'Alarm originator should be specified!');
  if (typeof o !== 'object' || Array.isArray(o))
    throw new OutpostError('BAD_PAYLOAD', "Field 'originator' must be an entity id object");
  const oType = String((o as Record<string, unknown>)['entityType'] ?? '');
  if (!isEntityType(oType))
    throw new OutpostError('BAD_PARAM', `No enum constant org.thingsboard.server.common.data.EntityType.${oType}`);
  const originator = {
    entityType: oType as EntityType,
    id: parseUuid(String((o as Record<string, unknown>)['id'] ?? ''), 'originator.id'),
  };
  const sev = body['severity'];
  if (sev === undefined || sev === null) throw new OutpostError('BAD_PARAM', 'Alarm severity should be specified!');
  if (typeof sev !== 'string' || !(ALARM_SEVERITIES as readonly string[]).includes(sev))
    throw new OutpostError(
      'BAD_PAYLOAD',
      `Cannot deserialize value of type AlarmSeverity from String ${JSON.stringify(sev)}`,
    );
  const startTs = ts(body, 'startTs') || Date.now();
  const endTs = ts(body, 'endTs') || startTs;
  if (startTs > endTs) throw new OutpostError('BAD_PARAM', "Alarm start ts can't be greater than alarm end ts!");
  const rel = body['propagateRelationTypes'];
  if (rel !== undefined && rel !== null && !(Array.isArray(rel) && rel.every((x) => typeof x === 'string')))
    throw new OutpostError('BAD_PAYLOAD', "Field 'propagateRelationTypes' must be a list of strings");
  const opts: RaiseOptions = {
    raiseOnly: false,
    always: true,
    startTs,
    propagate: bool(body, 'propagate') ?? false,
    propagateToOwner: bool(body, 'propagateToOwner') ?? false,
    propagateToTenant: bool(body, 'propagateToTenant') ?? false,
    propagateRelationTypes: (rel as string[] | null | undefined) ?? [],
    customerId: idOf(body['customerId'], 'customerId'),
  };
  return {
    id: idOf(body['id'], 'id') ?? undefined,
    type,
    originator,
    severity: sev as AlarmSeverity,
    startTs,
    endTs,
    details: body['details'],
    acknowledged: bool(body, 'acknowledged'),
    cleared: bool(body, 'cleared'),
    assigneeId: idOf(body['assigneeId'], 'assigneeId'),
    opts,
  };
}

export function registerAlarmRoutes(router: HttpRouter, s: Services): void {
  const entity = (id: string) => s.entities.get(id);
  const info = (a: AlarmRecord) => alarmInfoJson(a, entity);
  /** TB's customerAlarmPermissionChecker */
  const visible = (p: Principal, a: AlarmRecord): boolean =>
    a.tenantId === p.tenantId && (p.authority === 'TENANT_ADMIN' || a.customerId === p.customerId);
  const alarmFor = (p: Principal, rawId: string | undefined): AlarmRecord => {
    const id = parseUuid(rawId, 'alarmId');
    const a = s.alarms.get(id);
    if (a === undefined) throw notFound(id);
    if (!visible(p, a)) throw new OutpostError('PERMISSION_DENIED');
    return a;
  };
  /** an assignee the caller may name: an existing user it can read (TB's checkUserId) */
  const assignee = (p: Principal, rawId: string): string => {
    const id = parseUuid(rawId, 'assigneeId');
    const u = s.entities.get(id);
    if (u?.entityType !== 'USER') throw new OutpostError('ENTITY_NOT_FOUND', `User with id [${id}] is not found`);
    s.auth.checkAccess(p, 'USER', id, 'read');
    return id;
  };

  router.route('get', '/api/alarm/info/:alarmId', (ctx) => json(info(alarmFor(principalOf(s, ctx), ctx.params[0]))));
  router.route('get', '/api/alarm/types', (ctx) => {
    const p = principalOf(s, ctx);
    const q = alarmPageQuery(ctx.query);
    const types = [
      ...new Set(
        s.alarms
          .all()
          .filter((a) => a.tenantId === p.tenantId)
          .map((a) => a.type),
      ),
    ]
      .filter((t) => t.toLowerCase().includes(q.textSearch))
      .sort();
    if ((ctx.query.get('sortOrder') ?? '').toUpperCase() === 'DESC') types.reverse();
    const start = q.page * q.pageSize;
    return json({
      data: types
        .slice(start, start + q.pageSize)
        .map((type) => ({ tenantId: { entityType: 'TENANT', id: p.tenantId }, entityType: 'ALARM', type })),
      totalPages: Math.ceil(types.length / q.pageSize),
      totalElements: types.length,
      hasNext: start + q.pageSize < types.length,
    });
  });
  router.route('get', '/api/alarm/:alarmId', (ctx) => json(alarmJson(alarmFor(principalOf(s, ctx), ctx.params[0]))));

  router.route('post', '/api/alarm', async (ctx) => {
    const p = principalOf(s, ctx);
    const b = alarmBody(await jsonObjectBody(ctx));
    s.auth.checkAccess(p, b.originator.entityType, b.originator.id, 'write');
    let a: AlarmRecord;
    if (b.id !== undefined) {
      const old = alarmFor(p, b.id);
      a = await s.alarms.update(
        old.id,
        {
          severity: b.severity,
          startTs: b.startTs,
          endTs: b.endTs,
          detailsJson: b.details === undefined || b.details === null ? undefined : JSON.stringify(b.details),
        },
        b.opts,
      );
    } else {
      a = (await s.alarms.createOrUpdateActive(b.originator, b.type, b.severity, b.details, b.endTs, b.opts)).alarm;
    }
    const now = Date.now();
    if (b.acknowledged === true && !a.acknowledged) a = (await s.alarms.ack(a.id, now)) ?? a;
    if (b.cleared === true && !a.cleared) a = (await s.alarms.clear(a.id, now)) ?? a;
    if (b.assigneeId !== undefined && b.assigneeId !== a.assigneeId) {
      const who = b.assigneeId === null ? null : assignee(p, b.assigneeId);
      a = (await s.alarms.assign(a.id, who, now)) ?? a;
    }
    return json(alarmJson(a));
  });

  router.route('del', '/api/alarm/:alarmId', async (ctx) => {
    const a = alarmFor(principalOf(s, ctx), ctx.params[0]);
    if (!(await s.alarms.delete(a.id))) throw notFound(a.id);
    return json(true);
  });

  router.route('post', '/api/alarm/:alarmId/ack', async (ctx) => {
    const a = alarmFor(principalOf(s, ctx), ctx.params[0]);
    const done = await s.alarms.ack(a.id, Date.now());
    if (done === undefined) throw new OutpostError('BAD_PARAM', 'Alarm was already acknowledged!');
    return json(info(done));
  });
  router.route('post', '/api/alarm/:alarmId/clear', async (ctx) => {
    const a = alarmFor(principalOf(s, ctx), ctx.params[0]);
    const done = await s.alarms.clear(a.id, Date.now());
    if (done === undefined) throw new OutpostError('BAD_PARAM', 'Alarm was already cleared!');
    return json(info(done));
  });
  router.route('post', '/api/alarm/:alarmId/assign/:assigneeId', async (ctx) => {
    const p = principalOf(s, ctx);
    const a = alarmFor(p, ctx.params[0]);
    const done = await s.alarms.assign(a.id, assignee(p, ctx.params[1] ?? ''), Date.now());
    if (done === undefined) throw new OutpostError('BAD_PARAM', 'Alarm was already assigned to this user!');
    return json(alarmJson(done));
  });
  router.route('del', '/api/alarm/:alarmId/assign', async (ctx) => {
    const a = alarmFor(principalOf(s, ctx), ctx.params[0]);
    const done = await s.alarms.assign(a.id, null, Date.now());
    if (done === undefined) throw new OutpostError('BAD_PARAM', 'Alarm was already unassigned!');
    return json(alarmJson(done));
  });

  /** the alarms an entity originated, once the caller may read the entity */
  const ofEntity = (ctx: HttpContext, p: Principal): AlarmRecord[] => {
    const type = ctx.params[0] ?? '';
    if (!isEntityType(type))
      throw new OutpostError('BAD_PARAM', `No enum constant org.thingsboard.server.common.data.EntityType.${type}`);
    const id = parseUuid(ctx.params[1], 'entityId');
    s.auth.checkAccess(p, type, id, 'read');
    return s.alarms.byOriginator(id).filter((a) => visible(p, a));
  };
  /** the caller's alarms; the uncleared ones from their index when only those are asked for */
  const all = (p: Principal, f: AlarmFilter): AlarmRecord[] =>
    (f.cleared === false ? s.alarms.active() : s.alarms.all()).filter((a) => visible(p, a));
  const listed = (ctx: HttpContext, alarms: AlarmRecord[], f: AlarmFilter): Reply => {
    const page = alarmPage(
      alarms.filter((a) => matches(a, f)),
      alarmPageQuery(ctx.query),
    );
    return json({ ...page, data: page.data.map(info) });
  };
  router.route('get', '/api/alarm/highestSeverity/:entityType/:entityId', (ctx) => {
    const p = principalOf(s, ctx);
    const f = v1Filter(ctx.query);
    let best: AlarmSeverity | undefined;
    for (const a of ofEntity(ctx, p))
      if (matches(a, f) && (best === undefined || severityRank(a.severity) < severityRank(best))) best = a.severity;
    return best === undefined ? { status: 200, body: '' } : json(best);
  });
  router.route('get', '/api/alarm/:entityType/:entityId', (ctx) => {
    const p = principalOf(s, ctx);
    const f = v1Filter(ctx.query);
    return listed(ctx, ofEntity(ctx, p), f);
  });
  router.route('get', '/api/alarms', (ctx) => {
    const p = principalOf(s, ctx);
    const f = v1Filter(ctx.query);
    return listed(ctx, all(p, f), f);
  });
  router.route('get', '/api/v2/alarm/:entityType/:entityId', (ctx) => {
    const p = principalOf(s, ctx);
    const f = v2Filter(ctx.query);
    return listed(ctx, ofEntity(ctx, p), f);
  });
  router.route('get', '/api/v2/alarms', (ctx) => {
    const p = principalOf(s, ctx);
    const f = v2Filter(ctx.query);
    return listed(ctx, all(p, f), f);
  });
}
