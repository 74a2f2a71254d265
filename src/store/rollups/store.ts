/**
 * Rollup tiers (docs/design/downsampling.md): per series and tier, the mergeable aggregate state (`BucketAgg` of
 * aggregate.ts) of every non-empty bucket [start, start + bucketMs), buckets aligned to epoch 0.
 * Because BucketAgg merges exactly (exact long sums, Shewchuk partials for doubles), merging rollup buckets
 * gives the same finalized answer as aggregating the raw points.
 *
 * Invariant: a tier's buckets reflect the series' CHUNKS only (not head fragments). Compaction and deletes
 * rewrite a window's chunk and call `rebuildWindow` in the same LMDB transaction; the planner treats windows
 * with head fragments as dirty. Tiers finer than or equal to the chunk window are computed from the window's
 * points; coarser tiers from the next finer tier (a fixed resolution ladder, as Thanos does).
 *
 * Storage: `env.rollups` [tier u8][entity u32][key u32][blockStart i64] → a column-encoded block of buckets.
 * A block spans about BUCKETS_PER_BLOCK buckets (rounded up to a whole number of chunk windows), so a month
 * of 1-hour buckets is a handful of LMDB reads, and the per-entry overhead is spread over many buckets.
 */
import { OutpostError } from '../../errors.js';
import { type BucketAgg, addPoint, emptyAgg, mergeAgg } from './aggregate.js';
import type { KvValue, TsKv } from '../../model/kv.js';
import { kvDouble, kvLong, kvString } from '../../model/kv.js';
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import { readOrderedI64, writeOrderedI64 } from '../encoding/codec.js';
import { windowKey, windowStart } from '../series/chunks.js';
import { type StoreEnv, readOwnCopy } from '../env.js';
import { ByteLru } from '../lru.js';
import { ByteReader, ByteWriter, readDiffs, writeDiffs } from '../encoding/bytes.js';
import { decodePoints, encodePoints } from '../encoding/gorilla.js';
import { type DecodedBlock, type RollupBucket, decodeSums } from './decoded-block.js';

const BUCKETS_PER_BLOCK = 120;

export interface TierSpec {
  /** position in the ladder, 0 = finest; also the first byte of its LMDB keys */
  readonly index: number;
  /** ms, > 0 */
  readonly bucketMs: number;
  /** ms; multiple of bucketMs and of the chunk window */
  readonly blockMs: number;
  /** ms; 0 = kept forever */
  readonly retentionMs: number;
}

/** Validates the ladder against the chunk window: ascending, each a multiple of the previous, each dividing the window or a multiple of it. */
export function makeTiers(tiersMs: readonly number[], retentionMs: readonly number[], windowMs: number): TierSpec[] {
  if (!Number.isSafeInteger(windowMs) || windowMs <= 0)
    throw new OutpostError('CONFIG_INVALID', 'config: "store.chunkWindowMs" must be a positive integer');
  if (tiersMs.length > 8) throw new OutpostError('CONFIG_INVALID', 'config: at most 8 rollup tiers');
  if (retentionMs.length !== tiersMs.length) {
    throw new OutpostError(
      'CONFIG_INVALID',
      'config: "downsample.tierRetentionMs" needs one entry per tier of "downsample.tiersMs"',
    );
  }
  return tiersMs.map((bucketMs, index) => {
    const prev = index > 0 ? (tiersMs[index - 1] as number) : undefined;
    const ret = retentionMs[index] as number;
    if (
      !Number.isSafeInteger(bucketMs) ||
      bucketMs <= 0 ||
      (prev !== undefined && bucketMs % prev !== 0) ||
      (bucketMs <= windowMs ? windowMs % bucketMs !== 0 : bucketMs % windowMs !== 0)
    ) {
      throw new OutpostError(
        'CONFIG_INVALID',
        `config: rollup tier ${bucketMs} ms must be a multiple of the previous tier and divide (or be a multiple of) the chunk window ${windowMs} ms`,
      );
    }
    if (!Number.isFinite(ret) || ret < 0)
      throw new OutpostError('CONFIG_INVALID', `config: tier retention must be ≥ 0, got ${ret}`);
    const blockMs = Math.ceil((bucketMs * BUCKETS_PER_BLOCK) / windowMs) * windowMs;
    return { index, bucketMs, blockMs, retentionMs: ret };
  });
}

