/**
 * Interning of entity UUIDs and key names to u32 indices, so binary keys stay 16 bytes and sort by
 * (entity, key, ts). Lookups are cached in memory (a gateway has thousands of series, not millions).
 * Only the daemon allocates: new ids are written with the same batch as the data that needs them, so a
 * crash can never leave a point whose id is unknown.
 */
import type { EntityIdx, KeyIdx } from './codec.js';
import type { StoreEnv } from './env.js';

export class Dictionary {
  private readonly keyToIdx = new Map<string, KeyIdx>();
  private readonly idxToKey = new Map<KeyIdx, string>();
  private readonly entityToIdx = new Map<string, EntityIdx>();
  private readonly idxToEntity = new Map<EntityIdx, string>();
  private nextKey: number;
  private nextEntity: number;

  constructor(private readonly env: StoreEnv) {
    this.nextKey = (env.meta.get('nextKeyIdx') as number | undefined) ?? 1;
    this.nextEntity = (env.meta.get('nextEntityIdx') as number | undefined) ?? 1;
  }

  keyIdx(name: string): KeyIdx | undefined {
    let idx = this.keyToIdx.get(name);
    if (idx === undefined) {
      idx = this.env.dict.get(['k', name]) as number | undefined;
      if (idx !== undefined) this.remember(this.keyToIdx, this.idxToKey, name, idx);
    }
    return idx;
  }

  keyName(idx: KeyIdx): string | undefined {
    let name = this.idxToKey.get(idx);
    if (name === undefined) {
      name = this.env.dict.get(['K', idx]) as string | undefined;
      if (name !== undefined) this.remember(this.keyToIdx, this.idxToKey, name, idx);
    }
    return name;
  }

  entityIdx(uuid: string): EntityIdx | undefined {
    let idx = this.entityToIdx.get(uuid);
    if (idx === undefined) {
      idx = this.env.dict.get(['e', uuid]) as number | undefined;
      if (idx !== undefined) this.remember(this.entityToIdx, this.idxToEntity, uuid, idx);
    }
    return idx;
  }

  entityUuid(idx: EntityIdx): string | undefined {
    let uuid = this.idxToEntity.get(idx);
    if (uuid === undefined) {
      uuid = this.env.dict.get(['E', idx]) as string | undefined;
      if (uuid !== undefined) this.remember(this.entityToIdx, this.idxToEntity, uuid, idx);
    }
    return uuid;
  }

  /** The key's index, allocating one (as part of the current write batch) when it is new. */
  internKey(name: string): KeyIdx {
    const found = this.keyIdx(name);
    if (found !== undefined) return found;
    const idx = this.nextKey++;
    void this.env.dict.put(['k', name], idx);
    void this.env.dict.put(['K', idx], name);
    void this.env.meta.put('nextKeyIdx', this.nextKey);
    this.remember(this.keyToIdx, this.idxToKey, name, idx);
    return idx;
  }

  internEntity(uuid: string): EntityIdx {
    const found = this.entityIdx(uuid);
    if (found !== undefined) return found;
    const idx = this.nextEntity++;
    void this.env.dict.put(['e', uuid], idx);
    void this.env.dict.put(['E', idx], uuid);
    void this.env.meta.put('nextEntityIdx', this.nextEntity);
    this.remember(this.entityToIdx, this.idxToEntity, uuid, idx);
    return idx;
  }

  private remember<K, V>(fwd: Map<K, V>, rev: Map<V, K>, k: K, v: V): void {
    fwd.set(k, v);
    rev.set(v, k);
  }
}
