/**
 * The alarm store's rule-engine API (store/alarms.ts) on a real LMDB environment: create-or-update per
 * originator and type, severity only raised by a rule, and a row written only when something worth one changes
 * (create, severity, ack, clear, assign), never for a re-raise that changes nothing (docs/write-budget.md).
 */
import t from 'tap';
import { type AlarmRecord, AlarmStore } from '../../src/store/alarms.js';
import { EntityStore } from '../../src/store/entities.js';
import { openTestEnv } from '../helpers/store.js';

t.test('createOrUpdateActive: same id, severity raised never lowered, rows written only on change', async (t) => {
  const { env } = openTestEnv(t);
  const entities = new EntityStore(env);
  await entities.ensureTenant();
  const dev = await entities.createDevice({ name: 'freezer', type: 'default' });
  const alarms = new AlarmStore(env, (id) => entities.get(id), { maxPerOriginator: 10 });
  const o = { entityType: 'DEVICE' as const, id: dev.id };
  const row = (id: string) => env.alarms.get(['A', id]) as AlarmRecord;

  const first = await alarms.createOrUpdateActive(o, 'High Temperature', 'MINOR', { t: 30 }, 1_000);
  t.match(first, { created: true, written: true });
  t.match(row(first.alarm.id), {
    severity: 'MINOR',
    startTs: 1_000,
    endTs: 1_000,
    cleared: false,
    acknowledged: false,
  });

  const same = await alarms.createOrUpdateActive(o, 'High Temperature', 'MINOR', { t: 31 }, 2_000);
  t.match(same, { created: false, written: false }, 'same severity: no row');
  t.equal(same.alarm.id, first.alarm.id);
  t.equal(row(first.alarm.id).endTs, 1_000, 'the row is untouched');
  t.match(
    alarms.get(first.alarm.id),
    { endTs: 2_000, detailsJson: '{"t":31}' },
    'reads show the newer endTs and details',
  );

  const lower = await alarms.createOrUpdateActive(o, 'High Temperature', 'WARNING', undefined, 3_000);
  t.match(lower, { written: false, alarm: { severity: 'MINOR', endTs: 3_000 } }, 'a rule never lowers');

  const higher = await alarms.createOrUpdateActive(o, 'High Temperature', 'CRITICAL', { t: 40 }, 4_000);
  t.match(higher, { created: false, written: true });
  t.match(row(first.alarm.id), { severity: 'CRITICAL', startTs: 1_000, endTs: 4_000, detailsJson: '{"t":40}' });

  const late = await alarms.createOrUpdateActive(o, 'High Temperature', 'CRITICAL', undefined, 3_500);
  t.match(late, { written: false, alarm: { endTs: 4_000 } }, 'an older reading never moves endTs back');
  await t.rejects(
    alarms.createOrUpdateActive(
      { entityType: 'DEVICE', id: '0b1c2d3e-0000-4000-8000-0000000000ff' },
      'X',
      'MINOR',
      null,
      1,
    ),
    /is not found/,
    'no alarm without its originator',
  );

  const rest = await alarms.createOrUpdateActive(o, 'High Temperature', 'MAJOR', undefined, 5_000, {
    raiseOnly: false,
  });
  t.equal(rest.alarm.severity, 'MAJOR', 'REST sets the severity as given');
  t.same(alarms.activeBySeverity(), { CRITICAL: 0, MAJOR: 1, MINOR: 0, WARNING: 0, INDETERMINATE: 0 });

  t.ok(await alarms.ack(first.alarm.id, 6_000));
  t.equal(await alarms.ack(first.alarm.id, 6_500), undefined, 'already acknowledged: nothing');
  t.match(row(first.alarm.id), { acknowledged: true, ackTs: 6_000 });
  t.ok(await alarms.clear(first.alarm.id, 7_000));
  t.match(row(first.alarm.id), { cleared: true, clearTs: 7_000 });
  t.equal(alarms.activeOf(dev.id, 'High Temperature'), undefined, 'no longer the active one');
  t.same(alarms.active(), []);

  const next = await alarms.createOrUpdateActive(o, 'High Temperature', 'MINOR', undefined, 8_000);
  t.match(next, { created: true });
  t.not(next.alarm.id, first.alarm.id, 'a cleared alarm is never re-raised: a new one');
  t.same(
    alarms.byOriginator(dev.id).map((a) => a.id),
    [first.alarm.id, next.alarm.id],
    "the originator's alarms, oldest first",
  );

  await entities.deleteDevice(dev.id);
  t.same(alarms.byOriginator(dev.id), [], 'gone with their device');
  t.equal(alarms.get(first.alarm.id), undefined);
  t.same([...env.alarms.getKeys({})], [], 'no index entry left');
});
