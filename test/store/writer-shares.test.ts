/**
 * A writer pays for its own bytes (store/writer-shares.ts, store/write-budget.ts), on a fake clock: the writers
 * whose bytes drained the reserve are the paced ones, the light writers' bytes stay within their share of the
 * refill, the memory is bounded, and with every device paced alike the daily total holds as before.
 */
import '../helpers/sandbox.js';
import t from 'tap';
import { FakeClock } from '../helpers/fake-clock.js';
import { AIM_SHARE, WriteBudget } from '../../src/store/write-budget.js';
import { LIGHT_SHARE, MAX_WRITERS, WRITER_WINDOW_MS, WriterShares } from '../../src/store/writer-shares.js';

const DAY = 86_400_000;
const BUDGET = 1.5e9;
const RATE = (BUDGET / DAY) * AIM_SHARE;
const PAGE = 4096;

function budgetSetup() {
  const clock = new FakeClock(Date.UTC(2026, 10, 26, 12));
  const c = { log: 0, other: 0 };
  const budget = new WriteBudget({
    bytesPerDay: BUDGET,
    cardEnduranceBytes: 16e12,
    now: () => clock.now(),
    source: 'proc',
    written: () => c.log + c.other,
    logWritten: () => c.log,
  });
  return { clock, c, budget };
}

t.test('max-min: a writer under its fair part of the light share is light; the others are heavy', async (t) => {
  const clock = new FakeClock();
  const share = 10; // bytes per ms: 3 MB over the window
  const s = new WriterShares(share, () => clock.now());
  s.charge('bulk', 25_000_000);
  s.charge('a', 500_000);
  s.charge('b', 750_000);
  s.charge('c', 2_000_000);
  clock.advance(1000);
  // a's 500 KB is under 3000/4; b's 750 under the 2500 left over 3; c's 2000 over the 1750 left over 2
  t.notOk(s.heavy('a'));
  t.notOk(s.heavy('b'));
  t.ok(s.heavy('c'), 'c owes more than its fair part');
  t.ok(s.heavy('bulk'));
  t.equal(s.heavyWriters(), 2);
  t.notOk(s.heavy('new'), 'a writer owing nothing is light');
  // a light writer that spends more than the most a light one owed becomes heavy at once, not a second later
  s.charge('a', 500_000);
  t.ok(s.heavy('a'), 'a, now owing 1 MB, is heavy');
});

t.test('writers alike, all over their fair part, are all heavy: none is singled out', async (t) => {
  const clock = new FakeClock();
  const s = new WriterShares(10, () => clock.now());
  // 50 writers at 2 B/ms each: their fair part of the 10-B/ms share is 0.2
  for (let i = 0; i < 300; i++) {
    for (let d = 0; d < 50; d++) s.charge(`d${d}`, 2 * 1000 + d);
    clock.advance(1000);
  }
  t.equal(s.heavyWriters(), 50);
});

t.test('the light commits together never spend more than the light share', async (t) => {
  const clock = new FakeClock();
  const s = new WriterShares(10, () => clock.now());
  // 500 writers, each new and light, each posting a page at once whenever it may: the share is what limits them
  let spent = 0;
  for (let ms = 0; ms < 10 * WRITER_WINDOW_MS; ms += 100) {
    const w = `d${(ms / 100) % 500}`;
    if (!s.heavy(w)) {
      s.charge(w, PAGE, true);
      spent += PAGE;
    }
    clock.advance(100);
  }
  const most = 10 * 10 * WRITER_WINDOW_MS + 10 * WRITER_WINDOW_MS;
  t.ok(
    spent <= most + PAGE,
    `${spent} bytes at once in 10 windows; the share allows ${most} (its rate, plus a full bucket)`,
  );
  t.ok(spent >= 0.9 * 10 * 10 * WRITER_WINDOW_MS, 'and is used');
});

t.test('a heavy writer that stops is light again once its bytes are behind it', async (t) => {
  const clock = new FakeClock();
  const s = new WriterShares(10, () => clock.now());
  s.charge('bulk', 25_000_000);
  clock.advance(1000);
  t.ok(s.heavy('bulk'));
  // 25 MB decays under the 3-MB share after ln(25/3) windows, ~2.1
  clock.advance(2 * WRITER_WINDOW_MS);
  t.ok(s.heavy('bulk'), 'still over its share after two windows');
  clock.advance(0.2 * WRITER_WINDOW_MS);
  t.notOk(s.heavy('bulk'), 'light again');
  t.ok(s.owed('bulk') < 3_000_000);
});

