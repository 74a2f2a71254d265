/**
 * Alarm rules, pure (src/alarms/rules/): each spec (SIMPLE, DURATION, REPEATING), each predicate (numeric, string,
 * boolean, complex), each key type, dynamic values, schedules, severities from CRITICAL down and clear rules,
 * against tables of readings as ThingsBoard's rule node would see them; and the parser's refusals.
 */
import '../helpers/sandbox.js';
import t from 'tap';
import {
  type AlarmProgress,
  type CompiledProfile,
  compileProfile,
  evaluateAlarm,
  forgetAlarm,
  newProgress,
} from '../../src/alarms/rules/evaluate.js';
import { parseProfileAlarms } from '../../src/alarms/rules/model.js';
import { localTime, slotOf } from '../../src/alarms/rules/predicates.js';
import type { KvValue } from '../../src/model/kv.js';
import type { AlarmSeverity } from '../../src/store/alarms.js';

type Raw = Record<string, unknown>;
const pv = (v: unknown, dyn?: string): Raw => ({
  defaultValue: v,
  userValue: null,
  dynamicValue: dyn === undefined ? null : { sourceType: 'CURRENT_DEVICE', sourceAttribute: dyn, inherit: false },
});
const num = (key: string, op: string, v: unknown, keyType = 'TIME_SERIES', dyn?: string): Raw => ({
  key: { type: keyType, key },
  valueType: 'NUMERIC',
  value: null,
  predicate: { type: 'NUMERIC', operation: op, value: pv(v, dyn) },
});
const rule = (filters: Raw[], spec: Raw = { type: 'SIMPLE' }, extra: Raw = {}): Raw => ({
  condition: { condition: filters, spec },
  schedule: null,
  alarmDetails: null,
  dashboardId: null,
  ...extra,
});

function compile(alarms: Raw[]): CompiledProfile {
  const r = parseProfileAlarms(alarms);
  if (!r.ok) throw new Error(r.error);
  return compileProfile(r.alarms);
}

const kv = (v: unknown): KvValue =>
  typeof v === 'boolean'
    ? { type: 'BOOLEAN', v }
    : typeof v === 'number'
      ? Number.isInteger(v)
        ? { type: 'LONG', v }
        : { type: 'DOUBLE', v }
      : { type: 'STRING', v: String(v) };

interface Reading {
  ts: number;
  ts_?: Record<string, unknown>;
  attr?: Record<string, unknown>;
  /** the minute check at this time instead of a reading */
  tick?: boolean;
}

/**
 * Drives one alarm through readings as the service does: the latest values merged, the keys that changed, the
 * alarm kept as the store would (severity only raised). Returns, per reading, the alarm's severity or 'cleared'/'-'.
 */
function drive(p: CompiledProfile, readings: Reading[], values = new Map<string, KvValue>()): string[] {
  const a = p.alarms[0];
  if (a === undefined) throw new Error('no alarm');
  const prog: AlarmProgress = newProgress(a);
  let current: { severity: AlarmSeverity; details: unknown } | undefined;
  const out: string[] = [];
  for (const r of readings) {
    const updated = new Set<string>();
    for (const [k, v] of Object.entries(r.ts_ ?? {})) {
      values.set(slotOf('TIME_SERIES', k), kv(v));
      updated.add(slotOf('TIME_SERIES', k));
    }
    for (const [k, v] of Object.entries(r.attr ?? {})) {
      values.set(slotOf('ATTRIBUTE', k), kv(v));
      updated.add(slotOf('ATTRIBUTE', k));
    }
    const ev = evaluateAlarm(a, prog, {
      values,
      ts: r.ts,
      updated: r.tick ? null : updated,
      current,
      now: r.ts,
      canStart: true,
    });
    const o = ev.outcome;
    if (o.kind === 'raise') {
      const rank = ['CRITICAL', 'MAJOR', 'MINOR', 'WARNING', 'INDETERMINATE'];
      if (current === undefined || rank.indexOf(o.severity) < rank.indexOf(current.severity))
        current = { severity: o.severity, details: o.details ?? current?.details };
      out.push(current.severity);
    } else if (o.kind === 'clear') {
      current = undefined;
      out.push('cleared');
    } else out.push(current === undefined ? '-' : current.severity);
  }
  return out;
}

