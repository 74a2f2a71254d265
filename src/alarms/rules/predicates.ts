/**
 * One filter of an alarm rule against a device's latest values, as ThingsBoard's `AlarmRuleState` reads them:
 * numbers compare as doubles (a long, a double, a numeric string or JSON, a boolean as 1 or 0); strings from any
 * type (a double as Java prints it, `31.5`, `30.0`); booleans from numbers (> 0) and strings (`"true"`, any case).
 * A value missing or not convertible makes the filter false. Pure: no I/O, no clock.
 */
import { type KvValue, kvToString } from '../../model/kv.js';
import {
  DAY_MS,
  type DynamicValue,
  type Filter,
  type KeyType,
  type Predicate,
  type PredicateValue,
  type Schedule,
  parseSchedule,
} from './model.js';

/** The latest values a rule reads, by slot (`slotOf`). */
export type Values = ReadonlyMap<string, KvValue>;

const PREFIX: Record<KeyType, string> = { TIME_SERIES: 'T:', ATTRIBUTE: 'A:', ENTITY_FIELD: 'E:', CONSTANT: 'C:' };

/** Where a key's latest value sits in `Values`: a key name is unique within its type, not across types. */
export function slotOf(type: KeyType, key: string): string {
  return PREFIX[type] + key;
}

/** Java's Double.parseDouble on what sensors send: decimal and exponent forms, surrounding blanks ignored. */
const DECIMAL = /^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[dDfF]?\s*$/;

export function toDouble(v: KvValue | undefined): number | undefined {
  if (v === undefined) return undefined;
  switch (v.type) {
    case 'LONG':
      return Number(v.v);
    case 'DOUBLE':
      return v.v;
    case 'BOOLEAN':
      return v.v ? 1 : 0;
    default:
      return DECIMAL.test(v.v) ? Number.parseFloat(v.v) : undefined;
  }
}

export function toStr(v: KvValue | undefined): string | undefined {
  return v === undefined ? undefined : kvToString(v);
}

export function toBool(v: KvValue | undefined): boolean | undefined {
  if (v === undefined) return undefined;
  switch (v.type) {
    case 'BOOLEAN':
      return v.v;
    case 'LONG':
      return Number(v.v) > 0;
    case 'DOUBLE':
      return v.v > 0;
    default:
      return v.v.toLowerCase() === 'true';
  }
}

/** The value a dynamic value names: CURRENT_DEVICE's attribute; the other sources fall back to the default. */
export function dynamicOf(values: Values, dv: DynamicValue | null): KvValue | undefined {
  if (dv === null || dv.sourceType !== 'CURRENT_DEVICE' || dv.sourceAttribute === null) return undefined;
  return values.get(slotOf('ATTRIBUTE', dv.sourceAttribute));
}

/**
 * A predicate's operand: the dynamic value when present and convertible, else the default; with a CONSTANT key
 * there is no default (TB: the filter is then false).
 */
function operand<T>(
  values: Values,
  pv: PredicateValue<T>,
  constantKey: boolean,
  conv: (v: KvValue | undefined) => T | undefined,
): T | undefined {
  const dyn = conv(dynamicOf(values, pv.dynamicValue));
  if (dyn !== undefined) return dyn;
  return constantKey || pv.defaultValue === null ? undefined : pv.defaultValue;
}

function numeric(values: Values, p: Predicate, v: number, constantKey: boolean): boolean {
  if (p.type === 'COMPLEX') return complex(p, (q) => numeric(values, q, v, constantKey));
  if (p.type !== 'NUMERIC') return false;
  const x = operand(values, p.value, constantKey, toDouble);
  if (x === undefined) return false;
  switch (p.operation) {
    case 'EQUAL':
      return v === x;
    case 'NOT_EQUAL':
      return v !== x;
    case 'GREATER':
      return v > x;
    case 'LESS':
      return v < x;
    case 'GREATER_OR_EQUAL':
      return v >= x;
    case 'LESS_OR_EQUAL':
      return v <= x;
  }
}

function string(values: Values, p: Predicate, raw: string, constantKey: boolean): boolean {
  if (p.type === 'COMPLEX') return complex(p, (q) => string(values, q, raw, constantKey));
  if (p.type !== 'STRING') return false;
  const op = operand(values, p.value, constantKey, toStr);
  if (op === undefined) return false;
  const v = p.ignoreCase ? raw.toLowerCase() : raw;
  const x = p.ignoreCase ? op.toLowerCase() : op;
  switch (p.operation) {
    case 'EQUAL':
      return v === x;
    case 'NOT_EQUAL':
      return v !== x;
    case 'STARTS_WITH':
      return v.startsWith(x);
    case 'ENDS_WITH':
      return v.endsWith(x);
    case 'CONTAINS':
      return v.includes(x);
    case 'NOT_CONTAINS':
      return !v.includes(x);
    case 'IN':
      return x.split(',').some((s) => s.trim() === v);
    case 'NOT_IN':
      return !x.split(',').some((s) => s.trim() === v);
  }
}

