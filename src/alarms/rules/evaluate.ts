/**
 * One alarm of a device profile for one device: ThingsBoard's `AlarmState`/`AlarmRuleState` step by step
 * (docs/api.md "Alarm rules"). Create rules run from the highest severity down and the first true one wins; a
 * false one has its progress reset; a DURATION or REPEATING rule in progress lets the lower ones run. Without a
 * winner, an active alarm meets its clear rule. Pure: the device's latest values, the reading's ts, the keys it
 * updated and the clock come in; what to do with the alarm comes out, and the progress is updated in place.
 */
import type { AlarmSeverity } from '../../store/alarms.js';
import { type AlarmRule, type PredicateValue, type ProfileAlarm, UNIT_MS } from './model.js';
import { dynamicOf, evalFilter, scheduleActive, slotOf, toDouble, toStr, type Values } from './predicates.js';

/** TB's AlarmRuleState.state: DURATION's time held, REPEATING's count */
export interface RuleProgress {
  /** ms; the ts of the last true reading, 0 = none */
  lastEventTs: number;
  /** ms held so far (gaps between true readings' ts) */
  duration: number;
  eventCount: number;
}

export interface CompiledRule {
  readonly rule: AlarmRule;
  /** each filter's slot in the latest values */
  readonly slots: readonly string[];
  /** the slots whose update runs the rule: its filters' keys, its dynamic values' and schedule's attributes */
  readonly keys: ReadonlySet<string>;
}

export interface CompiledAlarm {
  readonly def: ProfileAlarm;
  readonly create: ReadonlyArray<{ readonly severity: AlarmSeverity; readonly rule: CompiledRule }>;
  readonly clear: CompiledRule | null;
}

export interface CompiledProfile {
  readonly alarms: readonly CompiledAlarm[];
  /** every slot a rule reads: what a device of this profile keeps of its values */
  readonly slots: ReadonlySet<string>;
  /** telemetry keys read, each with its slot (no string built per point) */
  readonly timeseries: ReadonlyMap<string, string>;
  readonly attributes: ReadonlySet<string>;
  readonly entityFields: ReadonlySet<string>;
  /** some rule is DURATION: the minute check runs for its devices */
  readonly timed: boolean;
}

export interface AlarmProgress {
  /** aligned with `CompiledAlarm.create` */
  readonly create: RuleProgress[];
  readonly clear: RuleProgress;
}

export type EvalResult = 'TRUE' | 'FALSE' | 'NOT_YET_TRUE';

export type Outcome =
  | { readonly kind: 'none' }
  /** create the alarm or raise it to `severity` (a lower one changes nothing); `details` undefined = keep */
  | { readonly kind: 'raise'; readonly severity: AlarmSeverity; readonly details: unknown; readonly startTs: number }
  /** `details` undefined = keep */
  | { readonly kind: 'clear'; readonly details: unknown };

export interface Evaluation {
  readonly outcome: Outcome;
  /** the progress as it is persisted changed (a DURATION started or reset, a REPEATING count moved) */
  readonly progressChanged: boolean;
  /** a rule would have started its progress but `canStart` was false */
  readonly startRefused: boolean;
}

export interface EvalInput {
  readonly values: Values;
  /** ms; the reading's ts (0: none yet) */
  readonly ts: number;
  /** the slots this reading changed; null = the minute check (a DURATION held without a new reading) */
  readonly updated: ReadonlySet<string> | null;
  /** the device's uncleared alarm of this type */
  readonly current: { readonly severity: AlarmSeverity; readonly details: unknown } | undefined;
  readonly now: number;
  /** false at the pending-state cap: a rule with no progress does not start one */
  readonly canStart: boolean;
}

function compileRule(rule: AlarmRule): CompiledRule {
  const slots = rule.filters.map((f) => slotOf(f.key.type, f.key.key));
  const keys = new Set<string>();
  const dyn = (pv: PredicateValue<unknown>): void => {
    if (pv.dynamicValue?.sourceType === 'CURRENT_DEVICE' && pv.dynamicValue.sourceAttribute !== null)
      keys.add(slotOf('ATTRIBUTE', pv.dynamicValue.sourceAttribute));
  };
  const walk = (p: AlarmRule['filters'][number]['predicate']): void => {
    if (p.type === 'COMPLEX') p.predicates.forEach(walk);
    else dyn(p.value);
  };
  rule.filters.forEach((f, i) => {
    if (f.key.type !== 'CONSTANT') keys.add(slots[i] as string);
    walk(f.predicate);
  });
  if (rule.spec.type !== 'SIMPLE') dyn(rule.spec.predicate);
  const sd = rule.schedule?.dynamicValue;
  if (sd?.sourceType === 'CURRENT_DEVICE' && sd.sourceAttribute !== null)
    keys.add(slotOf('ATTRIBUTE', sd.sourceAttribute));
  return { rule, slots, keys };
}