const highTemp = [
  {
    id: 'a1',
    alarmType: 'High Temperature',
    createRules: {
      MAJOR: rule([num('temperature', 'GREATER', 25)]),
      CRITICAL: rule([num('temperature', 'GREATER', 30)], {
        type: 'DURATION',
        unit: 'MINUTES',
        predicate: pv(1),
      }),
    },
    clearRule: rule([num('temperature', 'LESS', 22)]),
  },
];

t.test('TB example: MAJOR at once, CRITICAL after a minute held, never lowered, cleared below 22', async (t) => {
  const p = compile(highTemp);
  const got = drive(p, [
    { ts: 1000, ts_: { temperature: 20 } },
    { ts: 2000, ts_: { temperature: 26 } },
    { ts: 3000, ts_: { temperature: 31 } },
    { ts: 33_000, ts_: { temperature: 32 } },
    { ts: 64_000, ts_: { temperature: 33 } },
    { ts: 65_000, ts_: { humidity: 50 } },
    { ts: 70_000, ts_: { temperature: 26 } },
    { ts: 80_000, ts_: { temperature: 23 } },
    { ts: 90_000, ts_: { temperature: 21 } },
  ]);
  t.same(got, ['-', 'MAJOR', 'MAJOR', 'MAJOR', 'CRITICAL', 'CRITICAL', 'CRITICAL', 'CRITICAL', 'cleared']);
});

t.test(
  'DURATION: strictly longer than required, gaps count, a false reading resets, the minute check fires',
  async (t) => {
    const p = compile([
      {
        id: 'd',
        alarmType: 'Hot',
        createRules: {
          CRITICAL: rule([num('t', 'GREATER', 30)], { type: 'DURATION', unit: 'SECONDS', predicate: pv(10) }),
        },
        clearRule: null,
      },
    ]);
    t.same(
      drive(p, [
        { ts: 1000, ts_: { t: 31 } },
        { ts: 11_000, ts_: { t: 31 } },
        { ts: 11_001, ts_: { t: 31 } },
      ]),
      ['-', '-', 'CRITICAL'],
      'exactly 10 s held is not yet more than 10 s',
    );
    t.same(
      drive(p, [
        { ts: 1000, ts_: { t: 31 } },
        { ts: 8000, ts_: { t: 29 } },
        { ts: 9000, ts_: { t: 31 } },
        { ts: 15_000, ts_: { t: 31 } },
        { ts: 20_000, ts_: { t: 31 } },
      ]),
      ['-', '-', '-', '-', 'CRITICAL'],
      'a false reading starts it over',
    );
    t.same(
      drive(p, [
        { ts: 1000, ts_: { t: 31 } },
        { ts: 500, ts_: { t: 31 } },
        { ts: 5000, tick: true },
        { ts: 12_000, tick: true },
      ]),
      ['-', '-', '-', 'CRITICAL'],
      'an older reading changes nothing; a silent device above the threshold escalates at the minute check',
    );
    t.same(
      drive(p, [
        { ts: 1000, ts_: { t: 31 } },
        { ts: 2000, ts_: { other: 1 } },
        { ts: 20_000, ts_: { other: 2 } },
      ]),
      ['-', '-', '-'],
      'a message without the rule key changes nothing',
    );
  },
);

t.test('REPEATING: consecutive true readings, reset by a false one; the count from an attribute', async (t) => {
  const p = compile([
    {
      id: 'r',
      alarmType: 'Spikes',
      createRules: {
        WARNING: rule([num('v', 'GREATER_OR_EQUAL', 10)], { type: 'REPEATING', predicate: pv(3, 'spikes') }),
      },
      clearRule: rule([num('v', 'LESS', 10)], { type: 'REPEATING', predicate: pv(2) }),
    },
  ]);
  t.same(
    drive(p, [
      { ts: 1, ts_: { v: 10 } },
      { ts: 2, ts_: { v: 11 } },
      { ts: 3, ts_: { v: 1 } },
      { ts: 4, ts_: { v: 12 } },
      { ts: 5, ts_: { v: 12 } },
      { ts: 6, ts_: { v: 12 } },
      { ts: 7, ts_: { v: 1 } },
      { ts: 8, ts_: { v: 1 } },
    ]),
    ['-', '-', '-', '-', '-', 'WARNING', 'WARNING', 'cleared'],
  );
  t.same(
    drive(p, [
      { ts: 1, attr: { spikes: 2 } },
      { ts: 2, ts_: { v: 10 } },
      { ts: 3, ts_: { v: 10 } },
    ]),
    ['-', '-', 'WARNING'],
    'spikes=2 from the device attribute',
  );
});

