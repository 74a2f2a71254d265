import '../helpers/sandbox.js';
import t from 'tap';
import { TimerWheel } from '../../src/rpc/timer-wheel.js';
import { FakeClock } from '../helpers/fake-clock.js';

t.test('fires at or after the deadline, at most one tick late, never early', (t) => {
  const clock = new FakeClock(1_000_000);
  const wheel = new TimerWheel(50, clock);
  const fired: Array<[string, number]> = [];
  wheel.schedule(120, () => fired.push(['a', clock.now()]));
  wheel.schedule(100, () => fired.push(['b', clock.now()]));
  wheel.schedule(0, () => fired.push(['z', clock.now()]));
  t.same(fired, [], 'nothing runs synchronously, even with delay 0');
  clock.advance(99);
  t.same(
    fired.map((f) => f[0]),
    ['z'],
    'delay 0 fires on the next check; 100 not yet',
  );
  clock.advance(1);
  t.same(
    fired.map((f) => f[0]),
    ['z', 'b'],
    'exactly at the deadline',
  );
  clock.advance(29);
  t.same(
    fired.map((f) => f[0]),
    ['z', 'b'],
    '120 is rounded up to the 150 bucket',
  );
  clock.advance(21);
  t.same(fired, [
    ['z', 1_000_000],
    ['b', 1_000_100],
    ['a', 1_000_150],
  ]);
  t.equal(wheel.size, 0);
  t.equal(clock.pending, 0, 'an empty wheel holds no timer');
  t.end();
});

t.test('one runtime timer serves many entries; cancel is O(1) and idempotent', (t) => {
  const clock = new FakeClock(0);
  const wheel = new TimerWheel(100, clock);
  let count = 0;
  const entries = [];
  for (let i = 0; i < 10_000; i++)
    entries.push(
      wheel.schedule(1_000 + (i % 2_000), () => {
        count++;
      }),
    );
  t.equal(clock.pending, 1, 'one armed timer for 10,000 entries');
  t.ok(clock.armedTotal <= 2, `armed ${clock.armedTotal} timers in total`);
  for (let i = 0; i < 10_000; i += 2) entries[i]?.cancel();
  entries[0]?.cancel();
  t.equal(wheel.size, 5_000);
  t.equal(entries[0]?.active, false);
  t.equal(entries[1]?.active, true);
  clock.advance(3_000);
  t.equal(count, 5_000, 'only the entries not cancelled ran');
  t.equal(entries[1]?.active, false, 'a fired entry is no longer active');
  entries[1]?.cancel();
  t.equal(clock.pending, 0);
  t.end();
});

t.test('an earlier deadline re-arms the timer; an emptied head bucket does not keep it', (t) => {
  const clock = new FakeClock(0);
  const wheel = new TimerWheel(10, clock);
  const fired: string[] = [];
  const late = wheel.schedule(10_000, () => fired.push('late'));
  wheel.schedule(20, () => fired.push('early'));
  t.equal(clock.pending, 1, 're-armed, not doubled');
  clock.advance(20);
  t.same(fired, ['early']);
  late.cancel();
  const again = wheel.schedule(5, () => fired.push('again'));
  clock.advance(9);
  t.same(fired, ['early'], 'due at 25, rounded up to the 30 bucket');
  clock.advance(1);
  t.same(fired, ['early', 'again']);
  t.equal(again.active, false);
  clock.advance(20_000);
  t.same(fired, ['early', 'again'], 'cancelled entry never runs');
  t.equal(clock.pending, 0);
  t.end();
});

t.test('a throwing callback is logged and does not stop the others', (t) => {
  const clock = new FakeClock(0);
  const logs: string[] = [];
  const wheel = new TimerWheel(10, clock, (m) => logs.push(m));
  let ran = false;
  wheel.schedule(10, () => {
    throw new Error('boom');
  });
  wheel.schedule(10, () => {
    ran = true;
  });
  clock.advance(10);
  t.equal(ran, true);
  t.equal(logs.length, 1);
  t.match(logs[0], /boom/);
  t.end();
});

t.test('entries scheduled from inside a callback fire later, not in the same sweep', (t) => {
  const clock = new FakeClock(0);
  const wheel = new TimerWheel(10, clock);
  const fired: number[] = [];
  wheel.schedule(10, () => {
    fired.push(clock.now());
    wheel.schedule(30, () => fired.push(clock.now()));
  });
  clock.advance(10);
  t.same(fired, [10]);
  clock.advance(30);
  t.same(fired, [10, 40]);
  t.end();
});

t.test('close forgets everything and disarms', (t) => {
  const clock = new FakeClock(0);
  const wheel = new TimerWheel(10, clock);
  let ran = false;
  const e = wheel.schedule(10, () => {
    ran = true;
  });
  wheel.close();
  t.equal(clock.pending, 0);
  t.equal(e.active, false);
  clock.advance(100);
  t.equal(ran, false);
  t.throws(() => new TimerWheel(0, clock), RangeError);
  t.end();
});

t.test("the real clock: timer is unref'd and fires", async (t) => {
  const wheel = new TimerWheel(5);
  // The wheel's own timer is unref'd, so something else must keep this process alive while we wait.
  const keepAlive = setTimeout(() => undefined, 5_000);
  t.teardown(() => clearTimeout(keepAlive));
  const started = Date.now();
  const at = await new Promise<number>((resolve) => {
    wheel.schedule(20, () => resolve(Date.now()));
  });
  t.ok(at - started >= 19, `fired after ${at - started} ms`);
  wheel.close();
});
