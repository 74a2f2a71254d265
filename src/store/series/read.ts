/**
 * Reads: latest values and raw ranges streamed window by window (chunks.ts). Every read first applies what the
 * log holds (apply.ts), so it sees each acknowledged point; the reader keeps no state of its own.
 */
import type { TsKv } from '../../model/kv.js';
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import { decodeStamped, entityPrefix, prefixEnd, seriesKey } from '../encoding/codec.js';
import type { Dictionary } from '../encoding/dict.js';
import type { StoreEnv } from '../env.js';
import { type WindowPoints, seriesPoints, seriesWindows } from './chunks.js';
import type { RangeQuery } from './interface.js';

export class SeriesReader {
  constructor(
    private readonly env: StoreEnv,
    private readonly dict: Dictionary,
    private readonly windowMs: number,
    /** puts what the log holds into LMDB (a no-op without a log) */
    private readonly applyLogged: () => void,
  ) {}

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

  /** The merged windows of series (e, k) overlapping [fromTs, toTs), ascending. */
  windowsOf(e: EntityIdx, k: KeyIdx, fromTs: number, toTs: number): IterableIterator<WindowPoints> {
    this.applyLogged();
    return seriesWindows(this.env, e, k, fromTs, toTs, this.windowMs, false);
  }
}
