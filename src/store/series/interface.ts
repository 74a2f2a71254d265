/**
 * The storage seam the query layer, websocket, downloads and the rollup planner read through: what a
 * timeseries store answers, apart from how the LMDB store does it, so the planner and bucket sources depend on
 * this small module and not on the store's implementation.
 */
import type { TelemetryBatch } from '../../model/batch.js';
import type { TsKv } from '../../model/kv.js';
import type { TsRecord } from '../../model/record.js';

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

/** The storage seam the query layer, websocket and downloads read through. */
export interface TimeseriesStore {
  /**
   * Stores every point for one entity; resolves once they are on disk. Records (TB's shape) are converted to
   * the columnar batch the ingest path parses into.
   */
  write(entityId: string, points: TelemetryBatch | readonly TsRecord[]): Promise<void>;
  /** Latest value per key; all keys of the entity when `keys` is undefined. Missing keys are absent. */
  latest(entityId: string, keys?: readonly string[]): Map<string, TsKv>;
  /** Timeseries keys that have a latest value, sorted. */
  keys(entityId: string): string[];
  /** Raw points of one key in [startTs, endTs), in `order`, at most `limit`. Lazy: reads window by window. */
  range(entityId: string, key: string, q: RangeQuery): IterableIterator<TsKv>;
  /** Deletes points of `keys` in [startTs, endTs). Resolves once durable. */
  delete(entityId: string, req: DeleteRequest): Promise<void>;
}
