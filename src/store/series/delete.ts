/**
 * Deletes: a range of keys removed from chunks (their rollups rebuilt) and head fragments window by window,
 * in transactions of about stepBudgetMs, then the latest values as asked (TB's deleteLatest, rewriteLatest).
 */
import { performance } from 'node:perf_hooks';
import type { TsKv } from '../../model/kv.js';
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import { decodeStamped, encodeStamped, readOrderedI64, seriesKey } from '../encoding/codec.js';
import type { Dictionary } from '../encoding/dict.js';
import { blockCount, decodePoints, encodePoints } from '../encoding/gorilla.js';
import type { StoreEnv } from '../env.js';
import type { RollupStore } from '../rollups/store.js';
import { fragmentPoints, headFragments, windowKey, windowStart } from './chunks.js';
import type { LogApplier } from './apply.js';
import type { HeadWriter } from './head.js';
import type { DeleteRequest, RangeQuery } from './interface.js';
import type { ReadCache } from './read-cache.js';

/** What a delete needs of the rest of the store besides LMDB. */
export interface DeleterPorts {
  readonly cache: Pick<ReadCache, 'writeChunks' | 'clear'>;
  readonly rollups: Pick<RollupStore, 'batch' | 'rebuildWindow'>;
  /** the latest ts kept per series */
  readonly head: Pick<HeadWriter, 'forgetLatestTs' | 'setLatestTs'>;
  /** writes what is queued (group commit), so the delete covers every earlier write */
  readonly flushPending: () => void;
  /** the log, when writes are acknowledged from it: what it holds goes into LMDB before the delete */
  readonly log: Pick<LogApplier, 'logIdle' | 'applyLogged'> | undefined;
  /** raw points of series (e, k), as reads see them */
  readonly seriesRange: (e: EntityIdx, k: KeyIdx, q: RangeQuery) => IterableIterator<TsKv>;
}

export class Deleter {
  constructor(
    private readonly env: StoreEnv,
    private readonly dict: Dictionary,
    private readonly windowMs: number,
    /** ms one transaction may run before yielding the event loop */
    private readonly stepBudgetMs: number,
    private readonly ports: DeleterPorts,
  ) {}

  /**
   * Removes [startTs, endTs) of the keys from chunks (rebuilding their rollups) and head fragments, then their
   * latest values as asked. A range of months is done window by window in transactions of about
   * `stepBudgetMs` each (a month of one key is ~150 ms of decoding and rollup rebuilding here), so a large
   * delete does not hold the event loop, and with it every device's acknowledgement, for seconds; the promise
   * resolves after the last step, committed and flushed. Between steps readers may see part of the range
   * gone, and a point written meanwhile into a window the delete has not reached yet goes with it (a write
   * concurrent with a delete has no order in TB either). A crash between steps leaves the delete partial:
   * its request was not answered, and repeating it finishes it.
   */
  async delete(entityId: string, req: DeleteRequest): Promise<void> {
    // Points queued before this delete are written first, so the delete covers them (sequential semantics).
    this.ports.flushPending();
    const log = this.ports.log;
    if (log !== undefined) {
      await log.logIdle();
      log.applyLogged();
    }
    const e = this.dict.entityIdx(entityId);
    if (e === undefined || req.endTs <= req.startTs) return;
    for (const name of req.keys) {
      const k = this.dict.keyIdx(name);
      if (k === undefined) continue;
      const cursor = { w: windowStart(req.startTs, this.windowMs) };
      let done = false;
      while (!done)
        done = await this.ports.cache.writeChunks(() =>
          this.ports.rollups.batch(() => this.deleteStep(e, k, req, cursor)),
        );
      if (req.deleteLatest) await this.env.root.transaction(() => this.dropLatest(e, k, req));
    }
    await this.env.flushed();
  }

  /**
   * Inside a transaction: deletes the range from the windows of series (e, k) from `cursor.w` on, one window
   * (its chunk and its fragments) at a time, until `stepBudgetMs` have passed. Returns true when done.
   */
  private deleteStep(e: EntityIdx, k: KeyIdx, req: DeleteRequest, cursor: { w: number }): boolean {
    const t0 = performance.now();
    this.ports.cache.clear();
    const W = this.windowMs;
    const inRange = (p: TsKv): boolean => p.ts >= req.startTs && p.ts < req.endTs;
    const end = windowKey(e, k, req.endTs);
    for (;;) {
      // the next window holding a chunk or a fragment of the series
      let w = Infinity;
      for (const db of [this.env.chunks, this.env.head]) {
        for (const key of db.getKeys({ start: windowKey(e, k, cursor.w), end, limit: 1 }))
          w = Math.min(w, windowStart(readOrderedI64(key as Buffer, 8), W));
      }
      if (w === Infinity) return true;
      const ck = windowKey(e, k, w);
      const chunk = this.env.chunks.get(ck);
      if (chunk !== undefined) {
        // a window inside the range goes whole, without decoding it
        const kept = w >= req.startTs && w + W <= req.endTs ? [] : decodePoints(chunk).filter((p) => !inRange(p));
        if (kept.length < blockCount(chunk)) {
          if (kept.length === 0) void this.env.chunks.remove(ck);
          else void this.env.chunks.put(ck, encodePoints(kept));
          this.ports.rollups.rebuildWindow(e, k, w, kept);
        }
      }
      for (const f of headFragments(this.env, e, k, w, w + W)) {
        const pts = fragmentPoints(f);
        const kept = pts.filter((p) => !inRange(p));
        if (kept.length === pts.length) continue;
        if (kept.length === 0 || f.key.length !== 24) void this.env.head.remove(f.key);
        else void this.env.head.put(f.key, encodePoints(kept));
      }
      cursor.w = w + W;
      if (performance.now() - t0 >= this.stepBudgetMs) return false;
    }
  }

  /** Inside a transaction: the latest value of series (e, k) goes when it lies in the range (then rewritten if asked). */
  private dropLatest(e: EntityIdx, k: KeyIdx, req: DeleteRequest): void {
    const sk = seriesKey(e, k);
    const cur = this.env.latest.get(sk);
    if (cur === undefined) return;
    const { ts } = decodeStamped(cur);
    if (ts < req.startTs || ts >= req.endTs) return;
    void this.env.latest.remove(sk);
    this.ports.head.forgetLatestTs(e, k);
    if (!req.rewriteLatest) return;
    for (const p of this.ports.seriesRange(e, k, {
      startTs: Number.MIN_SAFE_INTEGER,
      endTs: Number.MAX_SAFE_INTEGER,
      order: 'DESC',
      limit: 1,
    })) {
      void this.env.latest.put(sk, encodeStamped(p.ts, p.value));
      this.ports.head.setLatestTs(e, k, p.ts);
    }
  }
}
