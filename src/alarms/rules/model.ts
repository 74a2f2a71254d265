/**
 * ThingsBoard's device-profile alarm rules (`profileData.alarms`, docs/api.md "Alarm rules") as typed values, and
 * the one parser from JSON: a profile's rules are checked when it is saved, so evaluation never meets a bad one.
 * A rule the parser refuses answers with the message `POST /api/deviceProfile` sends back (400); messages that
 * ThingsBoard has (its profile validator, Jackson's enum and subtype errors) are ThingsBoard's.
 */
import {
  BOOLEAN_OPS,
  type BooleanOp,
  NUMERIC_OPS,
  type NumericOp,
  STRING_OPS,
  type StringOp,
} from '../../model/key-filter.js';
import { ALARM_SEVERITIES, type AlarmSeverity } from '../../store/alarms.js';

export const KEY_TYPES = ['ATTRIBUTE', 'TIME_SERIES', 'ENTITY_FIELD', 'CONSTANT'] as const;
export type KeyType = (typeof KEY_TYPES)[number];
export const VALUE_TYPES = ['STRING', 'NUMERIC', 'BOOLEAN', 'DATE_TIME'] as const;
export type ValueType = (typeof VALUE_TYPES)[number];
export const SOURCE_TYPES = ['CURRENT_DEVICE', 'CURRENT_CUSTOMER', 'CURRENT_TENANT', 'CURRENT_USER'] as const;
export type SourceType = (typeof SOURCE_TYPES)[number];
export const TIME_UNITS = ['MILLISECONDS', 'SECONDS', 'MINUTES', 'HOURS', 'DAYS'] as const;
export type TimeUnit = (typeof TIME_UNITS)[number];
export const UNIT_MS: Record<TimeUnit, number> = {
  MILLISECONDS: 1,
  SECONDS: 1_000,
  MINUTES: 60_000,
  HOURS: 3_600_000,
  DAYS: 86_400_000,
};
/** ms in a day: a schedule's `endsOn` 0 means the end of the day */
export const DAY_MS = 86_400_000;

export interface DynamicValue {
  readonly sourceType: SourceType;
  /** null: no attribute named, the default value applies */
  readonly sourceAttribute: string | null;
  readonly inherit: boolean;
}

/** TB's FilterPredicateValue; `userValue` and `resolvedValue` are ignored by the rule engine, as TB's. */
export interface PredicateValue<T> {
  readonly defaultValue: T | null;
  readonly dynamicValue: DynamicValue | null;
}

export type Predicate =
  | { readonly type: 'NUMERIC'; readonly operation: NumericOp; readonly value: PredicateValue<number> }
  | {
      readonly type: 'STRING';
      readonly operation: StringOp;
      readonly value: PredicateValue<string>;
      readonly ignoreCase: boolean;
    }
  | { readonly type: 'BOOLEAN'; readonly operation: BooleanOp; readonly value: PredicateValue<boolean> }
  | { readonly type: 'COMPLEX'; readonly operation: 'AND' | 'OR'; readonly predicates: readonly Predicate[] };

export interface FilterKey {
  readonly type: KeyType;
  readonly key: string;
}

export interface Filter {
  readonly key: FilterKey;
  readonly valueType: ValueType;
  /** CONSTANT keys: the constant compared */
  readonly value: string | number | boolean | null;
  readonly predicate: Predicate;
}

export type Spec =
  | { readonly type: 'SIMPLE' }
  | { readonly type: 'DURATION'; readonly unit: TimeUnit; readonly predicate: PredicateValue<number> }
  | { readonly type: 'REPEATING'; readonly predicate: PredicateValue<number> };

export interface ScheduleItem {
  readonly enabled: boolean;
  /** 1 = Monday … 7 = Sunday */
  readonly dayOfWeek: number;
  /** ms from local midnight */
  readonly startsOn: number;
  /** ms from local midnight; 0 = the end of the day */
  readonly endsOn: number;
}

