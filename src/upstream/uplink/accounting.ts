/**
 * What the backlog's bookkeeping is, for everything that moves entries: the persisted counters and totals
 * (counts.ts), each device's backlog (devices.ts), and the acknowledgements waiting for their transaction
 * (acks.ts).
 */
import type { FragmentRef } from '../../store/outbox.js';
import type { Acks } from './acks.js';
import type { SyncCounts } from './counts.js';
import type { Devices } from './devices.js';

export class Accounting {
  constructor(
    readonly counts: SyncCounts,
    readonly devices: Devices,
    readonly acks: Acks,
  ) {}

  /** An outbox entry of entity e entered (1) or left (-1) the backlog: the counts and its device's backlog. */
  noteQueued(e: number, refs: readonly FragmentRef[], sign: 1 | -1): void {
    const n = this.counts.queued(refs, sign);
    const dev = this.devices.ofEntity(e);
    if (dev !== undefined) dev.backlog += n * sign;
  }
}
