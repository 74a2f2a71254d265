/**
 * An RPC from the upstream reaches its device once (src/upstream/downlink/rpc.ts's invariants), even when the downlink's
 * once-a-second tick runs while the RPC's first write is still being flushed: the tick re-submits pending RPCs
 * that are not in the broker, and one not yet submitted because its flush is slow (a busy card) was such an RPC.
 * The device then got the same call twice (seen under CI load as `rpcDelivered: 3` for 2 RPCs). And when the
 * disk is full as the RPC is delivered and replied, its record's new state is written once the disk has room, so
 * a restart after that does not hand it to the device again (found by bench:soak).
 */
import t from 'tap';
import { EventBus } from '../../src/bus/index.js';
import type { Logger } from '../../src/log.js';
import { RpcBroker } from '../../src/rpc/broker.js';
import type { PollOutcome } from '../../src/rpc/longpoll.js';
import { EntityStore } from '../../src/store/entities.js';
import type { DownlinkStore } from '../../src/store/outbox.js';
import { LmdbDownlinkStore } from '../../src/store/outbox-lmdb.js';
import { DownlinkState } from '../../src/upstream/downlink/state.js';
import { RpcDownlink } from '../../src/upstream/downlink/rpc.js';
import type { UpstreamConnection } from '../../src/upstream/session/connection.js';
import { openTestEnv } from '../helpers/store.js';

const quiet: Logger = { info() {}, warn() {}, error() {}, debug() {} };

/** The broker as the daemon makes it, small bounds. */
function newBroker(): RpcBroker {
  return new RpcBroker(new EventBus(), {
    maxPendingPerDevice: 10,
    maxOpenPolls: 10,
    clientSideTimeoutMs: 10_000,
    log: () => {},
  });
}

/** `real` with some of its members replaced. */
function storeOver(real: DownlinkStore, over: Partial<DownlinkStore>): DownlinkStore {
  return {
    get: (key) => real.get(key),
    put: (key, value) => real.put(key, value),
    remove: (key) => real.remove(key),
    entries: (range) => real.entries(range),
    flushed: () => real.flushed(),
    ...over,
  };
}

/**
 * The downlink as the daemon makes it, its link down (nothing is published upstream, which these tests do not
 * look at). `store` is what it writes through; its counters go to the real store.
 */
function newDownlink(
  o: { store: DownlinkStore; real: DownlinkStore; entities: EntityStore; rpc: RpcBroker },
  now: () => number = Date.now,
): RpcDownlink {
  return new RpcDownlink({
    store: o.store,
    session: { state: 'down' } as unknown as UpstreamConnection,
    entities: o.entities,
    rpc: o.rpc,
    state: new DownlinkState(o.real),
    ttlMs: 60_000,
    log: quiet,
    now,
  });
}

/** A device's long-poll for an RPC. The broker's timers do not keep a process alive: this one does meanwhile. */
function poll(rpc: RpcBroker, deviceId: string, ms: number): Promise<PollOutcome> {
  const alive = setTimeout(() => {}, ms + 1000);
  return new Promise<PollOutcome>((resolve) => {
    rpc.waitRpc(deviceId, ms, resolve);
  }).finally(() => clearTimeout(alive));
}