export function compileProfile(defs: readonly ProfileAlarm[]): CompiledProfile {
  const alarms = defs.map((def) => ({
    def,
    create: def.createRules.map(([severity, r]) => ({ severity, rule: compileRule(r) })),
    clear: def.clearRule === null ? null : compileRule(def.clearRule),
  }));
  const slots = new Set<string>();
  let timed = false;
  for (const a of alarms)
    for (const r of [...a.create.map((c) => c.rule), ...(a.clear === null ? [] : [a.clear])]) {
      for (const k of r.keys) slots.add(k);
      // an ENTITY_FIELD key never updates, but is read
      r.rule.filters.forEach((f, i) => {
        if (f.key.type === 'ENTITY_FIELD') slots.add(r.slots[i] as string);
      });
      if (r.rule.spec.type === 'DURATION') timed = true;
    }
  const named = (p: string): Set<string> =>
    new Set([...slots].filter((s) => s.startsWith(p)).map((s) => s.slice(p.length)));
  return {
    alarms,
    slots,
    timeseries: new Map([...named(slotOf('TIME_SERIES', ''))].map((k) => [k, slotOf('TIME_SERIES', k)] as const)),
    attributes: named(slotOf('ATTRIBUTE', '')),
    entityFields: named(slotOf('ENTITY_FIELD', '')),
    timed,
  };
}

export const newRuleProgress = (): RuleProgress => ({ lastEventTs: 0, duration: 0, eventCount: 0 });

export function newProgress(a: CompiledAlarm): AlarmProgress {
  return { create: a.create.map(newRuleProgress), clear: newRuleProgress() };
}

/** A spec's required value (DURATION: ms, REPEATING: a count): the device attribute it names, else the default. */
function required(rule: AlarmRule, values: Values): number | undefined {
  const spec = rule.spec;
  if (spec.type === 'SIMPLE') return undefined;
  const v = toDouble(dynamicOf(values, spec.predicate.dynamicValue)) ?? spec.predicate.defaultValue;
  if (v === null) return undefined;
  return spec.type === 'DURATION' ? Math.trunc(v) * UNIT_MS[spec.unit] : v;
}

function condition(r: CompiledRule, values: Values): boolean {
  const fs = r.rule.filters;
  for (let i = 0; i < fs.length; i++)
    if (!evalFilter(fs[i] as (typeof fs)[number], r.slots[i] as string, values)) return false;
  return true;
}

/**
 * The persisted form of a rule's progress: DURATION the ts it started holding (its `duration` is always the last
 * true reading's ts minus that), REPEATING the count up to what fires the rule (counting on past it changes
 * nothing worth a write). 0 = none.
 */
export function progressForm(rule: AlarmRule, p: RuleProgress, values: Values): number {
  if (rule.spec.type === 'DURATION') return p.lastEventTs > 0 ? p.lastEventTs - p.duration : 0;
  if (rule.spec.type === 'REPEATING') return Math.min(p.eventCount, Math.max(1, required(rule, values) ?? 1));
  return 0;
}

function reset(p: RuleProgress): void {
  p.lastEventTs = 0;
  p.duration = 0;
  p.eventCount = 0;
}

/** TB's AlarmRuleState.eval(data): a reading */
function evalReading(
  r: CompiledRule,
  p: RuleProgress,
  values: Values,
  ts: number,
  canStart: () => boolean,
): EvalResult {
  const holds = scheduleActive(r.rule.schedule, values, ts) && condition(r, values);
  const spec = r.rule.spec;
  if (spec.type === 'SIMPLE') return holds ? 'TRUE' : 'FALSE';
  if (!holds) return 'FALSE';
  const need = required(r.rule, values);
  if (spec.type === 'REPEATING') {
    if (p.eventCount === 0 && !canStart()) return 'FALSE';
    p.eventCount++;
    return need !== undefined && p.eventCount >= need ? 'TRUE' : 'NOT_YET_TRUE';
  }
  if (p.lastEventTs > 0) {
    if (ts > p.lastEventTs) {
      p.duration += ts - p.lastEventTs;
      p.lastEventTs = ts;
    }
  } else {
    if (!canStart()) return 'FALSE';
    p.lastEventTs = ts;
    p.duration = 0;
  }
  return need !== undefined && p.duration > need ? 'TRUE' : 'NOT_YET_TRUE';
}

