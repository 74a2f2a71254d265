/**
 * Interning of entity UUIDs and key names to u32 indices, so binary keys stay 16 bytes and sort by
 * (entity, key, ts). Lookups are cached in memory (a gateway has thousands of series, not millions).
 * Only the daemon allocates: new ids are written with the same batch as the data that needs them, so a
 * crash can never leave a point whose id is unknown. Until that batch is known to have committed, every later
 * batch that uses the id writes it again: if the first one fails (a full disk), the id still reaches the disk
 * with the first data that does, and its counter moves past it, so it is never handed out twice.
 */
import type { EntityIdx, KeyIdx } from './codec.js';
import type { StoreEnv } from '../env.js';

export class Dictionary {
  private readonly keyToIdx = new Map<string, KeyIdx>();
  private readonly idxToKey = new Map<KeyIdx, string>();
  private readonly entityToIdx = new Map<string, EntityIdx>();
  private readonly idxToEntity = new Map<EntityIdx, string>();
  private nextKey: number;
  private nextEntity: number;
  /** names and UUIDs whose ids were written in a batch not yet known to have committed */
  private readonly unconfirmedKeys = new Set<string>();
  private readonly unconfirmedEntities = new Set<string>();

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
    let idx = this.keyIdx(name);
    if (idx !== undefined && !this.unconfirmedKeys.has(name)) return idx;
    if (idx === undefined) {
      idx = this.nextKey++;
      this.remember(this.keyToIdx, this.idxToKey, name, idx);
    }
    void this.env.dict.put(['K', idx], name);
    this.confirmWith(
      this.unconfirmedKeys,
      name,
      this.env.dict.put(['k', name], idx),
      this.env.meta.put('nextKeyIdx', this.nextKey),
    );
    return idx;
  }

  internEntity(uuid: string): EntityIdx {
    let idx = this.entityIdx(uuid);
    if (idx !== undefined && !this.unconfirmedEntities.has(uuid)) return idx;
    if (idx === undefined) {
      idx = this.nextEntity++;
      this.remember(this.entityToIdx, this.idxToEntity, uuid, idx);
    }
    void this.env.dict.put(['E', idx], uuid);
    this.confirmWith(
      this.unconfirmedEntities,
      uuid,
      this.env.dict.put(['e', uuid], idx),
      this.env.meta.put('nextEntityIdx', this.nextEntity),
    );
    return idx;
  }

  /**
   * `id` stays unconfirmed until its batch commits. Inside a transaction callback lmdb-js answers writes with an
   * already resolved promise although nothing is committed yet: the id is then confirmed by the next batch.
   */
  private confirmWith(unconfirmed: Set<string>, id: string, ...writes: Array<Promise<unknown>>): void {
    unconfirmed.add(id);
    for (const w of writes) {
      if ((w as { isSync?: boolean }).isSync === true) return;
    }
    Promise.all(writes).then(
      () => unconfirmed.delete(id),
      () => undefined,
    );
  }

  private remember<K, V>(fwd: Map<K, V>, rev: Map<V, K>, k: K, v: V): void {
    fwd.set(k, v);
    rev.set(v, k);
  }
}
