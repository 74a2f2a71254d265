/**
 * SliceTurns (src/upstream/uplink/turns.ts): the sync's CPU work runs one slice per event-loop iteration, so timers and
 * I/O (a device post, the log's fdatasync completion) get the loop between any two slices; live slices first.
 */
import '../helpers/sandbox.js';
import t from 'tap';
import { performance } from 'node:perf_hooks';
import { SliceTurns } from '../../src/upstream/uplink/turns.js';

const busy = (ms: number): void => {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    /* a slice of CPU work */
  }
};

t.test('the loop runs between slices: a due timer fires between any two of 40 slices', async (t) => {
  const turns = new SliceTurns();
  // a slice of 5 ms makes a 1-ms timer due: if the loop turns between slices, its timers phase runs before the next
  let ticks = 0;
  const tick = setInterval(() => {
    ticks++;
  }, 1);
  const ticksAtSlice: number[] = [];
  // all queued at once, as jobs whose answers arrived in one poll phase would be
  await Promise.all(
    Array.from({ length: 40 }, async () => {
      await turns.take(false);
      ticksAtSlice.push(ticks);
      busy(5);
    }),
  );
  clearInterval(tick);
  const backToBack = ticksAtSlice.filter((n, i) => i > 0 && n === ticksAtSlice[i - 1]).length;
  t.equal(backToBack, 0, 'no two slices ran without a timer between them');
});

t.test('live slices go before the backlog slices waiting; each queue in order', async (t) => {
  const turns = new SliceTurns();
  const order: string[] = [];
  await Promise.all([
    turns.take(false).then(() => order.push('b1')),
    turns.take(false).then(() => order.push('b2')),
    turns.take(true).then(() => order.push('l1')),
    turns.take(false).then(() => order.push('b3')),
    turns.take(true).then(() => order.push('l2')),
  ]);
  t.same(order, ['l1', 'l2', 'b1', 'b2', 'b3']);
});

t.test('releaseAll lets every waiting slice go at once (stop)', async (t) => {
  const turns = new SliceTurns();
  let done = 0;
  const all = Promise.all(
    Array.from({ length: 5 }, () =>
      turns.take(false).then(() => {
        done++;
      }),
    ),
  );
  turns.releaseAll();
  await Promise.resolve();
  t.equal(done, 5, 'resolved in the same turn');
  await all;
});