export type Schedule =
  | { readonly type: 'ANY_TIME'; readonly dynamicValue: DynamicValue | null }
  | {
      readonly type: 'SPECIFIC_TIME';
      readonly timezone: string;
      readonly daysOfWeek: readonly number[];
      readonly startsOn: number;
      readonly endsOn: number;
      readonly dynamicValue: DynamicValue | null;
    }
  | {
      readonly type: 'CUSTOM';
      readonly timezone: string;
      readonly items: readonly ScheduleItem[];
      readonly dynamicValue: DynamicValue | null;
    };

export interface AlarmRule {
  readonly filters: readonly Filter[];
  readonly spec: Spec;
  /** null: any time */
  readonly schedule: Schedule | null;
  readonly alarmDetails: string | null;
  readonly dashboardId: string | null;
}

export interface ProfileAlarm {
  /** the UI's id of the alarm (a guid); its progress survives a profile update while it stays */
  readonly id: string;
  readonly alarmType: string;
  /** highest severity first: the order rules run */
  readonly createRules: ReadonlyArray<readonly [AlarmSeverity, AlarmRule]>;
  readonly clearRule: AlarmRule | null;
  readonly propagate: boolean;
  readonly propagateToOwner: boolean;
  readonly propagateToTenant: boolean;
  readonly propagateRelationTypes: readonly string[];
}

export type ParseResult =
  | { readonly ok: true; readonly alarms: ProfileAlarm[] }
  | { readonly ok: false; readonly error: string };

class RuleError extends Error {}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function fail(msg: string): never {
  throw new RuleError(msg);
}

/** Jackson's answer to an enum value it does not know, as ThingsBoard returns it */
function oneOf<T extends string>(allowed: readonly T[], v: unknown, javaType: string, where: string): T {
  if (typeof v === 'string' && (allowed as readonly string[]).includes(v)) return v as T;
  fail(
    `Cannot deserialize value of type \`${javaType}\` from String ${JSON.stringify(String(v))}: not one of the values accepted for Enum class: [${allowed.join(', ')}] (${where})`,
  );
}

function need(o: Obj, field: string, where: string): unknown {
  const v = o[field];
  if (v === undefined || v === null) fail(`${where}.${field} should be specified!`);
  return v;
}

function objAt(v: unknown, where: string): Obj {
  if (!isObj(v)) fail(`${where} must be a JSON object`);
  return v;
}

function num(v: unknown, where: string): number {
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  if (typeof v === 'string' && v.trim() !== '' && Number.isFinite(Number(v))) return Number(v);
  fail(`${where} must be a number`);
}

function bool(v: unknown, dflt: boolean): boolean {
  return typeof v === 'boolean' ? v : dflt;
}

function dynamicValue(v: unknown, where: string): DynamicValue | null {
  if (v === undefined || v === null) return null;
  const o = objAt(v, where);
  // ThingsBoard's UI sends an empty dynamic value (no source) for "none"
  if (o['sourceType'] === undefined || o['sourceType'] === null) return null;
  const sourceType = oneOf(SOURCE_TYPES, o['sourceType'], 'DynamicValueSourceType', `${where}.sourceType`);
  const attr = o['sourceAttribute'];
  if (attr !== undefined && attr !== null && typeof attr !== 'string')
    fail(`${where}.sourceAttribute must be a string`);
  return {
    sourceType,
    sourceAttribute: typeof attr === 'string' && attr !== '' ? attr : null,
    inherit: bool(o['inherit'], false),
  };
}

function predicateValue<T>(v: unknown, where: string, conv: (x: unknown, w: string) => T): PredicateValue<T> {
  const o = objAt(v, where);
  const d = o['defaultValue'];
  const dyn = dynamicValue(o['dynamicValue'], `${where}.dynamicValue`);
  return { defaultValue: d === undefined || d === null ? null : conv(d, `${where}.defaultValue`), dynamicValue: dyn };
}