t.test('predicates: numeric, string, boolean and complex against a table', async (t) => {
  const table: Array<[string, Raw, Array<[unknown, boolean]>]> = [
    [
      'NUMERIC EQUAL 5',
      num('k', 'EQUAL', 5),
      [
        [5, true],
        [5.0, true],
        ['5', true],
        [4, false],
        ['x', false],
        [true, false],
      ],
    ],
    [
      'NUMERIC NOT_EQUAL 5',
      num('k', 'NOT_EQUAL', 5),
      [
        [5, false],
        [6, true],
      ],
    ],
    [
      'NUMERIC LESS 5',
      num('k', 'LESS', 5),
      [
        [4.9, true],
        [5, false],
        [false, true],
      ],
    ],
    [
      'NUMERIC LESS_OR_EQUAL 5',
      num('k', 'LESS_OR_EQUAL', 5),
      [
        [5, true],
        [6, false],
      ],
    ],
    [
      'NUMERIC GREATER_OR_EQUAL 5',
      num('k', 'GREATER_OR_EQUAL', 5),
      [
        [5, true],
        [' 7.5 ', true],
        [4, false],
      ],
    ],
    [
      'STRING CONTAINS "ab" ignoreCase',
      {
        key: { type: 'TIME_SERIES', key: 'k' },
        valueType: 'STRING',
        predicate: { type: 'STRING', operation: 'CONTAINS', value: pv('ab'), ignoreCase: true },
      },
      [
        ['xABy', true],
        ['xy', false],
      ],
    ],
    [
      'STRING STARTS_WITH/ENDS_WITH',
      {
        key: { type: 'TIME_SERIES', key: 'k' },
        valueType: 'STRING',
        predicate: {
          type: 'COMPLEX',
          operation: 'AND',
          predicates: [
            { type: 'STRING', operation: 'STARTS_WITH', value: pv('err'), ignoreCase: false },
            { type: 'STRING', operation: 'ENDS_WITH', value: pv('!'), ignoreCase: false },
          ],
        },
      },
      [
        ['error!', true],
        ['Error!', false],
        ['error', false],
      ],
    ],
    [
      'STRING IN "a, b"',
      {
        key: { type: 'TIME_SERIES', key: 'k' },
        valueType: 'STRING',
        predicate: { type: 'STRING', operation: 'IN', value: pv('a, b'), ignoreCase: false },
      },
      [
        ['a', true],
        ['b', true],
        ['c', false],
      ],
    ],
    [
      'STRING NOT_IN "a,b" (a number read as text)',
      {
        key: { type: 'TIME_SERIES', key: 'k' },
        valueType: 'STRING',
        predicate: { type: 'STRING', operation: 'NOT_IN', value: pv('a,b'), ignoreCase: false },
      },
      [
        ['a', false],
        [1.5, true],
      ],
    ],
    [
      'STRING EQUAL "30.0" (a double as Java prints it)',
      {
        key: { type: 'TIME_SERIES', key: 'k' },
        valueType: 'STRING',
        predicate: { type: 'STRING', operation: 'EQUAL', value: pv('30.5'), ignoreCase: false },
      },
      [
        [30.5, true],
        ['30.5', true],
        [30, false],
      ],
    ],
    [
      'BOOLEAN EQUAL true',
      {
        key: { type: 'TIME_SERIES', key: 'k' },
        valueType: 'BOOLEAN',
        predicate: { type: 'BOOLEAN', operation: 'EQUAL', value: pv(true) },
      },
      [
        [true, true],
        [false, false],
        [1, true],
        [0, false],
        ['TRUE', true],
        ['yes', false],
      ],
    ],
    [
      'BOOLEAN NOT_EQUAL true',
      {
        key: { type: 'TIME_SERIES', key: 'k' },
        valueType: 'BOOLEAN',
        predicate: { type: 'BOOLEAN', operation: 'NOT_EQUAL', value: pv(true) },
      },
      [
        [true, false],
        [false, true],
      ],
    ],
    [
      'COMPLEX OR (k < 0 or k > 100)',
      {
        key: { type: 'TIME_SERIES', key: 'k' },
        valueType: 'NUMERIC',
        predicate: {
          type: 'COMPLEX',
          operation: 'OR',
          predicates: [
            { type: 'NUMERIC', operation: 'LESS', value: pv(0) },
            { type: 'NUMERIC', operation: 'GREATER', value: pv(100) },
          ],
        },
      },
      [
        [-1, true],
        [50, false],
        [101, true],
      ],
    ],
  ];
  for (const [name, f, rows] of table) {
    const p = compile([{ id: 'x', alarmType: 'X', createRules: { MINOR: rule([f]) }, clearRule: null }]);
    for (const [v, want] of rows) {
      const got = drive(p, [{ ts: 1, ts_: { k: v } }]);
      t.equal(got[0], want ? 'MINOR' : '-', `${name}: ${JSON.stringify(v)}`);
    }
  }
});

