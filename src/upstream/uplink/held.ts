/**
 * Points held back for their timestamp (the clock rule of docs/sync.md): an entry with points stamped too far
 * ahead waits in `['h', e, seq]` (store/outbox.ts) until the clock reaches them; then those points go back to
 * the queue, and the pre-2000 ones stay held.
 */
import {
  HELD_RANGE,
  type HeldKey,
  type HeldRecord,
  decodeRefs,
  encodeQueueEntry,
  queueKey,
} from '../../store/outbox.js';
import { MAX_AHEAD_MS } from './clock.js';
import type { SyncPorts } from './ports.js';

export class HeldPoints {
  /** `released`: entries went back to the queue, older than the live boundary (the backlog lane starts over) */
  constructor(
    private readonly ports: SyncPorts,
    private readonly released: () => void,
  ) {}

  /** The points held, counted once at start. */
  load(): void {
    for (const { value } of this.ports.store.outbox.held.entries(HELD_RANGE))
      this.ports.accounting.counts.heldTotal += value.held;
  }

  /** Held entries whose future points the clock has reached go back to the queue (only those points are sent). */
  async release(): Promise<void> {
    const { store, accounting } = this.ports;
    const { outbox } = store;
    const maxTs = this.ports.now() + MAX_AHEAD_MS;
    const moves: Array<{ key: HeldKey; h: HeldRecord }> = [];
    for (const { key, value: h } of outbox.held.entries(HELD_RANGE)) {
      if (h.futureMin !== null && h.futureMin <= maxTs) moves.push({ key, h });
      if (moves.length >= 256) break;
    }
    if (moves.length === 0) return;
    await outbox.commit({
      held: moves.flatMap(({ key, h }) => [
        { key, value: null },
        ...(h.pre2000 > 0 ? [{ key, value: { ...h, futureMin: null, held: h.pre2000 } }] : []),
      ]),
      queue: moves.map(({ key: [, e, seq], h }) => ({
        key: queueKey(seq, e),
        value: encodeQueueEntry(h.above, h.refs),
      })),
    });
    for (const { key, h } of moves) {
      accounting.counts.heldTotal -= h.held - h.pre2000;
      accounting.noteQueued(key[1], decodeRefs(h.refs), 1);
    }
    this.released();
  }
}
