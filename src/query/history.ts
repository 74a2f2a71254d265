/**
 * Latest and history queries over a TimeseriesStore (docs/api.md), free of HTTP so the REST handlers, the
 * websocket and anything else share them.
 *
 * Streaming: results are lazy iterables pulled from `TimeseriesStore.range`; nothing loads a whole range.
 * A consumer that stops early must call `return()` on what it iterates (for-of does) so the LMDB range
 * iterator and its read transaction are released.
 *
 * Aggregation seam: every aggregated series goes through `aggregateBuckets(source, …)`. The default
 * BucketSource scans raw points; a store that also implements BucketSource (e.g. one answering interior
 * buckets from rollup tiers) is used automatically, and callers may pass their own.
 */
import { OutpostError } from '../errors.js';
import type { KvValue, TsKv } from '../model/kv.js';
import type { Order, TimeseriesStore } from '../store/series/interface.js';
import type { DurationMs, EpochMs } from '../types.js';
import type { AggFn } from '../store/rollups/aggregate.js';
import { type BucketSource, bucketSourceOf } from '../store/planner/bucket-source.js';
import { type BucketPlan, bucketAt, planBuckets } from '../store/planner/buckets.js';
import { finalizeAgg } from './aggregate.js';

export type AggParam = AggFn | 'NONE';

/** A history request as numbers (already parsed); see `planHistory` for the rules. */
export interface HistoryRequest {
  /** inclusive, epoch ms */
  readonly startTs: EpochMs;
  /** exclusive, epoch ms */
  readonly endTs: EpochMs;
  /** default NONE */
  readonly agg?: AggParam | undefined;
  /** ms; default 0; with an agg, 0 means a raw query */
  readonly interval?: DurationMs | undefined;
  /** raw: points per key (default `defaultLimit`); aggregated: explicit cap on buckets from startTs */
  readonly limit?: number | undefined;
  /** raw queries only; default DESC */
  readonly orderBy?: Order | undefined;
}

export interface QueryLimits {
  /** config query.maxIntervals */
  readonly maxIntervals: number;
  /** config query.defaultLimit */
  readonly defaultLimit: number;
}

export type HistoryPlan =
  | {
      readonly kind: 'raw';
      readonly startTs: EpochMs;
      readonly endTs: EpochMs;
      readonly limit: number;
      readonly order: Order;
    }
  | { readonly kind: 'agg'; readonly fn: AggFn; readonly plan: BucketPlan };

/**
 * Validates and normalises a request (docs/api.md): agg NONE, or agg with interval 0, is raw; an agg with
 * interval < 0 is 400; limit must be ≥ 1; without an explicit limit an aggregated range may span at most
 * maxIntervals buckets (else 400); endTs < startTs is 400 for aggregates and an empty answer for raw.
 */
export function planHistory(q: HistoryRequest, limits: QueryLimits): HistoryPlan {
  for (const [name, v] of [
    ['startTs', q.startTs],
    ['endTs', q.endTs],
    ['interval', q.interval ?? 0],
  ] as const) {
    if (!Number.isSafeInteger(v)) throw new OutpostError('BAD_PARAM', `'${name}' must be an integer, got ${String(v)}`);
  }
  if (q.limit !== undefined && (!Number.isSafeInteger(q.limit) || q.limit < 1)) {
    throw new OutpostError('BAD_PARAM', `'limit' must be a positive integer, got ${String(q.limit)}`);
  }
  const agg = q.agg ?? 'NONE';
  const interval = q.interval ?? 0;
  if (agg === 'NONE' || interval === 0) {
    return {
      kind: 'raw',
      startTs: q.startTs,
      endTs: q.endTs,
      limit: q.limit ?? limits.defaultLimit,
      order: q.orderBy ?? 'DESC',
    };
  }
  return {
    kind: 'agg',
    fn: agg,
    plan: planBuckets(q.startTs, q.endTs, interval, { limit: q.limit, maxIntervals: limits.maxIntervals }),
  };
}