t.test('keys: ATTRIBUTE, ENTITY_FIELD and CONSTANT; a rule runs only when its keys update', async (t) => {
  const p = compile([
    {
      id: 'k',
      alarmType: 'Mixed',
      createRules: {
        MAJOR: rule([
          num('t', 'GREATER', 0),
          {
            key: { type: 'ATTRIBUTE', key: 'mode' },
            valueType: 'STRING',
            predicate: { type: 'STRING', operation: 'EQUAL', value: pv('auto'), ignoreCase: false },
          },
          {
            key: { type: 'ENTITY_FIELD', key: 'type' },
            valueType: 'STRING',
            predicate: { type: 'STRING', operation: 'EQUAL', value: pv('pump'), ignoreCase: false },
          },
        ]),
      },
      clearRule: null,
    },
  ]);
  const values = new Map<string, KvValue>([[slotOf('ENTITY_FIELD', 'type'), kv('pump')]]);
  t.same(
    drive(
      p,
      [
        { ts: 1, ts_: { t: 5 } },
        { ts: 2, attr: { mode: 'auto' } },
      ],
      values,
    ),
    ['-', 'MAJOR'],
    'the attribute update runs the rule with the latest telemetry',
  );
  // a CONSTANT key compares its value with a dynamic one; without a dynamic value it is false (TB)
  const c = compile([
    {
      id: 'c',
      alarmType: 'Const',
      createRules: {
        MINOR: rule([
          num('t', 'GREATER', -1000),
          {
            key: { type: 'CONSTANT', key: 'limit' },
            valueType: 'NUMERIC',
            value: 10,
            predicate: { type: 'NUMERIC', operation: 'LESS', value: pv(100, 'max') },
          },
        ]),
      },
      clearRule: null,
    },
  ]);
  t.same(
    drive(c, [
      { ts: 1, ts_: { t: 1 } },
      { ts: 2, attr: { max: 20 } },
      { ts: 3, attr: { max: 5 } },
    ]),
    ['-', 'MINOR', 'MINOR'],
    'the default does not apply to a CONSTANT key; the attribute does',
  );
});

