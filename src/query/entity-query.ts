/**
 * ThingsBoard's entity data queries (docs/api.md "Entity data queries"): the subset TB's UI, mobile app and
 * widgets send. Parsing (bad or unsupported input → 400, errorCode 31) and evaluation over the entity index
 * (store/entity-index.ts), the relations and the latest-value and attribute stores REST reads; nothing here
 * knows HTTP.
 *
 * Evaluation: the entity filter picks candidates from one index (type, profile, customer, name prefix or a
 * relation walk); the caller's scope (a customer user: its customer's entities) and key filters narrow them,
 * each key filter reading one key of each candidate; then sort and page. Latest values are read for the page's
 * rows only, unless a sort or the text search needs them for all.
 */
import { NUMERIC_OPS, type NumericOp, STRING_OPS, type StringOp, isOp } from '../model/key-filter.js';
import { OutpostError } from '../errors.js';
import { type KvValue, kvToString } from '../model/kv.js';
import type { AttributeScope, AttributeStore } from '../store/attributes.js';
import {
  type EntityIndex,
  QUERYABLE_TYPES,
  type QueryableRecord,
  type QueryableType,
  recordName,
} from '../store/entity-index.js';
import { NULL_UUID } from '../types.js';
import type { TimeseriesStore } from '../store/series/interface.js';
import { type RelationStore, type RelationsQuery, queryRelations } from '../store/relations.js';

export const KEY_TYPES = [
  'ENTITY_FIELD',
  'ATTRIBUTE',
  'CLIENT_ATTRIBUTE',
  'SHARED_ATTRIBUTE',
  'SERVER_ATTRIBUTE',
  'TIME_SERIES',
] as const;
export type KeyType = (typeof KEY_TYPES)[number];

export interface EntityKey {
  readonly type: KeyType;
  readonly key: string;
}

export type Predicate =
  | { readonly type: 'STRING'; readonly operation: StringOp; readonly value: string; readonly ignoreCase: boolean }
  | { readonly type: 'NUMERIC'; readonly operation: NumericOp; readonly value: number }
  | { readonly type: 'BOOLEAN'; readonly operation: 'EQUAL' | 'NOT_EQUAL'; readonly value: boolean }
  | { readonly type: 'COMPLEX'; readonly operation: 'AND' | 'OR'; readonly predicates: readonly Predicate[] };

export interface KeyFilter {
  readonly key: EntityKey;
  readonly predicate: Predicate;
}

export type EntityFilter =
  | { readonly type: 'singleEntity'; readonly entityType: string; readonly id: string }
  | { readonly type: 'entityList'; readonly entityType: string; readonly ids: readonly string[] }
  | { readonly type: 'entityType'; readonly entityType: QueryableType }
  | { readonly type: 'entityName'; readonly entityType: QueryableType; readonly name: string }
  | {
      readonly type: 'subtype';
      readonly entityType: 'DEVICE' | 'ASSET';
      readonly subtypes: string[];
      readonly name: string;
    }
  | ({ readonly type: 'relationsQuery' } & RelationsQuery);

export interface EntityQuery {
  readonly filter: EntityFilter;
  readonly keyFilters: readonly KeyFilter[];
  readonly keyFiltersOr: boolean;
}

export interface EntityDataQuery extends EntityQuery {
  readonly entityFields: readonly EntityKey[];
  readonly latestValues: readonly EntityKey[];
  readonly page: number;
  readonly pageSize: number;
  readonly textSearch: string;
  readonly sort: { readonly key: EntityKey; readonly desc: boolean } | undefined;
}

/** Who asks: a customer user sees only its customer's entities (and its customer). */
export interface QueryScope {
  readonly tenantAdmin: boolean;
  readonly customerId: string;
}

export interface QuerySources {
  readonly index: EntityIndex;
  readonly relations: RelationStore;
  readonly timeseries: Pick<TimeseriesStore, 'latest' | 'keys'>;
  readonly attributes: Pick<AttributeStore, 'get' | 'keys'>;
  readonly now: () => number;
  /** the tenant's title: a tenant-owned entity's ownerName */
  readonly tenantTitle: string;
}

/** One latest value as TB answers it: every value a string; missing → `{"ts":0,"value":""}`. */
export interface TsValue {
  readonly ts: number;
  readonly value: string;
}
const MISSING: TsValue = { ts: 0, value: '' };

export interface EntityDataRow {
  readonly entityId: { readonly entityType: string; readonly id: string };
  readonly latest: Record<string, Record<string, TsValue>>;
  readonly timeseries: Record<string, never>;
  readonly aggLatest: Record<string, never>;
}

