/**
 * The timeseries store. CONTRACT §5 semantics live here: same (entity, key, ts) overwrites; "latest" follows
 * the newest ts and an older point never replaces it; ranges are [startTs, endTs).
 *
 * Write path (group commit): a request's puts are all issued in one synchronous turn, so lmdb-js puts them in
 * the same transaction as every other request of that turn; the request is acknowledged after that
 * transaction is committed *and* flushed. No fsync per request, and no request is half-stored.
 *
 * Layout seam for downsampling: raw points land in `head`; compaction into `chunks` and `rollups` belongs to
 * the downsampling engine, which reads and rewrites through this class.
 */
import type { KvValue, TsKv } from '../model/kv.js';
import type { TsRecord } from '../ingest/payload.js';
import type { EntityIdx, KeyIdx } from './codec.js';
import {
  decodeStamped, decodeValue, encodeStamped, encodeValue, entityPrefix, pointKey, prefixEnd, readOrderedI64, seriesKey,
} from './codec.js';
import type { Dictionary } from './dict.js';
import type { StoreEnv } from './env.js';

export type Order = 'ASC' | 'DESC';

export interface RangeQuery {
  readonly startTs: number;
  /** exclusive */
  readonly endTs: number;
  readonly order: Order;
  readonly limit?: number;
}

export interface DeleteRequest {
  readonly keys: readonly string[];
  readonly startTs: number;
  /** exclusive */
  readonly endTs: number;
  /** remove the latest value when it lies in the range (TB default true) */
  readonly deleteLatest: boolean;
  /** after removing the latest value, promote the newest remaining point (TB default false) */
  readonly rewriteLatest: boolean;
}

/** The storage seam the query layer, websocket and downloads read through (STYLE §2). */
export interface TimeseriesStore {
  /** Stores every point of `records` for one entity; resolves once they are on disk. */
  write(entityId: string, records: readonly TsRecord[]): Promise<void>;
  /** Latest value per key; all keys of the entity when `keys` is undefined. Missing keys are absent. */
  latest(entityId: string, keys?: readonly string[]): Map<string, TsKv>;
  /** Timeseries keys that have a latest value, sorted. */
  keys(entityId: string): string[];
  /** Raw points of one key in [startTs, endTs), in `order`, at most `limit`. Lazy: reads pages from LMDB. */
  range(entityId: string, key: string, q: RangeQuery): IterableIterator<TsKv>;
  /** Deletes points of `keys` in [startTs, endTs). Resolves once durable. */
  delete(entityId: string, req: DeleteRequest): Promise<void>;
}

export class LmdbTimeseriesStore implements TimeseriesStore {
  /** latest ts per series, so concurrent writes in one batch never let an older point win */
  private readonly latestTs = new Map<EntityIdx, Map<KeyIdx, number>>();

  constructor(private readonly env: StoreEnv, private readonly dict: Dictionary) {}

  write(entityId: string, records: readonly TsRecord[]): Promise<void> {
    let last: Promise<boolean> | undefined;
    if (records.length > 0) {
      const e = this.dict.internEntity(entityId);
      for (const rec of records) {
        for (const [key, value] of rec.values) {
          const k = this.dict.internKey(key);
          last = this.env.head.put(pointKey(e, k, rec.ts), encodeValue(value));
          if (rec.ts >= this.cachedLatestTs(e, k)) {
            this.setLatestTs(e, k, rec.ts);
            last = this.env.latest.put(seriesKey(e, k), encodeStamped(rec.ts, value));
          }
        }
      }
    }
    if (last === undefined) return Promise.resolve();
    return last.then(() => this.env.flushed());
  }

  latest(entityId: string, keys?: readonly string[]): Map<string, TsKv> {
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

  *range(entityId: string, key: string, q: RangeQuery): IterableIterator<TsKv> {
    const e = this.dict.entityIdx(entityId);
    const k = this.dict.keyIdx(key);
    if (e === undefined || k === undefined || q.endTs <= q.startTs) return;
    const limit = q.limit !== undefined ? { limit: q.limit } : {};
    // Timestamps are integers, so [startTs, endTs) is [startTs, endTs - 1]; lmdb-js ranges include `start`
    // and exclude `end` in either direction.
    const opts = q.order === 'ASC'
      ? { start: pointKey(e, k, q.startTs), end: pointKey(e, k, q.endTs), ...limit }
      : { start: pointKey(e, k, q.endTs - 1), end: pointKey(e, k, q.startTs - 1), reverse: true, ...limit };
    for (const { key: rk, value } of this.env.head.getRange(opts)) {
      yield { ts: readOrderedI64(rk as Buffer, 8), value: decodeValue(value) };
    }
  }

  async delete(entityId: string, req: DeleteRequest): Promise<void> {
    const e = this.dict.entityIdx(entityId);
    if (e === undefined) return;
    await this.env.root.transaction(() => {
      for (const name of req.keys) {
        const k = this.dict.keyIdx(name);
        if (k === undefined) continue;
        for (const rk of this.env.head.getKeys({ start: pointKey(e, k, req.startTs), end: pointKey(e, k, req.endTs) })) {
          void this.env.head.remove(rk as Buffer);
        }
        const sk = seriesKey(e, k);
        const cur = this.env.latest.get(sk);
        if (!req.deleteLatest || cur === undefined) continue;
        const { ts } = decodeStamped(cur);
        if (ts < req.startTs || ts >= req.endTs) continue;
        void this.env.latest.remove(sk);
        this.latestTs.get(e)?.delete(k);
        if (req.rewriteLatest) {
          for (const { key: rk, value } of this.env.head.getRange({ start: pointKey(e, k, Number.MAX_SAFE_INTEGER), end: pointKey(e, k, Number.MIN_SAFE_INTEGER), reverse: true, limit: 1 })) {
            const pts = readOrderedI64(rk as Buffer, 8);
            void this.env.latest.put(sk, encodeStamped(pts, decodeValue(value)));
            this.setLatestTs(e, k, pts);
          }
        }
      }
    });
    await this.env.flushed();
  }

  private cachedLatestTs(e: EntityIdx, k: KeyIdx): number {
    const m = this.latestTs.get(e);
    const cached = m?.get(k);
    if (cached !== undefined) return cached;
    const raw = this.env.latest.get(seriesKey(e, k));
    const ts = raw === undefined ? -Infinity : decodeStamped(raw).ts;
    if (raw !== undefined) this.setLatestTs(e, k, ts);
    return ts;
  }

  private setLatestTs(e: EntityIdx, k: KeyIdx, ts: number): void {
    let m = this.latestTs.get(e);
    if (m === undefined) this.latestTs.set(e, (m = new Map()));
    m.set(k, ts);
  }
}

export type { KvValue };
