/**
 * A bucketed timer: thousands of long-poll and RPC deadlines share ONE runtime timer.
 *
 * Deadlines are rounded UP to the next multiple of `tickMs`, so an entry fires at or after its deadline and at
 * most `tickMs` late, never early. Entries with the same rounded deadline share a bucket; a min-heap of bucket
 * numbers keeps the earliest bucket at hand and the single timer is armed for it. Cancelling an entry is O(1)
 * (removal from its bucket's set); an emptied bucket stays in the heap and is skipped when it comes due.
 *
 * The clock is injected so tests drive time by hand. The real clock's timer is unref'd: pending
 * deadlines never keep the process alive.
 */
import type { DurationMs, EpochMs } from '../types.js';

/** The time source and the one-shot timer the wheel arms. */
export interface WheelClock {
  now(): EpochMs;
  /** Arms a one-shot timer; the handle is passed back to `clear`. */
  set(cb: () => void, delay: DurationMs): unknown;
  clear(handle: unknown): void;
}

/**
 * The real clock counts on the monotonic clock, in ms from the epoch at the process's start: deadlines are
 * durations, and a wall clock stepped back (NTP's first sync on a board without a battery-backed clock, a
 * technician's `date -s`) would hold every RPC and long-poll deadline back by the step, one stepped ahead would
 * fire them all at once.
 */
export const realClock: WheelClock = {
  now: () => performance.timeOrigin + performance.now(),
  set(cb, delay) {
    const t = setTimeout(cb, delay);
    t.unref();
    return t;
  },
  clear(handle) {
    clearTimeout(handle as NodeJS.Timeout);
  },
};

/** A scheduled callback; `cancel` is idempotent and a no-op once the entry has fired. */
export interface WheelEntry {
  cancel(): void;
  readonly active: boolean;
}

class Entry implements WheelEntry {
  bucket: Set<Entry> | undefined;
  constructor(
    readonly cb: () => void,
    private readonly onCancel: () => void,
  ) {}
  get active(): boolean {
    return this.bucket !== undefined;
  }
  cancel(): void {
    if (this.bucket === undefined) return;
    this.bucket.delete(this);
    this.bucket = undefined;
    this.onCancel();
  }
}

/** A binary min-heap of bucket numbers. */
class MinHeap {
  private readonly a: number[] = [];
  get size(): number {
    return this.a.length;
  }
  peek(): number | undefined {
    return this.a[0];
  }
  clear(): void {
    this.a.length = 0;
  }
  push(v: number): void {
    const a = this.a;
    a.push(v);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if ((a[p] as number) <= v) break;
      a[i] = a[p] as number;
      i = p;
    }
    a[i] = v;
  }
  pop(): number | undefined {
    const a = this.a;
    const top = a[0];
    const last = a.pop();
    if (a.length === 0 || last === undefined) return top;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= a.length) break;
      const r = l + 1;
      const c = r < a.length && (a[r] as number) < (a[l] as number) ? r : l;
      if ((a[c] as number) >= last) break;
      a[i] = a[c] as number;
      i = c;
    }
    a[i] = last;
    return top;
  }
}

export class TimerWheel {
  /** bucket number (deadline / tickMs, rounded up) → entries due then */
  private readonly buckets = new Map<number, Set<Entry>>();
  private readonly heap = new MinHeap();
  private armedFor: number | undefined;
  private timer: unknown;
  /** entries neither fired nor cancelled */
  private live = 0;
  private readonly cancelled = (): void => {
    // The last entry gone: disarm at once, so an idle wheel holds no timer.
    if (--this.live === 0) this.reset();
  };

  /** `tickMs`: bucket width in ms (> 0); the most an entry fires late. */
  constructor(
    private readonly tickMs: DurationMs = 50,
    private readonly clock: WheelClock = realClock,
    private readonly log: (msg: string) => void = () => undefined,
  ) {
    if (!(tickMs > 0)) throw new RangeError('tickMs must be > 0');
  }

  /** Entries scheduled and neither fired nor cancelled. */
  get size(): number {
    return this.live;
  }

  /** Runs `cb` once, `delay` ms from now (delay ≤ 0: on the next due check, never synchronously). */
  schedule(delay: DurationMs, cb: () => void): WheelEntry {
    const bucketNo = Math.ceil((this.clock.now() + Math.max(0, delay)) / this.tickMs);
    let bucket = this.buckets.get(bucketNo);
    if (bucket === undefined) {
      bucket = new Set();
      this.buckets.set(bucketNo, bucket);
      this.heap.push(bucketNo);
    }
    const e = new Entry(cb, this.cancelled);
    e.bucket = bucket;
    bucket.add(e);
    this.live++;
    this.arm();
    return e;
  }

  /** Stops the timer and forgets every entry without running it (shutdown). */
  close(): void {
    for (const b of this.buckets.values()) for (const e of b) e.bucket = undefined;
    this.reset();
  }

  private reset(): void {
    if (this.armedFor !== undefined) this.clock.clear(this.timer);
    this.armedFor = undefined;
    this.live = 0;
    this.buckets.clear();
    this.heap.clear();
  }

  /** Fires every bucket whose time has come; called by the timer (and by tests through the fake clock). */
  private fire(): void {
    this.armedFor = undefined;
    const now = this.clock.now();
    for (;;) {
      const head = this.heap.peek();
      if (head === undefined || head * this.tickMs > now) break;
      this.heap.pop();
      const bucket = this.buckets.get(head);
      this.buckets.delete(head);
      if (bucket === undefined) continue;
      for (const e of bucket) {
        e.bucket = undefined;
        this.live--;
        try {
          e.cb();
        } catch (err) {
          this.log(`timer callback failed: ${(err as Error)?.stack ?? String(err)}`);
        }
      }
    }
    this.arm();
  }

  /** Keeps the one timer armed for the earliest bucket that still has entries. */
  private arm(): void {
    // Drop emptied buckets at the head so an idle wheel holds no timer.
    for (;;) {
      const head = this.heap.peek();
      if (head === undefined) break;
      const b = this.buckets.get(head);
      if (b !== undefined && b.size > 0) break;
      this.heap.pop();
      this.buckets.delete(head);
    }
    const head = this.heap.peek();
    if (head === undefined) {
      if (this.armedFor !== undefined) this.clock.clear(this.timer);
      this.armedFor = undefined;
      return;
    }
    if (this.armedFor !== undefined && this.armedFor <= head) return;
    if (this.armedFor !== undefined) this.clock.clear(this.timer);
    this.armedFor = head;
    this.timer = this.clock.set(() => this.fire(), Math.max(0, head * this.tickMs - this.clock.now()));
  }
}
