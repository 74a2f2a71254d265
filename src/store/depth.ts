/**
 * The depth-series store (Tempus fork of TB; docs/api.md "Depth series"). A depth series is
 * a key's values stamped by a depth ("ds", a double: metres or feet, whatever the device uses) instead of a
 * time. Same (entity, key, ds) overwrites.
 *
 * Layout (env.depth): key [entity u32][key u32][ds f64 ordered] → value (codec.encodeValue). The ordered f64
 * is the IEEE-754 big-endian image with the sign bit flipped for positives and every bit inverted for
 * negatives, so LMDB's byte order is numeric order (-2.5 < -1 < 0 < 0.25 < 1 < 10). -0 is stored as 0.
 *
 * "Latest" of a depth series is its value at the greatest depth (the deepest reading), by analogy with the
 * timeseries latest following the newest ts; it needs no extra state and survives any write order.
 *
 * Reads are paged: each page is read to the end inside one short read transaction before anything is
 * yielded, so a slow consumer (a CSV download) never pins an LMDB snapshot.
 */
import type { KvEntry } from '../model/record.js';
import type { KvValue } from '../model/kv.js';
import type { EntityIdx, KeyIdx } from './encoding/codec.js';
import { decodeValue, encodeValue, entityPrefix, prefixEnd, seriesKey } from './encoding/codec.js';
import type { Dictionary } from './encoding/dict.js';
import type { StoreEnv } from './env.js';

/** A depth stamp (the `ds` of a payload), in the device's own unit. */
export type Depth = number;

/** Values written at one depth. */
export interface DsRecord {
  readonly ds: Depth;
  readonly values: readonly KvEntry[];
}

/** One stored depth point: a key's value at a depth. */
export interface DsKv {
  readonly ds: Depth;
  readonly value: KvValue;
}

export interface DepthRangeQuery {
  /** inclusive */
  readonly startDs: Depth;
  /** inclusive (depths are doubles: there is no "next depth" to make an exclusive bound useful) */
  readonly endDs: Depth;
  readonly limit?: number;
}

/** The storage seam the depth REST API and the CSV downloads read through. */
export interface DepthStore {
  /** Stores every point of `records` for one entity; resolves once they are on disk. */
  write(entityId: string, records: readonly DsRecord[]): Promise<void>;
  /** Keys that have at least one depth point, sorted. */
  keys(entityId: string): string[];
  /** The value at the greatest depth per key; every key of the entity when `keys` is undefined. Missing keys are absent. */
  latest(entityId: string, keys?: readonly string[]): Map<string, DsKv>;
  /** Points of one key with startDs ≤ ds ≤ endDs, ascending by depth, at most `limit`. Lazy and paged. */
  range(entityId: string, key: string, q: DepthRangeQuery): IterableIterator<DsKv>;
}

/** Points read per LMDB read transaction in `range`. */
const PAGE = 1024;

/** Writes `ds` as 8 order-preserving bytes at `off`. Precondition: ds is finite. */
export function writeOrderedF64(buf: Buffer, ds: Depth, off: number): void {
  buf.writeDoubleBE(ds === 0 ? 0 : ds, off);
  if (((buf[off] as number) & 0x80) === 0) {
    buf[off] = (buf[off] as number) | 0x80;
  } else {
    for (let i = off; i < off + 8; i++) buf[i] = ~(buf[i] as number) & 0xff;
  }
}

const scratch = Buffer.allocUnsafe(8);

export function readOrderedF64(buf: Uint8Array, off: number): Depth {
  const positive = ((buf[off] as number) & 0x80) !== 0;
  for (let i = 0; i < 8; i++) {
    const byte = buf[off + i] as number;
    scratch[i] = positive ? byte : ~byte & 0xff;
  }
  if (positive) scratch[0] = (scratch[0] as number) & 0x7f;
  return scratch.readDoubleBE(0);
}

/** [entity u32][key u32][ds f64 ordered] */
export function depthKey(e: EntityIdx, k: KeyIdx, ds: Depth): Buffer {
  const b = Buffer.allocUnsafe(16);
  b.writeUInt32BE(e, 0);
  b.writeUInt32BE(k, 4);
  writeOrderedF64(b, ds, 8);
  return b;
}

/**
 * Upstream sync's bookkeeping of depth writes (src/upstream/uplink/depth.ts), given while sync is on. `record` is called in
 * the write's synchronous turn, after its puts, so whatever it puts shares the write's LMDB transaction (the
 * outbox entry cannot be missed after a crash, nor exist without its points). `points` is the write's distinct
 * points grouped by depth, flat: (ds, n, k1..kn)*. It returns what to call once that transaction settled.
 */
export interface DepthSyncRecorder {
  record(e: EntityIdx, points: number[], count: number): (committed: boolean) => void;
}