const numConv = (x: unknown, w: string): number => num(x, w);
const strConv = (x: unknown): string => (typeof x === 'string' ? x : JSON.stringify(x));
const boolConv = (x: unknown, w: string): boolean => {
  if (typeof x === 'boolean') return x;
  if (x === 'true' || x === 'false') return x === 'true';
  fail(`${w} must be a boolean`);
};

/** the predicate family a value type takes (DATE_TIME compares as a number, as TB's) */
const FAMILY: Record<ValueType, Predicate['type']> = {
  NUMERIC: 'NUMERIC',
  DATE_TIME: 'NUMERIC',
  STRING: 'STRING',
  BOOLEAN: 'BOOLEAN',
};

const PREDICATE_TYPES = ['NUMERIC', 'STRING', 'BOOLEAN', 'COMPLEX'] as const;

function predicate(v: unknown, valueType: ValueType, where: string, depth = 0): Predicate {
  const o = objAt(v, where);
  const type = oneOf(PREDICATE_TYPES, need(o, 'type', where), 'FilterPredicateType', `${where}.type`);
  if (type === 'COMPLEX') {
    if (depth > 8) fail(`${where}: complex predicates nest at most 8 deep`);
    const operation = oneOf(
      ['AND', 'OR'] as const,
      need(o, 'operation', where),
      'ComplexOperation',
      `${where}.operation`,
    );
    const list = need(o, 'predicates', where);
    if (!Array.isArray(list)) fail(`${where}.predicates must be a list`);
    return {
      type,
      operation,
      predicates: list.map((p, i) => predicate(p, valueType, `${where}.predicates[${i}]`, depth + 1)),
    };
  }
  if (type !== FAMILY[valueType]) fail(`${where}: a ${type} predicate on a key of valueType ${valueType}`);
  const value = need(o, 'value', where);
  if (type === 'NUMERIC')
    return {
      type,
      operation: oneOf(NUMERIC_OPS, need(o, 'operation', where), 'NumericOperation', `${where}.operation`),
      value: predicateValue(value, `${where}.value`, numConv),
    };
  if (type === 'STRING')
    return {
      type,
      operation: oneOf(STRING_OPS, need(o, 'operation', where), 'StringOperation', `${where}.operation`),
      value: predicateValue(value, `${where}.value`, strConv),
      ignoreCase: bool(o['ignoreCase'], false),
    };
  return {
    type,
    operation: oneOf(BOOLEAN_OPS, need(o, 'operation', where), 'BooleanOperation', `${where}.operation`),
    value: predicateValue(value, `${where}.value`, boolConv),
  };
}

function filter(v: unknown, where: string): Filter {
  const o = objAt(v, where);
  const k = objAt(need(o, 'key', where), `${where}.key`);
  const type = oneOf(KEY_TYPES, need(k, 'type', `${where}.key`), 'AlarmConditionKeyType', `${where}.key.type`);
  const keyName = need(k, 'key', `${where}.key`);
  if (typeof keyName !== 'string' || keyName === '') fail(`${where}.key.key should be specified!`);
  const valueType = oneOf(VALUE_TYPES, need(o, 'valueType', where), 'EntityKeyValueType', `${where}.valueType`);
  const c = o['value'];
  if (type === 'CONSTANT' && (c === undefined || c === null))
    fail(`${where}.value should be specified for a CONSTANT key!`);
  const value = typeof c === 'string' || typeof c === 'number' || typeof c === 'boolean' ? c : null;
  return {
    key: { type, key: keyName },
    valueType,
    value,
    predicate: predicate(need(o, 'predicate', where), valueType, `${where}.predicate`),
  };
}

const SPEC_TYPES: readonly string[] = ['SIMPLE', 'DURATION', 'REPEATING'];

