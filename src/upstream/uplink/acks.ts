/**
 * Acknowledgements: what a sent (or set-aside) batch changes in the outbox, written in batches.
 *
 * They are written with the next ingest batch (OutboxListener.committing: in its turn, so in its
 * transaction), or ACK_DELAY_MS after the first of them when no batch comes, all at once in one event-loop turn
 * (one transaction): sync adds next to no commits of its own (bytes written per point, BENCHMARKS.md). The
 * counters are written in the same transaction.
 *
 * Invariant: an entry whose removal or rewrite is queued and not committed is in `acking` until the commit, and
 * every scan of the queue skips it (else it would be sent, or counted, twice). A kill -9 re-sends what was acknowledged in
 * that last interval: with the requests in flight, the only duplicates (at-least-once, docs/sync.md).
 */
import type { Logger } from '../../log.js';
import {
  type HeldRecord,
  type Outbox,
  type QueueKey,
  type SetAsideRecord,
  heldKey,
  setAsideKey,
} from '../../store/outbox.js';
import type { SyncCounts } from './counts.js';

/** ms an acknowledgement waits to share its transaction */
const ACK_DELAY_MS = 250;

/** what one acknowledgement transaction does */
export interface AckOps {
  /** entries rewritten (partly sent): applied before `remove` */
  puts: Array<{ key: QueueKey; value: number[] }>;
  remove: Array<QueueKey>;
  held: Array<{ e: number; seq: number; value: HeldRecord }>;
  setAside: Array<{ key: QueueKey; value: SetAsideRecord }>;
}

export const noOps = (): AckOps => ({ puts: [], remove: [], held: [], setAside: [] });

const pendingKey = (k: QueueKey): string => `${k[1]}:${k[2]}`;

/** the outbox entries an acknowledgement removes or rewrites */
const touched = (ops: AckOps): QueueKey[] => [...ops.remove, ...ops.puts.map((p) => p.key)];

export class Acks {
  private pendingOps: AckOps = noOps();
  private ackTimer: NodeJS.Timeout | undefined;
  /**
   * outbox entries removed or rewritten (partly sent) by acknowledgements not committed yet: `${seq}:${e}` → how
   * many of those acknowledgements (an entry sent over two jobs is rewritten, then removed, maybe in two flushes)
   */
  private readonly acking = new Map<string, number>();
  private ackChain: Promise<void> = Promise.resolve();

  constructor(
    private readonly outbox: Outbox,
    private readonly counts: SyncCounts,
    private readonly log: Logger,
  ) {}

  /** whether the entry (seq, e) is being removed or rewritten by an acknowledgement not committed yet */
  has(seq: number, e: number): boolean {
    return this.acking.has(`${seq}:${e}`);
  }

  private hold(keys: readonly QueueKey[], by: 1 | -1): void {
    for (const k of keys) {
      const id = pendingKey(k);
      const n = (this.acking.get(id) ?? 0) + by;
      if (n > 0) this.acking.set(id, n);
      else this.acking.delete(id);
    }
  }

  /** whether acknowledgements wait for a transaction */
  get waiting(): boolean {
    return this.ackTimer !== undefined;
  }

  queue(ops: AckOps): void {
    this.pendingOps.puts.push(...ops.puts);
    this.pendingOps.remove.push(...ops.remove);
    this.pendingOps.held.push(...ops.held);
    this.pendingOps.setAside.push(...ops.setAside);
    this.hold(touched(ops), 1);
    this.ackTimer ??= setTimeout(() => this.flush(), ACK_DELAY_MS);
  }

  flush(): void {
    clearTimeout(this.ackTimer);
    this.ackTimer = undefined;
    const o = this.pendingOps;
    this.pendingOps = noOps();
    // one synchronous turn: one transaction (the ingest batch's, when it commits now)
    const last = this.outbox.write({
      queue: [...o.puts, ...o.remove.map((key) => ({ key, value: null }))],
      held: o.held.map((h) => ({ key: heldKey(h.e, h.seq), value: h.value })),
      setAside: o.setAside.map((x) => ({ key: setAsideKey(x.key), value: x.value })),
      counters: this.counts.persisted(),
    });
    const done = last
      .then(
        () => undefined,
        (err: unknown) => {
          this.log.error(`sync: recording an acknowledgement failed: ${(err as Error).message}`);
        },
      )
      .finally(() => {
        this.hold(touched(o), -1);
      });
    this.ackChain = this.ackChain.then(() => done);
  }

  /** Writes what is queued and resolves once every acknowledgement is committed (stop). */
  async close(): Promise<void> {
    this.flush();
    await this.ackChain;
  }
}