t.test("a tick during the RPC's flush does not hand it to the device a second time", async (t) => {
  const { env } = openTestEnv(t);
  const entities = new EntityStore(env);
  await entities.ensureTenant();
  const device = await entities.createDevice({ name: 'valve-1' });
  let openFlush: () => void = () => {};
  const flushHeld = new Promise<void>((resolve) => {
    openFlush = resolve;
  });
  // the store as the downlink sees it, with a flush that waits until the test lets it go
  const real = new LmdbDownlinkStore(env);
  const slow = storeOver(real, { flushed: () => flushHeld.then(() => real.flushed()) });
  const rpc = newBroker();
  t.teardown(() => rpc.close());
  const state = new DownlinkState(real);
  const downlink = new RpcDownlink({
    store: slow,
    // the link is down: nothing is published upstream, which this test does not look at
    session: { state: 'down' } as unknown as UpstreamConnection,
    entities,
    rpc,
    state,
    ttlMs: 60_000,
    log: quiet,
    now: Date.now,
  });
  downlink.start();
  t.teardown(() => downlink.stop());
  const received = downlink.received(
    Buffer.from(JSON.stringify({ device: 'valve-1', data: { id: 1, method: 'open', params: { s: 5 } } })),
  );
  // the flush held past a tick (one a second)
  await new Promise((r) => setTimeout(r, 1300));
  openFlush();
  await received;
  const first = await poll(rpc, device.id, 1000);
  t.match(first, { kind: 'data', body: /"method":"open"/ }, 'the device gets the RPC');
  const second = await poll(rpc, device.id, 300);
  t.same(second, { kind: 'timeout' }, 'and nothing more');
  t.equal(state.counters.rpcReceived, 1);
  t.equal(state.counters.rpcDelivered, 1, 'delivered once');
});

t.test(
  'a full disk while the RPC is delivered and replied: after a restart the device does not get it again',
  async (t) => {
    const { env } = openTestEnv(t);
    const entities = new EntityStore(env);
    await entities.ensureTenant();
    const device = await entities.createDevice({ name: 'valve-2' });
    // the store as the downlink sees it, refusing writes while `full` (as a full disk does: 507 STORE_FULL)
    let full = false;
    const real = new LmdbDownlinkStore(env);
    const fullStore = storeOver(real, {
      put: (key, value) => (full ? Promise.reject(new Error('Storage is full')) : real.put(key, value)),
    });
    const make = (): { rpc: RpcBroker; downlink: RpcDownlink } => {
      const rpc = newBroker();
      const downlink = newDownlink({ store: fullStore, real, entities, rpc });
      downlink.start();
      t.teardown(() => {
        downlink.stop();
        rpc.close();
      });
      return { rpc, downlink };
    };
    const before = make();
    await before.downlink.received(
      Buffer.from(JSON.stringify({ device: 'valve-2', data: { id: 7, method: 'open', params: {} } })),
    );
    full = true;
    const got = await poll(before.rpc, device.id, 1000);
    t.match(got, { kind: 'data', body: /"method":"open"/ }, 'delivered while the disk is full');
    t.equal(before.rpc.reply(device.id, 1, '{"ok":true}'), true, 'and replied');
    await new Promise((r) => setTimeout(r, 300));
    full = false;
    // the disk has room again; a tick later the record's state is on disk
    await new Promise((r) => setTimeout(r, 1300));
    await env.flushed();
    before.downlink.stop();
    // a power cut now, then a start on the same store
    const after = make();
    const again = await poll(after.rpc, device.id, 500);
    t.same(again, { kind: 'timeout' }, 'the device does not get the same RPC a second time');
  },
);

t.test('a wall clock stepped ahead does not make a re-sent RPC look new (ages on the monotonic clock)', async (t) => {
  const { env } = openTestEnv(t);
  const entities = new EntityStore(env);
  await entities.ensureTenant();
  const device = await entities.createDevice({ name: 'valve-3' });
  const rpc = newBroker();
  let step = 0;
  const downlink = newDownlink(
    { store: new LmdbDownlinkStore(env), real: new LmdbDownlinkStore(env), entities, rpc },
    () => Date.now() + step,
  );
  downlink.start();
  t.teardown(() => {
    downlink.stop();
    rpc.close();
  });
  const call = Buffer.from(JSON.stringify({ device: 'valve-3', data: { id: 9, method: 'open', params: {} } }));
  await downlink.received(call);
  t.match(await poll(rpc, device.id, 1000), { kind: 'data', body: /"method":"open"/ }, 'delivered');
  // NTP's first sync steps the clock 10 minutes ahead; the upstream re-sends the RPC (a new sub-session)
  step = 600_000;
  await downlink.received(call);
  t.same(await poll(rpc, device.id, 500), { kind: 'timeout' }, 'a copy 1 s old is still a copy: not delivered again');
});