function spec(v: unknown, where: string): Spec {
  if (v === undefined || v === null) return { type: 'SIMPLE' };
  const o = objAt(v, where);
  const type = o['type'] as Spec['type'];
  if (typeof type !== 'string' || !SPEC_TYPES.includes(type))
    fail(
      `Could not resolve type id ${JSON.stringify(String(type))} as a subtype of \`AlarmConditionSpec\`: known type ids = [DURATION, REPEATING, SIMPLE] (${where}.type)`,
    );
  if (type === 'SIMPLE') return { type };
  const p = o['predicate'];
  if (p === undefined || p === null)
    fail(
      `${where}: a ${type} condition needs its predicate (the ${type === 'DURATION' ? 'duration' : 'count of events'})`,
    );
  const value = predicateValue(p, `${where}.predicate`, numConv);
  if (value.defaultValue === null && (value.dynamicValue === null || value.dynamicValue.sourceAttribute === null))
    fail(`${where}: a ${type} condition needs a value (predicate.defaultValue or a dynamic value)`);
  if (type === 'REPEATING') return { type, predicate: value };
  return { type, unit: oneOf(TIME_UNITS, need(o, 'unit', where), 'TimeUnit', `${where}.unit`), predicate: value };
}

function dayMs(v: unknown, where: string): number {
  const n = v === undefined || v === null ? 0 : num(v, where);
  if (n < 0 || n > DAY_MS) fail(`${where} must be ms from midnight, 0..${DAY_MS}`);
  return n;
}

function timezone(v: unknown, where: string): string {
  const tz = typeof v === 'string' && v !== '' ? v : 'UTC';
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
  } catch {
    fail(`${where}: unknown time zone ${JSON.stringify(tz)}`);
  }
  return tz;
}

const SCHEDULE_TYPES = ['ANY_TIME', 'SPECIFIC_TIME', 'CUSTOM'];

/** A schedule; exported for the one read from a device attribute (a dynamic schedule), checked the same way. */
export function parseSchedule(v: unknown, where: string): Schedule | null {
  if (v === undefined || v === null) return null;
  const o = objAt(v, where);
  const type = o['type'];
  if (typeof type !== 'string' || !SCHEDULE_TYPES.includes(type))
    fail(
      `Could not resolve type id ${JSON.stringify(String(type))} as a subtype of \`AlarmSchedule\`: known type ids = [ANY_TIME, CUSTOM, SPECIFIC_TIME] (${where}.type)`,
    );
  const dyn = dynamicValue(o['dynamicValue'], `${where}.dynamicValue`);
  if (type === 'ANY_TIME') return { type, dynamicValue: dyn };
  const tz = timezone(o['timezone'], `${where}.timezone`);
  if (type === 'SPECIFIC_TIME') {
    const days = o['daysOfWeek'] ?? [];
    if (!Array.isArray(days) || !days.every((d) => Number.isInteger(d) && d >= 1 && d <= 7))
      fail(`${where}.daysOfWeek must be a list of days 1 (Monday) to 7`);
    return {
      type,
      timezone: tz,
      daysOfWeek: days as number[],
      startsOn: dayMs(o['startsOn'], `${where}.startsOn`),
      endsOn: dayMs(o['endsOn'], `${where}.endsOn`),
      dynamicValue: dyn,
    };
  }
  const items = o['items'] ?? [];
  if (!Array.isArray(items)) fail(`${where}.items must be a list`);
  return {
    type: 'CUSTOM',
    timezone: tz,
    items: items.map((it, i) => {
      const w = `${where}.items[${i}]`;
      const io = objAt(it, w);
      const day = io['dayOfWeek'];
      if (!Number.isInteger(day) || (day as number) < 1 || (day as number) > 7)
        fail(`${w}.dayOfWeek must be 1 (Monday) to 7`);
      return {
        enabled: bool(io['enabled'], false),
        dayOfWeek: day as number,
        startsOn: dayMs(io['startsOn'], `${w}.startsOn`),
        endsOn: dayMs(io['endsOn'], `${w}.endsOn`),
      };
    }),
    dynamicValue: dyn,
  };
}