t.test('memory: at most MAX_WRITERS writers remembered, the lightest forgotten', async (t) => {
  const clock = new FakeClock();
  const s = new WriterShares(10, () => clock.now());
  s.charge('bulk', 250_000_000);
  let most = 0;
  for (let i = 0; i < 5 * MAX_WRITERS; i++) {
    s.charge(`d${i}`, PAGE);
    most = Math.max(most, s.size);
  }
  t.ok(most <= MAX_WRITERS, `at most ${most} writers remembered of ${5 * MAX_WRITERS}`);
  t.ok(s.heavy('bulk'), 'the heavy writer is not the one forgotten');
  // writers owing under a byte are dropped
  clock.advance(30 * WRITER_WINDOW_MS);
  t.notOk(s.heavy('bulk'));
  t.equal(s.size, 0, 'all forgotten once they owe nothing');
});

t.test('the budget paces only the heavy writers, and only while it paces', async (t) => {
  const { clock, c, budget } = budgetSetup();
  budget.charge('bulk', 0, 100_000);
  clock.advance(1000);
  t.notOk(budget.heavy('bulk'), 'room in the reserve: no one waits');
  // the bulk writer drains the reserve (20 MB), charged for its bytes
  for (let i = 0; i < 100; i++) {
    c.log += 200_000;
    budget.charge('bulk', 200_000, 2000);
    clock.advance(1000);
    budget.commitDelayMs();
  }
  t.ok(budget.pacing(), 'paced');
  t.ok(budget.commitDelayMs() > 0);
  t.ok(budget.heavy('bulk'), 'the bulk writer waits the delay');
  t.notOk(budget.heavy('light'), 'a device posting one reading at a time does not');
  // the light device posts once a second, a page each (4 KB/s, under its share of 8.4 KB/s), for two minutes
  let heavySeen = 0;
  for (let i = 0; i < 120; i++) {
    c.log += PAGE;
    budget.charge('light', PAGE, 1, true);
    clock.advance(1000);
    if (budget.heavy('light')) heavySeen++;
  }
  t.equal(heavySeen, 0, 'the light device was never paced');
  t.ok(budget.pacing(), 'while the reserve was still low');
  // a device posting 10 times a second (41 KB/s, more than the whole budget) is paced however alone it is
  for (let i = 0; i < 60; i++) {
    c.log += 10 * PAGE;
    for (let j = 0; j < 10; j++) budget.charge('chatty', PAGE, 1, !budget.heavy('chatty'));
    clock.advance(1000);
  }
  t.ok(budget.heavy('chatty'), 'a device over the share is heavy, bulk or not');
});

/**
 * The reference load (50 devices × a post every 5 s, evenly spread), a page per commit: paced devices share a
 * commit per delay, light ones take one each. The light ones' bytes stay within their share, and the total within
 * the budget, as with every device paced alike.
 */
t.test('the reference load: the light lane stays within its share and the day within the budget', async (t) => {
  const { clock, c, budget } = budgetSetup();
  const DEVICES = 50;
  const TICK = 20;
  let sharedOpen = false;
  let sharedDueAt = 0;
  let lightBytes = 0;
  let lightFrom = 0;
  let written0 = 0;
  let lightShare = 0;
  const SECONDS = 2 * 3600;
  for (let ms = 0; ms < SECONDS * 1000; ms += TICK) {
    if (ms === 3600_000) {
      written0 = c.log;
      lightFrom = lightBytes;
    }
    for (let d = 0; d < DEVICES; d++) {
      if ((ms + d * 100) % 5000 !== 0) continue;
      const dev = `d${d}`;
      if (budget.pacing() && !budget.heavy(dev)) {
        c.log += PAGE;
        lightBytes += PAGE;
        budget.charge(dev, PAGE, 5, true);
        continue;
      }
      // joins the shared batch (each device's part of its page charged when written, approximated as a page
      // shared by the posts of a delay)
      const delay = budget.commitDelayMs();
      if (!sharedOpen) {
        sharedOpen = true;
        sharedDueAt = ms + delay;
      }
      budget.charge(dev, PAGE / Math.max(1, delay / 100), 5, false);
    }
    if (sharedOpen && ms >= sharedDueAt) {
      sharedOpen = false;
      c.log += PAGE;
    }
    clock.advance(TICK);
  }
  const perDay = ((c.log - written0) / 3_600_000) * DAY;
  t.ok(perDay <= BUDGET, `the second hour at ${(perDay / 1e9).toFixed(3)} GB/day, the budget 1.5`);
  t.ok(perDay >= BUDGET * 0.8, `and used (${(perDay / 1e9).toFixed(3)} GB/day)`);
  lightShare = (lightBytes - lightFrom) / 3_600_000;
  t.ok(
    lightShare <= RATE * LIGHT_SHARE * 1.05,
    `the light commits wrote ${lightShare.toFixed(2)} B/ms, their share ${(RATE * LIGHT_SHARE).toFixed(2)}`,
  );
});