export type { RollupBucket };

/** [tier u8][entity u32][key u32][blockStart i64] */
export function rollupKey(tier: number, e: EntityIdx, k: KeyIdx, blockStart: number): Buffer {
  const b = Buffer.allocUnsafe(17);
  b[0] = tier;
  b.writeUInt32BE(e, 1);
  b.writeUInt32BE(k, 5);
  writeOrderedI64(b, blockStart, 9);
  return b;
}

// ---- block codec: one column per BucketAgg field, each column run-length/delta or point-block encoded ----

function intColumn(w: ByteWriter, ints: number[]): void {
  writeDiffs(w, ints, 1);
}

function valueColumn(w: ByteWriter, values: ReadonlyArray<KvValue | undefined>): void {
  const present: number[] = [];
  const points: TsKv[] = [];
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    present.push(v === undefined ? 0 : 1);
    if (v !== undefined) points.push({ ts: i, value: v });
  }
  intColumn(w, present);
  const block = encodePoints(points);
  w.uvar(block.length);
  w.bytes(block);
}

function readIntColumn(r: ByteReader, n: number): number[] {
  const out: number[] = [];
  if (n > 0) readDiffs(r, n, 1, out);
  return out;
}

function readValueColumn(r: ByteReader, n: number): Array<KvValue | undefined> {
  const present = readIntColumn(r, n);
  const len = r.uvar();
  const points = decodePoints(r.slice(len));
  const out = new Array<KvValue | undefined>(n).fill(undefined);
  for (const p of points) out[p.ts] = p.value;
  if (points.length !== present.reduce((a, b) => a + b, 0)) throw new Error('corrupt rollup block: presence mismatch');
  return out;
}

const longOf = (v: KvValue | undefined): number | bigint | undefined =>
  v === undefined ? undefined : (v.v as number | bigint);
const numOf = (v: KvValue | undefined): number | undefined => (v === undefined ? undefined : (v.v as number));
const strOf = (v: KvValue | undefined): string | undefined => (v === undefined ? undefined : (v.v as string));

/** Encodes non-empty buckets (ascending start, all inside the block) of one tier. */
export function encodeBlock(blockStart: number, bucketMs: number, buckets: readonly RollupBucket[]): Buffer {
  const w = new ByteWriter(64 + buckets.length * 16);
  const n = buckets.length;
  w.uvar(n);
  const aggs = buckets.map((b) => b.agg);
  intColumn(
    w,
    buckets.map((b) => (b.start - blockStart) / bucketMs),
  );
  intColumn(
    w,
    aggs.map((a) => a.count),
  );
  intColumn(
    w,
    aggs.map((a) => a.longCount),
  );
  intColumn(
    w,
    aggs.map((a) => a.doubleCount),
  );
  intColumn(
    w,
    aggs.map((a) => a.boolCount),
  );
  intColumn(
    w,
    aggs.map((a) => a.stringCount),
  );
  intColumn(
    w,
    aggs.map((a) => a.jsonCount),
  );
  // An exact long sum may leave the 64-bit range (encodeValue's LONG): then the column holds decimal strings.
  const I64_MIN = -(2n ** 63n);
  const I64_MAX = 2n ** 63n - 1n;
  const wide = aggs.some((a) => typeof a.longSum === 'bigint' && (a.longSum < I64_MIN || a.longSum > I64_MAX));
  w.u8(wide ? 1 : 0);
  valueColumn(
    w,
    aggs.map((a) => (a.longCount > 0 ? (wide ? kvString(String(a.longSum)) : kvLong(a.longSum)) : undefined)),
  );
  intColumn(
    w,
    aggs.map((a) => a.doubleSum.length),
  );
  valueColumn(
    w,
    aggs.flatMap((a) => a.doubleSum.map(kvDouble)),
  );
  valueColumn(
    w,
    aggs.map((a) => (a.doubleSpecial === 0 ? undefined : kvDouble(a.doubleSpecial))),
  );
  valueColumn(
    w,
    aggs.map((a) => (a.longMin === undefined ? undefined : kvLong(a.longMin))),
  );
  valueColumn(
    w,
    aggs.map((a) => (a.longMax === undefined ? undefined : kvLong(a.longMax))),
  );
  valueColumn(
    w,
    aggs.map((a) => (a.doubleMin === undefined ? undefined : kvDouble(a.doubleMin))),
  );
  valueColumn(
    w,
    aggs.map((a) => (a.doubleMax === undefined ? undefined : kvDouble(a.doubleMax))),
  );
  valueColumn(
    w,
    aggs.map((a) => (a.stringMin === undefined ? undefined : kvString(a.stringMin))),
  );
  valueColumn(
    w,
    aggs.map((a) => (a.stringMax === undefined ? undefined : kvString(a.stringMax))),
  );
  intColumn(
    w,
    buckets.map((b) => b.agg.firstTs - b.start),
  );
  intColumn(
    w,
    buckets.map((b) => b.agg.lastTs - b.start),
  );
  valueColumn(
    w,
    aggs.map((a) => a.first),
  );
  valueColumn(
    w,
    aggs.map((a) => a.last),
  );
  return w.finish();
}

