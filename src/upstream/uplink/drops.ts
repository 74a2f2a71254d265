/**
 * Points dropped before they went up: when retention or the disk budget moved the raw horizon, queue entries
 * pointing below it are counted as dropped (also while the link is down), in bounded steps; what is left of an
 * entry stays queued.
 */
import {
  QUEUE_END,
  QUEUE_START,
  type QueueKey,
  type QueuePos,
  decodeQueueEntry,
  decodeRefs,
  encodeQueueEntry,
  queueFrom,
  refsMinTs,
} from '../../store/outbox.js';
import type { SyncPorts } from './ports.js';

/** how soon entries below the raw horizon whose fragments were still in the head are looked at again */
const DROP_RECHECK_MS = 2_000;

export class DropSweep {
  private lastHorizonChecked = Number.MIN_SAFE_INTEGER;
  private sweeping = false;
  private retryAt = Infinity;

  constructor(private readonly ports: SyncPorts) {}

  /** Starts a sweep when the raw horizon moved since the last one (or a retry is due). */
  check(): void {
    const horizon = this.ports.store.timeseries.rawHorizonTs;
    if (this.sweeping || (horizon <= this.lastHorizonChecked && !(this.retryAt <= this.ports.now()))) return;
    this.sweeping = true;
    void this.sweep(horizon)
      .then(
        (settled) => {
          // fragments below the horizon not compacted yet: their windows' fate is known once compaction ran
          this.retryAt = settled ? Infinity : this.ports.now() + DROP_RECHECK_MS;
        },
        (err: unknown) => {
          this.ports.log.error(`sync: counting dropped points failed: ${(err as Error).message}`);
          this.retryAt = this.ports.now() + DROP_RECHECK_MS;
        },
      )
      .finally(() => {
        this.sweeping = false;
      });
  }

  /** Resolves true when every entry below the horizon was settled (dropped or kept), false to look again later. */
  private async sweep(horizon: number): Promise<boolean> {
    const { store, accounting } = this.ports;
    const { outbox } = store;
    const { counts, devices, acks } = accounting;
    let settled = true;
    const windowMs = store.timeseries.windowMs;
    let start: QueuePos = QUEUE_START;
    for (;;) {
      const rewrites: Array<{ key: QueueKey; keep: number[] | null }> = [];
      let last: QueueKey | undefined;
      let n = 0;
      for (const { key: qk, value } of outbox.queue.entries({ start, end: QUEUE_END, limit: 1000 })) {
        last = qk;
        n++;
        const entry = decodeQueueEntry(value);
        if (refsMinTs(entry.refs) >= horizon) continue;
        const dev = devices.ofEntity(qk[2]);
        // a job has it in hand, or one has just counted it and its acknowledgement is not committed yet (counted
        // twice, the backlog went below what was pending)
        if ((dev !== undefined && (dev.busy[0] || dev.busy[1])) || acks.has(qk[1], qk[2])) {
          settled = false;
          continue;
        }
        const keep: number[] = [];
        let dropped = 0;
        let from = Infinity;
        let to = -Infinity;
        for (const r of entry.refs) {
          const below = Math.floor(r.lastTs / windowMs) * windowMs < horizon;
          const gone = below && !outbox.hasFragment(qk[2], qk[1], r);
          if (below && !gone) settled = false;
          if (gone) {
            dropped += r.n;
            from = Math.min(from, r.firstTs);
            to = Math.max(to, r.lastTs);
          } else keep.push(r.k, r.firstTs, r.lastTs, r.n);
        }
        if (dropped === 0) continue;
        counts.dropped(dropped, from, to);
        accounting.noteQueued(qk[2], entry.refs, -1);
        if (keep.length > 0) accounting.noteQueued(qk[2], decodeRefs(keep), 1);
        rewrites.push({ key: qk, keep: keep.length > 0 ? encodeQueueEntry(entry.fromTs, keep) : null });
      }
      if (rewrites.length > 0) {
        await outbox.commit({
          queue: rewrites.map((r) => ({ key: r.key, value: r.keep })),
          counters: counts.persisted(),
        });
      }
      if (last === undefined || n < 1000 || this.ports.jobs.stopped()) break;
      start = queueFrom(last[1], last[2] + 1);
      await new Promise<void>((r) => setImmediate(r));
    }
    this.lastHorizonChecked = horizon;
    return settled;
  }
}
