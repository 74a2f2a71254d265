/**
 * Compaction: head fragments of windows that ended at least headWindowMs ago are folded into one compressed
 * chunk per window, and the window's rollups rebuilt, in bounded steps driven by the background engine
 * (background/downsample.ts). The compactor owns what tells a sweep which series have a window due: the smallest
 * head firstTs per series, told of every fragment put (head.ts) and read from the head once at start.
 */
import { performance } from 'node:perf_hooks';
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import { prefixEnd, readOrderedI64, seriesKey } from '../encoding/codec.js';
import { blockCount, decodePoints, encodePoints } from '../encoding/gorilla.js';
import type { StoreEnv } from '../env.js';
import type { RollupStore } from '../rollups/store.js';
import { headFragments, mergeWindow, rawHorizonOf, windowKey, windowStart } from './chunks.js';
import type { CompactionCounters } from './options.js';
import type { ReadCache } from './read-cache.js';

export class Compactor {
  readonly counters: CompactionCounters = {
    compactedWindows: 0,
    compactedFragments: 0,
    droppedLatePoints: 0,
    rollupOnlyPoints: 0,
  };
  /**
   * Per series with head fragments, the smallest firstTs among them as far as this process knows: never
   * above the truth (every fragment put lowers it; compaction, deletes and purges leave it low, and the seek
   * that finds it stale corrects it). Read from the head once at start. It tells compaction which series
   * have a window due without a seek per series at every sweep: with 10,000 live series that scan held the
   * event loop 45-90 ms every second.
   */
  private readonly headFirstTs = new Map<EntityIdx, Map<KeyIdx, number>>();
  /** the series the compaction sweep in progress visits (due when it began), and its position; undefined: none */
  private dueSeries: Array<readonly [EntityIdx, KeyIdx]> | undefined;
  private duePos = 0;

  constructor(
    private readonly env: StoreEnv,
    private readonly windowMs: number,
    private readonly headWindowMs: number,
    private readonly rollups: Pick<RollupStore, 'batch' | 'hasFinestBuckets' | 'rebuildWindow'>,
    private readonly cache: Pick<ReadCache, 'writeChunks' | 'clear'>,
  ) {
    // one seek per series with head data, once
    let start: Buffer = Buffer.alloc(0);
    for (;;) {
      let found: Buffer | undefined;
      for (const key of env.head.getKeys({ start, limit: 1 })) found = key as Buffer;
      if (found === undefined) break;
      const e = found.readUInt32BE(0);
      const k = found.readUInt32BE(4);
      this.noteHeadFragment(e, k, readOrderedI64(found, 8));
      start = prefixEnd(seriesKey(e, k));
    }
  }

  /** Lowers series (e, k)'s smallest known head firstTs to `firstTs`. */
  noteHeadFragment(e: EntityIdx, k: KeyIdx, firstTs: number): void {
    let byKey = this.headFirstTs.get(e);
    if (byKey === undefined) this.headFirstTs.set(e, (byKey = new Map()));
    const cur = byKey.get(k);
    if (cur === undefined || firstTs < cur) byKey.set(k, firstTs);
  }

  /** Forgets the head firstTs kept of entity `e` (its data has been purged). */
  forgetEntity(e: EntityIdx): void {
    this.headFirstTs.delete(e);
  }

  /**
   * One bounded compaction step: folds the fragments of windows that ended at least `headWindowMs` before
   * `now` into their chunks, one window at a time, until `budgetMs` have passed. One transaction. Resolves
   * once committed, with the number of windows compacted, whether more are due, and the wall time spent
   * inside the transaction callback: the event-loop block of this step.
   */
  async compactStep(now: number, budgetMs: number): Promise<{ compacted: number; more: boolean; wallMs: number }> {
    // A fragment is due when its whole window ended at least headWindowMs ago: firstTs < this cutoff.
    const cutoff = windowStart(now - this.headWindowMs, this.windowMs);
    let compacted = 0;
    let more = false;
    let wallMs = 0;
    const horizon = rawHorizonOf(this.env);
    await this.cache.writeChunks(() => {
      const t0 = performance.now();
      try {
        this.rollups.batch(() => {
          for (;;) {
            const target = this.nextCompactable(cutoff);
            if (target === undefined) return;
            this.compactWindow(target.e, target.k, target.w, horizon);
            compacted++;
            if (performance.now() - t0 >= budgetMs) {
              more = true;
              return;
            }
          }
        });
      } finally {
        wallMs = performance.now() - t0;
      }
    });
    return { compacted, more, wallMs };
  }

  /**
   * The next window of the sweep in progress with a fragment whose firstTs < cutoff; a new sweep starts with the
   * series that headFirstTs says have one. Undefined when the sweep is over.
   */
  private nextCompactable(cutoff: number): { e: EntityIdx; k: KeyIdx; w: number } | undefined {
    if (this.dueSeries === undefined) {
      this.dueSeries = [];
      this.duePos = 0;
      for (const [e, byKey] of this.headFirstTs)
        for (const [k, ts] of byKey) if (ts < cutoff) this.dueSeries.push([e, k]);
    }
    while (this.duePos < this.dueSeries.length) {
      const [e, k] = this.dueSeries[this.duePos] as readonly [EntityIdx, KeyIdx];
      // the series' first fragment as it is now (compaction of its previous window removed some)
      const sk = seriesKey(e, k);
      let firstTs: number | undefined;
      for (const key of this.env.head.getKeys({ start: sk, end: prefixEnd(sk), limit: 1 }))
        firstTs = readOrderedI64(key as Buffer, 8);
      const byKey = this.headFirstTs.get(e);
      if (firstTs === undefined) byKey?.delete(k);
      else byKey?.set(k, firstTs);
      if (firstTs !== undefined && firstTs < cutoff) return { e, k, w: windowStart(firstTs, this.windowMs) };
      this.duePos++;
    }
    this.dueSeries = undefined;
    return undefined;
  }

  private compactWindow(e: EntityIdx, k: KeyIdx, w: number, rawHorizon: number): void {
    this.cache.clear();
    const frags = headFragments(this.env, e, k, w, w + this.windowMs);
    for (const f of frags) void this.env.head.remove(f.key);
    this.counters.compactedFragments += frags.length;
    if (w < rawHorizon) {
      // Raw retention already dropped this window. Rollups built from its dropped chunk are final (a late point
      // cannot be merged exactly: it might overwrite a dropped one), so it is dropped and counted; a window that
      // never had data gets rollups from the late points alone (a backfill older than the raw retention).
      if (this.rollups.hasFinestBuckets(e, k, w, w + this.windowMs)) {
        for (const f of frags) this.counters.droppedLatePoints += f.key.length === 24 ? blockCount(f.value) : 1;
      } else {
        const points = mergeWindow(undefined, frags);
        this.rollups.rebuildWindow(e, k, w, points);
        this.counters.rollupOnlyPoints += points.length;
      }
      return;
    }
    const ck = windowKey(e, k, w);
    const old = this.env.chunks.get(ck);
    const merged = mergeWindow(old === undefined ? undefined : decodePoints(old), frags);
    if (merged.length === 0) void this.env.chunks.remove(ck);
    else void this.env.chunks.put(ck, encodePoints(merged));
    this.rollups.rebuildWindow(e, k, w, merged);
    this.counters.compactedWindows++;
  }
}