export function decodeBlock(buf: Buffer, blockStart: number, bucketMs: number): RollupBucket[] {
  const r = new ByteReader(buf);
  const n = r.uvar();
  if (n === 0) return [];
  const starts = readIntColumn(r, n);
  const count = readIntColumn(r, n);
  const longCount = readIntColumn(r, n);
  const doubleCount = readIntColumn(r, n);
  const boolCount = readIntColumn(r, n);
  const stringCount = readIntColumn(r, n);
  const jsonCount = readIntColumn(r, n);
  const wideSums = r.u8() === 1;
  const longSum = readValueColumn(r, n).map((v) => (v !== undefined && wideSums ? kvLong(BigInt(v.v as string)) : v));
  const partialLens = readIntColumn(r, n);
  const partialTotal = partialLens.reduce((a, b) => a + b, 0);
  const partials = readValueColumn(r, partialTotal);
  const special = readValueColumn(r, n);
  const longMin = readValueColumn(r, n);
  const longMax = readValueColumn(r, n);
  const doubleMin = readValueColumn(r, n);
  const doubleMax = readValueColumn(r, n);
  const stringMin = readValueColumn(r, n);
  const stringMax = readValueColumn(r, n);
  const firstTs = readIntColumn(r, n);
  const lastTs = readIntColumn(r, n);
  const first = readValueColumn(r, n);
  const last = readValueColumn(r, n);
  const out: RollupBucket[] = new Array(n);
  let p = 0;
  for (let i = 0; i < n; i++) {
    const start = blockStart + (starts[i] as number) * bucketMs;
    const plen = partialLens[i] as number;
    const doubleSum: number[] = [];
    for (let j = 0; j < plen; j++) doubleSum.push(numOf(partials[p++]) as number);
    const agg: BucketAgg = {
      count: count[i] as number,
      longCount: longCount[i] as number,
      doubleCount: doubleCount[i] as number,
      boolCount: boolCount[i] as number,
      stringCount: stringCount[i] as number,
      jsonCount: jsonCount[i] as number,
      longSum: longOf(longSum[i]) ?? 0,
      doubleSum,
      doubleSpecial: numOf(special[i]) ?? 0,
      longMin: longOf(longMin[i]),
      longMax: longOf(longMax[i]),
      doubleMin: numOf(doubleMin[i]),
      doubleMax: numOf(doubleMax[i]),
      stringMin: strOf(stringMin[i]),
      stringMax: strOf(stringMax[i]),
      firstTs: start + (firstTs[i] as number),
      first: first[i],
      lastTs: start + (lastTs[i] as number),
      last: last[i],
    };
    out[i] = { start, agg };
  }
  return out;
}

/** Aggregates ascending points into `bucketMs` buckets (aligned to epoch 0). */
export function bucketize(points: readonly TsKv[], bucketMs: number): RollupBucket[] {
  const out: RollupBucket[] = [];
  let cur: { start: number; agg: BucketAgg } | undefined;
  for (const p of points) {
    const start = windowStart(p.ts, bucketMs);
    if (cur === undefined || cur.start !== start) {
      cur = { start, agg: emptyAgg() };
      out.push(cur);
    }
    addPoint(cur.agg, p.ts, p.value);
  }
  return out;
}