export interface EntityDataPage {
  readonly data: EntityDataRow[];
  readonly totalPages: number;
  readonly totalElements: number;
  readonly hasNext: boolean;
}

// ---- parsing ----

const bad = (msg: string): OutpostError => new OutpostError('BAD_PARAM', msg);

function obj(v: unknown, what: string): Record<string, unknown> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw bad(`${what} must be an object`);
  return v as Record<string, unknown>;
}

function str(o: Record<string, unknown>, field: string, what: string): string {
  const v = o[field];
  if (typeof v !== 'string') throw bad(`${what}.${field} must be a string`);
  return v;
}

function queryableType(raw: unknown, what: string): QueryableType {
  if (typeof raw !== 'string') throw bad(`${what} must be an entity type`);
  if (!(QUERYABLE_TYPES as readonly string[]).includes(raw))
    throw bad(`Unsupported entity type in entity queries: ${raw} (Outpost answers ${QUERYABLE_TYPES.join(', ')})`);
  return raw as QueryableType;
}

function entityKey(v: unknown, what: string): EntityKey {
  const o = obj(v, what);
  const type = o['type'];
  if (typeof type !== 'string' || !(KEY_TYPES as readonly string[]).includes(type))
    throw bad(`Unsupported key type in ${what}: ${String(type)} (one of ${KEY_TYPES.join(', ')})`);
  return { type: type as KeyType, key: str(o, 'key', what) };
}

function keys(v: unknown, what: string): EntityKey[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw bad(`${what} must be an array`);
  return v.map((k, i) => entityKey(k, `${what}[${i}]`));
}

/** `{"defaultValue":..,"dynamicValue":null}`: dynamic values (another entity's attribute) are not followed */
function predicateValue(o: Record<string, unknown>, what: string): unknown {
  const v = obj(o['value'], `${what}.value`);
  const dyn = v['dynamicValue'];
  if (dyn !== undefined && dyn !== null && obj(dyn, `${what}.value.dynamicValue`)['sourceType'] !== undefined)
    throw bad(`Unsupported in ${what}: dynamicValue (Outpost compares with defaultValue only)`);
  return v['defaultValue'];
}

function predicate(v: unknown, what: string): Predicate {
  const o = obj(v, what);
  const type = o['type'];
  const op = o['operation'];
  switch (type) {
    case 'STRING': {
      if (!isOp(STRING_OPS, op)) throw bad(`Unsupported STRING operation: ${String(op)}`);
      const value = predicateValue(o, what);
      return { type, operation: op, value: String(value ?? ''), ignoreCase: o['ignoreCase'] === true };
    }
    case 'NUMERIC': {
      if (!isOp(NUMERIC_OPS, op)) throw bad(`Unsupported NUMERIC operation: ${String(op)}`);
      const value = Number(predicateValue(o, what));
      if (!Number.isFinite(value)) throw bad(`${what}.value.defaultValue must be a number`);
      return { type, operation: op, value };
    }
    case 'BOOLEAN': {
      if (op !== 'EQUAL' && op !== 'NOT_EQUAL') throw bad(`Unsupported BOOLEAN operation: ${String(op)}`);
      const value = predicateValue(o, what);
      return { type, operation: op, value: value === true || value === 'true' };
    }
    case 'COMPLEX': {
      if (op !== 'AND' && op !== 'OR') throw bad(`Unsupported COMPLEX operation: ${String(op)}`);
      const list = o['predicates'];
      if (!Array.isArray(list)) throw bad(`${what}.predicates must be an array`);
      return { type, operation: op, predicates: list.map((p, i) => predicate(p, `${what}.predicates[${i}]`)) };
    }
    default:
      throw bad(`Unsupported predicate type: ${String(type)} (STRING, NUMERIC, BOOLEAN or COMPLEX)`);
  }
}

function keyFilters(v: unknown): KeyFilter[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw bad('keyFilters must be an array');
  return v.map((f, i) => {
    const o = obj(f, `keyFilters[${i}]`);
    const valueType = o['valueType'];
    if (valueType !== undefined && !['STRING', 'NUMERIC', 'BOOLEAN', 'DATE_TIME'].includes(String(valueType)))
      throw bad(`Unsupported valueType: ${String(valueType)} (STRING, NUMERIC, BOOLEAN or DATE_TIME)`);
    return {
      key: entityKey(o['key'], `keyFilters[${i}].key`),
      predicate: predicate(o['predicate'], `keyFilters[${i}].predicate`),
    };
  });
}

