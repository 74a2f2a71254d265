/**
 * Reads: latest values, raw ranges streamed window by window (chunks.ts), and the decoded-chunk and fragment
 * caches the rollup planner reads its raw edges through. Every read first applies what the log holds
 * (apply.ts), so it sees each acknowledged point. Chunks and rollups change only inside `writeChunks`, which
 * keeps the caches from filling until the change has committed.
 */
import type { TsKv } from '../../model/kv.js';
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import { decodeStamped, entityPrefix, prefixEnd, seriesKey } from '../encoding/codec.js';
import { BlockColumns } from '../encoding/gorilla.js';
import type { StoreEnv } from '../env.js';
import { SeriesAppend } from './append.js';
import { type SeriesChunks, type WindowPoints, seriesPoints, seriesWindows, windowKey } from './chunks.js';
import type { RangeQuery } from './interface.js';
import { chunkBytes } from './state.js';

/**
 * The value under `key` in a buffer of its own and of exactly its size, for a cache to keep: lmdb-js'
 * getBinaryFast hands out its shared read buffer, and getBinary's copies hold ~4 KB each.
 */
function readOwnCopy(db: StoreEnv['head'], key: Buffer): Buffer | undefined {
  const fast = db.getBinaryFast(key);
  if (fast === undefined) return undefined;
  const own = Buffer.allocUnsafeSlow(fast.length);
  own.set(new Uint8Array(fast.buffer, fast.byteOffset, fast.length));
  return own;
}

export abstract class SeriesRead extends SeriesAppend {
  seriesOf(entityId: string, key: string): { e: EntityIdx; k: KeyIdx } | undefined {
    // a logged entity or key is interned when its points go into LMDB
    this.applyLogged();
    const e = this.dict.entityIdx(entityId);
    const k = this.dict.keyIdx(key);
    return e === undefined || k === undefined ? undefined : { e, k };
  }

  latest(entityId: string, keys?: readonly string[]): Map<string, TsKv> {
    this.applyLogged();
    const out = new Map<string, TsKv>();
    const e = this.dict.entityIdx(entityId);
    if (e === undefined) return out;
    if (keys === undefined) {
      const prefix = entityPrefix(e);
      for (const { key, value } of this.env.latest.getRange({ start: prefix, end: prefixEnd(prefix) })) {
        const name = this.dict.keyName((key as Buffer).readUInt32BE(4));
        if (name !== undefined) out.set(name, decodeStamped(value));
      }
      return out;
    }
    for (const name of keys) {
      const k = this.dict.keyIdx(name);
      if (k === undefined) continue;
      const raw = this.env.latest.get(seriesKey(e, k));
      if (raw !== undefined) out.set(name, decodeStamped(raw));
    }
    return out;
  }

  keys(entityId: string): string[] {
    return [...this.latest(entityId).keys()].sort();
  }

  range(entityId: string, key: string, q: RangeQuery): IterableIterator<TsKv> {
    this.applyLogged();
    const s = this.seriesOf(entityId, key);
    if (s === undefined || q.endTs <= q.startTs) return [][Symbol.iterator]();
    return this.seriesRange(s.e, s.k, q);
  }

  /** range() by interned ids: streamed point by point from the decoded blocks (chunks.ts `seriesPoints`). */
  seriesRange(e: EntityIdx, k: KeyIdx, q: RangeQuery): IterableIterator<TsKv> {
    this.applyLogged();
    return seriesPoints(this.env, e, k, q.startTs, q.endTs, this.windowMs, q.order === 'DESC', q.limit ?? Infinity);
  }

  /** The interned index of an entity, undefined when it never stored a point or attribute. */
  entityIdx(entityId: string): EntityIdx | undefined {
    this.applyLogged();
    return this.dict.entityIdx(entityId);
  }

  /** The decoded-chunk cache of series (e, k), for chunkColumns (a query looks it up once). */
  seriesChunks(e: EntityIdx, k: KeyIdx): SeriesChunks {
    const id = `${e}:${k}`;
    let chunks = this.chunkCache.get(id);
    if (chunks !== undefined) this.chunkCache.delete(id);
    else chunks = new Map();
    this.chunkCache.set(id, chunks);
    return chunks;
  }

