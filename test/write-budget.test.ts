/**
 * The write budget's arithmetic (store/write-budget.ts) on a fake clock and fake byte counters: room means no
 * delay, a burst is spent at once up to the reserve, sustained load settles at the budget's rate, and the
 * figures (today, last hour, card life, over budget) add up.
 */
import t from 'tap';
import { FakeClock } from './helpers/fake-clock.js';
import {
  APPLY_STRETCH,
  MAX_DELAY_MS,
  OTHER_SPREAD_MS,
  PACING_SHARE,
  RESERVE_MS,
  WriteBudget,
  dayStart,
} from '../src/store/write-budget.js';

const DAY = 86_400_000;
const BUDGET = 1.5e9;
const RATE = BUDGET / DAY; // bytes per ms

function setup(opts: { fixedDelayMs?: number; start?: number } = {}) {
  const clock = new FakeClock(opts.start ?? Date.UTC(2026, 10, 26, 12));
  const c = { log: 0, other: 0 };
  const budget = new WriteBudget({
    bytesPerDay: BUDGET,
    cardEnduranceBytes: 16e12,
    now: () => clock.now(),
    source: 'proc',
    written: () => c.log + c.other,
    logWritten: () => c.log,
    ...(opts.fixedDelayMs === undefined ? {} : { fixedDelayMs: opts.fixedDelayMs }),
  });
  return { clock, c, budget };
}

t.test('room: no delay, and writing at the budget rate never paces', async (t) => {
  const { clock, c, budget } = setup();
  t.equal(budget.reserve, RATE * RESERVE_MS, 'the reserve is RESERVE_MS of the budget');
  t.equal(budget.commitDelayMs(), 0);
  let maxDelay = 0;
  for (let s = 0; s < 6 * 3600; s++) {
    clock.advance(1000);
    c.log += RATE * 1000 * 0.99;
    maxDelay = Math.max(maxDelay, budget.commitDelayMs());
  }
  t.equal(maxDelay, 0, 'six hours at 99% of the budget: every commit at once');
  t.ok(budget.figures().reserveLeftBytes > budget.reserve * 0.99, 'the reserve stays full');
});

t.test(
  'a burst spends the reserve at once down to its pacing band, then the delay rises to MAX_DELAY_MS',
  async (t) => {
    const { clock, c, budget } = setup();
    const band = budget.reserve * PACING_SHARE;
    const second = RATE * 1000;
    clock.advance(1000);
    c.log += budget.reserve - band + second - 1000;
    t.equal(budget.commitDelayMs(), 0, 'three quarters of the reserve in one second: still no delay');
    clock.advance(1000);
    c.log += second + band / 2 + 1000;
    t.ok(
      Math.abs(budget.commitDelayMs() - MAX_DELAY_MS / 2) < 1e-6,
      `half the band left: half the longest delay (${budget.commitDelayMs()})`,
    );
    clock.advance(1000);
    c.log += second + band;
    t.equal(budget.commitDelayMs(), MAX_DELAY_MS, 'half the band overspent: the longest delay, and no more');
    t.equal(budget.applyStretch(), APPLY_STRETCH, 'paced: applies rarer and larger');
    // nothing written: the budget refills at its rate and the delay falls back to 0
    clock.advance(Math.ceil((band / RATE) * 1.6));
    t.equal(budget.commitDelayMs(), 0, 'refilled past the band after a quiet spell');
    t.equal(budget.applyStretch(), 1, 'applies as configured');
  },
);

t.test('counters are read at most once a second', async (t) => {
  const { clock, c, budget } = setup();
  clock.advance(1000);
  t.equal(budget.commitDelayMs(), 0);
  c.log += budget.reserve * 2;
  clock.advance(500);
  t.equal(budget.commitDelayMs(), 0, 'within the second: the last answer');
  clock.advance(500);
  t.equal(budget.commitDelayMs(), MAX_DELAY_MS, 'the next second sees the bytes');
});

/**
 * A gateway under sustained load above the budget: 10 posts/s one at a time, each commit one 4-KiB page; with a
 * delay d, commits happen every d plus the mean gap between posts (100 ms), at most one per post; an LMDB apply
 * of 1 MB every 5 minutes on top.
 */
function sustained(
  budget: WriteBudget,
  clock: FakeClock,
  c: { log: number; other: number },
  seconds: number,
  onSecond?: (s: number, delay: number) => void,
): void {
  for (let s = 0; s < seconds; s++) {
    const d = budget.commitDelayMs();
    const commitsPerSec = Math.min(10, 1000 / (d + 100));
    clock.advance(1000);
    c.log += commitsPerSec * 4096;
    if (s % 300 === 299) c.other += 1_000_000;
    onSecond?.(s, d);
  }
}

