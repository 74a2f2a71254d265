/**
 * History for a new upstream (docs/sync.md "History from before sync"): when `sync.url` names an upstream these
 * counters never spoke to (sync configured for the first time, or pointed elsewhere), the outbox's queue is
 * replaced by entries covering every telemetry point of every device the store still holds, so what was written
 * before sync was set goes up too. The entries sit below every batch's seq (QUEUE_START..0), oldest window first
 * across devices, so the backlog lane drains them behind live data, paced like any backlog, and `backlogPoints`
 * counts them until they are acknowledged.
 *
 * An entry is pointers, as any outbox entry: per device, a span of chunk windows (at most a day, and about
 * SPAN_POINTS points unless one window holds more), one ref per key over the whole windows. Its seq names no head
 * fragment, so the points are read back through the chunk path (chunk and fragments merged, outbox.ts `RefSource`).
 * Counts come from the blocks' headers (no decoding); a point a fragment rewrote on its chunk's ts counts twice.
 * What the SD card pays, once: one key and four numbers per key per span (docs/sync.md has a measured figure:
 * about 1 KiB of outbox per device-day of 5 keys every 10 s). Memory: one entity's windows at a time.
 */
import type { EntityIdx, KeyIdx } from '../../store/encoding/codec.js';
import {
  HELD_RANGE,
  type Outbox,
  QUEUE_START,
  backfillSeq,
  encodeQueueEntry,
  queueFrom,
  queueKey,
} from '../../store/outbox.js';

/** points an entry holds about at most: what one job reads back and encodes at once (a few MB) */
const SPAN_POINTS = 10_000;
/** ms; the longest span of one entry, which also bounds what retention can take from an entry unnoticed */
const SPAN_MS = 86_400_000;

export interface BackfillResult {
  readonly entries: number;
  readonly points: number;
  /** queue entries and held records of the upstream before, replaced (their points are among the above) */
  readonly replaced: number;
}

/**
 * Replaces the queue below `boundary` (and the held records) with entries covering the store's telemetry of
 * every entity `isDevice` accepts. Idempotent: the entries' keys follow from the data, so a run cut short by a
 * stop is redone whole at the next start (the caller records that it ran, with the upstream's url, after).
 */
export async function backfill(
  outbox: Outbox,
  windowMs: number,
  boundary: number,
  isDevice: (e: EntityIdx) => boolean,
  stopped: () => boolean,
): Promise<BackfillResult> {
  const turn = (): Promise<void> => new Promise((r) => setImmediate(r));
  let replaced = 0;
  // in turns of 5000 removals, each written with the next commit
  const removeAll = async <K>(keys: Iterable<K>, write: (batch: K[]) => Promise<void>): Promise<void> => {
    let batch: K[] = [];
    let last: Promise<void> | undefined;
    for (const key of keys) {
      batch.push(key);
      if (++replaced % 5000 === 0) {
        last = write(batch);
        batch = [];
        await turn();
      }
    }
    if (batch.length > 0) last = write(batch);
    await last;
  };
  await removeAll(outbox.queue.keys({ start: QUEUE_START, end: queueFrom(boundary) }), (b) =>
    outbox.write({ queue: b.map((key) => ({ key, value: null })) }),
  );
  await removeAll(outbox.held.keys(HELD_RANGE), (b) => outbox.write({ held: b.map((key) => ({ key, value: null })) }));
  let entries = 0;
  let points = 0;
  for (let e = outbox.nextStoredEntity(0); e !== undefined && !stopped(); e = outbox.nextStoredEntity(e + 1)) {
    if (!isDevice(e)) continue;
    const windows = outbox.storedWindows(e, windowMs, boundary);
    let span = new Map<KeyIdx, { first: number; last: number; n: number }>();
    let spanStart = 0;
    let spanPoints = 0;
    let last: Promise<void> | undefined;
    const emit = (): void => {
      if (span.size === 0) return;
      const flat: number[] = [];
      for (const [k, r] of span) flat.push(k, r.first, r.last, r.n);
      last = outbox.write({
        queue: [
          {
            key: queueKey(backfillSeq(spanStart, windowMs), e),
            value: encodeQueueEntry(Number.MIN_SAFE_INTEGER, flat),
          },
        ],
      });
      entries++;
      points += spanPoints;
      span = new Map();
      spanPoints = 0;
    };
    for (const [w, keys] of windows) {
      if (span.size > 0 && (spanPoints >= SPAN_POINTS || w + windowMs - spanStart > SPAN_MS)) emit();
      if (span.size === 0) spanStart = w;
      for (const [k, n] of keys) {
        const r = span.get(k);
        if (r === undefined) span.set(k, { first: w, last: w + windowMs - 1, n });
        else {
          r.last = w + windowMs - 1;
          r.n += n;
        }
        spanPoints += n;
      }
    }
    emit();
    await last;
    await turn();
  }
  return { entries, points, replaced };
}