  /**
   * The committed chunk of window `w` of series (e, k), decoded (all timestamps; values on demand), or
   * undefined when it has none. Shared with other readers through `chunks` (seriesChunks(e, k)): callers must
   * not load another block into it. Chunks change only inside `writeChunks`, which keeps the cache empty until
   * the change has committed. Past the cache's bytes, the least recently used series go first.
   */
  chunkColumns(
    e: EntityIdx,
    k: KeyIdx,
    w: number,
    chunks: SeriesChunks = this.seriesChunks(e, k),
  ): BlockColumns | undefined {
    const hit = chunks.get(w);
    if (hit !== undefined) return hit ?? undefined;
    const block = readOwnCopy(this.env.chunks, windowKey(e, k, w));
    const cols = block === undefined ? null : new BlockColumns().load(block);
    if (this.cacheHolds > 0) return cols ?? undefined;
    chunks.set(w, cols);
    // a reader's map dropped by clearReadCaches() mid-query is no longer the cache's: not counted
    if (this.chunkCache.get(`${e}:${k}`) !== chunks) return cols ?? undefined;
    this.chunkCacheSize += chunkBytes(cols);
    // Evict window by window: from the least recently used series, its first-read windows first.
    while (this.chunkCacheSize > this.chunkCacheBytes) {
      const [id, oldest] = this.chunkCache.entries().next().value as [string, SeriesChunks];
      const first = oldest.entries().next();
      if (first.done) {
        this.chunkCache.delete(id);
        continue;
      }
      const [firstW, firstCols] = first.value;
      if (oldest === chunks && firstW === w) break; // the window just read stays
      oldest.delete(firstW);
      this.chunkCacheSize -= chunkBytes(firstCols);
    }
    return cols ?? undefined;
  }

  /**
   * The head fragment under `key` (24 bytes: a point block) decoded, values included, or undefined when it is
   * gone. Shared with other readers through the fragment cache, so callers must not load another block into it.
   */
  fragmentColumns(key: Buffer): BlockColumns | undefined {
    const id = key.toString('latin1');
    const hit = this.fragmentCache.get(id);
    if (hit !== undefined) return hit;
    const block = readOwnCopy(this.env.head, key);
    if (block === undefined) return undefined;
    const cols = new BlockColumns().load(block);
    cols.intsUpTo(cols.count);
    if (this.cacheHolds === 0) this.fragmentCache.add(id, cols);
    return cols;
  }

  /** Accounted bytes of the decoded chunks, head fragments and rollup blocks held for readers, and budgets. */
  readCacheUsage(): {
    chunkBytes: number;
    chunkBudget: number;
    fragmentBytes: number;
    fragmentBudget: number;
    rollupBytes: number;
  } {
    return {
      chunkBytes: this.chunkCacheSize,
      chunkBudget: this.chunkCacheBytes,
      fragmentBytes: this.fragmentCache.bytes,
      fragmentBudget: this.fragmentCache.budget,
      rollupBytes: this.rollups.readCacheUsage,
    };
  }

  /**
   * Runs `fn` in a write transaction that may change chunks or rollups; `fn` calls `clearReadCaches()` before
   * it changes any. Until the commit has resolved, readers do not fill the caches: once LMDB has committed, a
   * reader already sees the new state (a window's head fragments gone) while a decoded chunk or block cached
   * from the old one would miss their points. A step that changes nothing leaves the caches as they are.
   */
  async writeChunks<T>(fn: () => T): Promise<T> {
    this.cacheHolds++;
    try {
      return await this.env.root.transaction(() => {
        this.inWriteTxn++;
        try {
          return fn();
        } finally {
          this.inWriteTxn--;
        }
      });
    } finally {
      this.cacheHolds--;
    }
  }

  /** Drops the decoded chunks and rollup blocks readers share. */
  clearReadCaches(): void {
    this.chunkCache.clear();
    this.chunkCacheSize = 0;
    this.fragmentCache.clear();
    this.rollups.clearReadCache();
  }

  /** The merged windows of series (e, k) overlapping [fromTs, toTs), ascending. */
  windowsOf(e: EntityIdx, k: KeyIdx, fromTs: number, toTs: number): IterableIterator<WindowPoints> {
    this.applyLogged();
    return seriesWindows(this.env, e, k, fromTs, toTs, this.windowMs, false);
  }
}
