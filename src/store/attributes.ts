/**
 * The attribute store (docs/api.md): CLIENT, SERVER and SHARED scopes per entity.
 *
 * Layout: `attributes` sub-database, key [entity u32][scope u8][key utf8] → [lastUpdateTs i64][value]
 * (codec.encodeStamped). Scope bytes follow TB's listing order CLIENT < SERVER < SHARED, so an entity's
 * attributes over all scopes are one contiguous range in exactly the order `values/attributes` lists them.
 *
 * Writes and deletes resolve only once committed and flushed to disk, and publish one bus `attributes` event
 * after that: long-polls, websocket subscriptions and sync listen there, never here.
 */
import type { AttributeScope, EventBus } from '../bus/index.js';
import type { KvValue } from '../model/kv.js';
import type { EntityType, EpochMs } from '../types.js';
import { type EntityIdx, decodeStamped, encodeStamped, prefixEnd } from './encoding/codec.js';
import type { Dictionary } from './encoding/dict.js';
import type { StoreEnv } from './env.js';

export type { AttributeScope } from '../bus/index.js';

/** TB's listing order (docs/api.md: values/attributes without scope lists CLIENT, SERVER, SHARED). */
export const ATTRIBUTE_SCOPES: readonly AttributeScope[] = ['CLIENT_SCOPE', 'SERVER_SCOPE', 'SHARED_SCOPE'];

export function isAttributeScope(s: string): s is AttributeScope {
  return (ATTRIBUTE_SCOPES as readonly string[]).includes(s);
}

const SCOPE_BYTE: Record<AttributeScope, number> = { CLIENT_SCOPE: 1, SERVER_SCOPE: 2, SHARED_SCOPE: 3 };
const BYTE_SCOPE: Record<number, AttributeScope> = { 1: 'CLIENT_SCOPE', 2: 'SERVER_SCOPE', 3: 'SHARED_SCOPE' };

export interface AttributeKv {
  readonly scope: AttributeScope;
  readonly key: string;
  readonly lastUpdateTs: EpochMs;
  readonly value: KvValue;
}

/** The storage seam for attributes. */
export interface AttributeStore {
  /**
   * Upserts `entries` in one scope, all stamped `ts`; resolves once on disk, then publishes. An empty list
   * is a no-op (no event).
   */
  save(
    entityType: EntityType,
    entityId: string,
    scope: AttributeScope,
    entries: ReadonlyArray<readonly [string, KvValue]>,
    ts: EpochMs,
  ): Promise<void>;
  /** Removes `keys` from one scope; resolves with the keys that existed, once on disk, then publishes them. */
  delete(entityType: EntityType, entityId: string, scope: AttributeScope, keys: readonly string[]): Promise<string[]>;
  /**
   * Attributes of one scope (or all scopes, in CLIENT, SERVER, SHARED order), sorted by key (UTF-8 byte
   * order) within a scope. `keys` undefined → all; keys that don't exist are absent.
   */
  get(entityId: string, scope?: AttributeScope, keys?: readonly string[]): AttributeKv[];
  /** Key names of one scope or of all scopes (a key in two scopes appears twice, TB behaviour). */
  keys(entityId: string, scope?: AttributeScope): string[];
}

function scopePrefix(e: EntityIdx, scope: AttributeScope): Buffer {
  const b = Buffer.allocUnsafe(5);
  b.writeUInt32BE(e, 0);
  b[4] = SCOPE_BYTE[scope];
  return b;
}

function attrKey(e: EntityIdx, scope: AttributeScope, key: string): Buffer {
  const len = Buffer.byteLength(key, 'utf8');
  const b = Buffer.allocUnsafe(5 + len);
  b.writeUInt32BE(e, 0);
  b[4] = SCOPE_BYTE[scope];
  b.write(key, 5, 'utf8');
  return b;
}

function entityRange(e: EntityIdx): { start: Buffer; end: Buffer } {
  const start = Buffer.allocUnsafe(4);
  start.writeUInt32BE(e, 0);
  return { start, end: prefixEnd(start) };
}