function idOf(v: unknown, what: string): string {
  if (typeof v !== 'string' || !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(v))
    throw bad(`Invalid UUID string: ${String(v)} (${what})`);
  return v.toLowerCase();
}

function nameFilter(o: Record<string, unknown>, field: string): string {
  const v = o[field];
  if (v === undefined || v === null) return '';
  if (typeof v !== 'string') throw bad(`entityFilter.${field} must be a string`);
  return v;
}

function subtypes(o: Record<string, unknown>, many: string, one: string): string[] {
  const list = o[many];
  if (Array.isArray(list) && list.length > 0) return list.map(String);
  if (typeof o[one] === 'string') return [o[one] as string];
  throw bad(`entityFilter.${many} must name at least one type`);
}

function entityFilter(v: unknown): EntityFilter {
  const o = obj(v, 'entityFilter');
  const type = o['type'];
  switch (type) {
    case 'singleEntity': {
      const e = obj(o['singleEntity'], 'entityFilter.singleEntity');
      return { type, entityType: str(e, 'entityType', 'singleEntity'), id: idOf(e['id'], 'singleEntity.id') };
    }
    case 'entityList': {
      const list = o['entityList'];
      if (!Array.isArray(list)) throw bad('entityFilter.entityList must be an array of ids');
      return { type, entityType: str(o, 'entityType', 'entityFilter'), ids: list.map((x) => idOf(x, 'entityList')) };
    }
    case 'entityType':
      return { type, entityType: queryableType(o['entityType'], 'entityFilter.entityType') };
    case 'entityName':
      return {
        type,
        entityType: queryableType(o['entityType'], 'entityFilter.entityType'),
        name: nameFilter(o, 'entityNameFilter'),
      };
    case 'deviceType':
      return {
        type: 'subtype',
        entityType: 'DEVICE',
        subtypes: subtypes(o, 'deviceTypes', 'deviceType'),
        name: nameFilter(o, 'deviceNameFilter'),
      };
    case 'assetType':
      return {
        type: 'subtype',
        entityType: 'ASSET',
        subtypes: subtypes(o, 'assetTypes', 'assetType'),
        name: nameFilter(o, 'assetNameFilter'),
      };
    case 'relationsQuery': {
      if (o['negate'] === true) throw bad('Unsupported in relationsQuery: negate');
      const root = obj(o['rootEntity'], 'entityFilter.rootEntity');
      const direction = o['direction'] ?? 'FROM';
      if (direction !== 'FROM' && direction !== 'TO') throw bad(`Invalid direction: ${String(direction)}`);
      const maxLevel = o['maxLevel'] ?? 1;
      if (typeof maxLevel !== 'number' || !Number.isInteger(maxLevel))
        throw bad('entityFilter.maxLevel must be an integer');
      const filters = o['filters'];
      if (filters !== undefined && filters !== null && !Array.isArray(filters))
        throw bad('entityFilter.filters must be an array');
      return {
        type,
        rootId: idOf(root['id'], 'rootEntity.id'),
        direction,
        group: 'COMMON',
        maxLevel,
        fetchLastLevelOnly: o['fetchLastLevelOnly'] === true,
        filters: ((filters as unknown[] | undefined) ?? []).map((f) => {
          const fo = obj(f, 'relation filter');
          const et = fo['entityTypes'];
          return {
            relationType: typeof fo['relationType'] === 'string' ? fo['relationType'] : undefined,
            entityTypes: Array.isArray(et) ? et.map(String) : undefined,
          };
        }),
      };
    }
    default:
      throw bad(
        `Unsupported entity filter type: ${String(type)} (Outpost answers singleEntity, entityList, entityType, entityName, deviceType, assetType, relationsQuery)`,
      );
  }
}

export function parseEntityCountQuery(body: Record<string, unknown>): EntityQuery {
  const op = body['keyFiltersOperation'] ?? 'AND';
  if (op !== 'AND' && op !== 'OR') throw bad(`keyFiltersOperation must be AND or OR, got ${String(op)}`);
  return {
    filter: entityFilter(body['entityFilter']),
    keyFilters: keyFilters(body['keyFilters']),
    keyFiltersOr: op === 'OR',
  };
}

