/**
 * Depth-series reads (docs/api.md, Tempus' TelemetryFeature.DEPTHSERIES):
 * - GET /api/plugins/telemetry/{entityType}/{entityId}/keys/depthseries → `["k1","k2"]` (sorted);
 * - GET .../values/depthseries?keys=a,b → the value at the greatest depth per key; keys without data absent;
 *   no `keys` → every key;
 * - GET .../values/depthseries?keys=&startDs=&endDs=[&limit=100] → raw points with startDs ≤ ds ≤ endDs
 *   (inclusive, as the download), ascending by depth, at most `limit` per key.
 * Reply `{"k":[{"ds":<number>,"value":"<string>"}]}`; `useStrictDataTypes=true` gives typed values. Only
 * agg=NONE exists for depth (Tempus' UI says the same); another agg → 400.
 */
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import type { HttpContext, HttpRouter, Reply } from '../../uws/adapter.js';
import { jsonText } from '../../uws/adapter.js';
import { kvToJson, kvToString } from '../../model/kv.js';
import type { DsKv } from '../../store/depth.js';
import { isEntityType } from '../../types.js';
import { principalOf } from '../principal.js';

export const DEFAULT_DEPTH_LIMIT = 100;

const DECIMAL = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

export interface DepthValuesQuery {
  /** undefined → every key */
  readonly keys: readonly string[] | undefined;
  /** undefined → latest values */
  readonly range: { readonly startDs: number; readonly endDs: number; readonly limit: number } | undefined;
  readonly strict: boolean;
}

function parseDepthParam(name: string, text: string): number {
  const t = text.trim();
  if (!DECIMAL.test(t)) throw new OutpostError('BAD_PARAM', `Invalid '${name}' parameter: '${text}' is not a number`);
  return Number(t);
}

export function parseKeysParam(raw: string | null): string[] | undefined {
  if (raw === null) return undefined;
  const keys = raw
    .split(',')
    .map((k) => k.trim())
    .filter((k) => k !== '');
  return keys.length === 0 ? undefined : [...new Set(keys)];
}

export function parseDepthValuesQuery(q: URLSearchParams): DepthValuesQuery {
  const keys = parseKeysParam(q.get('keys'));
  const strict = q.get('useStrictDataTypes') === 'true';
  const agg = q.get('agg');
  if (agg !== null && agg !== '' && agg.toUpperCase() !== 'NONE') {
    throw new OutpostError('BAD_PARAM', `Invalid 'agg' parameter: depth series support only NONE, got '${agg}'`);
  }
  const start = q.get('startDs');
  const end = q.get('endDs');
  if (start === null && end === null) return { keys, range: undefined, strict };
  if (start === null || end === null)
    throw new OutpostError('BAD_PARAM', "'startDs' and 'endDs' must be given together");
  let limit = DEFAULT_DEPTH_LIMIT;
  const limitText = q.get('limit');
  if (limitText !== null && limitText.trim() !== '') {
    if (!/^\d+$/.test(limitText.trim()) || Number(limitText) < 1)
      throw new OutpostError('BAD_PARAM', `Invalid 'limit' parameter: '${limitText}'`);
    limit = Number(limitText);
  }
  return {
    keys,
    range: { startDs: parseDepthParam('startDs', start), endDs: parseDepthParam('endDs', end), limit },
    strict,
  };
}

function renderPoints(points: readonly DsKv[], strict: boolean): string {
  let out = '[';
  for (let i = 0; i < points.length; i++) {
    const p = points[i] as DsKv;
    const value = strict ? kvToJson(p.value) : JSON.stringify(kvToString(p.value));
    out += `${i === 0 ? '' : ','}{"ds":${JSON.stringify(p.ds)},"value":${value}}`;
  }
  return `${out}]`;
}

function entityOf(s: Services, ctx: HttpContext): string {
  const entityType = ctx.params[0] ?? '';
  const entityId = ctx.params[1] ?? '';
  const principal = principalOf(s, ctx);
  if (!isEntityType(entityType)) throw new OutpostError('BAD_PARAM', `Invalid entity type '${entityType}'`);
  s.auth.checkAccess(principal, entityType, entityId, 'read');
  return entityId;
}

export function getDepthKeys(s: Services) {
  return (ctx: HttpContext): Reply => jsonText(JSON.stringify(s.depth.keys(entityOf(s, ctx))));
}

export function getDepthValues(s: Services) {
  return (ctx: HttpContext): Reply => {
    const entityId = entityOf(s, ctx);
    const q = parseDepthValuesQuery(ctx.query);
    const parts: string[] = [];
    if (q.range === undefined) {
      for (const [key, p] of s.depth.latest(entityId, q.keys))
        parts.push(`${JSON.stringify(key)}:${renderPoints([p], q.strict)}`);
    } else {
      const { startDs, endDs, limit } = q.range;
      for (const key of q.keys ?? s.depth.keys(entityId)) {
        const points = Array.from(s.depth.range(entityId, key, { startDs, endDs, limit }));
        if (points.length > 0) parts.push(`${JSON.stringify(key)}:${renderPoints(points, q.strict)}`);
      }
    }
    return jsonText(`{${parts.join(',')}}`);
  };
}

export function registerDepthRoutes(router: HttpRouter, s: Services): void {
  router.route('get', '/api/plugins/telemetry/:entityType/:entityId/keys/depthseries', getDepthKeys(s));
  router.route('get', '/api/plugins/telemetry/:entityType/:entityId/values/depthseries', getDepthValues(s));
}
