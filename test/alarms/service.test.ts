/**
 * The alarm rule service on a real store with a stepped clock (src/alarms/service.ts): a re-raise writes no alarm
 * row, a DURATION's progress is one write at its start and one at its reset, and a service started over a store
 * with progress checks that device's DURATION at the minute check without a new reading (a silent device escalates
 * after a restart).
 */
import t from 'tap';
import { AlarmRuleService } from '../../src/alarms/service.js';
import { EventBus } from '../../src/bus/index.js';
import { SeriesColumn } from '../../src/model/batch.js';
import type { TsKv } from '../../src/model/kv.js';
import { AlarmRuleStateStore } from '../../src/store/alarm-rule-state.js';
import { type AlarmRecord, AlarmStore } from '../../src/store/alarms.js';
import { LmdbAttributeStore } from '../../src/store/attributes.js';
import { EntityStore } from '../../src/store/entities.js';
import { DeviceProfileStore } from '../../src/store/profiles.js';
import { openTestEnv } from '../helpers/store.js';

const pv = (v: unknown): object => ({ defaultValue: v, userValue: null, dynamicValue: null });
const gt = (v: number): object => ({
  key: { type: 'TIME_SERIES', key: 't' },
  valueType: 'NUMERIC',
  value: null,
  predicate: { type: 'NUMERIC', operation: 'GREATER', value: pv(v) },
});

t.test('rows and progress written on transitions only; a restart keeps checking a silent DURATION', async (t) => {
  const { env, dict } = openTestEnv(t);
  const entities = new EntityStore(env);
  await entities.ensureTenant();
  await new DeviceProfileStore(entities, env).save({
    name: 'oven',
    profileData: {
      alarms: [
        {
          id: 'hot',
          alarmType: 'Hot',
          createRules: {
            CRITICAL: {
              condition: { condition: [gt(200)], spec: { type: 'DURATION', unit: 'SECONDS', predicate: pv(30) } },
            },
            MINOR: { condition: { condition: [gt(100)], spec: { type: 'SIMPLE' } } },
          },
          clearRule: null,
        },
      ],
    },
  });
  const dev = await entities.createDevice({ name: 'oven-1', type: 'oven' });
  const bus = new EventBus((m) => t.fail(m));
  const attributes = new LmdbAttributeStore(env, dict, bus);
  const alarms = new AlarmStore(env, (id) => entities.get(id));
  let clock = Date.now();
  const noSeries = { latest: () => new Map<string, TsKv>() };
  const make = (): AlarmRuleService =>
    new AlarmRuleService(entities, attributes, noSeries, alarms, new AlarmRuleStateStore(env, (m) => t.fail(m)), bus, {
      maxPending: 0,
      now: () => clock,
      log: (m) => t.fail(m),
    });
  const post = (ts: number, v: number): void => {
    const col = new SeriesColumn();
    col.pushLong(ts, v);
    bus.publish('telemetry', { entityType: 'DEVICE', entityId: dev.id, series: new Map([['t', col]]) });
  };
  const rowOf = (id: string): AlarmRecord => env.alarms.get(['A', id]) as AlarmRecord;

  let svc = make();
  svc.start();
  const t0 = clock;
  post(t0, 150);
  await svc.stop();
  const minor = alarms.activeOf(dev.id, 'Hot');
  t.equal(minor?.severity, 'MINOR', 'MINOR at once');
  svc = make();
  svc.start();
  post(t0 + 1000, 150);
  clock = t0 + 2000;
  post(t0 + 2000, 150);
  await svc.stop();
  t.equal(rowOf(minor?.id ?? '').endTs, t0, 'a re-raise at the same severity writes no row');
  t.equal(alarms.get(minor?.id ?? '')?.endTs, t0 + 2000, 'its newer endTs (now, as TB) is shown');

  svc = make();
  svc.start();
  post(t0 + 3000, 250);
  await svc.stop();
  t.equal(svc.stats().pending, 1, 'the DURATION started: one progress record');
  t.equal(alarms.activeOf(dev.id, 'Hot')?.severity, 'MINOR', 'not yet CRITICAL');

  // a restart: the device says nothing more; the minute check finds it held long enough
  clock = t0 + 40_000;
  svc = make();
  svc.start();
  svc.check();
  await svc.stop();
  const crit = alarms.activeOf(dev.id, 'Hot');
  t.equal(crit?.severity, 'CRITICAL', 'escalated without a new reading');
  t.equal(crit?.id, minor?.id, 'the same alarm, raised');
});