export function parseEntityDataQuery(body: Record<string, unknown>): EntityDataQuery {
  const base = parseEntityCountQuery(body);
  const link = obj(body['pageLink'], 'pageLink');
  const pageSize = link['pageSize'] ?? 10;
  const page = link['page'] ?? 0;
  if (typeof pageSize !== 'number' || !Number.isInteger(pageSize) || pageSize < 1)
    throw bad('pageLink.pageSize must be an integer of at least 1');
  if (typeof page !== 'number' || !Number.isInteger(page) || page < 0)
    throw bad('pageLink.page must be an integer of at least 0');
  const textSearch = link['textSearch'];
  let sort: EntityDataQuery['sort'];
  if (link['sortOrder'] !== undefined && link['sortOrder'] !== null) {
    const so = obj(link['sortOrder'], 'pageLink.sortOrder');
    const dir = so['direction'] ?? 'ASC';
    if (dir !== 'ASC' && dir !== 'DESC') throw bad(`sortOrder.direction must be ASC or DESC, got ${String(dir)}`);
    sort = { key: entityKey(so['key'], 'pageLink.sortOrder.key'), desc: dir === 'DESC' };
  }
  return {
    ...base,
    entityFields: keys(body['entityFields'], 'entityFields'),
    latestValues: keys(body['latestValues'], 'latestValues'),
    page,
    pageSize,
    textSearch: typeof textSearch === 'string' ? textSearch : '',
    sort,
  };
}

// ---- evaluation ----

/** TB's name filter: case-insensitive starts-with; a leading or trailing `%` makes it an ILIKE pattern */
function nameMatcher(filter: string): ((name: string) => boolean) | undefined {
  if (filter === '') return undefined;
  if (!filter.startsWith('%') && !filter.endsWith('%')) {
    const p = filter.toLowerCase();
    return (n) => n.toLowerCase().startsWith(p);
  }
  const re = new RegExp(
    `^${filter
      .split('%')
      .map((s) => s.replace(/[.*+?^${}()|[\]\\_]/g, (c) => (c === '_' ? '.' : `\\${c}`)))
      .join('.*')}$`,
    'is',
  );
  return (n) => re.test(n);
}

/** the entity filter's candidates, each once */
function candidates(src: QuerySources, f: EntityFilter): readonly QueryableRecord[] {
  switch (f.type) {
    case 'singleEntity': {
      const r = src.index.get(f.id);
      return r !== undefined && r.entityType === f.entityType ? [r] : [];
    }
    case 'entityList': {
      const seen = new Set<string>();
      const out: QueryableRecord[] = [];
      for (const id of f.ids) {
        const r = src.index.get(id);
        if (r !== undefined && r.entityType === f.entityType && !seen.has(id)) {
          seen.add(id);
          out.push(r);
        }
      }
      return out;
    }
    case 'entityType':
      return src.index.ofType(f.entityType);
    case 'entityName': {
      const m = nameMatcher(f.name);
      if (m === undefined) return src.index.ofType(f.entityType);
      if (!f.name.startsWith('%') && !f.name.endsWith('%')) return src.index.withNamePrefix(f.entityType, f.name);
      return src.index.ofType(f.entityType).filter((r) => m(recordName(r)));
    }
    case 'subtype': {
      const all = src.index.ofSubtypes(f.entityType, f.subtypes);
      const m = nameMatcher(f.name);
      return m === undefined ? all : all.filter((r) => m(recordName(r)));
    }
    case 'relationsQuery': {
      const rels = queryRelations(src.relations, { ...f, rootId: f.rootId });
      const seen = new Set<string>();
      const out: QueryableRecord[] = [];
      for (const r of rels) {
        const far = f.direction === 'FROM' ? r.to : r.from;
        if (seen.has(far.id)) continue;
        seen.add(far.id);
        const rec = src.index.get(far.id);
        if (rec !== undefined) out.push(rec);
      }
      return out;
    }
  }
}

function inScope(scope: QueryScope, r: QueryableRecord): boolean {
  if (scope.tenantAdmin) return true;
  return r.entityType === 'CUSTOMER' ? r.id === scope.customerId : r.customerId === scope.customerId;
}

const SCOPE_OF: Partial<Record<KeyType, AttributeScope>> = {
  CLIENT_ATTRIBUTE: 'CLIENT_SCOPE',
  SHARED_ATTRIBUTE: 'SHARED_SCOPE',
  SERVER_ATTRIBUTE: 'SERVER_SCOPE',
};

interface Raw {
  readonly ts: number;
  /** the value as TB's string */
  readonly text: string;
  /** the value as a number when it is one (NUMERIC filters, sorting) */
  readonly num: number | undefined;
}

