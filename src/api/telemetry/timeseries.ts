/**
 * Timeseries REST under /api/plugins/telemetry/{entityType}/{entityId} (docs/api.md): keys/timeseries,
 * latest and history values, POST timeseries/{scope}, DELETE timeseries/delete.
 *
 * Every handler: user JWT (401) → entity type and id syntax (400) → access (404/403, write for POST/DELETE)
 * → parameters (400) → the query layer. Handlers stay thin: parsing lives in src/query/params.ts, queries in
 * src/query/history.ts, JSON text in src/query/render.ts.
 */
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import { type HttpContext, type HttpRouter, type Reply, type StreamReply, jsonText } from '../../uws/adapter.js';
import { countPoints, parseBody, parseTelemetry } from '../../ingest/payload.js';
import type { JsonValue } from '../../ingest/json.js';
import type { TsRecord } from '../../model/record.js';
import { queryHistory, queryLatest } from '../../query/history.js';
import {
  isHistoryRequest,
  parseBoolParam,
  parseEntityId,
  parseEntityType,
  parseHistoryParams,
  parseKeys,
  parseLongParam,
  parseStrict,
} from '../../query/params.js';
import { renderHistoryChunks, renderLatest } from '../../query/render.js';
import type { AccessOp } from '../../auth/index.js';
import type { EntityType } from '../../types.js';
import { principalOf } from '../principal.js';

export const TELEMETRY_PREFIX = '/api/plugins/telemetry/:entityType/:entityId';

interface Target {
  readonly entityType: EntityType;
  readonly entityId: string;
}

/** Authenticates, validates the path's entity and checks the principal may `op` it (docs/api.md). */
function target(s: Services, ctx: HttpContext, op: AccessOp): Target {
  const principal = principalOf(s, ctx);
  const entityType = parseEntityType(ctx.params[0] ?? '');
  const entityId = parseEntityId(ctx.params[1] ?? '');
  s.auth.checkAccess(principal, entityType, entityId, op);
  return { entityType, entityId };
}

/** GET keys/timeseries → `["k1","k2"]`, sorted. */
export function getTimeseriesKeys(s: Services) {
  return (ctx: HttpContext): Reply => {
    const { entityId } = target(s, ctx, 'read');
    return jsonText(JSON.stringify(s.timeseries.keys(entityId)));
  };
}

/**
 * GET values/timeseries: latest unless both startTs and endTs are given (TB routing quirk, docs/api.md);
 * `historyOnly` (values/timeseries/history) always answers history and requires both.
 */
export function getTimeseriesValues(s: Services, historyOnly: boolean) {
  return (ctx: HttpContext): Reply | StreamReply => {
    const { entityId } = target(s, ctx, 'read');
    const strict = parseStrict(ctx.query);
    const keys = parseKeys(ctx.query);
    if (!historyOnly && !isHistoryRequest(ctx.query)) {
      return jsonText(renderLatest(queryLatest(s.timeseries, entityId, keys, s.now()), strict));
    }
    const request = parseHistoryParams(ctx.query);
    // Validates (400) even when no keys are asked for, then answers `{}` (TB).
    const series = queryHistory(s.timeseries, entityId, keys ?? [], request, s.config.query);
    return historyReply(renderHistoryChunks(series, strict));
  };
}

/**
 * A small answer (≤ 2 chunks) goes out as one plain reply; a larger one streams chunk by chunk with
 * backpressure, so a large page never sits in memory whole.
 */
function historyReply(chunks: IterableIterator<string>): Reply | StreamReply {
  const first = chunks.next();
  const second = first.done ? first : chunks.next();
  if (second.done) return jsonText(first.done ? '{}' : first.value);
  const head = [first.value as string, second.value];
  return {
    contentType: 'application/json',
    async produce(sink) {
      try {
        for (const c of head) await sink.write(c);
        for (let r = chunks.next(); !r.done && !sink.aborted; r = chunks.next()) await sink.write(r.value);
      } finally {
        chunks.return?.(undefined);
      }
    },
  };
}

