/**
 * The value of an aggregated bucket (docs/api.md), from the storage engine's mergeable state (src/store/rollups/aggregate.ts).
 */
import { type KvValue, kvDouble, kvLong, kvString } from '../model/kv.js';
import { type AggFn, type BucketAgg, type ExactLong, numericSum } from '../store/rollups/aggregate.js';

/**
 * The bucket's value under `fn` (docs/api.md), or undefined when the bucket is omitted:
 * - AVG → DOUBLE S / numeric count; omitted without numbers.
 * - SUM → LONG exact sum when all numbers are longs, DOUBLE S when a double is present; omitted without numbers.
 * - MIN/MAX → over numbers (LONG if all long, DOUBLE if any double); without numbers, lexicographic over
 *   strings (STRING); omitted when the bucket holds only booleans/JSON.
 * - COUNT → LONG number of points of every type; omitted when the bucket is empty.
 */
export function finalizeAgg(agg: BucketAgg, fn: AggFn): KvValue | undefined {
  if (agg.count === 0) return undefined;
  const numeric = agg.longCount + agg.doubleCount;
  switch (fn) {
    case 'COUNT':
      return kvLong(agg.count);
    case 'AVG':
      return numeric === 0 ? undefined : kvDouble(numericSum(agg) / numeric);
    case 'SUM':
      if (numeric === 0) return undefined;
      return agg.doubleCount > 0 ? kvDouble(numericSum(agg)) : kvLong(agg.longSum);
    case 'MIN':
    case 'MAX': {
      const isMin = fn === 'MIN';
      if (numeric > 0) {
        const l = isMin ? agg.longMin : agg.longMax;
        const d = isMin ? agg.doubleMin : agg.doubleMax;
        if (d === undefined) return kvLong(l as ExactLong);
        if (l === undefined) return kvDouble(d);
        // Rounding a long to a double is monotonic, so comparing after conversion picks the same extreme.
        const ld = Number(l);
        return kvDouble(isMin ? Math.min(ld, d) : Math.max(ld, d));
      }
      const s = isMin ? agg.stringMin : agg.stringMax;
      return s === undefined ? undefined : kvString(s);
    }
  }
}