interface PendingBlock {
  readonly key: Buffer;
  readonly tier: TierSpec;
  readonly blockStart: number;
  /** ascending by start */
  buckets: RollupBucket[];
}

const EMPTY_BLOCK = decodeSums(Buffer.alloc(0), 0, 1, () => []);

/**
 * Reads and writes the tiers of every series. All methods are synchronous LMDB work for a transaction.
 * Inside `batch`, touched blocks stay decoded in memory and are encoded and written once at its end: a
 * compaction step that folds many windows of one series rewrites each block once, not once per window.
 */

export class RollupStore {
  private pending: Map<string, PendingBlock> | undefined;
  /**
   * rollup key (latin1) → decoded committed block, least recently used first, within `readCacheBytes`; emptied
   * before a transaction changes rollups and left unfilled until it has committed (LmdbTimeseriesStore.writeChunks)
   */
  private readonly readCache: ByteLru<string, DecodedBlock>;

  /**
   * `horizons` reports what retention dropped: raw chunks of windows before `raw`, tier i's blocks before
   * `tiers[i]`. Nothing is rebuilt below a horizon: a tier below its horizon is not written, and a coarser
   * tier whose finer tier is gone there is recomputed from raw chunks, or left as it is when those are gone too.
   */
  constructor(
    private readonly env: StoreEnv,
    readonly tiers: readonly TierSpec[],
    readonly windowMs: number,
    private readonly horizons: () => { raw: number; tiers: readonly number[] } = () => ({
      raw: Number.MIN_SAFE_INTEGER,
      tiers: [],
    }),
    readCacheBytes = 12 * 1024 * 1024,
    /** false while a change to rollups may be committing (see LmdbTimeseriesStore.writeChunks) */
    private readonly cacheable: () => boolean = () => true,
  ) {
    this.readCache = new ByteLru(readCacheBytes, (blk) => blk.bytes);
  }

  /** Buckets of `tier` with start in [fromTs, toTs), ascending, as stored. Lazy per block. */
  *buckets(tier: TierSpec, e: EntityIdx, k: KeyIdx, fromTs: number, toTs: number): IterableIterator<RollupBucket> {
    if (toTs <= fromTs) return;
    const lo = windowStart(fromTs, tier.blockMs);
    for (const { key, value } of this.env.rollups.getRange({
      start: rollupKey(tier.index, e, k, lo),
      end: rollupKey(tier.index, e, k, toTs),
    })) {
      const blockStart = readOrderedI64(key as Buffer, 9);
      for (const b of decodeBlock(value, blockStart, tier.bucketMs)) {
        if (b.start >= fromTs && b.start < toTs) yield b;
      }
    }
  }

  /**
   * The committed buckets of one block, decoded; shared with other readers, so never modified. Rollups are
   * written inside LmdbTimeseriesStore.writeChunks, which empties this cache and keeps it unfilled until the
   * change has committed.
   */
  readBlock(tier: TierSpec, e: EntityIdx, k: KeyIdx, blockStart: number): DecodedBlock {
    const key = rollupKey(tier.index, e, k, blockStart);
    const id = key.toString('latin1');
    const hit = this.readCache.get(id);
    if (hit !== undefined) return hit;
    const raw = readOwnCopy(this.env.rollups, key);
    const blk =
      raw === undefined
        ? EMPTY_BLOCK
        : decodeSums(raw, blockStart, tier.bucketMs, () => decodeBlock(raw, blockStart, tier.bucketMs));
    if (!this.cacheable()) return blk;
    this.readCache.add(id, blk);
    if (blk !== EMPTY_BLOCK) blk.onGrown = () => this.readCache.remeasure(id);
    return blk;
  }

  clearReadCache(): void {
    this.readCache.clear();
  }

  /** Accounted bytes of the decoded blocks held for readers. */
  get readCacheUsage(): number {
    return this.readCache.bytes;
  }