function parseTimeseriesBody(body: Buffer, now: number): TsRecord[] {
  let json: JsonValue;
  try {
    json = parseBody(body);
  } catch (err) {
    throw new OutpostError('BAD_JSON', 'Unable to parse time series payload: Invalid JSON body!', { cause: err });
  }
  try {
    return parseTelemetry(json, now, true);
  } catch (err) {
    if (err instanceof OutpostError) {
      throw new OutpostError('BAD_PAYLOAD', `Unable to parse time series payload. Invalid JSON body: ${err.message}`, {
        cause: err,
      });
    }
    throw err;
  }
}

/**
 * POST timeseries/{scope}[/{ttl}]: the device API's shapes, but a null value is rejected; nothing to save →
 * 400 "No time series data found in request body!". `scope` and `ttl` are accepted and ignored (no TTL
 * support). Stored through ingest (durable, then published on the bus); 200 with an empty body.
 */
export function postTimeseries(s: Services) {
  return async (ctx: HttpContext): Promise<void> => {
    const { entityType, entityId } = target(s, ctx, 'write');
    const records = parseTimeseriesBody(await ctx.body(), s.now());
    if (countPoints(records) === 0) throw new OutpostError('BAD_PAYLOAD', 'No time series data found in request body!');
    await s.ingest.save(entityType, entityId, records);
  };
}

/**
 * DELETE timeseries/delete?keys=&startTs=&endTs=&deleteAllDataForKeys=&deleteLatest=&rewriteLatestIfDeleted=
 * Range [startTs, endTs); deleteAllDataForKeys=true deletes every point of the keys (TB uses [0, now): we
 * also remove future and pre-epoch points, which is what "all data" says). deleteLatest defaults true,
 * rewriteLatestIfDeleted false. Publishes `telemetryDeleted` with the keys whose latest value went away or
 * was rewritten. 200 with an empty body once durable.
 */
export function deleteTimeseries(s: Services) {
  return async (ctx: HttpContext): Promise<void> => {
    const { entityType, entityId } = target(s, ctx, 'write');
    const keys = parseKeys(ctx.query);
    if (keys === undefined) throw new OutpostError('BAD_PARAM', 'Empty keys: []');
    const all = parseBoolParam(ctx.query, 'deleteAllDataForKeys') ?? false;
    let startTs = parseLongParam(ctx.query, 'startTs');
    let endTs = parseLongParam(ctx.query, 'endTs');
    if (all) {
      startTs = Number.MIN_SAFE_INTEGER;
      endTs = Number.MAX_SAFE_INTEGER;
    } else if (startTs === undefined || endTs === undefined) {
      throw new OutpostError(
        'BAD_PARAM',
        "When deleteAllDataForKeys is false, start and end timestamp values shouldn't be empty",
      );
    }
    const deleteLatest = parseBoolParam(ctx.query, 'deleteLatest') ?? true;
    const rewriteLatest = parseBoolParam(ctx.query, 'rewriteLatestIfDeleted') ?? false;

    const before = s.timeseries.latest(entityId, keys);
    await s.timeseries.delete(entityId, { keys, startTs, endTs, deleteLatest, rewriteLatest });
    const after = s.timeseries.latest(entityId, keys);
    const changed = keys.filter((k) => {
      const b = before.get(k);
      return b !== undefined && after.get(k)?.ts !== b.ts;
    });
    if (changed.length > 0) s.bus.publish('telemetryDeleted', { entityType, entityId, keys: changed });
  };
}

export function registerTimeseriesRoutes(router: HttpRouter, s: Services): void {
  const p = TELEMETRY_PREFIX;
  router.route('get', `${p}/keys/timeseries`, getTimeseriesKeys(s));
  router.route('get', `${p}/values/timeseries`, getTimeseriesValues(s, false));
  router.route('get', `${p}/values/timeseries/history`, getTimeseriesValues(s, true));
  router.route('post', `${p}/timeseries/:scope`, postTimeseries(s));
  router.route('post', `${p}/timeseries/:scope/:ttl`, postTimeseries(s));
  router.route('del', `${p}/timeseries/delete`, deleteTimeseries(s));
}
