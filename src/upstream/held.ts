/**
 * Points held back for their timestamp (the clock rule of docs/sync.md): an entry with points stamped too far
 * ahead waits in `['h', e, seq]` (store/outbox.ts) until the clock reaches them; then those points go back to
 * the queue, and the pre-2000 ones stay held.
 */
import { HELD_RANGE, type HeldKey, decodeRefs, encodeQueueEntry, queueKey } from '../store/outbox.js';
import { MAX_AHEAD_MS } from './clock.js';
import type { HeldRecord } from './encode.js';
import type { SyncPorts } from './ports.js';

export class HeldPoints {
  /** `released`: entries went back to the queue, older than the live boundary (the backlog lane starts over) */
  constructor(
    private readonly ports: SyncPorts,
    private readonly released: () => void,
  ) {}

  /** The points held, counted once at start. */
  load(): void {
    for (const { value } of this.ports.store.env.outbox.getRange(HELD_RANGE))
      this.ports.accounting.counts.heldTotal += (value as HeldRecord).held;
  }

  /** Held entries whose future points the clock has reached go back to the queue (only those points are sent). */
  async release(): Promise<void> {
    const { store, accounting } = this.ports;
    const { env } = store;
    const maxTs = this.ports.now() + MAX_AHEAD_MS;
    const moves: Array<{ key: HeldKey; h: HeldRecord }> = [];
    for (const { key, value } of env.outbox.getRange(HELD_RANGE)) {
      const h = value as HeldRecord;
      if (h.futureMin !== null && h.futureMin <= maxTs) moves.push({ key: key as HeldKey, h });
      if (moves.length >= 256) break;
    }
    if (moves.length === 0) return;
    await env.root.transaction(() => {
      for (const { key, h } of moves) {
        const [, e, seq] = key;
        void env.outbox.remove(key);
        void env.outbox.put(queueKey(seq, e), encodeQueueEntry(h.above, h.refs));
        if (h.pre2000 > 0) void env.outbox.put(key, { ...h, futureMin: null, held: h.pre2000 });
      }
    });
    for (const { key, h } of moves) {
      accounting.counts.heldTotal -= h.held - h.pre2000;
      accounting.noteQueued(key[1], decodeRefs(h.refs), 1);
    }
    this.released();
  }
}
