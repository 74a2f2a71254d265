/**
 * Query-string parsing for the telemetry REST API (docs/api.md). Every problem is a
 * BAD_PARAM OutpostError: 400 with TB error JSON, errorCode 31. No HTTP types here: input is a
 * URLSearchParams, so the websocket layer can reuse the same rules on its own fields.
 */
import { OutpostError } from '../errors.js';
import type { Order } from '../store/series/interface.js';
import { type EntityType, isEntityType } from '../types.js';
import { isAggFn } from '../store/rollups/aggregate.js';
import type { AggParam, HistoryRequest } from './history.js';

/** Reads `name`; an absent or empty parameter is undefined (Spring treats `x=` like a missing optional). */
function opt(q: URLSearchParams, name: string): string | undefined {
  const v = q.get(name);
  return v === null || v === '' ? undefined : v;
}

const INTEGER = /^[+-]?\d+$/;

/** A Java `long` request parameter; undefined when absent. Non-integers and values beyond ±2^53 → 400. */
export function parseLongParam(q: URLSearchParams, name: string): number | undefined {
  const raw = opt(q, name);
  if (raw === undefined) return undefined;
  const n = INTEGER.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(n)) {
    throw new OutpostError(
      'BAD_PARAM',
      `Failed to convert value of type 'java.lang.String' to required type 'long'; For input string: "${raw}" (parameter '${name}')`,
    );
  }
  return n;
}

const TRUE = new Set(['true', 'on', 'yes', '1']);
const FALSE = new Set(['false', 'off', 'no', '0']);

/** A Spring boolean parameter (true/false/on/off/yes/no/1/0, any case); undefined when absent. */
export function parseBoolParam(q: URLSearchParams, name: string): boolean | undefined {
  const raw = opt(q, name);
  if (raw === undefined) return undefined;
  const v = raw.toLowerCase();
  if (TRUE.has(v)) return true;
  if (FALSE.has(v)) return false;
  throw new OutpostError('BAD_PARAM', `Invalid boolean value '${raw}' for parameter '${name}'`);
}

/**
 * Requested keys: the repeatable `key=a&key=b` form wins when present (it lets keys contain commas), else
 * `keys=a,b` split on commas without trimming. Empty entries are dropped; duplicates removed, first kept.
 * Undefined when neither gives a key.
 */
export function parseKeys(q: URLSearchParams): string[] | undefined {
  const repeated = q.getAll('key').filter((k) => k !== '');
  const list = repeated.length > 0 ? repeated : (q.get('keys') ?? '').split(',').filter((k) => k !== '');
  return list.length > 0 ? [...new Set(list)] : undefined;
}

/** `{entityType}` path segment → EntityType, else 400. */
export function parseEntityType(raw: string): EntityType {
  if (!isEntityType(raw)) throw new OutpostError('BAD_PARAM', `Invalid entity type: ${raw}`);
  return raw;
}

const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/** `{entityId}` path segment: a UUID (lower-cased, as stored), else 400. */
export function parseEntityId(raw: string): string {
  if (!UUID.test(raw)) throw new OutpostError('BAD_PARAM', `Invalid UUID string: ${raw}`);
  return raw.toLowerCase();
}

function parseAgg(q: URLSearchParams): AggParam | undefined {
  const raw = opt(q, 'agg');
  if (raw === undefined) return undefined;
  // TB: Aggregation.valueOf, case-sensitive.
  if (raw === 'NONE' || isAggFn(raw)) return raw;
  throw new OutpostError(
    'BAD_PARAM',
    `No enum constant org.thingsboard.server.common.data.kv.Aggregation.${raw} (parameter 'agg'; expected MIN, MAX, AVG, SUM, COUNT or NONE)`,
  );
}

function parseOrder(q: URLSearchParams): Order | undefined {
  const raw = opt(q, 'orderBy');
  if (raw === undefined) return undefined;
  // TB: Sort.Direction.fromString, case-insensitive.
  const v = raw.toUpperCase();
  if (v === 'ASC' || v === 'DESC') return v;
  throw new OutpostError(
    'BAD_PARAM',
    `Invalid value '${raw}' for orderBy parameter! Has to be either 'desc' or 'asc' (case insensitive).`,
  );
}

/** True when the request is a history query: both startTs and endTs are given (TB routes on that). */
export function isHistoryRequest(q: URLSearchParams): boolean {
  return opt(q, 'startTs') !== undefined && opt(q, 'endTs') !== undefined;
}

/**
 * The history parameters (defaults, docs/api.md: limit from config, agg NONE, orderBy DESC, interval 0).
 * Only syntax is checked here; `planHistory` applies the semantic rules (interval, bucket count).
 */
export function parseHistoryParams(q: URLSearchParams): HistoryRequest {
  const startTs = parseLongParam(q, 'startTs');
  const endTs = parseLongParam(q, 'endTs');
  if (startTs === undefined || endTs === undefined) {
    throw new OutpostError(
      'BAD_PARAM',
      `Required request parameter '${startTs === undefined ? 'startTs' : 'endTs'}' for method parameter type Long is not present`,
    );
  }
  const intervalType = opt(q, 'intervalType');
  if (intervalType !== undefined && intervalType !== 'MILLISECONDS') {
    // Calendar buckets (WEEK, MONTH, …) are not supported (docs/api.md).
    throw new OutpostError('BAD_PARAM', `Unsupported intervalType: ${intervalType} (only MILLISECONDS)`);
  }
  const limit = parseLongParam(q, 'limit');
  return {
    startTs,
    endTs,
    agg: parseAgg(q),
    interval: parseLongParam(q, 'interval'),
    limit,
    orderBy: parseOrder(q),
  };
}

/** `useStrictDataTypes` (default false). */
export function parseStrict(q: URLSearchParams): boolean {
  return parseBoolParam(q, 'useStrictDataTypes') ?? false;
}
