/**
 * The read caches of the series store: decoded chunks and head fragments the rollup planner reads its raw edges
 * through, and the holds that keep them (and the rollup read cache) from filling while a change to chunks or
 * rollups may be committing. `writeChunks` is the one way such a change is made.
 */
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import { BlockColumns } from '../encoding/gorilla.js';
import { type StoreEnv, readOwnCopy } from '../env.js';
import { ByteLru } from '../lru.js';
import type { RollupStore } from '../rollups/store.js';
import { type CachedChunk, type SeriesChunks, windowLookupKey } from './chunks.js';

/**
 * Approximate bytes of a decoded head fragment (BlockColumns, its typed arrays and its own copy of the block;
 * ~1.4 KB measured for 120 points of 10-s data) besides 16 per point: the fragment cache's accounting unit.
 */
const DECODED_FRAGMENT_BYTES = 512;
const DECODED_POINT_BYTES = 16;

const fragmentBytes = (cols: BlockColumns): number => DECODED_FRAGMENT_BYTES + cols.count * DECODED_POINT_BYTES;

/**
 * Approximate bytes of a cached chunk besides its encoded bytes and decoded columns (the entry, the Buffer and
 * the map's slot): the chunk cache's accounting unit.
 */
const CHUNK_ENTRY_BYTES = 192;

export const chunkBytes = (c: CachedChunk | null): number =>
  CHUNK_ENTRY_BYTES + (c === null ? 0 : c.block.length + (c.cols === undefined ? 0 : c.cols.heapBytes));

/** How query.readCacheBytes is shared: a quarter for chunks, 1/16 for head fragments, the rest for rollup blocks. */
export function readCacheBudgets(readCacheBytes: number): { chunk: number; fragment: number; rollup: number } {
  const chunk = readCacheBytes / 4;
  const fragment = readCacheBytes / 16;
  return { chunk, fragment, rollup: readCacheBytes - chunk - fragment };
}

export class ReadCache {
  /**
   * Chunks kept for the planner's raw edges: a month query at a 2-h interval reads one chunk per bucket boundary
   * (360 per key), and a dashboard re-polling "the last 30 days" moves its boundaries by seconds, so nearly the
   * same windows again. Each is kept encoded, with only the points before the edge a reader needed decoded
   * (regular timestamps as their first and step): kept whole and decoded, the month's chunks cost 2.5 times the
   * bytes and decoding their ends was work no edge used. "e:k" → that series' chunks by window start (null: no
   * chunk), series least recently used first, within the chunk budget.
   */
  private readonly chunkCache = new Map<string, SeriesChunks>();
  /** accounted bytes held in chunkCache */
  private chunkCacheSize = 0;
  private readonly chunkCacheBytes: number;
  /**
   * Decoded head fragments for the planner's dirty windows (the last hours, which a dashboard re-polls), by
   * fragment key (latin1), least recently used first, within the fragment budget. A fragment's value never
   * changes under its key: every write takes a new seq, and the one rewrite (a delete) empties this cache first.
   */
  private readonly fragmentCache: ByteLru<string, BlockColumns>;
  /** transactions that change chunks or rollups and have not resolved yet: readers must not fill the caches */
  private cacheHolds = 0;
  /** > 0 while writeChunks' callback runs (in an lmdb-js write transaction) */
  private inWriteTxn = 0;

  constructor(
    private readonly env: StoreEnv,
    budgets: { readonly chunk: number; readonly fragment: number },
    private readonly rollups: Pick<RollupStore, 'clearReadCache' | 'readCacheUsage'>,
  ) {
    this.chunkCacheBytes = budgets.chunk;
    this.fragmentCache = new ByteLru<string, BlockColumns>(budgets.fragment, fragmentBytes);
  }

  /** false while a change to chunks or rollups may be committing: readers then leave the caches unfilled */
  mayFill(): boolean {
    return this.cacheHolds === 0;
  }

  /** whether writeChunks' callback is running, in an lmdb-js write transaction */
  get inWriteTransaction(): boolean {
    return this.inWriteTxn > 0;
  }

