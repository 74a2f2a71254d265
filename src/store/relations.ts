/**
 * Entity relations (docs/api.md "Relations"): ThingsBoard's EntityRelation, keyed by (from, to, typeGroup, type).
 *
 * Layout: the `relations` sub-database holds each relation twice, under ['F', fromId, group, type, toId] and
 * ['T', toId, group, type, fromId], so the relations from an entity and those to it are each one key range.
 * Both keys are written and removed in the entity store's write transaction (EntityStore.transaction), the one
 * that also deletes an entity: an entity and its relations go together.
 */
import type { EntityType } from '../types.js';
import type { StoreEnv } from './env.js';

export const RELATION_TYPE_GROUPS = [
  'COMMON',
  'DASHBOARD',
  'RULE_CHAIN',
  'RULE_NODE',
  'EDGE',
  'EDGE_AUTO_ASSIGN_RULE_CHAIN',
] as const;
export type RelationTypeGroup = (typeof RELATION_TYPE_GROUPS)[number];

export function isRelationTypeGroup(s: string): s is RelationTypeGroup {
  return (RELATION_TYPE_GROUPS as readonly string[]).includes(s);
}

/** The relation a gateway has to each sub-device it created or took over over the MQTT Gateway API (TB). */
export const GATEWAY_CREATED = 'Created';

export interface RelationEnd {
  readonly entityType: EntityType;
  readonly id: string;
}

export interface RelationRecord {
  readonly from: RelationEnd;
  readonly to: RelationEnd;
  readonly type: string;
  readonly typeGroup: RelationTypeGroup;
  /** 1 when created, one more on each save of the same key */
  readonly version: number;
  /** `additionalInfo` as the client gave it, serialized; absent = null */
  readonly additionalInfoJson?: string;
}

export type NewRelation = Omit<RelationRecord, 'version'>;

type Key = Array<string | number>;

const fromKey = (r: NewRelation): Key => ['F', r.from.id, r.typeGroup, r.type, r.to.id];
const toKey = (r: NewRelation): Key => ['T', r.to.id, r.typeGroup, r.type, r.from.id];

/** Entries whose key starts with `prefix`, in key order. */
function* withPrefix(env: StoreEnv, prefix: Key): Generator<RelationRecord> {
  for (const { key, value } of env.relations.getRange({ start: prefix })) {
    const k = key as Key;
    for (let i = 0; i < prefix.length; i++) if (k[i] !== prefix[i]) return;
    yield value as RelationRecord;
  }
}

/** Saves (upserts) a relation; call inside an EntityStore write transaction. */
export function putRelationTx(env: StoreEnv, r: NewRelation): RelationRecord {
  const old = env.relations.get(fromKey(r)) as RelationRecord | undefined;
  const rec: RelationRecord = { ...r, version: (old?.version ?? 0) + 1 };
  void env.relations.put(fromKey(rec), rec);
  void env.relations.put(toKey(rec), rec);
  return rec;
}

function removeTx(env: StoreEnv, r: RelationRecord): void {
  void env.relations.remove(fromKey(r));
  void env.relations.remove(toKey(r));
}

/** Every relation of an entity, both directions; `group` undefined = all groups. Inside a write transaction. */
export function deleteEntityRelationsTx(env: StoreEnv, id: string, group?: RelationTypeGroup): number {
  const tail = group === undefined ? [] : [group];
  const found = [...withPrefix(env, ['F', id, ...tail]), ...withPrefix(env, ['T', id, ...tail])];
  for (const r of found) removeTx(env, r);
  return found.length;
}

/** The entity store's write transaction (EntityStore.transaction), the one entity deletes run in. */
export interface EntityTransactions {
  transaction<T>(fn: () => T): Promise<T>;
}

export class RelationStore {
  constructor(
    private readonly env: StoreEnv,
    private readonly entities: EntityTransactions,
  ) {}

  /** Creates or updates a relation; resolves once on disk with what was stored. */
  async save(r: NewRelation): Promise<RelationRecord> {
    const rec = await this.entities.transaction(() => putRelationTx(this.env, r));
    await this.env.flushed();
    return rec;
  }

