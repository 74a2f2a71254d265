/**
 * The outbox ports (outbox.ts: `Outbox`, `DownlinkStore`, `RefSource`) over the LMDB environment: each table is
 * a range of `env.outbox` under its own first key element, a write of several records is one transaction (the
 * turn's, or one of its own), and what the sync reads of the series beside it is read here, where the key
 * layouts of the head and chunks are known.
 */
import type { KvValue } from '../model/kv.js';
import type { EntityIdx, KeyIdx } from './encoding/codec.js';
import { decodeValue, readOrderedI64 } from './encoding/codec.js';
import { blockCount } from './encoding/gorilla.js';
import { depthKey } from './depth.js';
import { type StoreEnv, openStoreEnv } from './env.js';
import {
  type AttributeMarkKey,
  COUNTERS_KEY,
  type Change,
  DEPTH_COUNTERS_KEY,
  type DepthCounters,
  type DepthSetAsideRecord,
  type DownlinkKey,
  type DownlinkStore,
  type FragmentRef,
  type HeldRecord,
  type Outbox,
  type OutboxChanges,
  type OutboxRange,
  type OutboxTable,
  type RefSource,
  type SetAsideRecord,
  type SyncCounters,
  type TokenRecord,
  attributeMarkKey,
  hasFragment,
  refSourceOf,
  tokenKey,
} from './outbox.js';
import { windowStart } from './series/chunks.js';

type Db = StoreEnv['outbox'];
type LmdbKey = Parameters<Db['get']>[0];

/**
 * A copy of `range` for lmdb-js: its getKeys sets `values: false` on the options it is given, so a range kept in a
 * constant (HELD_RANGE) and once given to getKeys would read every later getRange as keys without values.
 */
const lmdbRange = (range: OutboxRange): Parameters<Db['getRange']>[0] =>
  ({ ...range }) as unknown as Parameters<Db['getRange']>[0];

/** The records of `db` whose first key element is `tag`, typed. */
class Table<K extends readonly unknown[], V> implements OutboxTable<K, V> {
  constructor(
    private readonly db: Db,
    private readonly tag: string,
  ) {}

  get(key: K): V | undefined {
    return this.db.get(key as unknown as LmdbKey) as V | undefined;
  }

  *keys(range: OutboxRange): Iterable<K> {
    for (const key of this.db.getKeys(lmdbRange(range))) {
      // a range reaching past the table ends with it (the tables are contiguous: keys sort by their tag first)
      if ((key as unknown as readonly unknown[])[0] !== this.tag) return;
      yield key as unknown as K;
    }
  }

  *entries(range: OutboxRange): Iterable<{ readonly key: K; readonly value: V }> {
    for (const { key, value } of this.db.getRange(lmdbRange(range))) {
      if ((key as unknown as readonly unknown[])[0] !== this.tag) return;
      yield { key: key as unknown as K, value: value as V };
    }
  }

  /** Puts or removes each change, in order; returns the last one's promise. */
  apply(changes: ReadonlyArray<Change<K, V>> | undefined): Promise<boolean> | undefined {
    let last: Promise<boolean> | undefined;
    for (const c of changes ?? []) {
      const key = c.key as unknown as LmdbKey;
      last = c.value === null ? this.db.remove(key) : this.db.put(key, c.value);
    }
    return last;
  }
}

const entityPrefix = (e: number): Buffer => {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(e, 0);
  return b;
};

export class LmdbOutbox implements Outbox {
  readonly queue: Table<['q', number, number], number[]>;
  readonly held: Table<['h', number, number], HeldRecord>;
  readonly setAside: Table<['x', number, number], SetAsideRecord>;
  readonly depth: Table<['d', number, number], number[]>;
  readonly depthSetAside: Table<['y', number, number], DepthSetAsideRecord>;
  readonly marks: Table<AttributeMarkKey, number>;
  readonly refs: RefSource;

  constructor(private readonly env: StoreEnv) {
    const db = env.outbox;
    this.queue = new Table(db, 'q');
    this.held = new Table(db, 'h');
    this.setAside = new Table(db, 'x');
    this.depth = new Table(db, 'd');
    this.depthSetAside = new Table(db, 'y');
    this.marks = new Table(db, 'a');
    this.refs = refSourceOf(env);
  }

  counters(): Partial<SyncCounters> | undefined {
    return this.env.outbox.get(COUNTERS_KEY) as Partial<SyncCounters> | undefined;
  }

  depthCounters(): Partial<DepthCounters> | undefined {
    return this.env.outbox.get(DEPTH_COUNTERS_KEY) as Partial<DepthCounters> | undefined;
  }

  /** Issues every change now; returns the last put's promise (they commit together). */
  private issue(c: OutboxChanges): Promise<boolean> | undefined {
    let last = this.queue.apply(c.queue);
    last = this.held.apply(c.held) ?? last;
    last = this.setAside.apply(c.setAside) ?? last;
    last = this.depth.apply(c.depth) ?? last;
    last = this.depthSetAside.apply(c.depthSetAside) ?? last;
    if (c.counters !== undefined) last = this.env.outbox.put(COUNTERS_KEY, c.counters);
    if (c.depthCounters !== undefined) last = this.env.outbox.put(DEPTH_COUNTERS_KEY, c.depthCounters);
    return last;
  }

  async write(changes: OutboxChanges): Promise<void> {
    await this.issue(changes);
  }

  async commit(changes: OutboxChanges | (() => OutboxChanges)): Promise<void> {
    await this.env.root.transaction(() => {
      this.issue(typeof changes === 'function' ? changes() : changes);
    });
  }