export class LmdbDepthStore implements DepthStore {
  /** `syncRecorder`: upstream sync's bookkeeping, given while sync is on */
  constructor(
    private readonly env: StoreEnv,
    private readonly dict: Dictionary,
    private readonly syncRecorder?: DepthSyncRecorder,
  ) {}

  write(entityId: string, records: readonly DsRecord[]): Promise<void> {
    // All puts are issued in one synchronous turn: lmdb-js commits them in one transaction (all-or-nothing),
    // and the caller is answered only after that transaction is flushed (durability, docs/api.md).
    let last: Promise<boolean> | undefined;
    let settle: ((committed: boolean) => void) | undefined;
    if (records.length > 0) {
      const e = this.dict.internEntity(entityId);
      const recorder = this.syncRecorder;
      const byDepth = recorder === undefined ? undefined : new Map<Depth, Set<KeyIdx>>();
      for (const rec of records) {
        for (const [key, value] of rec.values) {
          const k = this.dict.internKey(key);
          last = this.env.depth.put(depthKey(e, k, rec.ds), encodeValue(value));
          if (byDepth !== undefined) {
            // -0 and 0 are one stored depth (depthKey)
            const ds = rec.ds === 0 ? 0 : rec.ds;
            let keys = byDepth.get(ds);
            if (keys === undefined) byDepth.set(ds, (keys = new Set()));
            keys.add(k);
          }
        }
      }
      if (recorder !== undefined && byDepth !== undefined && byDepth.size > 0) {
        const flat: number[] = [];
        let count = 0;
        for (const [ds, keys] of byDepth) {
          flat.push(ds, keys.size);
          for (const k of keys) flat.push(k);
          count += keys.size;
        }
        settle = recorder.record(e, flat, count);
      }
    }
    if (last === undefined) return Promise.resolve();
    return last.then(
      () => {
        settle?.(true);
        return this.env.flushed();
      },
      (err: unknown) => {
        settle?.(false);
        throw err;
      },
    );
  }

  keys(entityId: string): string[] {
    const e = this.dict.entityIdx(entityId);
    if (e === undefined) return [];
    const out: string[] = [];
    const end = prefixEnd(entityPrefix(e));
    let start: Buffer = entityPrefix(e);
    // Skip-scan: one point per key, then jump past that key's whole series.
    for (;;) {
      let found: KeyIdx | undefined;
      for (const rk of this.env.depth.getKeys({ start, end, limit: 1 })) found = (rk as Buffer).readUInt32BE(4);
      if (found === undefined) break;
      const name = this.dict.keyName(found);
      if (name !== undefined) out.push(name);
      start = prefixEnd(seriesKey(e, found));
    }
    return out.sort();
  }

  latest(entityId: string, keys?: readonly string[]): Map<string, DsKv> {
    const out = new Map<string, DsKv>();
    const e = this.dict.entityIdx(entityId);
    if (e === undefined) return out;
    for (const name of keys ?? this.keys(entityId)) {
      const k = this.dict.keyIdx(name);
      if (k === undefined) continue;
      const sk = seriesKey(e, k);
      // Reverse from just past the series: the first entry is the greatest depth.
      for (const { key, value } of this.env.depth.getRange({
        start: prefixEnd(sk),
        end: sk,
        reverse: true,
        limit: 1,
      })) {
        const rk = key as Buffer;
        if (rk.length === 16 && rk.readUInt32BE(0) === e && rk.readUInt32BE(4) === k) {
          out.set(name, { ds: readOrderedF64(rk, 8), value: decodeValue(value) });
        }
      }
    }
    return out;
  }

  *range(entityId: string, key: string, q: DepthRangeQuery): IterableIterator<DsKv> {
    const e = this.dict.entityIdx(entityId);
    const k = this.dict.keyIdx(key);
    if (e === undefined || k === undefined || !(q.startDs <= q.endDs)) return;
    // lmdb-js ranges exclude `end`; one byte past the 16-byte key of endDs makes endDs itself included.
    const end = Buffer.concat([depthKey(e, k, q.endDs), Buffer.from([0])]);
    let start: Buffer = depthKey(e, k, q.startDs);
    let remaining = q.limit ?? Infinity;
    while (remaining > 0) {
      const page: DsKv[] = [];
      for (const { key: rk, value } of this.env.depth.getRange({ start, end, limit: Math.min(PAGE, remaining) })) {
        page.push({ ds: readOrderedF64(rk as Buffer, 8), value: decodeValue(value) });
      }
      const last = page[page.length - 1];
      yield* page;
      remaining -= page.length;
      if (page.length < PAGE || last === undefined) return;
      // Resume strictly after the last key read (keys are fixed-size, so key + 0x00 is its successor).
      start = Buffer.concat([depthKey(e, k, last.ds), Buffer.from([0])]);
    }
  }
}