export class LmdbAttributeStore implements AttributeStore {
  /**
   * `syncMark`: told of every device client-attribute write inside its transaction, for upstream sync
   * (src/upstream/uplink/attribute-marks.ts); undefined: sync off
   */
  constructor(
    private readonly env: StoreEnv,
    private readonly dict: Dictionary,
    private readonly bus: EventBus,
    private readonly now: () => EpochMs = Date.now,
    private readonly syncMark?: (entityId: string) => Promise<boolean>,
  ) {}

  async save(
    entityType: EntityType,
    entityId: string,
    scope: AttributeScope,
    entries: ReadonlyArray<readonly [string, KvValue]>,
    ts: EpochMs,
  ): Promise<void> {
    if (entries.length === 0) return;
    // All puts in one synchronous turn: lmdb-js commits them in one transaction (all-or-nothing).
    const e = this.dict.internEntity(entityId);
    let last: Promise<boolean> | undefined;
    for (const [key, value] of entries)
      last = this.env.attributes.put(attrKey(e, scope, key), encodeStamped(ts, value));
    if (scope === 'CLIENT_SCOPE' && entityType === 'DEVICE' && this.syncMark !== undefined)
      last = this.syncMark(entityId);
    await last;
    await this.env.flushed();
    this.bus.publish('attributes', { entityType, entityId, scope, updated: entries, ts, deleted: [] });
  }

  async delete(
    entityType: EntityType,
    entityId: string,
    scope: AttributeScope,
    keys: readonly string[],
  ): Promise<string[]> {
    const e = this.dict.entityIdx(entityId);
    if (e === undefined || keys.length === 0) return [];
    const removed = await this.env.root.transaction(() => {
      const out: string[] = [];
      for (const key of new Set(keys)) {
        const k = attrKey(e, scope, key);
        if (this.env.attributes.get(k) === undefined) continue;
        void this.env.attributes.remove(k);
        out.push(key);
      }
      return out;
    });
    await this.env.flushed();
    if (removed.length > 0) {
      this.bus.publish('attributes', { entityType, entityId, scope, updated: [], ts: this.now(), deleted: removed });
    }
    return removed;
  }

  get(entityId: string, scope?: AttributeScope, keys?: readonly string[]): AttributeKv[] {
    const e = this.dict.entityIdx(entityId);
    if (e === undefined) return [];
    const scopes = scope === undefined ? ATTRIBUTE_SCOPES : [scope];
    const out: AttributeKv[] = [];
    if (keys !== undefined) {
      const sorted = [...new Set(keys)].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
      for (const sc of scopes) {
        for (const key of sorted) {
          const raw = this.env.attributes.get(attrKey(e, sc, key));
          if (raw === undefined) continue;
          const { ts, value } = decodeStamped(raw);
          out.push({ scope: sc, key, lastUpdateTs: ts, value });
        }
      }
      return out;
    }
    const range =
      scope === undefined
        ? entityRange(e)
        : (() => {
            const p = scopePrefix(e, scope);
            return { start: p, end: prefixEnd(p) };
          })();
    for (const { key, value } of this.env.attributes.getRange(range)) {
      const kb = key as Buffer;
      const sc = BYTE_SCOPE[kb[4] as number];
      if (sc === undefined) continue;
      const { ts, value: v } = decodeStamped(value);
      out.push({ scope: sc, key: kb.toString('utf8', 5), lastUpdateTs: ts, value: v });
    }
    return out;
  }

  keys(entityId: string, scope?: AttributeScope): string[] {
    const e = this.dict.entityIdx(entityId);
    if (e === undefined) return [];
    const range =
      scope === undefined
        ? entityRange(e)
        : (() => {
            const p = scopePrefix(e, scope);
            return { start: p, end: prefixEnd(p) };
          })();
    const out: string[] = [];
    for (const key of this.env.attributes.getKeys(range)) out.push((key as Buffer).toString('utf8', 5));
    return out;
  }
}