  mark(deviceId: string): Promise<boolean> {
    return this.env.outbox.put(attributeMarkKey(deviceId), Math.random());
  }

  async unmark(deviceId: string, ifValue?: number): Promise<void> {
    const key = attributeMarkKey(deviceId);
    if (ifValue === undefined) {
      await this.env.outbox.remove(key);
      return;
    }
    await this.env.root.transaction(() => {
      if (this.env.outbox.get(key) === ifValue) void this.env.outbox.remove(key);
    });
  }

  token(deviceId: string): TokenRecord | undefined {
    return this.env.outbox.get(tokenKey(deviceId)) as TokenRecord | undefined;
  }

  async setToken(deviceId: string, rec: TokenRecord): Promise<void> {
    await this.env.outbox.put(tokenKey(deviceId), rec);
    await this.env.flushed();
  }

  async removeToken(deviceId: string): Promise<void> {
    await this.env.outbox.remove(tokenKey(deviceId));
  }

  flushed(): Promise<void> {
    return this.env.flushed();
  }

  nextSeq(): number {
    return (this.env.meta.get('headSeq') as number | undefined) ?? 1;
  }

  hasFragment(e: EntityIdx, seq: number, r: FragmentRef): boolean {
    return hasFragment(this.env, e, seq, r);
  }

  nextStoredEntity(e: EntityIdx): EntityIdx | undefined {
    let best: number | undefined;
    for (const db of [this.env.chunks, this.env.head]) {
      for (const key of db.getKeys({ start: entityPrefix(e), limit: 1 })) {
        const found = (key as Buffer).readUInt32BE(0);
        if (best === undefined || found < best) best = found;
      }
    }
    return best;
  }

  storedWindows(e: EntityIdx, windowMs: number, boundary: number): Map<number, Map<KeyIdx, number>> {
    const windows = new Map<number, Map<KeyIdx, number>>();
    const add = (k: KeyIdx, ts: number, n: number): void => {
      const w = windowStart(ts, windowMs);
      let keys = windows.get(w);
      if (keys === undefined) windows.set(w, (keys = new Map()));
      keys.set(k, (keys.get(k) ?? 0) + n);
    };
    const range = { start: entityPrefix(e), end: entityPrefix(e + 1) };
    for (const { key, value } of this.env.chunks.getRange(range)) {
      const kb = key as Buffer;
      add(kb.readUInt32BE(4), readOrderedI64(kb, 8), blockCount(value as Buffer));
    }
    for (const { key, value } of this.env.head.getRange(range)) {
      const kb = key as Buffer;
      if (kb.length >= 24 && readOrderedI64(kb, 16) >= boundary) continue;
      // a 16-byte key is a legacy fragment of one value
      add(kb.readUInt32BE(4), readOrderedI64(kb, 8), kb.length === 16 ? 1 : blockCount(value as Buffer));
    }
    return new Map([...windows].sort((a, b) => a[0] - b[0]));
  }

  depthValue(e: EntityIdx, k: KeyIdx, ds: number): KvValue | undefined {
    const stored = this.env.depth.get(depthKey(e, k, ds));
    return stored === undefined ? undefined : decodeValue(stored);
  }
}

/** The downlink's records: keys whose first element is uppercase, the uplink's being lowercase. */
export class LmdbDownlinkStore implements DownlinkStore {
  constructor(private readonly env: StoreEnv) {}

  private static check(key: DownlinkKey): LmdbKey {
    const tag = key[0];
    if (tag === '' || tag !== tag.toUpperCase()) throw new Error(`not a downlink key: ${JSON.stringify(key)}`);
    return key as unknown as LmdbKey;
  }

  get(key: DownlinkKey): unknown {
    return this.env.outbox.get(LmdbDownlinkStore.check(key));
  }

  put(key: DownlinkKey, value: unknown): Promise<boolean> {
    return this.env.outbox.put(LmdbDownlinkStore.check(key), value);
  }

  remove(key: DownlinkKey): Promise<boolean> {
    return this.env.outbox.remove(LmdbDownlinkStore.check(key));
  }

  *entries(range: OutboxRange): Iterable<{ readonly key: DownlinkKey; readonly value: unknown }> {
    const tag = range.start[0];
    for (const { key, value } of this.env.outbox.getRange(lmdbRange(range))) {
      if ((key as unknown as readonly unknown[])[0] !== tag) return;
      yield { key: key as unknown as DownlinkKey, value };
    }
  }

  flushed(): Promise<void> {
    return this.env.flushed();
  }
}

/** What the sync thread reads the refs' points through: the data dir's environment, opened in that thread. */
export interface ThreadRefSource extends RefSource {
  /** a fresh read snapshot: the next reads see every commit made before this call */
  fresh(): void;
  close(): Promise<void>;
}

export function openRefSource(opts: { readonly dataDir: string; readonly mapSizeBytes: number }): ThreadRefSource {
  const env = openStoreEnv({
    dataDir: opts.dataDir,
    mapSizeBytes: opts.mapSizeBytes,
    readOnly: true,
    otherThread: true,
  });
  const refs = refSourceOf(env);
  return {
    rawHorizonTs: () => refs.rawHorizonTs(),
    read: (e, seq, r, windowMs, horizon) => refs.read(e, seq, r, windowMs, horizon),
    // `resetReadTxn` is lmdb-js API its typings leave out
    fresh: () => (env.root as unknown as { resetReadTxn(): void }).resetReadTxn(),
    close: () => env.close(),
  };
}
