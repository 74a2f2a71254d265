/**
 * In-memory indexes of the entity store for entity data queries (docs/api.md "Entity data queries"): devices,
 * assets and customers by type, by profile (a device's type) or asset type, by customer, and by lower-cased
 * name for prefix lookups. Built from one pass over the `entities` table and rebuilt, on the next query, only
 * when the entity store's generation (meta ENTITIES_GEN, rewritten by every entity write in any process) has
 * changed: a query reads the index, never the whole table.
 */
import {
  ENTITIES_GEN,
  type AssetRecord,
  type CustomerRecord,
  type DeviceRecord,
  type EntityRecord,
} from './entities.js';
import type { StoreEnv } from './env.js';

/** What entity data queries answer: the entities Outpost keeps that carry a name. */
export type QueryableRecord = DeviceRecord | AssetRecord | CustomerRecord;
export type QueryableType = QueryableRecord['entityType'];
export const QUERYABLE_TYPES: readonly QueryableType[] = ['DEVICE', 'ASSET', 'CUSTOMER'];

/** A record's name as queries see it: a customer's title. */
export const recordName = (r: QueryableRecord): string => (r.entityType === 'CUSTOMER' ? r.title : r.name);

interface Built {
  readonly gen: unknown;
  /** by entity type, in creation order */
  readonly byType: ReadonlyMap<QueryableType, readonly QueryableRecord[]>;
  /** [entity type, device or asset type] → records, in creation order */
  readonly bySubtype: ReadonlyMap<string, readonly QueryableRecord[]>;
  /** customer id → its devices and assets, in creation order */
  readonly byCustomer: ReadonlyMap<string, readonly QueryableRecord[]>;
  /** per entity type: records sorted by lower-cased name, with the names beside them for binary search */
  readonly byName: ReadonlyMap<QueryableType, { readonly names: string[]; readonly recs: QueryableRecord[] }>;
  readonly byId: ReadonlyMap<string, QueryableRecord>;
}

const subtypeKey = (type: QueryableType, subtype: string): string => `${type}\u0000${subtype}`;

function push<K, V>(m: Map<K, V[]>, k: K, v: V): void {
  const list = m.get(k);
  if (list === undefined) m.set(k, [v]);
  else list.push(v);
}

export class EntityIndex {
  private built: Built | undefined;

  constructor(private readonly env: StoreEnv) {}

  private current(): Built {
    const gen = this.env.meta.get(ENTITIES_GEN);
    if (this.built !== undefined && this.built.gen === gen) return this.built;
    this.built = build(this.env, gen);
    return this.built;
  }

  get(id: string): QueryableRecord | undefined {
    return this.current().byId.get(id);
  }

  ofType(type: QueryableType): readonly QueryableRecord[] {
    return this.current().byType.get(type) ?? [];
  }

  /** devices of these profiles (types), or assets of these asset types, in creation order */
  ofSubtypes(type: 'DEVICE' | 'ASSET', subtypes: readonly string[]): QueryableRecord[] {
    const b = this.current();
    const out = subtypes.flatMap((s) => b.bySubtype.get(subtypeKey(type, s)) ?? []);
    return subtypes.length > 1 ? out.sort((x, y) => x.createdTime - y.createdTime || (x.id < y.id ? -1 : 1)) : out;
  }

  /** the devices and assets of a customer */
  ofCustomer(customerId: string): readonly QueryableRecord[] {
    return this.current().byCustomer.get(customerId) ?? [];
  }

  /** records whose name starts with `prefix`, case-insensitively: a binary search, then a walk over the matches */
  withNamePrefix(type: QueryableType, prefix: string): QueryableRecord[] {
    const idx = this.current().byName.get(type);
    if (idx === undefined) return [];
    const p = prefix.toLowerCase();
    let lo = 0;
    let hi = idx.names.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((idx.names[mid] as string) < p) lo = mid + 1;
      else hi = mid;
    }
    const out: QueryableRecord[] = [];
    for (let i = lo; i < idx.names.length && (idx.names[i] as string).startsWith(p); i++)
      out.push(idx.recs[i] as QueryableRecord);
    return out;
  }
}

function build(env: StoreEnv, gen: unknown): Built {
  const all: QueryableRecord[] = [];
  for (const { value } of env.entities.getRange({})) {
    const r = value as EntityRecord;
    if (r.entityType === 'DEVICE' || r.entityType === 'ASSET' || r.entityType === 'CUSTOMER') all.push(r);
  }
  all.sort((a, b) => a.createdTime - b.createdTime || (a.id < b.id ? -1 : 1));
  const byType = new Map<QueryableType, QueryableRecord[]>();
  const bySubtype = new Map<string, QueryableRecord[]>();
  const byCustomer = new Map<string, QueryableRecord[]>();
  const byId = new Map<string, QueryableRecord>();
  for (const r of all) {
    byId.set(r.id, r);
    push(byType, r.entityType, r);
    if (r.entityType !== 'CUSTOMER') {
      push(bySubtype, subtypeKey(r.entityType, r.type), r);
      push(byCustomer, r.customerId, r);
    }
  }
  const byName = new Map<QueryableType, { names: string[]; recs: QueryableRecord[] }>();
  for (const [type, recs] of byType) {
    const pairs = recs.map((r) => [recordName(r).toLowerCase(), r] as const);
    pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    byName.set(type, { names: pairs.map((p) => p[0]), recs: pairs.map((p) => p[1]) });
  }
  return { gen, byType, bySubtype, byCustomer, byName, byId };
}
