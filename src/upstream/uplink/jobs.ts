/**
 * The sync's jobs: the slots (requests in flight, of every lane), the pump's wake-up, and the jobs running,
 * which stop() waits for. The pump (service.ts) keeps `slots.inFlight` within sync.concurrency; a lane or a
 * sender of attributes or depth points takes a slot when it starts a job and gives it back when the job ends.
 */
import { SliceTurns } from './turns.js';

/** Requests in flight, of every lane: the pump keeps `inFlight` within sync.concurrency. */
export interface Slots {
  inFlight: number;
  /** live jobs in flight (from the log, and of the live outbox lane): at most the pump's `liveCap` */
  liveInFlight: number;
}

export class Jobs {
  readonly slots: Slots = { inFlight: 0, liveInFlight: 0 };
  /** one slice of sync CPU work per event-loop turn (turns.ts) */
  readonly turns = new SliceTurns();
  private isStopped = false;
  private wakeUp: (() => void) | undefined;
  private readonly running = new Set<Promise<void>>();

  stopped(): boolean {
    return this.isStopped;
  }

  /** No job starts from now on; the pump wakes to see it. */
  stop(): void {
    this.isStopped = true;
    this.turns.releaseAll();
    this.wake();
  }

  wake(): void {
    const w = this.wakeUp;
    this.wakeUp = undefined;
    w?.();
  }

  /** Resolves after `ms`, or at the next wake(). */
  sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        this.wakeUp = undefined;
        resolve();
      }, ms);
      t.unref();
      this.wakeUp = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }

  /** A job started: settled() waits for it. */
  track(job: Promise<void>): void {
    this.running.add(job);
    void job.finally(() => this.running.delete(job));
  }

  /** Resolves when the jobs running now have ended. */
  async settled(): Promise<void> {
    await Promise.all([...this.running]);
  }
}
