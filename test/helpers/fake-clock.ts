/**
 * A hand-driven clock for TimerWheel / RpcBroker unit tests: `advance(ms)` moves time and runs
 * every timer that came due, in due order. Counts armed timers so tests can assert "one timer, not one per entry".
 */
import type { WheelClock } from '../../src/rpc/timer-wheel.js';

interface FakeTimer {
  id: number;
  at: number;
  cb: () => void;
}

export class FakeClock implements WheelClock {
  private t: number;
  private nextId = 1;
  private timers: FakeTimer[] = [];
  /** timers armed over the clock's life */
  armedTotal = 0;

  constructor(start = 1_000_000) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  set(cb: () => void, delay: number): unknown {
    const timer = { id: this.nextId++, at: this.t + Math.max(0, delay), cb };
    this.timers.push(timer);
    this.armedTotal++;
    return timer.id;
  }

  clear(handle: unknown): void {
    this.timers = this.timers.filter((x) => x.id !== handle);
  }

  /** timers currently armed */
  get pending(): number {
    return this.timers.length;
  }

  advance(ms: number): void {
    const end = this.t + ms;
    for (;;) {
      const due = this.timers.filter((x) => x.at <= end).sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (due === undefined) break;
      this.timers = this.timers.filter((x) => x !== due);
      this.t = Math.max(this.t, due.at);
      due.cb();
    }
    this.t = end;
  }
}