function raw(ts: number, v: KvValue): Raw {
  const text = kvToString(v);
  const num =
    v.type === 'LONG' || v.type === 'DOUBLE'
      ? Number(v.v)
      : v.type === 'STRING' && text.trim() !== '' && Number.isFinite(Number(text))
        ? Number(text)
        : undefined;
  return { ts, text, num };
}

function fieldText(src: QuerySources, r: QueryableRecord, field: string): string | undefined {
  switch (field) {
    case 'createdTime':
      return String(r.createdTime);
    case 'entityType':
      return r.entityType;
    case 'name':
    case 'title':
      return recordName(r);
    case 'type':
      return r.entityType === 'CUSTOMER' ? undefined : r.type;
    case 'label':
      return r.entityType === 'CUSTOMER' ? undefined : (r.label ?? undefined);
    case 'displayName':
      return r.entityType === 'CUSTOMER' ? r.title : r.label || r.name;
    case 'additionalInfo':
      return r.entityType === 'CUSTOMER' ? undefined : r.additionalInfoJson;
    case 'ownerType':
      return r.entityType === 'CUSTOMER' ? 'TENANT' : r.customerId === NULL_UUID ? 'TENANT' : 'CUSTOMER';
    case 'ownerName': {
      if (r.entityType === 'CUSTOMER' || r.customerId === NULL_UUID) return src.tenantTitle;
      const c = src.index.get(r.customerId);
      return c === undefined ? undefined : recordName(c);
    }
    default:
      return undefined;
  }
}

/** One key of one entity, or undefined when it has none. */
function keyValue(src: QuerySources, r: QueryableRecord, k: EntityKey): Raw | undefined {
  switch (k.type) {
    case 'ENTITY_FIELD': {
      const t = fieldText(src, r, k.key);
      if (t === undefined) return undefined;
      return { ts: src.now(), text: t, num: k.key === 'createdTime' ? r.createdTime : undefined };
    }
    case 'TIME_SERIES': {
      const p = src.timeseries.latest(r.id, [k.key]).get(k.key);
      return p === undefined ? undefined : raw(p.ts, p.value);
    }
    default: {
      const found = src.attributes.get(r.id, SCOPE_OF[k.type], [k.key]);
      // ATTRIBUTE (any scope): the newest of the scopes that have it
      let best: (typeof found)[number] | undefined;
      for (const a of found) if (best === undefined || a.lastUpdateTs > best.lastUpdateTs) best = a;
      return best === undefined ? undefined : raw(best.lastUpdateTs, best.value);
    }
  }
}

function test(p: Predicate, v: Raw): boolean {
  switch (p.type) {
    case 'STRING': {
      const a = p.ignoreCase ? v.text.toLowerCase() : v.text;
      const b = p.ignoreCase ? p.value.toLowerCase() : p.value;
      switch (p.operation) {
        case 'EQUAL':
          return a === b;
        case 'NOT_EQUAL':
          return a !== b;
        case 'STARTS_WITH':
          return a.startsWith(b);
        case 'ENDS_WITH':
          return a.endsWith(b);
        case 'CONTAINS':
          return a.includes(b);
        case 'NOT_CONTAINS':
          return !a.includes(b);
        case 'IN':
          return b.split(',').some((x) => x.trim() === a);
        case 'NOT_IN':
          return !b.split(',').some((x) => x.trim() === a);
      }
      return false;
    }
    case 'NUMERIC': {
      if (v.num === undefined) return false;
      switch (p.operation) {
        case 'EQUAL':
          return v.num === p.value;
        case 'NOT_EQUAL':
          return v.num !== p.value;
        case 'GREATER':
          return v.num > p.value;
        case 'LESS':
          return v.num < p.value;
        case 'GREATER_OR_EQUAL':
          return v.num >= p.value;
        case 'LESS_OR_EQUAL':
          return v.num <= p.value;
      }
      return false;
    }
    case 'BOOLEAN': {
      const b = v.text.toLowerCase();
      if (b !== 'true' && b !== 'false') return false;
      return p.operation === 'EQUAL' ? (b === 'true') === p.value : (b === 'true') !== p.value;
    }
    case 'COMPLEX':
      return p.operation === 'AND' ? p.predicates.every((x) => test(x, v)) : p.predicates.some((x) => test(x, v));
  }
}

