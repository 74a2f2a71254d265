/**
 * The bytes of device uploads being decoded and written at once (`ingest.maxBytesInFlight`,
 * docs/design/memory-budget.md). A body's points are held decoded from its parse until its commit is on disk, so
 * without a bound what a gateway holds grows with how many devices post at the same moment, not with anything
 * configured. A body is admitted while the bodies in flight leave room for it; otherwise it waits, first come
 * first served, until earlier ones are answered. A body larger than the whole budget goes in alone. Nothing is
 * refused for the budget's sake: a device only waits longer for its answer.
 */

export interface AdmissionFigures {
  /** the configured budget, bytes */
  readonly budgetBytes: number;
  /** body bytes admitted and not yet answered */
  readonly inFlightBytes: number;
  /** the most body bytes in flight at once since start */
  readonly peakBytes: number;
  /** bodies that waited for room since start */
  readonly waited: number;
  /** bodies waiting now */
  readonly waiting: number;
}

interface Waiter {
  readonly bytes: number;
  readonly go: () => void;
}

export class IngestAdmission {
  private inFlight = 0;
  private peak = 0;
  private waitedCount = 0;
  private readonly queue: Waiter[] = [];
  private head = 0;

  constructor(private readonly budgetBytes: number) {}

  /**
   * Runs `work` once `bytes` are admitted and gives them back when its promise settles. The common case (room
   * in the budget) runs it at once, without a promise of its own.
   */
  run<T>(bytes: number, work: () => Promise<T>): Promise<T> {
    if (this.head === this.queue.length && this.fits(bytes)) {
      this.take(bytes);
      return this.admitted(bytes, work);
    }
    this.waitedCount++;
    // give() takes the bytes of a waiter it wakes, so no later arrival can pass it meanwhile
    return new Promise<void>((go) => this.queue.push({ bytes, go })).then(() => this.admitted(bytes, work));
  }

  figures(): AdmissionFigures {
    return {
      budgetBytes: this.budgetBytes,
      inFlightBytes: this.inFlight,
      peakBytes: this.peak,
      waited: this.waitedCount,
      waiting: this.queue.length - this.head,
    };
  }

  private fits(bytes: number): boolean {
    return this.inFlight === 0 || this.inFlight + bytes <= this.budgetBytes;
  }

  /** `bytes` are taken: runs `work` and gives them back once it settled */
  private admitted<T>(bytes: number, work: () => Promise<T>): Promise<T> {
    let p: Promise<T>;
    try {
      p = work();
    } catch (err) {
      this.give(bytes);
      return Promise.reject(err);
    }
    return p.then(
      (v) => {
        this.give(bytes);
        return v;
      },
      (err: unknown) => {
        this.give(bytes);
        throw err;
      },
    );
  }

  private take(bytes: number): void {
    this.inFlight += bytes;
    if (this.inFlight > this.peak) this.peak = this.inFlight;
  }

  private give(bytes: number): void {
    this.inFlight -= bytes;
    // waiters in order while they fit
    while (this.head < this.queue.length) {
      const w = this.queue[this.head] as Waiter;
      if (!this.fits(w.bytes)) break;
      this.head++;
      this.take(w.bytes);
      w.go();
    }
    if (this.head === this.queue.length) {
      this.queue.length = 0;
      this.head = 0;
    }
  }
}

/** `work` within the budget when there is one (unit tests build the device layer without) */
export function admitted<T>(a: IngestAdmission | undefined, bytes: number, work: () => Promise<T>): Promise<T> {
  return a === undefined ? work() : a.run(bytes, work);
}