/** TB's AlarmRuleState.eval(ts, data): the minute check, for a DURATION held without a new reading */
function evalTick(r: CompiledRule, p: RuleProgress, values: Values, now: number): EvalResult {
  if (r.rule.spec.type !== 'DURATION') return 'NOT_YET_TRUE';
  const need = required(r.rule, values) ?? 0;
  if (need > 0 && p.lastEventTs > 0 && now > p.lastEventTs) {
    if (!scheduleActive(r.rule.schedule, values, now)) return 'FALSE';
    return p.duration + (now - p.lastEventTs) > need ? 'TRUE' : 'NOT_YET_TRUE';
  }
  return 'FALSE';
}

function touched(r: CompiledRule, updated: ReadonlySet<string> | null): boolean {
  if (updated === null) return true;
  for (const k of r.keys) if (updated.has(k)) return true;
  return false;
}

/** `${key}` of each filter key replaced by its latest value, as TB's alarm details */
export function detailsText(r: CompiledRule, values: Values): string {
  let text = r.rule.alarmDetails ?? '';
  r.rule.filters.forEach((f, i) => {
    const v = toStr(values.get(r.slots[i] as string));
    if (v !== undefined) text = text.split(`\${${f.key.key}}`).join(v);
  });
  return text;
}

/** Runs one alarm's rules for a reading (or the minute check); `p` is updated in place. */
export function evaluateAlarm(a: CompiledAlarm, p: AlarmProgress, input: EvalInput): Evaluation {
  const { values, ts, updated, current, now, canStart } = input;
  let changed = false;
  let refused = false;
  const mayStart = (): boolean => {
    if (!canStart) refused = true;
    return canStart;
  };
  const run = (r: CompiledRule, rp: RuleProgress): EvalResult => {
    const before = progressForm(r.rule, rp, values);
    const res = updated === null ? evalTick(r, rp, values, now) : evalReading(r, rp, values, ts, mayStart);
    if (res === 'FALSE') reset(rp);
    if (progressForm(r.rule, rp, values) !== before) changed = true;
    return res;
  };
  const resetRule = (r: CompiledRule, rp: RuleProgress): void => {
    if (progressForm(r.rule, rp, values) !== 0) changed = true;
    reset(rp);
  };
  for (let i = 0; i < a.create.length; i++) {
    const c = a.create[i] as (typeof a.create)[number];
    const rp = p.create[i] as RuleProgress;
    if (!touched(c.rule, updated)) continue;
    if (run(c.rule, rp) !== 'TRUE') continue;
    if (a.clear !== null) resetRule(a.clear, p.clear);
    const startTs = ts <= 0 || ts > now ? now : ts;
    const details =
      c.rule.rule.alarmDetails !== null
        ? {
            data: detailsText(c.rule, values),
            ...(c.rule.rule.dashboardId === null ? {} : { dashboardId: c.rule.rule.dashboardId }),
          }
        : current === undefined
          ? {}
          : undefined;
    return {
      outcome: { kind: 'raise', severity: c.severity, details, startTs },
      progressChanged: changed,
      startRefused: refused,
    };
  }
  if (current !== undefined && a.clear !== null && touched(a.clear, updated)) {
    if (run(a.clear, p.clear) === 'TRUE') {
      for (let i = 0; i < a.create.length; i++)
        resetRule((a.create[i] as (typeof a.create)[number]).rule, p.create[i] as RuleProgress);
      resetRule(a.clear, p.clear);
      const details = a.clear.rule.alarmDetails === null ? undefined : { data: detailsText(a.clear, values) };
      return { outcome: { kind: 'clear', details }, progressChanged: changed, startRefused: refused };
    }
  }
  return { outcome: { kind: 'none' }, progressChanged: changed, startRefused: refused };
}

/** After a clear or delete by a user: TB forgets the alarm and starts the create rules over. */
export function forgetAlarm(a: CompiledAlarm, p: AlarmProgress, values: Values): boolean {
  let changed = false;
  a.create.forEach((c, i) => {
    const rp = p.create[i] as RuleProgress;
    if (progressForm(c.rule.rule, rp, values) !== 0) changed = true;
    reset(rp);
  });
  return changed;
}