  /** The chunk cache of series (e, k), for chunk and chunkColumns (a query looks it up once). */
  seriesChunks(e: EntityIdx, k: KeyIdx): SeriesChunks {
    const id = `${e}:${k}`;
    let chunks = this.chunkCache.get(id);
    if (chunks !== undefined) this.chunkCache.delete(id);
    else chunks = new Map();
    this.chunkCache.set(id, chunks);
    return chunks;
  }

  /**
   * The committed chunk of window `w` of series (e, k), or undefined when it has none. Shared with other readers
   * through `chunks` (seriesChunks(e, k)): only chunkColumns changes it. Chunks change only inside
   * `writeChunks`, which keeps the cache empty until the change has committed. Past the cache's bytes, the
   * least recently used series go first.
   */
  chunk(e: EntityIdx, k: KeyIdx, w: number, chunks: SeriesChunks = this.seriesChunks(e, k)): CachedChunk | undefined {
    const hit = chunks.get(w);
    if (hit !== undefined) return hit ?? undefined;
    const block = readOwnCopy(this.env.chunks, windowLookupKey(e, k, w));
    const c = block === undefined ? null : { block, cols: undefined, upTo: -Infinity };
    if (this.cacheHolds > 0) return c ?? undefined;
    chunks.set(w, c);
    // a reader's map dropped by clear() mid-query is no longer the cache's: not counted
    if (this.chunkCache.get(`${e}:${k}`) !== chunks) return c ?? undefined;
    this.chunkCacheSize += chunkBytes(c);
    this.evictChunks(chunks, w);
    return c ?? undefined;
  }

  /**
   * The points of chunk `c` (window `w` of series (e, k), from `chunk`) with ts < `upTo`, decoded (at least
   * those: a reader asking for fewer may get more). Shared with other readers: callers must not load another
   * block into it. Values are decoded as they are read.
   */
  chunkColumns(
    e: EntityIdx,
    k: KeyIdx,
    w: number,
    c: CachedChunk,
    upTo: number,
    chunks: SeriesChunks = this.seriesChunks(e, k),
  ): BlockColumns {
    if (c.cols !== undefined && c.upTo >= upTo) return c.cols;
    const before = chunkBytes(c);
    c.cols = new BlockColumns().load(c.block, upTo).compact();
    c.upTo = upTo;
    if (chunks.get(w) === c && this.chunkCache.get(`${e}:${k}`) === chunks) {
      this.chunkCacheSize += chunkBytes(c) - before;
      this.evictChunks(chunks, w);
    }
    return c.cols;
  }

  /** Evicts window by window past the budget: from the least recently used series, its first-read windows first. */
  private evictChunks(chunks: SeriesChunks, w: number): void {
    while (this.chunkCacheSize > this.chunkCacheBytes) {
      const [id, oldest] = this.chunkCache.entries().next().value as [string, SeriesChunks];
      const first = oldest.entries().next();
      if (first.done) {
        this.chunkCache.delete(id);
        continue;
      }
      const [firstW, firstChunk] = first.value;
      if (oldest === chunks && firstW === w) break; // the window just read stays
      oldest.delete(firstW);
      this.chunkCacheSize -= chunkBytes(firstChunk);
    }
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

  /** Accounted bytes of the chunks, decoded head fragments and rollup blocks held for readers, and budgets. */
  usage(): {
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
   * Runs `fn` in a write transaction that may change chunks or rollups; `fn` calls `clear()` before it changes
   * any. Until the commit has resolved, readers do not fill the caches: once LMDB has committed, a reader
   * already sees the new state (a window's head fragments gone) while a decoded chunk or block cached from the
   * old one would miss their points. A step that changes nothing leaves the caches as they are.
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

  /** Drops the chunks, head fragments and rollup blocks readers share. */
  clear(): void {
    this.chunkCache.clear();
    this.chunkCacheSize = 0;
    this.fragmentCache.clear();
    this.rollups.clearReadCache();
  }
}
