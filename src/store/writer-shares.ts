/**
 * Who pays for the write budget's pacing (docs/write-budget.md, "A writer pays for its own bytes"): each writer
 * (a device's entity) is charged the bytes its commits cost, decayed over WRITER_WINDOW_MS, so a writer's
 * recent bytes divided by the window is its rate. While the budget paces commits, LIGHT_SHARE of the reserve's
 * refill rate is shared max-min fairly among the writers (water-filling): a writer whose rate is under its fair
 * part is "light", its commits go at once; the others are "heavy" and wait the budget's delay. The light commits
 * draw on a bucket of their own, refilled at that share, so whatever the writers do the light ones never write
 * more than it. A bulk upload drains the reserve and is the one paced; a device posting one reading at a time
 * beside it keeps fsync-speed answers. Where every writer is alike (the reference load), none is under its fair
 * part (paced, each writes the refill's 1/n, twice its part of the light share), so all are paced as before.
 *
 * Bounded: at most MAX_WRITERS writers are remembered; the lightest are forgotten first (a forgotten writer owes
 * nothing, which is what the lightest nearly do). Pure: the clock is given.
 */

/**
 * how long a writer's bytes are remembered (exponential decay; its bytes over this window are its rate). Also the
 * burst a light writer may make at once: its equal part of the light share over the window (1.26 MB beside one
 * upload at 1.5 GB/day, ~300 single posts), and the light bucket's size (2.5 MB, 30% of the reserve)
 */
export const WRITER_WINDOW_MS = 5 * 60_000;
/** the share of the reserve's refill that light writers may spend at once while the others are paced */
export const LIGHT_SHARE = 0.5;
/** writers remembered at most */
export const MAX_WRITERS = 1024;
/** the light writers are worked out at most this often (a sort of the writers) */
const CLASSIFY_MS = 1000;

interface Debt {
  bytes: number;
  at: number;
}

export class WriterShares {
  private readonly debts = new Map<string, Debt>();
  /**
   * a writer not found heavy stays light while it owes at most this many bytes (decayed): the most a light writer
   * owed at `classifiedAt`, or what the light writers left of their share then, whichever is more (a writer
   * new since then starts from nothing)
   */
  private threshold = 0;
  /** the writers found heavy at `classifiedAt` (a writer owing as much as the heaviest light one may be among them) */
  private heavySet = new Set<string>();
  private classifiedAt = Number.NEGATIVE_INFINITY;
  /** what the light writers' commits may still spend at once: refilled at the light share, up to one window of it */
  private lightLevel: number;
  private lightAt: number;

  constructor(
    /** bytes per ms the light writers may spend together: LIGHT_SHARE of the reserve's refill */
    private readonly lightBytesPerMs: number,
    private readonly now: () => number,
    private readonly windowMs = WRITER_WINDOW_MS,
    private readonly maxWriters = MAX_WRITERS,
  ) {
    this.lightLevel = lightBytesPerMs * windowMs;
    this.lightAt = now();
  }

  /** Charges `writer` the bytes one of its commits cost; `light`: a commit made at once, from the light share. */
  charge(writer: string, bytes: number, light = false): void {
    if (!(bytes > 0)) return;
    const now = this.now();
    if (light) {
      this.refillLight(now);
      this.lightLevel -= bytes;
    }
    const d = this.debts.get(writer);
    if (d === undefined) this.debts.set(writer, { bytes, at: now });
    else {
      d.bytes = this.decayed(d, now) + bytes;
      d.at = now;
    }
    if (this.debts.size > this.maxWriters) this.classify(now);
  }

  /** Whether `writer` waits the budget's delay while commits are paced (false: committed at once). */
  heavy(writer: string): boolean {
    const now = this.now();
    if (now - this.classifiedAt >= CLASSIFY_MS || now < this.classifiedAt) this.classify(now);
    if (this.heavySet.has(writer)) return true;
    this.refillLight(now);
    // the light share is spent: every writer waits until it refills
    if (this.lightLevel <= 0) return true;
    const d = this.debts.get(writer);
    return d !== undefined && this.decayed(d, now) > this.threshold;
  }

  /** writers paced as of the last classification */
  heavyWriters(): number {
    const now = this.now();
    if (now - this.classifiedAt >= CLASSIFY_MS || now < this.classifiedAt) this.classify(now);
    return this.heavySet.size;
  }

  /** a writer's bytes as of `now`, for tests and the status */
  owed(writer: string): number {
    const d = this.debts.get(writer);
    return d === undefined ? 0 : this.decayed(d, this.now());
  }

  get size(): number {
    return this.debts.size;
  }

  private refillLight(now: number): void {
    const cap = this.lightBytesPerMs * this.windowMs;
    this.lightLevel = Math.min(cap, this.lightLevel + this.lightBytesPerMs * Math.max(0, now - this.lightAt));
    this.lightAt = now;
  }

  private decayed(d: Debt, now: number): number {
    return d.bytes * Math.exp(-Math.max(0, now - d.at) / this.windowMs);
  }

  /**
   * Water-filling (max-min fairness): the writers, lightest first, are light while each owes at most an equal
   * part of what the lighter ones left of the light share (over the window); the first that owes more, and all
   * heavier, are heavy. Also forgets the writers
   * that owe under a byte, and the lightest beyond the cap (down to three quarters of it, so that a stream of new
   * writers does not sort on every charge).
   */
  private classify(now: number): void {
    this.classifiedAt = now;
    const owed: [string, number][] = [];
    for (const [w, d] of this.debts) {
      const b = this.decayed(d, now);
      if (b < 1) this.debts.delete(w);
      else owed.push([w, b]);
    }
    owed.sort((a, b) => a[1] - b[1]);
    if (owed.length > this.maxWriters) {
      const drop = owed.length - Math.floor((this.maxWriters * 3) / 4);
      for (const [w] of owed.splice(0, drop)) this.debts.delete(w);
    }
    let left = this.lightBytesPerMs * this.windowMs;
    let threshold = 0;
    let light = 0;
    for (const [, b] of owed) {
      if (b > left / (owed.length - light)) break;
      left -= b;
      threshold = b;
      light++;
    }
    // a writer new since, or light then, may spend up to a newcomer's fair part before the next classification
    this.threshold = Math.max(threshold, left / (owed.length - light + 1));
    this.heavySet = new Set(owed.slice(light).map(([w]) => w));
  }
}
