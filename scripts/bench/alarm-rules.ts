/**
 * The three alarm rules the benches put on every device's profile (docs/api.md "Alarm rules"): a SIMPLE, a
 * DURATION and a REPEATING rule over three telemetry keys, each with a clear rule, in the JSON TB's UI saves.
 * bench:ingest sets thresholds its body never meets (the cost of evaluating); bench:wear sets thresholds its
 * sine readings cross now and then, so alarms are raised and cleared during the window (the cost of their rows).
 */

/** Thresholds: `high` raises CRITICAL above `over`, clears below `clearBelow`; likewise the others. */
export interface RuleBounds {
  readonly high: { readonly key: string; readonly over: number; readonly clearBelow: number };
  readonly held: { readonly key: string; readonly over: number; readonly minutes: number; readonly clearBelow: number };
  readonly low: { readonly key: string; readonly under: number; readonly times: number; readonly clearAbove: number };
}

function condition(key: string, operation: string, value: number): object {
  return {
    key: { type: 'TIME_SERIES', key },
    valueType: 'NUMERIC',
    value: null,
    predicate: { type: 'NUMERIC', operation, value: { defaultValue: value, userValue: null, dynamicValue: null } },
  };
}

function rule(filter: object, spec: object): object {
  return { condition: { condition: [filter], spec }, schedule: null, alarmDetails: null, dashboardId: null };
}

const constant = (n: number): object => ({ defaultValue: n, userValue: null, dynamicValue: null });

export function threeAlarmRules(b: RuleBounds): object[] {
  const simple = { type: 'SIMPLE' };
  return [
    {
      id: 'bench-high',
      alarmType: `High ${b.high.key}`,
      createRules: { CRITICAL: rule(condition(b.high.key, 'GREATER', b.high.over), simple) },
      clearRule: rule(condition(b.high.key, 'LESS', b.high.clearBelow), simple),
      propagate: false,
    },
    {
      id: 'bench-held',
      alarmType: `Held ${b.held.key}`,
      createRules: {
        MAJOR: rule(condition(b.held.key, 'GREATER', b.held.over), {
          type: 'DURATION',
          unit: 'MINUTES',
          predicate: constant(b.held.minutes),
        }),
      },
      clearRule: rule(condition(b.held.key, 'LESS', b.held.clearBelow), simple),
      propagate: false,
    },
    {
      id: 'bench-low',
      alarmType: `Low ${b.low.key}`,
      createRules: {
        WARNING: rule(condition(b.low.key, 'LESS', b.low.under), {
          type: 'REPEATING',
          predicate: constant(b.low.times),
        }),
      },
      clearRule: rule(condition(b.low.key, 'GREATER', b.low.clearAbove), simple),
      propagate: false,
    },
  ];
}

/** A device profile's `profileData` carrying `alarms`, as `POST /api/deviceProfile` takes it. */
export function profileDataWith(alarms: object[]): Record<string, unknown> {
  return { configuration: { type: 'DEFAULT' }, transportConfiguration: { type: 'DEFAULT' }, alarms };
}
