/**
 * ThingsBoard's key-filter predicate operations (its `KeyFilterPredicate`): one model shared by its entity data
 * queries' key filters (src/query/entity-query.ts) and its device-profile alarm rules (src/alarms/rules/model.ts).
 */
export const NUMERIC_OPS = ['EQUAL', 'NOT_EQUAL', 'GREATER', 'LESS', 'GREATER_OR_EQUAL', 'LESS_OR_EQUAL'] as const;
export type NumericOp = (typeof NUMERIC_OPS)[number];
export const STRING_OPS = [
  'EQUAL',
  'NOT_EQUAL',
  'STARTS_WITH',
  'ENDS_WITH',
  'CONTAINS',
  'NOT_CONTAINS',
  'IN',
  'NOT_IN',
] as const;
export type StringOp = (typeof STRING_OPS)[number];
export const BOOLEAN_OPS = ['EQUAL', 'NOT_EQUAL'] as const;
export type BooleanOp = (typeof BOOLEAN_OPS)[number];

/** Whether `op` is one of `ops` (narrowing it). */
export function isOp<T extends string>(ops: readonly T[], op: unknown): op is T {
  return typeof op === 'string' && (ops as readonly string[]).includes(op);
}