  /** Removes one relation; undefined when there was none (nothing written). */
  async delete(from: string, to: string, group: RelationTypeGroup, type: string): Promise<RelationRecord | undefined> {
    if (this.get(from, to, group, type) === undefined) return undefined;
    const gone = await this.entities.transaction(() => {
      const r = this.get(from, to, group, type);
      if (r !== undefined) removeTx(this.env, r);
      return r;
    });
    await this.env.flushed();
    return gone;
  }

  /** Removes the relations of one group of an entity, both directions (TB's `DELETE /api/relations`). */
  async deleteAll(id: string, group: RelationTypeGroup): Promise<number> {
    const n = await this.entities.transaction(() => deleteEntityRelationsTx(this.env, id, group));
    await this.env.flushed();
    return n;
  }

  get(from: string, to: string, group: RelationTypeGroup, type: string): RelationRecord | undefined {
    return this.env.relations.get(['F', from, group, type, to]) as RelationRecord | undefined;
  }

  /** Relations from an entity, of one group (all when undefined) and type (any when undefined). */
  from(id: string, group?: RelationTypeGroup, type?: string): RelationRecord[] {
    return this.range('F', id, group, type);
  }

  /** Relations to an entity, as `from`. */
  to(id: string, group?: RelationTypeGroup, type?: string): RelationRecord[] {
    return this.range('T', id, group, type);
  }

  private range(dir: 'F' | 'T', id: string, group?: RelationTypeGroup, type?: string): RelationRecord[] {
    const prefix: Key = [dir, id];
    if (group !== undefined) {
      prefix.push(group);
      if (type !== undefined) prefix.push(type);
    }
    const out: RelationRecord[] = [];
    for (const r of withPrefix(this.env, prefix)) if (type === undefined || r.type === type) out.push(r);
    return out;
  }
}

/** One of a relations query's filters: a relation matches when its type is this (blank: any) and its far end is of one of these types (empty: any). */
export interface RelationFilter {
  readonly relationType?: string | undefined;
  readonly entityTypes?: readonly string[] | undefined;
}

export interface RelationsQuery {
  readonly rootId: string;
  readonly direction: 'FROM' | 'TO';
  readonly group: RelationTypeGroup;
  /** levels to follow; ≤ 0 = no limit */
  readonly maxLevel: number;
  readonly fetchLastLevelOnly: boolean;
  readonly filters: readonly RelationFilter[];
}

/** relations followed by one query at most: a bound on a cyclic or very wide graph */
const MAX_QUERY_RELATIONS = 100_000;

/**
 * TB's relation query: breadth-first from the root along `direction`, each entity entered once; the relations
 * found are then kept when they match any filter (every relation when there are none). `fetchLastLevelOnly`
 * keeps those of the deepest level reached, and of levels where the walk stopped for want of more.
 */
export function queryRelations(store: RelationStore, q: RelationsQuery): RelationRecord[] {
  const maxLevel = q.maxLevel <= 0 ? Number.MAX_SAFE_INTEGER : q.maxLevel;
  const seen = new Set<string>([q.rootId]);
  const found: Array<{ r: RelationRecord; level: number; leaf: boolean }> = [];
  let frontier = [q.rootId];
  for (let level = 1; level <= maxLevel && frontier.length > 0 && found.length < MAX_QUERY_RELATIONS; level++) {
    const next: string[] = [];
    for (const id of frontier) {
      const rels = q.direction === 'FROM' ? store.from(id, q.group) : store.to(id, q.group);
      for (const r of rels) {
        const far = q.direction === 'FROM' ? r.to.id : r.from.id;
        const fresh = !seen.has(far);
        const leaf =
          q.fetchLastLevelOnly &&
          (level === maxLevel ||
            (q.direction === 'FROM' ? store.from(far, q.group) : store.to(far, q.group)).length === 0);
        found.push({ r, level, leaf });
        if (fresh) {
          seen.add(far);
          next.push(far);
        }
      }
    }
    frontier = next;
  }
  const matches = (r: RelationRecord): boolean => {
    if (q.filters.length === 0) return true;
    const far = q.direction === 'FROM' ? r.to : r.from;
    return q.filters.some(
      (f) =>
        (f.relationType === undefined || f.relationType === '' || f.relationType === r.type) &&
        (f.entityTypes === undefined || f.entityTypes.length === 0 || f.entityTypes.includes(far.entityType)),
    );
  };
  return found.filter((x) => (!q.fetchLastLevelOnly || x.leaf) && matches(x.r)).map((x) => x.r);
}