t.test(
  'dynamic value from a device attribute: a change of it re-evaluates; missing falls back to the default',
  async (t) => {
    const p = compile([
      {
        id: 'dyn',
        alarmType: 'Over limit',
        createRules: { MAJOR: rule([num('t', 'GREATER', 50, 'TIME_SERIES', 'limit')]) },
        clearRule: rule([num('t', 'LESS_OR_EQUAL', 50, 'TIME_SERIES', 'limit')]),
      },
    ]);
    t.same(
      drive(p, [
        { ts: 1, ts_: { t: 40 } },
        { ts: 2, attr: { limit: 30 } },
        { ts: 3, attr: { limit: 45 } },
        { ts: 4, attr: { limit: 'x' } },
      ]),
      ['-', 'MAJOR', 'cleared', '-'],
    );
    const cust = compile([
      {
        id: 'c',
        alarmType: 'Customer limit',
        createRules: {
          MAJOR: rule([
            {
              key: { type: 'TIME_SERIES', key: 't' },
              valueType: 'NUMERIC',
              predicate: {
                type: 'NUMERIC',
                operation: 'GREATER',
                value: { defaultValue: 10, dynamicValue: { sourceType: 'CURRENT_CUSTOMER', sourceAttribute: 'lim' } },
              },
            },
          ]),
        },
      },
    ]);
    t.same(drive(cust, [{ ts: 1, ts_: { t: 11 } }]), ['MAJOR'], 'a customer source falls back to the default');
  },
);

t.test('severities from CRITICAL down; a lower one never lowers; the inactivity rule on active', async (t) => {
  const p = compile([
    {
      id: 'inact',
      alarmType: 'Inactive',
      createRules: {
        WARNING: rule([
          {
            key: { type: 'ATTRIBUTE', key: 'active' },
            valueType: 'BOOLEAN',
            predicate: { type: 'BOOLEAN', operation: 'EQUAL', value: pv(false) },
          },
        ]),
      },
      clearRule: rule([
        {
          key: { type: 'ATTRIBUTE', key: 'active' },
          valueType: 'BOOLEAN',
          predicate: { type: 'BOOLEAN', operation: 'EQUAL', value: pv(true) },
        },
      ]),
    },
  ]);
  t.same(
    drive(p, [
      { ts: 1, attr: { active: true } },
      { ts: 2, attr: { active: false } },
      { ts: 3, attr: { active: true } },
    ]),
    ['-', 'WARNING', 'cleared'],
  );
  const sev = compile([
    {
      id: 's',
      alarmType: 'Level',
      createRules: {
        MINOR: rule([num('v', 'GREATER', 1)]),
        CRITICAL: rule([num('v', 'GREATER', 3)]),
        MAJOR: rule([num('v', 'GREATER', 2)]),
      },
    },
  ]);
  t.same(
    drive(sev, [
      { ts: 1, ts_: { v: 2 } },
      { ts: 2, ts_: { v: 4 } },
      { ts: 3, ts_: { v: 2.5 } },
    ]),
    ['MINOR', 'CRITICAL', 'CRITICAL'],
  );
});

t.test('details: each key in braces after a dollar replaced with the latest value as Java prints it', async (t) => {
  const p = compileProfile(
    (() => {
      const r = parseProfileAlarms(highTemp);
      if (!r.ok) throw new Error(r.error);
      return r.alarms;
    })(),
  );
  const a = p.alarms[0];
  if (a === undefined) throw new Error('no alarm');
  const withDetails = compile([
    {
      id: 'x',
      alarmType: 'X',
      createRules: {
        MAJOR: rule([num('temperature', 'GREATER', 25)], undefined, {
          // biome-ignore lint/suspicious/noTemplateCurlyInString: TB's placeholder syntax, not a template
          alarmDetails: 'Temperature ${temperature} high',
        }),
      },
    },
  ]).alarms[0];
  if (withDetails === undefined) throw new Error('no alarm');
  const values = new Map<string, KvValue>([[slotOf('TIME_SERIES', 'temperature'), { type: 'DOUBLE', v: 30 }]]);
  const ev = evaluateAlarm(withDetails, newProgress(withDetails), {
    values,
    ts: 5,
    updated: new Set([slotOf('TIME_SERIES', 'temperature')]),
    current: undefined,
    now: 10,
    canStart: true,
  });
  t.same(ev.outcome, { kind: 'raise', severity: 'MAJOR', details: { data: 'Temperature 30.0 high' }, startTs: 5 });
  const future = evaluateAlarm(a, newProgress(a), {
    values,
    ts: 50,
    updated: new Set([slotOf('TIME_SERIES', 'temperature')]),
    current: undefined,
    now: 10,
    canStart: true,
  });
  t.match(future.outcome, { kind: 'raise', severity: 'MAJOR', details: {}, startTs: 10 }, 'a future ts starts now');
});

