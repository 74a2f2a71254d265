/**
 * Compaction: head fragments of windows that ended at least headWindowMs ago are folded into one compressed
 * chunk per window, and the window's rollups rebuilt, in bounded steps driven by the background engine
 * (background/downsample.ts). headFirstTs (state.ts) tells a sweep which series have a window due.
 */
import { performance } from 'node:perf_hooks';
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import { prefixEnd, readOrderedI64, seriesKey } from '../encoding/codec.js';
import { blockCount, decodePoints, encodePoints } from '../encoding/gorilla.js';
import { headFragments, mergeWindow, windowKey, windowStart } from './chunks.js';
import { SeriesRead } from './read.js';

export abstract class SeriesCompaction extends SeriesRead {
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
    const horizon = this.rawHorizonTs;
    await this.writeChunks(() => {
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
    this.clearReadCaches();
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