/**
 * THE aggregation of one key over planned buckets: finalized points at bucket midpoints, ascending; buckets
 * with no points, or whose function has no value (AVG/SUM without numbers, MIN/MAX of booleans/JSON), omitted.
 */
export function* aggregateBuckets(
  source: BucketSource,
  entityId: string,
  key: string,
  plan: BucketPlan,
  fn: AggFn,
): IterableIterator<TsKv> {
  for (const { index, agg } of source.bucketAggs(entityId, key, plan, fn)) {
    const value = finalizeAgg(agg, fn);
    if (value !== undefined) yield { ts: bucketAt(plan, index).ts, value };
  }
}

/** A key's answer: its points, lazily (the first one is already known to exist). */
export interface KeySeries {
  readonly key: string;
  readonly points: IterableIterator<TsKv>;
}

function* prepend(first: TsKv, rest: Iterator<TsKv>): IterableIterator<TsKv> {
  try {
    yield first;
    for (let r = rest.next(); !r.done; r = rest.next()) yield r.value;
  } finally {
    rest.return?.();
  }
}

/** Removes duplicates, keeping the first occurrence's position. */
export function uniqueKeys(keys: readonly string[]): string[] {
  return [...new Set(keys)];
}

export interface HistoryOptions extends QueryLimits {
  /** overrides `bucketSourceOf(store)` */
  readonly source?: BucketSource;
}

/**
 * History of `keys` (request order, duplicates dropped) for one entity. Throws BAD_PARAM synchronously for
 * an invalid request, before touching the store. Keys with no points in the answer are absent (docs/api.md).
 * Raw: [startTs, endTs) in `orderBy`, at most `limit` per key. Aggregated: see `aggregateBuckets`.
 */
export function queryHistory(
  store: TimeseriesStore,
  entityId: string,
  keys: readonly string[],
  q: HistoryRequest | HistoryPlan,
  opts: HistoryOptions,
): IterableIterator<KeySeries> {
  const plan = 'kind' in q ? q : planHistory(q, opts);
  const source = opts.source ?? bucketSourceOf(store);
  return seriesOf(store, source, entityId, uniqueKeys(keys), plan);
}

function* seriesOf(
  store: TimeseriesStore,
  source: BucketSource,
  entityId: string,
  keys: readonly string[],
  plan: HistoryPlan,
): IterableIterator<KeySeries> {
  for (const key of keys) {
    const it: Iterator<TsKv> =
      plan.kind === 'raw'
        ? store.range(entityId, key, { startTs: plan.startTs, endTs: plan.endTs, order: plan.order, limit: plan.limit })
        : aggregateBuckets(source, entityId, key, plan.plan, plan.fn);
    const first = it.next();
    if (first.done) continue;
    yield { key, points: prepend(first.value, it) };
  }
}

/** The whole answer in memory, for callers that send it as one message (websocket frames). */
export function collectHistory(
  store: TimeseriesStore,
  entityId: string,
  keys: readonly string[],
  q: HistoryRequest | HistoryPlan,
  opts: HistoryOptions,
): Map<string, TsKv[]> {
  const out = new Map<string, TsKv[]>();
  for (const s of queryHistory(store, entityId, keys, q, opts)) out.set(s.key, [...s.points]);
  return out;
}

/** A latest value; `value` null marks a requested key with no data (reported at `now`). */
export interface LatestPoint {
  readonly ts: EpochMs;
  readonly value: KvValue | null;
}

/**
 * Latest values (docs/api.md). With keys: one entry per requested key in request order (duplicates dropped),
 * `{ts: now, value: null}` for a key without data. Without keys (undefined or empty): every key that has a
 * latest value, sorted by name.
 */
export function queryLatest(
  store: TimeseriesStore,
  entityId: string,
  keys: readonly string[] | undefined,
  now: EpochMs,
): Array<readonly [string, LatestPoint]> {
  if (keys === undefined || keys.length === 0) {
    return [...store.latest(entityId)].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  }
  const wanted = uniqueKeys(keys);
  const found = store.latest(entityId, wanted);
  return wanted.map((k) => [k, found.get(k) ?? { ts: now, value: null }] as const);
}
