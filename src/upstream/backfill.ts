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
 * fragment, so the points are read back through the chunk path (chunk and fragments merged, outbox.ts readRef).
 * Counts come from the blocks' headers (no decoding); a point a fragment rewrote on its chunk's ts counts twice.
 * What the SD card pays, once: one key and four numbers per key per span (docs/sync.md has a measured figure:
 * about 1 KiB of outbox per device-day of 5 keys every 10 s). Memory: one entity's windows at a time.
 */
import type { EntityIdx, KeyIdx } from '../store/encoding/codec.js';
import { readOrderedI64 } from '../store/encoding/codec.js';
import { blockCount } from '../store/encoding/gorilla.js';
import type { StoreEnv } from '../store/env.js';
import { HELD_RANGE, QUEUE_START, backfillSeq, encodeQueueEntry, queueFrom } from '../store/outbox.js';
import { windowStart } from '../store/series/chunks.js';

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

const entityPrefix = (e: number): Buffer => {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(e, 0);
  return b;
};

/** The least entity index at or after `e` holding chunks or head fragments, or undefined. */
function nextEntity(env: StoreEnv, e: number): number | undefined {
  let best: number | undefined;
  for (const db of [env.chunks, env.head]) {
    for (const key of db.getKeys({ start: entityPrefix(e), limit: 1 })) {
      const found = (key as Buffer).readUInt32BE(0);
      if (best === undefined || found < best) best = found;
    }
  }
  return best;
}

/**
 * Per chunk window of entity e: its keys and their point counts (chunk + fragments), ascending by window. Read
 * in one synchronous turn: one snapshot, so a window compaction folds meanwhile is counted once. Fragments of
 * seq `boundary` and up were written since the sync started: their own entries carry them.
 */
function entityWindows(
  env: StoreEnv,
  e: EntityIdx,
  windowMs: number,
  boundary: number,
): Map<number, Map<KeyIdx, number>> {
  const windows = new Map<number, Map<KeyIdx, number>>();
  const add = (k: KeyIdx, ts: number, n: number): void => {
    const w = windowStart(ts, windowMs);
    let keys = windows.get(w);
    if (keys === undefined) windows.set(w, (keys = new Map()));
    keys.set(k, (keys.get(k) ?? 0) + n);
  };
  const range = { start: entityPrefix(e), end: entityPrefix(e + 1) };
  for (const { key, value } of env.chunks.getRange(range)) {
    const kb = key as Buffer;
    add(kb.readUInt32BE(4), readOrderedI64(kb, 8), blockCount(value as Buffer));
  }
  for (const { key, value } of env.head.getRange(range)) {
    const kb = key as Buffer;
    if (kb.length >= 24 && readOrderedI64(kb, 16) >= boundary) continue;
    // a 16-byte key is a legacy fragment of one value
    add(kb.readUInt32BE(4), readOrderedI64(kb, 8), kb.length === 16 ? 1 : blockCount(value as Buffer));
  }
  return new Map([...windows].sort((a, b) => a[0] - b[0]));
}

/**
 * Replaces the queue below `boundary` (and the held records) with entries covering the store's telemetry of
 * every entity `isDevice` accepts. Idempotent: the entries' keys follow from the data, so a run cut short by a
 * stop is redone whole at the next start (the caller records that it ran, with the upstream's url, after).
 */
export async function backfill(
  env: StoreEnv,
  windowMs: number,
  boundary: number,
  isDevice: (e: EntityIdx) => boolean,
  stopped: () => boolean,
): Promise<BackfillResult> {
  const turn = (): Promise<void> => new Promise((r) => setImmediate(r));
  let replaced = 0;
  for (const range of [{ start: QUEUE_START, end: queueFrom(boundary) }, HELD_RANGE]) {
    let last: Promise<boolean> | undefined;
    for (const key of env.outbox.getKeys(range)) {
      last = env.outbox.remove(key);
      if (++replaced % 5000 === 0) await turn();
    }
    await last;
  }
  let entries = 0;
  let points = 0;
  for (let e = nextEntity(env, 0); e !== undefined && !stopped(); e = nextEntity(env, e + 1)) {
    if (!isDevice(e)) continue;
    const windows = entityWindows(env, e, windowMs, boundary);
    let span = new Map<KeyIdx, { first: number; last: number; n: number }>();
    let spanStart = 0;
    let spanPoints = 0;
    let last: Promise<boolean> | undefined;
    const emit = (): void => {
      if (span.size === 0) return;
      const flat: number[] = [];
      for (const [k, r] of span) flat.push(k, r.first, r.last, r.n);
      last = env.outbox.put(
        ['q', backfillSeq(spanStart, windowMs), e],
        encodeQueueEntry(Number.MIN_SAFE_INTEGER, flat),
      );
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