t.test('sustained load settles at the budget rate within five minutes, and holds it', async (t) => {
  const { clock, c, budget } = setup();
  const written = (): number => c.log + c.other;
  let at5min = 0;
  const delays: number[] = [];
  sustained(budget, clock, c, 15 * 60, (s, d) => {
    if (s === 5 * 60 - 1) at5min = written();
    if (s >= 5 * 60) delays.push(d);
  });
  const perDay = ((written() - at5min) / (10 * 60_000)) * DAY;
  t.ok(perDay <= BUDGET * 1.03, `minutes 5-15 written at ${(perDay / 1e9).toFixed(3)} GB/day, the budget is 1.5`);
  t.ok(perDay >= BUDGET * 0.8, `and the budget is used, not wasted (${(perDay / 1e9).toFixed(3)} GB/day)`);
  const mean = delays.reduce((a, b) => a + b, 0) / delays.length;
  t.ok(mean > 50 && mean < MAX_DELAY_MS, `commits grouped by a delay of ${mean.toFixed(0)} ms on average`);
  // spread debits: no apply moves the delay by more than a few ms from one second to the next
  let jump = 0;
  for (let i = 1; i < delays.length; i++)
    jump = Math.max(jump, Math.abs((delays[i] as number) - (delays[i - 1] as number)));
  t.ok(jump < 60, `the delay moves by at most ${jump.toFixed(1)} ms a second (an apply's megabyte is spread)`);
  // hours later the long-run rate still holds
  const before = written();
  sustained(budget, clock, c, 3 * 3600);
  const longRun = ((written() - before) / (3 * 3_600_000)) * DAY;
  t.ok(Math.abs(longRun - BUDGET) < BUDGET * 0.02, `three more hours at ${(longRun / 1e9).toFixed(3)} GB/day`);
  t.equal(budget.figures().overBudget, false, 'paced: not over budget');
});

t.test("bytes other than the log's are debited spread over OTHER_SPREAD_MS, all of them in the end", async (t) => {
  const { clock, c, budget } = setup();
  clock.advance(1000);
  budget.commitDelayMs();
  c.other += 1_000_000;
  clock.advance(1000);
  budget.commitDelayMs();
  const left1 = budget.figures().reserveLeftBytes;
  t.ok(
    budget.reserve - left1 < 1_000_000 * (2000 / OTHER_SPREAD_MS) + RATE * 2000,
    'one second later only a sliver is debited',
  );
  // the reserve is full again only once the whole megabyte has been paid back at the budget's rate
  for (let s = 0; s < 3600; s++) {
    clock.advance(1000);
    budget.commitDelayMs();
  }
  t.equal(budget.figures().reserveLeftBytes, Math.round(budget.reserve), 'an hour later the reserve is full');
  t.equal(budget.figures().sinceStartBytes, 1_000_000, 'counted once');
});

t.test('figures: today from local midnight, the last hour, the card life at the budget and as measured', async (t) => {
  const start = dayStart(Date.UTC(2026, 10, 26, 12)) + DAY - 30 * 60_000; // 23:30 local time
  const { clock, c, budget } = setup({ start });
  for (let m = 0; m < 60; m++) {
    clock.advance(60_000);
    c.log += 1_000_000;
    budget.commitDelayMs();
  }
  const f = budget.figures();
  t.equal(f.sinceStartBytes, 60_000_000);
  t.equal(f.todayBytes, 31_000_000, 'the samples from 00:00 on');
  t.equal(f.lastHourBytes, 60_000_000);
  t.equal(f.budgetBytesPerDay, BUDGET);
  t.equal(f.cardLifeYearsAtBudget, 29.2, '16 TB at 1.5 GB/day');
  t.equal(f.bytesPerDay, 1_440_000_000, '1 MB a minute');
  t.equal(f.cardLifeYears, 30.4);
  t.equal(f.source, 'proc');
  clock.advance(61 * 60_000);
  t.equal(budget.figures().lastHourBytes, 0, 'an hour later the last hour is empty');
});

t.test(
  'a fixed delay (explicit store.commitDelayMs) is kept, counted, and warns when the card wears faster than planned',
  async (t) => {
    const { clock, c, budget } = setup({ fixedDelayMs: 0 });
    let maxDelay = 0;
    for (let s = 0; s < 3600; s++) {
      clock.advance(1000);
      c.log += 41_000; // one page per post at 10 posts/s
      maxDelay = Math.max(maxDelay, budget.commitDelayMs());
    }
    t.equal(maxDelay, 0, 'the fixed delay, whatever was written');
    t.equal(budget.applyStretch(), 1, 'applies as configured');
    const f = budget.figures();
    t.equal(f.paced, false);
    t.equal(f.overBudget, true, '3.5 GB/day for an hour: over the budget and its reserve');
    const paced = setup();
    for (let s = 0; s < 600; s++) {
      paced.clock.advance(1000);
      paced.c.log += 41_000;
    }
    t.equal(paced.budget.figures().overBudget, false, 'ten minutes of it is what the reserve is for');
  },
);

t.test('a clock set back counts no negative time and keeps sampling', async (t) => {
  const { clock, c, budget } = setup();
  clock.advance(1000);
  budget.commitDelayMs();
  const back = new FakeClock(clock.now() - 3_600_000);
  const b2 = new WriteBudget({
    bytesPerDay: BUDGET,
    cardEnduranceBytes: 16e12,
    now: () => back.now(),
    source: 'log',
    written: () => c.log,
    logWritten: () => c.log,
  });
  c.log += b2.reserve * 2;
  back.advance(1000);
  t.equal(b2.commitDelayMs(), MAX_DELAY_MS, 'a first sample sees the bytes');
  const sameBudgetClock = { t: clock.now() };
  const b3 = new WriteBudget({
    bytesPerDay: BUDGET,
    cardEnduranceBytes: 16e12,
    now: () => sameBudgetClock.t,
    source: 'log',
    written: () => c.log,
    logWritten: () => c.log,
  });
  sameBudgetClock.t -= 3_600_000; // set back an hour
  t.equal(
    b3.commitDelayMs(),
    MAX_DELAY_MS,
    'bytes written are seen at once after the clock went back, with no refill for the hour',
  );
  t.ok(b3.figures().reserveLeftBytes === 0, 'no time credited');
  t.throws(
    () => new WriteBudget({ bytesPerDay: 0, cardEnduranceBytes: 1, now: () => 0, source: 'log', written: () => 0 }),
    RangeError,
  );
});
