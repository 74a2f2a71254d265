/**
 * The device state service on a real store with a stepped clock (src/device/state.ts): what reads show before
 * the lazy write, what a stop writes, the inactivity report and its bus event once, and `inactivityTimeout`
 * parsed as ThingsBoard parses it.
 */
import t from 'tap';
import { type DeviceStateEvent, EventBus } from '../../src/bus/index.js';
import { DeviceStateService, StateAttributes, parseTimeout } from '../../src/device/state.js';
import type { KvValue } from '../../src/model/kv.js';
import { LmdbAttributeStore } from '../../src/store/attributes.js';
import { EntityStore } from '../../src/store/entities.js';
import { openTestEnv } from '../helpers/store.js';

t.test('inactivityTimeout: a long, as ThingsBoard parses its text', async (t) => {
  const table: Array<[KvValue | undefined, number]> = [
    [{ type: 'LONG', v: 3000 }, 3000],
    [{ type: 'STRING', v: '3000' }, 3000],
    [{ type: 'DOUBLE', v: 3000 }, 0],
    [{ type: 'STRING', v: '3000.0' }, 0],
    [{ type: 'STRING', v: 'x' }, 0],
    [{ type: 'LONG', v: -5 }, 0],
    [{ type: 'BOOLEAN', v: true }, 0],
    [undefined, 0],
  ];
  for (const [v, want] of table) t.equal(parseTimeout(v), want, JSON.stringify(v));
});

t.test('memory first, disk at the stop; inactivity reported once, on the bus too', async (t) => {
  const { env, dict } = openTestEnv(t);
  const entities = new EntityStore(env);
  await entities.ensureTenant();
  const dev = await entities.createDevice({ name: 'pump-1' });
  const bus = new EventBus();
  const store = new LmdbAttributeStore(env, dict, bus);
  let clock = Date.now();
  const now = (): number => clock;
  const state = new DeviceStateService(entities, store, bus, {
    inactivityTimeoutMs: 60_000,
    checkIntervalMs: 3_600_000,
    now,
    log: (m) => t.fail(m),
  });
  const reads = new StateAttributes(store, state);
  const events: DeviceStateEvent[] = [];
  bus.on('deviceState', (ev) => events.push(ev));
  await store.save(
    'DEVICE',
    dev.id,
    'SERVER_SCOPE',
    [
      ['a', { type: 'LONG', v: 1 }],
      ['zz', { type: 'LONG', v: 2 }],
    ],
    now(),
  );
  state.start();
  t.teardown(() => state.stop());

  state.connected(dev.id);
  clock += 1_000;
  state.activity(dev.id);
  const shown = reads.get(dev.id, 'SERVER_SCOPE');
  t.same(
    shown.map((a) => a.key),
    ['a', 'active', 'lastActivityTime', 'lastConnectTime', 'zz'],
    'the times from memory, in key order among the stored ones',
  );
  t.equal(Number(shown.find((a) => a.key === 'lastActivityTime')?.value.v), now(), 'the latest activity');
  t.equal(shown.find((a) => a.key === 'active')?.value.v, true, 'active, written or being written');
  t.notOk(store.get(dev.id, 'SERVER_SCOPE', ['lastConnectTime']).length, 'the connect time is not on disk yet');
  t.same(reads.keys(dev.id, 'SERVER_SCOPE').includes('lastConnectTime'), true, 'keys list it');
  t.same(
    events.map((e) => [e.kind, e.active]),
    [
      ['CONNECT', false],
      ['ACTIVITY', true],
    ],
    'connect, then active',
  );

  state.disconnected(dev.id);
  t.equal(events.at(-1)?.kind, 'DISCONNECT');
  await state.stop();
  const disk = new Map(store.get(dev.id, 'SERVER_SCOPE').map((a) => [a.key, a.value.v] as const));
  t.equal(disk.get('active'), true, 'a disconnect leaves it active');
  t.equal(disk.get('lastActivityTime'), now(), 'the stop wrote the latest activity');
  t.ok(Number(disk.get('lastDisconnectTime')) >= Number(disk.get('lastConnectTime')), 'and the session times');

  // a second service over the same store: what a restart loads
  const again = new DeviceStateService(entities, store, bus, {
    inactivityTimeoutMs: 60_000,
    checkIntervalMs: 3_600_000,
    now,
    log: (m) => t.fail(m),
  });
  again.start();
  t.teardown(() => again.stop());
  t.same(again.counts(), { devices: 1, active: 1 }, 'loaded active');
  clock += 59_000;
  again.check();
  t.same(again.counts(), { devices: 1, active: 1 }, 'not before its timeout');
  clock += 1_000;
  const before = events.length;
  again.check();
  again.check();
  t.same(again.counts(), { devices: 1, active: 0 }, 'inactive at its timeout');
  t.same(
    events.slice(before).map((e) => e.kind),
    ['INACTIVITY'],
    'reported once',
  );
  // a DOUBLE timeout is no timeout (the default stays); a longer long one makes it active again at once
  await store.save('DEVICE', dev.id, 'SERVER_SCOPE', [['inactivityTimeout', { type: 'DOUBLE', v: 120_000 }]], now());
  t.same(again.counts(), { devices: 1, active: 0 }, '120000.0 is not a timeout');
  await store.save('DEVICE', dev.id, 'SERVER_SCOPE', [['inactivityTimeout', { type: 'LONG', v: 120_000 }]], now());
  t.same(again.counts(), { devices: 1, active: 1 }, 'a longer timeout applies at once');
});
