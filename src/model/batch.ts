/**
 * A telemetry write as one column per key (batched ingest at chunk speed). A column holds a key's
 * points in posted order; its values stay unboxed numbers while they are all LONGs (safe integers) or all
 * DOUBLEs, the shape of nearly every sensor series. A 1000-record batch of two keys is then four number
 * arrays instead of ~8,000 small objects that would live until the commit and be copied by every scavenge on
 * the way, and the block encoder (store/encoding/gorilla.ts) reads the numbers directly.
 *
 * A column that receives anything else (a string, a bigint, a LONG among DOUBLEs, …) turns BOXED: its values
 * become KvValue objects, which is exactly the old per-point cost, no worse.
 */
import { type KvValue, type TsKv, kvDouble, kvLong } from './kv.js';

export type ColumnKind = 'LONG' | 'DOUBLE' | 'BOXED';

export class SeriesColumn {
  /**
   * the ts of each point. A column's first point makes its arrays anew, one element long: most device posts
   * carry one point per key, and the first push into an empty array reserves 17, so each such point held until
   * its log apply cost ~465 bytes of heap instead of ~210 (docs/design/memory-budget.md)
   */
  ts: number[] = [];
  /** the values while `kind` is LONG or DOUBLE (empty once BOXED) */
  nums: number[] = [];
  /** the values once `kind` is BOXED (empty before) */
  boxed: KvValue[] = [];
  /** undefined while empty */
  kind: ColumnKind | undefined;

  get length(): number {
    return this.ts.length;
  }

  /** A LONG that is a safe integer. */
  pushLong(ts: number, v: number): void {
    this.pushNumber(ts, v, 'LONG');
  }

  pushDouble(ts: number, v: number): void {
    this.pushNumber(ts, v, 'DOUBLE');
  }

  push(ts: number, v: KvValue): void {
    if (v.type === 'DOUBLE') this.pushDouble(ts, v.v);
    else if (v.type === 'LONG' && typeof v.v === 'number') this.pushLong(ts, v.v);
    else this.pushBoxed(ts, v);
  }

  value(i: number): KvValue {
    if (this.kind === 'LONG') return kvLong(this.nums[i] as number);
    if (this.kind === 'DOUBLE') return kvDouble(this.nums[i] as number);
    return this.boxed[i] as KvValue;
  }

  /** Appends points [from, to) of `other`. */
  append(other: SeriesColumn, from = 0, to = other.length): void {
    if (other.kind === undefined || from >= to) return;
    if (other.kind !== 'BOXED' && (this.kind === undefined || this.kind === other.kind)) {
      this.kind = other.kind;
      for (let i = from; i < to; i++) {
        this.ts.push(other.ts[i] as number);
        this.nums.push(other.nums[i] as number);
      }
      return;
    }
    for (let i = from; i < to; i++) this.push(other.ts[i] as number, other.value(i));
  }

  /** The points in ts order, one per ts (the last posted wins); `this` when already strictly ascending. */
  sortedDistinct(): SeriesColumn {
    const ts = this.ts;
    let ascending = true;
    for (let i = 1; i < ts.length; i++) {
      if ((ts[i] as number) <= (ts[i - 1] as number)) {
        ascending = false;
        break;
      }
    }
    if (ascending) return this;
    const idx = ts.map((_t, i) => i);
    // stable by position on an equal ts, so the last of a run of equal ts is the last posted
    idx.sort((a, b) => (ts[a] as number) - (ts[b] as number) || a - b);
    const out = new SeriesColumn();
    for (let j = 0; j < idx.length; j++) {
      const i = idx[j] as number;
      const next = idx[j + 1];
      if (next !== undefined && ts[next] === ts[i]) continue;
      out.append(this, i, i + 1);
    }
    return out;
  }

  toPoints(from = 0, to = this.length): TsKv[] {
    const out: TsKv[] = [];
    for (let i = from; i < to; i++) out.push({ ts: this.ts[i] as number, value: this.value(i) });
    return out;
  }

  static fromPoints(points: readonly TsKv[]): SeriesColumn {
    const col = new SeriesColumn();
    for (const p of points) col.push(p.ts, p.value);
    return col;
  }

  private pushNumber(ts: number, v: number, kind: 'LONG' | 'DOUBLE'): void {
    if (this.kind === kind) {
      this.ts.push(ts);
      this.nums.push(v);
    } else if (this.kind === undefined) {
      this.kind = kind;
      this.ts = [ts];
      this.nums = [v];
    } else {
      this.pushBoxed(ts, kind === 'LONG' ? kvLong(v) : kvDouble(v));
    }
  }

  private pushBoxed(ts: number, v: KvValue): void {
    if (this.kind === undefined) {
      this.kind = 'BOXED';
      this.ts = [ts];
      this.boxed = [v];
      return;
    }
    if (this.kind !== 'BOXED') {
      const nums = this.nums;
      const box = this.kind === 'LONG' ? kvLong : kvDouble;
      for (let i = 0; i < nums.length; i++) this.boxed.push(box(nums[i] as number));
      this.nums = [];
      this.kind = 'BOXED';
    }
    this.ts.push(ts);
    this.boxed.push(v);
  }
}

/** One entity's telemetry write: key → its column, keys in order of first appearance. */
export class TelemetryBatch {
  readonly series = new Map<string, SeriesColumn>();

  column(key: string): SeriesColumn {
    let col = this.series.get(key);
    if (col === undefined) this.series.set(key, (col = new SeriesColumn()));
    return col;
  }

  get pointCount(): number {
    let n = 0;
    for (const col of this.series.values()) n += col.length;
    return n;
  }

  static fromRecords(
    records: ReadonlyArray<{ readonly ts: number; readonly values: ReadonlyArray<readonly [string, KvValue]> }>,
  ): TelemetryBatch {
    const batch = new TelemetryBatch();
    for (const rec of records) for (const [key, v] of rec.values) batch.column(key).push(rec.ts, v);
    return batch;
  }
}