t.test('progress: changed on start and reset only; forgotten after a user clear; not started at the cap', async (t) => {
  const p = compile(highTemp);
  const a = p.alarms[0];
  if (a === undefined) throw new Error('no alarm');
  const prog = newProgress(a);
  const slot = slotOf('TIME_SERIES', 'temperature');
  const values = new Map<string, KvValue>();
  const step = (ts: number, v: number, canStart = true): boolean => {
    values.set(slot, kv(v));
    return evaluateAlarm(a, prog, { values, ts, updated: new Set([slot]), current: undefined, now: ts, canStart })
      .progressChanged;
  };
  t.equal(step(1000, 31), true, 'started');
  t.equal(step(2000, 31), false, 'held: nothing new to persist');
  t.equal(step(3000, 20), true, 'reset');
  t.equal(step(4000, 31, false), false, 'at the cap nothing starts');
  t.equal(prog.create[0]?.lastEventTs, 0);
  const refused = evaluateAlarm(a, prog, {
    values,
    ts: 4500,
    updated: new Set([slot]),
    current: undefined,
    now: 4500,
    canStart: false,
  });
  t.equal(refused.startRefused, true, 'said, so the cap is logged');
  step(5000, 31);
  t.equal(forgetAlarm(a, prog, values), true, 'a user clear forgets the progress');
});

t.test('schedules: SPECIFIC_TIME and CUSTOM in a time zone; outside, the rule is false', async (t) => {
  // 2026-01-05 is a Monday; 09:00 UTC = 10:00 Europe/Berlin
  const monday9utc = Date.UTC(2026, 0, 5, 9, 0, 0);
  t.same(localTime(monday9utc, 'Europe/Berlin'), { msOfDay: 10 * 3_600_000, dayOfWeek: 1 });
  const sched = (s: Raw): CompiledProfile =>
    compile([
      { id: 's', alarmType: 'S', createRules: { MAJOR: rule([num('v', 'GREATER', 0)], undefined, { schedule: s }) } },
    ]);
  const specific = sched({
    type: 'SPECIFIC_TIME',
    timezone: 'Europe/Berlin',
    daysOfWeek: [1, 2, 3, 4, 5],
    startsOn: 8 * 3_600_000,
    endsOn: 18 * 3_600_000,
  });
  t.same(drive(specific, [{ ts: monday9utc, ts_: { v: 1 } }]), ['MAJOR'], 'Monday 10:00 inside 08-18');
  t.same(drive(specific, [{ ts: monday9utc + 5 * 86_400_000, ts_: { v: 1 } }]), ['-'], 'Saturday outside');
  t.same(drive(specific, [{ ts: monday9utc + 9 * 3_600_000, ts_: { v: 1 } }]), ['-'], 'Monday 19:00 outside');
  const night = sched({
    type: 'SPECIFIC_TIME',
    timezone: 'UTC',
    daysOfWeek: [1, 2, 3, 4, 5, 6, 7],
    startsOn: 22 * 3_600_000,
    endsOn: 6 * 3_600_000,
  });
  t.same(drive(night, [{ ts: monday9utc - 6 * 3_600_000, ts_: { v: 1 } }]), ['MAJOR'], '03:00 inside 22-06');
  t.same(drive(night, [{ ts: monday9utc, ts_: { v: 1 } }]), ['-'], '09:00 outside 22-06');
  const custom = sched({
    type: 'CUSTOM',
    timezone: 'UTC',
    items: [
      { enabled: true, dayOfWeek: 1, startsOn: 0, endsOn: 0 },
      { enabled: false, dayOfWeek: 2, startsOn: 0, endsOn: 0 },
    ],
  });
  t.same(drive(custom, [{ ts: monday9utc, ts_: { v: 1 } }]), ['MAJOR'], 'Monday enabled, all day');
  t.same(drive(custom, [{ ts: monday9utc + 86_400_000, ts_: { v: 1 } }]), ['-'], 'Tuesday disabled');
  t.same(drive(custom, [{ ts: monday9utc + 2 * 86_400_000, ts_: { v: 1 } }]), ['-'], 'Wednesday not listed');
  t.same(drive(sched({ type: 'ANY_TIME' }), [{ ts: monday9utc, ts_: { v: 1 } }]), ['MAJOR']);
});