function rule(v: unknown, where: string): AlarmRule {
  const o = objAt(v, where);
  const cond = objAt(need(o, 'condition', where), `${where}.condition`);
  const list = need(cond, 'condition', `${where}.condition`);
  if (!Array.isArray(list)) fail(`${where}.condition.condition must be a list`);
  const details = o['alarmDetails'];
  const dash = o['dashboardId'];
  const dashId = isObj(dash) && typeof dash['id'] === 'string' ? dash['id'] : typeof dash === 'string' ? dash : null;
  return {
    filters: list.map((f, i) => filter(f, `${where}.condition.condition[${i}]`)),
    spec: spec(cond['spec'], `${where}.condition.spec`),
    schedule: parseSchedule(o['schedule'], `${where}.schedule`),
    alarmDetails: typeof details === 'string' && details !== '' ? details : null,
    dashboardId: dashId,
  };
}

function profileAlarm(v: unknown, i: number, types: Set<string>): ProfileAlarm {
  const where = `alarms[${i}]`;
  const o = objAt(v, where);
  const alarmType = o['alarmType'];
  if (typeof alarmType !== 'string' || alarmType === '') fail('Alarm rule type should be specified!');
  if (types.has(alarmType)) fail(`Can't create device profile with the same alarm rule types: "${alarmType}"!`);
  types.add(alarmType);
  const cr = o['createRules'];
  if (cr !== undefined && cr !== null && !isObj(cr)) fail(`${where}.createRules must be a JSON object`);
  const createRules: Array<readonly [AlarmSeverity, AlarmRule]> = [];
  for (const [sev, r] of Object.entries(cr ?? {})) {
    const s = oneOf(ALARM_SEVERITIES, sev, 'AlarmSeverity', `${where}.createRules`);
    createRules.push([s, rule(r, `${where}.createRules.${s}`)]);
  }
  createRules.sort((a, b) => ALARM_SEVERITIES.indexOf(a[0]) - ALARM_SEVERITIES.indexOf(b[0]));
  const clear = o['clearRule'];
  const rel = o['propagateRelationTypes'];
  const id = o['id'];
  return {
    id: typeof id === 'string' && id !== '' ? id : alarmType,
    alarmType,
    createRules,
    clearRule: clear === undefined || clear === null ? null : rule(clear, `${where}.clearRule`),
    propagate: bool(o['propagate'], false),
    propagateToOwner: bool(o['propagateToOwner'], false),
    propagateToTenant: bool(o['propagateToTenant'], false),
    propagateRelationTypes: Array.isArray(rel) ? rel.filter((r): r is string => typeof r === 'string') : [],
  };
}

/**
 * A profile's `profileData.alarms`: absent or null is none. `maxRules` (0 = no cap) bounds the rules (each create
 * rule and each clear rule counts one) the profile may carry.
 */
export function parseProfileAlarms(raw: unknown, maxRules = 0): ParseResult {
  try {
    if (raw === undefined || raw === null) return { ok: true, alarms: [] };
    if (!Array.isArray(raw)) fail('profileData.alarms must be a list');
    const types = new Set<string>();
    const alarms = raw.map((a, i) => profileAlarm(a, i, types));
    const rules = alarms.reduce((n, a) => n + a.createRules.length + (a.clearRule === null ? 0 : 1), 0);
    if (maxRules > 0 && rules > maxRules)
      fail(
        `A device profile may carry at most ${maxRules} alarm rules (alarms.maxRulesPerProfile), this one has ${rules}`,
      );
    return { ok: true, alarms };
  } catch (err) {
    if (err instanceof RuleError) return { ok: false, error: err.message };
    throw err;
  }
}
