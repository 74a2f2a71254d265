/**
 * What any implementation of the outbox ports (src/store/outbox.ts: `Outbox`, `DownlinkStore`) must do, as one
 * suite that takes a factory (the pattern of aedes-persistence's abstract.js): test/store/outbox.test.ts runs it
 * against LMDB; an implementation over something else runs the same suite.
 */
import type { Test } from 'tap';
import {
  ATTRIBUTE_MARKS,
  DEPTH_SET_ASIDE_RANGE,
  type DepthCounters,
  type DownlinkStore,
  HELD_RANGE,
  type HeldRecord,
  type Outbox,
  QUEUE_END,
  QUEUE_START,
  SET_ASIDE_RANGE,
  type SyncCounters,
  backfillSeq,
  depthQueueKey,
  depthQueueRange,
  depthSetAsideKey,
  heldKey,
  queueFrom,
  queueKey,
  setAsideKey,
} from '../../src/store/outbox.js';

export interface OutboxPorts {
  readonly outbox: Outbox;
  readonly downlink: DownlinkStore;
}

export interface OutboxFixture extends OutboxPorts {
  /** the same data opened again, as after a restart (the ports before are not used after) */
  reopen(): Promise<OutboxPorts>;
}

/** A fresh, empty outbox for one test; whatever it opened is closed at the test's teardown. */
export type OutboxFactory = (t: Test) => Promise<OutboxFixture>;

const held = (n: number): HeldRecord => ({ refs: [1, 10, 20, n], above: 100, futureMin: 150, held: n, pre2000: 0 });

const counters = (sent: number): SyncCounters => ({
  sent,
  dropped: 0,
  droppedFrom: null,
  droppedTo: null,
  setAside: 0,
  notSynced: 0,
  lastSuccessTs: null,
  lastError: null,
  url: 'http://up',
});