t.test('a dynamic value re-evaluates when its attribute changes; a user clear starts the rules over', async (t) => {
  const { env, dict } = openTestEnv(t);
  const entities = new EntityStore(env);
  await entities.ensureTenant();
  await new DeviceProfileStore(entities, env).save({
    name: 'tank',
    profileData: {
      alarms: [
        {
          id: 'over',
          alarmType: 'Over limit',
          createRules: {
            MAJOR: {
              condition: {
                condition: [
                  {
                    key: { type: 'TIME_SERIES', key: 't' },
                    valueType: 'NUMERIC',
                    predicate: {
                      type: 'NUMERIC',
                      operation: 'GREATER',
                      value: {
                        defaultValue: 100,
                        dynamicValue: { sourceType: 'CURRENT_DEVICE', sourceAttribute: 'limit' },
                      },
                    },
                  },
                ],
                spec: { type: 'SIMPLE' },
              },
            },
          },
        },
      ],
    },
  });
  const dev = await entities.createDevice({ name: 'tank-1', type: 'tank' });
  const bus = new EventBus((m) => t.fail(m));
  const attributes = new LmdbAttributeStore(env, dict, bus);
  const alarms = new AlarmStore(env, (id) => entities.get(id));
  const noSeries = { latest: () => new Map<string, TsKv>() };
  const svc = new AlarmRuleService(
    entities,
    attributes,
    noSeries,
    alarms,
    new AlarmRuleStateStore(env, (m) => t.fail(m)),
    bus,
    { maxPending: 0, now: Date.now, log: (m) => t.fail(m) },
  );
  svc.start();
  t.teardown(() => svc.stop());
  const col = new SeriesColumn();
  col.pushLong(Date.now(), 50);
  bus.publish('telemetry', { entityType: 'DEVICE', entityId: dev.id, series: new Map([['t', col]]) });
  await svc.stop();
  t.equal(alarms.activeOf(dev.id, 'Over limit'), undefined, '50 is under the default 100');
  svc.start();
  // the write publishes once committed: the rule runs again with the latest telemetry
  await attributes.save('DEVICE', dev.id, 'SERVER_SCOPE', [['limit', { type: 'LONG', v: 40 }]], Date.now());
  await svc.stop();
  const first = alarms.activeOf(dev.id, 'Over limit');
  t.equal(first?.severity, 'MAJOR', 'raised by the limit moving under the value');
  await alarms.clear(first?.id ?? '', Date.now());
  svc.start();
  await attributes.save('DEVICE', dev.id, 'SHARED_SCOPE', [['limit', { type: 'LONG', v: 30 }]], Date.now());
  await svc.stop();
  const second = alarms.activeOf(dev.id, 'Over limit');
  t.ok(
    second !== undefined && second.id !== first?.id,
    'after a user clear the next true evaluation creates a new alarm',
  );
});

t.test('progress changes are gathered for flushMs and written together; reads see them meanwhile', async (t) => {
  const { env } = openTestEnv(t);
  const stored = (device: string, alarm: string): unknown => env.alarms.get(['R', device, alarm]);
  // a long window, so nothing is written before the test asks
  const states = new AlarmRuleStateStore(env, (m) => t.fail(m), 60_000);
  const rec = { profileId: 'p', create: { CRITICAL: 1_000 }, clear: 0 };
  states.put('d1', 'hot', rec);
  states.put('d2', 'hot', rec);
  states.put('d2', 'cold', { ...rec, create: { MAJOR: 2 } });
  t.equal(stored('d1', 'hot'), undefined, 'not written before the window ends');
  t.ok(states.has('d1', 'hot'), 'but read as kept');
  t.same([...states.load('d2').keys()].sort(), ['cold', 'hot']);
  t.equal(states.count(), 3);
  t.equal(states.unflushed(), 3);
  await states.settled();
  t.same(stored('d1', 'hot'), rec, 'written at settled (a stop)');
  t.same(stored('d2', 'cold'), { ...rec, create: { MAJOR: 2 } });
  t.equal(states.unflushed(), 0);
  // a removal gathered after a set of the same record: the last change wins
  states.put('d1', 'hot', { ...rec, create: { CRITICAL: 2_000 } });
  states.put('d1', 'hot', undefined);
  t.notOk(states.has('d1', 'hot'));
  t.equal(states.count(), 2);
  await states.settled();
  t.equal(stored('d1', 'hot'), undefined, 'removed');
  t.same([...states.devices()].sort(), ['d2']);
});