/** the filter's entities the caller may see that pass the key filters (an entity without the key does not) */
function matching(src: QuerySources, scope: QueryScope, q: EntityQuery): QueryableRecord[] {
  const out: QueryableRecord[] = [];
  for (const r of candidates(src, q.filter)) {
    if (!inScope(scope, r)) continue;
    if (q.keyFilters.length > 0) {
      const pass = (f: KeyFilter): boolean => {
        const v = keyValue(src, r, f.key);
        return v !== undefined && test(f.predicate, v);
      };
      if (q.keyFiltersOr ? !q.keyFilters.some(pass) : !q.keyFilters.every(pass)) continue;
    }
    out.push(r);
  }
  return out;
}

export function countEntities(src: QuerySources, scope: QueryScope, q: EntityQuery): number {
  return matching(src, scope, q).length;
}

const keyOf = (k: EntityKey): string => `${k.type}\u0000${k.key}`;

export function findEntityData(src: QuerySources, scope: QueryScope, q: EntityDataQuery): EntityDataPage {
  const rows = matching(src, scope, q);
  const selected = [...q.entityFields, ...q.latestValues];
  const cache = new Map<string, Map<string, Raw | undefined>>();
  const read = (r: QueryableRecord, k: EntityKey): Raw | undefined => {
    let m = cache.get(r.id);
    if (m === undefined) cache.set(r.id, (m = new Map()));
    const ck = keyOf(k);
    if (m.has(ck)) return m.get(ck);
    const v = keyValue(src, r, k);
    m.set(ck, v);
    return v;
  };
  let kept: QueryableRecord[] = rows;
  if (q.textSearch !== '') {
    const needle = q.textSearch.toLowerCase();
    kept = rows.filter((r) =>
      selected.some((k) => k.key !== 'additionalInfo' && (read(r, k)?.text.toLowerCase().includes(needle) ?? false)),
    );
  }
  const sort = q.sort;
  if (sort !== undefined) {
    const sign = sort.desc ? -1 : 1;
    const decorated = kept.map((r) => ({ r, v: read(r, sort.key) }));
    decorated.sort((a, b) => {
      const c = compareRaw(a.v, b.v);
      return sign * c || (a.r.id < b.r.id ? -1 : a.r.id > b.r.id ? 1 : 0);
    });
    kept = decorated.map((d) => d.r);
  }
  const total = kept.length;
  const start = q.page * q.pageSize;
  const page = kept.slice(start, start + q.pageSize);
  const now = src.now();
  const data = page.map((r): EntityDataRow => {
    const latest: Record<string, Record<string, TsValue>> = {};
    for (const k of selected) {
      const group = (latest[k.type] ??= {});
      const v = read(r, k);
      group[k.key] =
        k.type === 'ENTITY_FIELD'
          ? { ts: now, value: v?.text ?? '' }
          : v === undefined
            ? MISSING
            : { ts: v.ts, value: v.text };
    }
    return { entityId: { entityType: r.entityType, id: r.id }, latest, timeseries: {}, aggLatest: {} };
  });
  return {
    data,
    totalPages: Math.ceil(total / q.pageSize),
    totalElements: total,
    hasNext: total > start + page.length,
  };
}

/** numbers as numbers, else text; an entity without the key sorts first ascending (SQL's nulls in TB's order by) */
function compareRaw(a: Raw | undefined, b: Raw | undefined): number {
  if (a === undefined || b === undefined) return a === b ? 0 : a === undefined ? -1 : 1;
  if (a.num !== undefined && b.num !== undefined) return a.num - b.num;
  return a.text < b.text ? -1 : a.text > b.text ? 1 : 0;
}

/**
 * The deprecated `find/keys`: the timeseries and attribute key names of the query's first 100 entities, each
 * list sorted and without duplicates; `scope` limits the attributes to one scope.
 */
export function findEntityKeys(
  src: QuerySources,
  scope: QueryScope,
  q: EntityQuery,
  want: { timeseries: boolean; attributes: boolean; scope: AttributeScope | undefined },
): { entityTypes: string[]; timeseries: string[]; attribute: string[] } {
  const rows = matching(src, scope, q).slice(0, 100);
  const types = new Set<string>();
  const ts = new Set<string>();
  const attrs = new Set<string>();
  for (const r of rows) {
    types.add(r.entityType);
    if (want.timeseries) for (const k of src.timeseries.keys(r.id)) ts.add(k);
    if (want.attributes) for (const k of src.attributes.keys(r.id, want.scope)) attrs.add(k);
  }
  return { entityTypes: [...types], timeseries: [...ts].sort(), attribute: [...attrs].sort() };
}