export function outboxPortSuite(t: Test, make: OutboxFactory): void {
  t.test('an empty outbox', async (t) => {
    const { outbox } = await make(t);
    t.same([...outbox.queue.keys({ start: QUEUE_START, end: QUEUE_END })], [], 'no queue entry');
    t.same([...outbox.held.entries(HELD_RANGE)], [], 'nothing held');
    t.same([...outbox.setAside.entries(SET_ASIDE_RANGE)], [], 'nothing set aside');
    t.same([...outbox.marks.keys(ATTRIBUTE_MARKS)], [], 'no mark');
    t.same([...outbox.depth.entries(depthQueueRange())], [], 'no depth entry');
    t.equal(outbox.counters(), undefined, 'no counters yet: sync never ran');
    t.equal(outbox.depthCounters(), undefined);
    t.equal(outbox.token('dev-1'), undefined);
    t.ok(outbox.nextSeq() >= 1, 'the next batch takes a seq of 1 or more');
    t.equal(outbox.nextStoredEntity(0), undefined, 'no telemetry stored');
    t.equal(outbox.depthValue(0, 0, 1.5), undefined);
    t.equal(outbox.hasFragment(0, 1, { k: 0, firstTs: 0, lastTs: 0, n: 1 }), false);
    t.type(outbox.refs.rawHorizonTs(), 'number');
  });

  t.test('the queue: in seq and entity order, history below every batch, a range ends with the table', async (t) => {
    const { outbox } = await make(t);
    const history = backfillSeq(1_700_000_000_000, 1_200_000);
    await outbox.write({
      queue: [
        { key: queueKey(7, 2), value: [1, 10, 20, 3] },
        { key: queueKey(7, 1), value: [1, 10, 20, 2] },
        { key: queueKey(3, 9), value: [2, 30, 40, 1] },
        { key: queueKey(history, 5), value: [1, 0, 1_199_999, 100] },
      ],
      held: [{ key: heldKey(1, 4), value: held(2) }],
    });
    t.same(
      [...outbox.queue.keys({ start: QUEUE_START, end: QUEUE_END })],
      [queueKey(history, 5), queueKey(3, 9), queueKey(7, 1), queueKey(7, 2)],
      'by seq, then entity; history first',
    );
    t.same(
      [...outbox.queue.entries({ start: queueFrom(7), end: QUEUE_END })].map((x) => x.value),
      [
        [1, 10, 20, 2],
        [1, 10, 20, 3],
      ],
      'from a seq on, with their values',
    );
    t.same(
      [...outbox.queue.keys({ start: queueFrom(7, 2), end: QUEUE_END })],
      [queueKey(7, 2)],
      'from an entity of a seq on',
    );
    t.same(
      [...outbox.queue.keys({ start: QUEUE_START, end: queueFrom(7) })],
      [queueKey(history, 5), queueKey(3, 9)],
      'up to a seq, excluded',
    );
    t.same([...outbox.queue.keys({ start: QUEUE_START, end: QUEUE_END, limit: 1 })], [queueKey(history, 5)], 'a limit');
    t.same(
      [...outbox.queue.keys({ start: QUEUE_START, end: ['q\u0000'] })].length,
      4,
      'a range reaching past the queue ends with it: no held record read as an entry',
    );
    t.same(outbox.queue.get(queueKey(3, 9)), [2, 30, 40, 1]);
    t.equal(outbox.queue.get(queueKey(3, 8)), undefined);
    t.same(outbox.held.get(heldKey(1, 4)), held(2), 'the held record beside it');
  });

  t.test('a write: each table in the order given, every table at once, the counters with it', async (t) => {
    const { outbox } = await make(t);
    await outbox.write({
      queue: [
        { key: queueKey(1, 1), value: [1, 1, 1, 1] },
        { key: queueKey(1, 1), value: null },
        { key: queueKey(2, 1), value: null },
        { key: queueKey(2, 1), value: [1, 2, 2, 1] },
      ],
      setAside: [{ key: setAsideKey(queueKey(5, 1)), value: { refs: [1, 5, 5, 1], status: 400, error: 'bad' } }],
      counters: counters(10),
    });
    t.equal(outbox.queue.get(queueKey(1, 1)), undefined, 'put, then removed: gone');
    t.same(outbox.queue.get(queueKey(2, 1)), [1, 2, 2, 1], 'removed, then put: there');
    t.same(
      [...outbox.setAside.entries(SET_ASIDE_RANGE)],
      [{ key: ['x', 5, 1], value: { refs: [1, 5, 5, 1], status: 400, error: 'bad' } }],
      'set aside',
    );
    t.same(outbox.counters(), counters(10), 'the counters');
  });

  t.test('a commit of its own: given as a function, it is called once and its changes written', async (t) => {
    const { outbox } = await make(t);
    await outbox.write({ held: [{ key: heldKey(3, 1), value: held(4) }], counters: counters(1) });
    let calls = 0;
    await outbox.commit(() => {
      calls++;
      return {
        held: [{ key: heldKey(3, 1), value: null }],
        queue: [{ key: queueKey(1, 3), value: [100, 1, 10, 20, 4] }],
        counters: counters(2),
      };
    });
    t.equal(calls, 1);
    t.same([...outbox.held.entries(HELD_RANGE)], [], 'the held record went');
    t.same(outbox.queue.get(queueKey(1, 3)), [100, 1, 10, 20, 4], 'back in the queue');
    t.equal(outbox.counters()?.sent, 2);
    await outbox.commit({ queue: [{ key: queueKey(1, 3), value: null }] });
    t.equal(outbox.queue.get(queueKey(1, 3)), undefined, 'and as changes');
  });

  t.test('depth entries and depth batches set aside: per entity in seq order, read backwards too', async (t) => {
    const { outbox } = await make(t);
    const dc: DepthCounters = { sent: 1, setAside: 2, dropped: 3, notSynced: 4 };
    await outbox.write({
      depth: [
        { key: depthQueueKey(2, 1), value: [1.5, 1, 7] },
        { key: depthQueueKey(1, 2), value: [2.5, 2, 7, 8] },
        { key: depthQueueKey(1, 1), value: [0.5, 1, 7] },
      ],
      depthSetAside: [{ key: depthSetAsideKey(1, 3), value: { points: [3.5, 1, 7], status: 400, error: null } }],
      depthCounters: dc,
    });
    t.same(
      [...outbox.depth.keys(depthQueueRange())],
      [depthQueueKey(1, 1), depthQueueKey(1, 2), depthQueueKey(2, 1)],
      'every entity',
    );
    t.same(
      [...outbox.depth.entries(depthQueueRange(1))].map((x) => x.value),
      [
        [0.5, 1, 7],
        [2.5, 2, 7, 8],
      ],
      "one entity's",
    );
    t.same(
      [...outbox.depth.keys({ start: ['d', 1, Number.MAX_SAFE_INTEGER], end: ['d', 1], reverse: true, limit: 1 })],
      [depthQueueKey(1, 2)],
      "an entity's last seq",
    );
    t.same(
      [
        ...outbox.depthSetAside.keys({
          start: ['y', 1, Number.MAX_SAFE_INTEGER],
          end: ['y', 1],
          reverse: true,
          limit: 1,
        }),
      ],
      [depthSetAsideKey(1, 3)],
      'and of what it has set aside',
    );
    t.same([...outbox.depthSetAside.entries(DEPTH_SET_ASIDE_RANGE)].length, 1);
    t.same(outbox.depthCounters(), dc);
  });

  t.test('client-attribute marks: a mark goes only if no change came since it was read', async (t) => {
    const { outbox } = await make(t);
    await outbox.mark('dev-a');
    await outbox.mark('dev-b');
    const read = [...outbox.marks.entries(ATTRIBUTE_MARKS)];
    t.same(
      read.map((m) => m.key),
      [
        ['a', 'dev-a'],
        ['a', 'dev-b'],
      ],
      'marked devices, in id order',
    );
    const a = read[0]?.value as number;
    await outbox.mark('dev-a');
    await outbox.unmark('dev-a', a);
    t.same(
      [...outbox.marks.keys({ ...ATTRIBUTE_MARKS, limit: 1 })],
      [['a', 'dev-a']],
      'a change came after the read: the mark stays',
    );
    const now = outbox.marks.get(['a', 'dev-a']) as number;
    await outbox.unmark('dev-a', now);
    t.equal(outbox.marks.get(['a', 'dev-a']), undefined, 'no change since: gone');
    await outbox.unmark('dev-b');
    t.same([...outbox.marks.keys(ATTRIBUTE_MARKS)], [], 'removed unconditionally');
  });

  t.test('tokens and counters survive a restart; a token is on disk once set', async (t) => {
    const first = await make(t);
    await first.outbox.setToken('dev-1', { token: 'T1', provisioned: true });
    await first.outbox.setToken('dev-2', { token: 'T2', provisioned: false });
    await first.outbox.removeToken('dev-2');
    await first.outbox.write({ counters: counters(5), queue: [{ key: queueKey(4, 4), value: [1, 1, 1, 1] }] });
    await first.outbox.flushed();
    const { outbox } = await first.reopen();
    t.same(outbox.token('dev-1'), { token: 'T1', provisioned: true });
    t.equal(outbox.token('dev-2'), undefined, 'removed');
    t.equal(outbox.counters()?.sent, 5);
    t.same(outbox.queue.get(queueKey(4, 4)), [1, 1, 1, 1]);
  });

  t.test("the downlink's state: its own keys, apart from the uplink's", async (t) => {
    const { outbox, downlink } = await make(t);
    await downlink.put(['R', 'dev-1', 2], { state: 'pending' });
    await downlink.put(['R', 'dev-1', 1], { state: 'delivered' });
    await downlink.put(['S', 'dev-1'], ['mode']);
    await downlink.put(['D'], { rpcReceived: 2 });
    await outbox.write({ queue: [{ key: queueKey(1, 1), value: [1, 1, 1, 1] }], counters: counters(0) });
    t.same(
      [...downlink.entries({ start: ['R'], end: ['R\u0000'] })].map((x) => x.key),
      [
        ['R', 'dev-1', 1],
        ['R', 'dev-1', 2],
      ],
      'a range of its records, in key order',
    );
    t.same(
      [...downlink.entries({ start: ['R'], end: ['Z'] })].map((x) => x.key[0]),
      ['R', 'R'],
      'a range ends with the kind of record it starts in',
    );
    t.same(downlink.get(['S', 'dev-1']), ['mode']);
    await downlink.remove(['S', 'dev-1']);
    t.equal(downlink.get(['S', 'dev-1']), undefined, 'removed');
    t.same(outbox.counters(), counters(0), "the uplink's counters are not the downlink's");
    t.same([...outbox.queue.keys({ start: QUEUE_START, end: QUEUE_END })], [queueKey(1, 1)]);
    t.throws(() => downlink.get(['q', 1, 1]), 'an uplink key is refused');
    await downlink.flushed();
  });
}