function boolean(values: Values, p: Predicate, v: boolean, constantKey: boolean): boolean {
  if (p.type === 'COMPLEX') return complex(p, (q) => boolean(values, q, v, constantKey));
  if (p.type !== 'BOOLEAN') return false;
  const x = operand(values, p.value, constantKey, toBool);
  if (x === undefined) return false;
  return p.operation === 'EQUAL' ? v === x : v !== x;
}

function complex(p: Predicate & { type: 'COMPLEX' }, each: (q: Predicate) => boolean): boolean {
  return p.operation === 'AND' ? p.predicates.every(each) : p.predicates.some(each);
}

function constantOf(f: Filter): KvValue | undefined {
  const c = f.value;
  if (c === null) return undefined;
  if (typeof c === 'number') return { type: 'DOUBLE', v: c };
  if (typeof c === 'boolean') return { type: 'BOOLEAN', v: c };
  return { type: 'STRING', v: c };
}

/** One filter: the key's latest value (a CONSTANT key: the filter's value) under its predicate. */
export function evalFilter(f: Filter, slot: string, values: Values): boolean {
  const constantKey = f.key.type === 'CONSTANT';
  const kv = constantKey ? constantOf(f) : values.get(slot);
  if (kv === undefined) return false;
  switch (f.valueType) {
    case 'NUMERIC':
    case 'DATE_TIME': {
      const v = toDouble(kv);
      return v !== undefined && numeric(values, f.predicate, v, constantKey);
    }
    case 'STRING':
      return string(values, f.predicate, kvToString(kv), constantKey);
    case 'BOOLEAN': {
      const v = toBool(kv);
      return v !== undefined && boolean(values, f.predicate, v, constantKey);
    }
  }
}

// ---- schedules ---------------------------------------------------------------------------------

const formatters = new Map<string, Intl.DateTimeFormat>();
const WEEKDAY: Record<string, number> = { Mon: 1, Tue: 2, Wed: 3, Thu: 4, Fri: 5, Sat: 6, Sun: 7 };

/** ms since local midnight and the ISO day of week (1 = Monday) of `ts` in `timezone` */
export function localTime(ts: number, timezone: string): { msOfDay: number; dayOfWeek: number } {
  let f = formatters.get(timezone);
  if (f === undefined) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: timezone,
      hourCycle: 'h23',
      weekday: 'short',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
    });
    if (formatters.size < 64) formatters.set(timezone, f);
  }
  let h = 0;
  let m = 0;
  let s = 0;
  let day = 1;
  for (const part of f.formatToParts(ts)) {
    if (part.type === 'hour') h = Number(part.value);
    else if (part.type === 'minute') m = Number(part.value);
    else if (part.type === 'second') s = Number(part.value);
    else if (part.type === 'weekday') day = WEEKDAY[part.value] ?? 1;
  }
  return { msOfDay: ((h * 60 + m) * 60 + s) * 1000 + (((ts % 1000) + 1000) % 1000), dayOfWeek: day };
}

/** TB's window test: `startsOn <= t < endsOn`, or across midnight when `startsOn > endsOn` */
function inWindow(msOfDay: number, startsOn: number, endsOn: number): boolean {
  const end = endsOn === 0 ? DAY_MS : endsOn;
  if (startsOn <= end) return startsOn <= msOfDay && msOfDay < end;
  return startsOn < msOfDay || (msOfDay > 0 && msOfDay < end);
}

/** dynamic schedules parsed from their attribute's text, the last few kept */
const parsedSchedules = new Map<string, Schedule | null>();

function scheduleOf(values: Values, s: Schedule): Schedule {
  const dyn = dynamicOf(values, s.dynamicValue);
  if (dyn === undefined) return s;
  const text = kvToString(dyn);
  let parsed = parsedSchedules.get(text);
  if (parsed === undefined) {
    try {
      parsed = parseSchedule(JSON.parse(text), 'schedule');
    } catch {
      parsed = null;
    }
    if (parsedSchedules.size >= 64) parsedSchedules.clear();
    parsedSchedules.set(text, parsed);
  }
  return parsed ?? s;
}

/** Whether a rule's schedule lets it run at `ts` (null: any time); outside it the rule is false. */
export function scheduleActive(schedule: Schedule | null, values: Values, ts: number): boolean {
  if (schedule === null) return true;
  const s = scheduleOf(values, schedule);
  if (s.type === 'ANY_TIME') return true;
  const { msOfDay, dayOfWeek } = localTime(ts, s.timezone);
  if (s.type === 'SPECIFIC_TIME') {
    if (s.daysOfWeek.length !== 7 && !s.daysOfWeek.includes(dayOfWeek)) return false;
    return inWindow(msOfDay, s.startsOn, s.endsOn);
  }
  const item = s.items.find((i) => i.dayOfWeek === dayOfWeek);
  return item?.enabled === true && inWindow(msOfDay, item.startsOn, item.endsOn);
}
