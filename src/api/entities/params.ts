/**
 * Request parsing shared by the management endpoints (docs/api.md): UUID path ids, TB's PageLink query
 * parameters and JSON object bodies. Bad input → 400 TB error JSON (errorCode 31), nothing changed.
 */
import { OutpostError } from '../../errors.js';
import type { HttpContext } from '../../uws/adapter.js';
import { type PageQuery, SORT_PROPERTIES, type SortProperty } from '../../store/entities.js';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A path or query id that must be a UUID; TB answers 400 "Invalid UUID string: x" otherwise. Lower-cased. */
export function parseUuid(raw: string | null | undefined, what = 'id'): string {
  if (raw === null || raw === undefined || raw === '')
    throw new OutpostError('BAD_PARAM', `Parameter '${what}' is required`);
  if (!UUID_RE.test(raw)) throw new OutpostError('BAD_PARAM', `Invalid UUID string: ${raw}`);
  return raw.toLowerCase();
}

/** A required integer query parameter of at least `min`, with TB's messages. */
export function requiredInt(q: URLSearchParams, name: string, min: number): number {
  const raw = q.get(name);
  if (raw === null || raw === '')
    throw new OutpostError('BAD_PARAM', `Required request parameter '${name}' is not present`);
  if (!/^-?\d{1,9}$/.test(raw))
    throw new OutpostError('BAD_PARAM', `Parameter '${name}' must be an integer, got '${raw}'`);
  const n = Number(raw);
  if (n < min) throw new OutpostError('BAD_PARAM', `Parameter '${name}' must be at least ${min}, got ${n}`);
  return n;
}

/** TB's PageLink: `pageSize` (≥ 1) and `page` (0-based, ≥ 0) required; `textSearch`, `sortProperty`, `sortOrder` optional. */
export function parsePageQuery(q: URLSearchParams): PageQuery {
  const pageSize = requiredInt(q, 'pageSize', 1);
  const page = requiredInt(q, 'page', 0);
  const textSearch = q.get('textSearch') ?? undefined;
  const sortPropertyRaw = q.get('sortProperty');
  let sortProperty: SortProperty | undefined;
  if (sortPropertyRaw !== null && sortPropertyRaw !== '') {
    if (!(SORT_PROPERTIES as readonly string[]).includes(sortPropertyRaw)) {
      throw new OutpostError(
        'BAD_PARAM',
        `Unsupported sortProperty '${sortPropertyRaw}' (one of ${SORT_PROPERTIES.join(', ')})`,
      );
    }
    sortProperty = sortPropertyRaw as SortProperty;
  }
  const orderRaw = q.get('sortOrder');
  let sortOrder: 'ASC' | 'DESC' | undefined;
  if (orderRaw !== null && orderRaw !== '') {
    const upper = orderRaw.toUpperCase();
    if (upper !== 'ASC' && upper !== 'DESC')
      throw new OutpostError('BAD_PARAM', `sortOrder must be ASC or DESC, got '${orderRaw}'`);
    sortOrder = upper;
  }
  return { pageSize, page, textSearch, sortProperty, sortOrder };
}

/** The request body as a JSON object; anything else → 400. */
export async function jsonObjectBody(ctx: HttpContext): Promise<Record<string, unknown>> {
  const raw = await ctx.body();
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch {
    throw new OutpostError('BAD_JSON', 'Invalid request body: not JSON');
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new OutpostError('BAD_PAYLOAD', 'Invalid request body: a JSON object is expected');
  }
  return parsed as Record<string, unknown>;
}

/** An optional string field: absent/null → undefined (or null when `nullable`), a non-string → 400. */
export function optionalString(body: Record<string, unknown>, field: string): string | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw new OutpostError('BAD_PAYLOAD', `Field '${field}' must be a string`);
  return v;
}

/** The `id` of an update body: TB sends `{"id":{"entityType":"DEVICE","id":"<uuid>"}}`; a bare string is accepted too. */
export function bodyEntityId(body: Record<string, unknown>): string | undefined {
  const v = body['id'];
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'string') return parseUuid(v, 'id');
  if (typeof v === 'object' && !Array.isArray(v))
    return parseUuid(String((v as Record<string, unknown>)['id'] ?? ''), 'id.id');
  throw new OutpostError('BAD_PAYLOAD', "Field 'id' must be an entity id object");
}
