/**
 * What the sync status counts: the persisted counters (sent, dropped, set aside, not synced, the last success
 * and error) and the in-memory counts of what is pending in the outbox.
 *
 * Invariant: `backlogTotal` and the hour buckets behind `oldestPendingTs` change together, through `queued`
 * only (an entry recorded: +, removed, sent, set aside, dropped or discarded: -), so the oldest pending point
 * is always one that is still counted. A device's own backlog (devices.ts `Dev.backlog`) moves with them.
 */
import type { Logger } from '../../log.js';
import { type FragmentRef, type Outbox, type SyncCounters, refsMinTs, refsPoints } from '../../store/outbox.js';

const HOUR = 3_600_000;
const DROP_LOG_MS = 60_000;

export class SyncCounts {
  /** persisted with every acknowledgement (see `persisted`) */
  readonly counters: SyncCounters;
  /** points pending in the outbox (not the log's: lanes/log.ts counts those) */
  private backlogTotal = 0;
  /** hour bucket → pending points whose batch's first ts falls in it, and the smallest such ts */
  private readonly oldest = new Map<number, { n: number; min: number }>();
  /** points held for their timestamp (outbox ['h', ..] records) */
  heldTotal = 0;
  /**
   * The last error of the daemon's previous run, kept apart: after a restart a healthy sync would otherwise show
   * it as its current error (docs/sync.md "Status"). Not persisted again: it is shown for this run only.
   */
  readonly previousRunError: { readonly message: string; readonly ts: number | null } | null;
  private lastDropLog = -Infinity;
  private droppedSinceLog = 0;
  /**
   * sync.url names an upstream these counters never spoke to (no counters yet: sync was never on; or another
   * url): what the store holds has not gone there (src/upstream/uplink/backfill.ts). Counters saved without a url (an
   * older version) are taken as this upstream's.
   */
  readonly newUpstream: boolean;

  /**
   * `unappliedSent`: points sent from the write-ahead log whose records are not in LMDB yet (OutboxRecorder
   * .sentPointsUnapplied). The stored `sent` leaves them out and the apply that puts their records into LMDB
   * counts them in its own transaction, so a kill -9 neither loses nor doubles them: after a restart the replay's
   * marks bring them back, or the points are sent (and counted) again.
   */
  constructor(
    outbox: Outbox,
    private readonly log: Logger,
    private readonly now: () => number,
    url: string,
    private readonly unappliedSent: () => number,
  ) {
    const saved = outbox.counters();
    this.counters = {
      sent: 0,
      dropped: 0,
      droppedFrom: null,
      droppedTo: null,
      setAside: 0,
      notSynced: 0,
      lastSuccessTs: null,
      lastError: null,
      ...saved,
      url,
    };
    this.counters.sent += unappliedSent();
    // an error of the upstream sync.url named before says nothing of this one
    const previous = saved?.url === url ? this.counters.lastError : null;
    this.previousRunError = previous === null ? null : { message: previous, ts: this.counters.lastErrorTs ?? null };
    this.counters.lastError = null;
    this.counters.lastErrorTs = null;
    this.newUpstream = saved === undefined || (saved.url !== undefined && saved.url !== url);
  }

  /** A failure to show as the sync's last error, with its time. */
  error(message: string): void {
    this.counters.lastError = message;
    this.counters.lastErrorTs = this.now();
  }

  /** The counters as they are written: `sent` without the points whose records are not in LMDB yet. */
  persisted(): SyncCounters {
    return { ...this.counters, sent: this.counters.sent - this.unappliedSent() };
  }

  /** `points` of a batch whose first ts is `minTs` entered (sign 1) or left (-1) the outbox. */
  queuedFlat(points: number, minTs: number, sign: 1 | -1): void {
    const n = points * sign;
    this.backlogTotal += n;
    const b = Math.floor(minTs / HOUR);
    const slot = this.oldest.get(b);
    if (sign > 0) {
      if (slot === undefined) this.oldest.set(b, { n, min: minTs });
      else {
        slot.n += n;
        slot.min = Math.min(slot.min, minTs);
      }
    } else if (slot !== undefined) {
      slot.n += n;
      if (slot.n <= 0) this.oldest.delete(b);
    }
  }

  /** An entry's refs entered (1) or left (-1) the outbox; returns its points. */
  queued(refs: readonly FragmentRef[], sign: 1 | -1): number {
    const n = refsPoints(refs);
    this.queuedFlat(n, refsMinTs(refs), sign);
    return n;
  }

  get backlog(): number {
    return Math.max(0, this.backlogTotal);
  }

  get oldestPendingTs(): number | null {
    let oldest: number | null = null;
    for (const s of this.oldest.values()) if (s.n > 0 && (oldest === null || s.min < oldest)) oldest = s.min;
    return oldest;
  }

  dropped(n: number, from: number, to: number): void {
    const c = this.counters;
    c.dropped += n;
    c.droppedFrom = c.droppedFrom === null ? from : Math.min(c.droppedFrom, from);
    c.droppedTo = c.droppedTo === null ? to : Math.max(c.droppedTo, to);
    this.droppedSinceLog += n;
    const now = this.now();
    if (now - this.lastDropLog >= DROP_LOG_MS) {
      this.log.warn(
        `sync: ${this.droppedSinceLog} points removed by retention or the disk budget before they were sent ` +
          `(${new Date(from).toISOString()} .. ${new Date(to).toISOString()}; ${c.dropped} in all)`,
      );
      this.lastDropLog = now;
      this.droppedSinceLog = 0;
    }
  }
}
