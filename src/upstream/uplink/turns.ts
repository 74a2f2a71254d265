/**
 * Event-loop turns for the sync's CPU work (the ingest path keeps priority: docs/sync.md).
 *
 * Reading a batch back from the store and encoding its body costs a few milliseconds. Left to promise
 * continuations, every job whose answer arrived in the same poll phase would do that work back to back,
 * and a device post parsed in that phase would wait for all of them (tens of ms at four jobs, more with a
 * scavenge in between). Here each slice of sync work waits for its own turn: at most one slice runs per
 * event-loop iteration, in the check phase (setImmediate), so between two slices the loop polls its sockets
 * and the log's fdatasync completions, and a post waits at most one slice at each step of its way.
 *
 * Live sends take their turns before the backlog's.
 */
export class SliceTurns {
  private readonly live: Array<() => void> = [];
  private readonly backlog: Array<() => void> = [];
  private scheduled = false;

  /** Resolves in a turn of its own; `live` goes ahead of every backlog slice waiting. */
  take(live: boolean): Promise<void> {
    return new Promise<void>((resolve) => {
      (live ? this.live : this.backlog).push(resolve);
      this.schedule();
    });
  }

  /** Lets every waiting slice run (at stop: they see `stopped` and return). */
  releaseAll(): void {
    for (const q of [this.live, this.backlog]) for (const r of q.splice(0)) r();
  }

  private schedule(): void {
    if (this.scheduled || (this.live.length === 0 && this.backlog.length === 0)) return;
    this.scheduled = true;
    // An immediate queued from inside an immediate runs in the next iteration, after the next poll phase.
    setImmediate(() => {
      this.scheduled = false;
      const next = this.live.shift() ?? this.backlog.shift();
      next?.();
      this.schedule();
    });
  }
}