  /** Runs `fn` (inside a transaction) with block writes deferred to its end. */
  batch<T>(fn: () => T): T {
    if (this.pending !== undefined) return fn();
    this.pending = new Map();
    try {
      const out = fn();
      for (const blk of this.pending.values()) this.store(blk);
      return out;
    } finally {
      this.pending = undefined;
    }
  }

  /**
   * Recomputes every tier for the window [w, w + W) of series (e, k) whose chunk now holds `points`
   * (ascending; empty when the window was emptied). Runs inside the transaction that wrote the chunk.
   */
  rebuildWindow(e: EntityIdx, k: KeyIdx, w: number, points: readonly TsKv[]): void {
    this.batch(() => {
      const W = this.windowMs;
      const h = this.horizons();
      const below = (tier: TierSpec, ts: number): boolean => ts < (h.tiers[tier.index] ?? Number.MIN_SAFE_INTEGER);
      for (const tier of this.tiers) {
        if (below(tier, w)) continue;
        if (tier.bucketMs <= W) {
          this.replaceBuckets(tier, e, k, w, w + W, bucketize(points, tier.bucketMs));
          continue;
        }
        const start = windowStart(w, tier.bucketMs);
        const end = start + tier.bucketMs;
        let agg: BucketAgg | undefined;
        const finer = tier.index > 0 ? this.tiers[tier.index - 1] : undefined;
        if (finer !== undefined && !below(finer, start)) {
          for (let b = windowStart(start, finer.blockMs); b < end; b += finer.blockMs) {
            for (const x of this.block(finer, e, k, b).buckets) {
              if (x.start >= start && x.start < end) agg = agg === undefined ? x.agg : mergeAgg(agg, x.agg);
            }
          }
        } else {
          // No finer tier here (none configured, or retention dropped it): aggregate the bucket's raw chunks.
          if (start < h.raw) continue;
          for (const { value } of this.env.chunks.getRange({
            start: windowKey(e, k, start),
            end: windowKey(e, k, end),
          })) {
            for (const p of decodePoints(value)) addPoint((agg ??= emptyAgg()), p.ts, p.value);
          }
        }
        this.replaceBuckets(tier, e, k, start, end, agg === undefined ? [] : [{ start, agg }]);
      }
    });
  }

  /** Whether the finest tier holds a bucket of series (e, k) starting in [from, to) (pending changes included). */
  hasFinestBuckets(e: EntityIdx, k: KeyIdx, from: number, to: number): boolean {
    const tier = this.tiers[0];
    if (tier === undefined) return false;
    for (let b = windowStart(from, tier.blockMs); b < to; b += tier.blockMs) {
      if (this.block(tier, e, k, b).buckets.some((x) => x.start >= from && x.start < to)) return true;
    }
    return false;
  }

  /** The block (pending version inside a batch), decoded. */
  private block(tier: TierSpec, e: EntityIdx, k: KeyIdx, blockStart: number): PendingBlock {
    const key = rollupKey(tier.index, e, k, blockStart);
    const id = key.toString('latin1');
    const cached = this.pending?.get(id);
    if (cached !== undefined) return cached;
    const raw = this.env.rollups.get(key);
    const blk: PendingBlock = {
      key,
      tier,
      blockStart,
      buckets: raw === undefined ? [] : decodeBlock(raw, blockStart, tier.bucketMs),
    };
    this.pending?.set(id, blk);
    return blk;
  }

  private store(blk: PendingBlock): void {
    if (blk.buckets.length === 0) void this.env.rollups.remove(blk.key);
    else void this.env.rollups.put(blk.key, encodeBlock(blk.blockStart, blk.tier.bucketMs, blk.buckets));
  }

  /** Replaces the buckets of `tier` in [from, to) (inside one block) with `fresh` (ascending). */
  private replaceBuckets(
    tier: TierSpec,
    e: EntityIdx,
    k: KeyIdx,
    from: number,
    to: number,
    fresh: readonly RollupBucket[],
  ): void {
    const blk = this.block(tier, e, k, windowStart(from, tier.blockMs));
    const before = blk.buckets.filter((b) => b.start < from);
    const after = blk.buckets.filter((b) => b.start >= to);
    blk.buckets = [...before, ...fresh, ...after];
    if (this.pending === undefined) this.store(blk);
  }
}