t.test('the parser refuses what evaluation could not run, with the message a save answers', async (t) => {
  const bad: Array<[string, unknown, RegExp]> = [
    ['no type', [{ createRules: {} }], /^Alarm rule type should be specified!$/],
    [
      'the same type twice',
      [
        { alarmType: 'A', createRules: {} },
        { alarmType: 'A', createRules: {} },
      ],
      /^Can't create device profile with the same alarm rule types: "A"!$/,
    ],
    [
      'an unknown key type',
      [{ alarmType: 'A', createRules: { MAJOR: rule([num('t', 'GREATER', 1, 'SERVER_ATTRIBUTE')]) } }],
      /AlarmConditionKeyType.*"SERVER_ATTRIBUTE"/,
    ],
    [
      'a DURATION without a value',
      [
        {
          alarmType: 'A',
          createRules: { MAJOR: rule([num('t', 'GREATER', 1)], { type: 'DURATION', unit: 'SECONDS' }) },
        },
      ],
      /DURATION condition needs/,
    ],
    [
      'a DURATION with a null value',
      [
        {
          alarmType: 'A',
          createRules: {
            MAJOR: rule([num('t', 'GREATER', 1)], { type: 'DURATION', unit: 'SECONDS', predicate: pv(null) }),
          },
        },
      ],
      /DURATION condition needs a value/,
    ],
    [
      'an unknown spec',
      [{ alarmType: 'A', createRules: { MAJOR: rule([], { type: 'SOMETIMES' }) } }],
      /known type ids/,
    ],
    ['an unknown severity', [{ alarmType: 'A', createRules: { HIGH: rule([]) } }], /AlarmSeverity/],
    [
      'an unknown operation',
      [{ alarmType: 'A', createRules: { MAJOR: rule([num('t', 'ABOVE', 1)]) } }],
      /NumericOperation.*"ABOVE"/,
    ],
    [
      'a predicate of another family',
      [
        {
          alarmType: 'A',
          createRules: {
            MAJOR: rule([
              {
                key: { type: 'TIME_SERIES', key: 't' },
                valueType: 'NUMERIC',
                predicate: { type: 'STRING', operation: 'EQUAL', value: pv('x') },
              },
            ]),
          },
        },
      ],
      /a STRING predicate on a key of valueType NUMERIC/,
    ],
    ['not a list', { alarmType: 'A' }, /must be a list/],
    [
      'an unknown time zone',
      [
        {
          alarmType: 'A',
          createRules: {
            MAJOR: rule([], undefined, { schedule: { type: 'CUSTOM', timezone: 'Mars/Base', items: [] } }),
          },
        },
      ],
      /unknown time zone/,
    ],
  ];
  for (const [name, raw, re] of bad) {
    const r = parseProfileAlarms(raw);
    t.equal(r.ok, false, name);
    if (!r.ok) t.match(r.error, re, name);
  }
  t.equal(parseProfileAlarms(highTemp).ok, true, "TB's example parses");
  t.equal(parseProfileAlarms(null).ok, true, 'no alarms');
  const emptyDynamic = parseProfileAlarms([
    {
      alarmType: 'A',
      createRules: {
        MAJOR: rule([
          {
            key: { type: 'TIME_SERIES', key: 't' },
            valueType: 'NUMERIC',
            predicate: {
              type: 'NUMERIC',
              operation: 'GREATER',
              value: { defaultValue: 1, dynamicValue: { sourceType: null, sourceAttribute: null } },
            },
          },
        ]),
      },
    },
  ]);
  t.equal(emptyDynamic.ok, true, "the UI's empty dynamic value is none");
  const capped = parseProfileAlarms(highTemp, 2);
  t.equal(capped.ok, false, 'three rules over a cap of two');
  if (!capped.ok) t.match(capped.error, /at most 2 alarm rules/);
});
