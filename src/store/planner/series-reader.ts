/**
 * The planner's per-query reader of one series (see planner.ts for how a request bucket is cut into pieces):
 * dirty windows, rollup blocks and chunks read once per query, the boundary moves of COUNT/SUM/AVG, and the
 * raw, dirty and tier pieces themselves.
 */
import type { TsKv } from '../../model/kv.js';
import {
  type AggFn,
  type BucketAgg,
  type MergeFields,
  addLong,
  addNumber,
  addPartial,
  addPoint,
  addScaledExactly,
  clearAgg,
  emptyAgg,
  fieldsFor,
  mergeInto,
  removeAgg,
  subtractable,
} from '../rollups/aggregate.js';
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import { readOrderedI64 } from '../encoding/codec.js';
import type { BlockColumns } from '../encoding/gorilla.js';
import {
  type DecodedBlock,
  SUM_COUNT,
  SUM_DOUBLE_COUNT,
  SUM_LONG_COUNT,
  SUM_LONG_SUM,
  SUM_PARTIALS,
  SUM_PARTIALS_AT,
} from '../rollups/decoded-block.js';
import { type RollupBucket, type TierSpec, rollupKey } from '../rollups/store.js';
import { windowKey, windowStart } from '../series/chunks.js';
import { EdgeChunk } from './edge-chunk.js';
import { alignUp, aligned, nearestMultiple } from './align.js';
import { type CachedBlock, coverage, seek, subtractableBucket } from './blocks.js';
import type { PlannedStore } from './planned-store.js';
import { type PlanStats, noStats } from './stats.js';

/** Per-query access to one series: dirty windows, cached rollup blocks and chunk buffers. */
export class SeriesReader {
  readonly stats: PlanStats = noStats();
  private readonly W: number;
  private readonly tiers: readonly TierSpec[];
  private readonly rawHorizon: number;
  private readonly tierHorizon: number[];
  /** the highest horizon: from here up, raw chunks and every tier are whole */
  private readonly floor: number;
  /** byBoundaries anchors boundaries on this tier's grid (-1: byBoundaries is off) */
  private readonly top: number;
  /** the last two corrections computed by `correction`, newest first */
  private readonly corrections: Array<{ x: number; anchor: number; state: BucketAgg; ok: boolean } | undefined> = [];
  /** ascending starts of windows with head fragments in the query range */
  private readonly dirty: number[] = [];
  /** the head fragment keys of each window of `dirty` (same index), as read once by the constructor */
  private readonly dirtyFragments: Buffer[][] = [];
  private dirtyPos = 0;
  private readonly blockCache: Array<CachedBlock | undefined> = [];
  /** the chunk of the window last read, for raw edges */
  private readonly edges: EdgeChunk;
  private dirtyCache: { w: number; points: TsKv[] } | undefined;
  /** a dirty window's fragments as columns when no merge is needed (see `plainFragments`) */
  private fragmentCache: { w: number; cols: BlockColumns[] | undefined } | undefined;
  /** the last raw span read by rawSpan, [spanFrom, spanTo), with its counts and sums (reused: no state per span) */
  private spanFrom = NaN;
  private spanTo = NaN;
  private readonly spanAgg = emptyAgg();

  /**
   * COUNT, SUM or AVG: a raw piece covering most of a finest-tier bucket may be answered as the bucket minus
   * the raw points of the rest (removePoint: exact for counts and sums only)
   */
  private readonly subtract: boolean;
  /** the state fields merges maintain: only those `fn` finalizes from (all when fn is not given) */
  private readonly fields: MergeFields;

  constructor(
    private readonly store: PlannedStore,
    private readonly e: EntityIdx,
    private readonly k: KeyIdx,
    private readonly startTs: number,
    private readonly endTs: number,
    fn: AggFn | undefined,
    boundaryInterval: number | undefined,
  ) {
    this.subtract = subtractable(fn);
    this.fields = fieldsFor(fn);
    this.W = store.windowMs;
    this.edges = new EdgeChunk(store, e, k);
    this.tiers = store.tiers;
    this.rawHorizon = store.rawHorizonTs;
    this.tierHorizon = store.tierHorizonsTs();
    this.floor = Math.max(this.rawHorizon, ...this.tierHorizon);
    // the coarsest tier no wider than the request interval; byBoundaries needs the finest to divide the window
    this.top = -1;
    if (this.subtract && boundaryInterval !== undefined && (this.tiers[0] as TierSpec).bucketMs <= this.W) {
      while (this.top + 1 < this.tiers.length && (this.tiers[this.top + 1] as TierSpec).bucketMs <= boundaryInterval)
        this.top++;
    }
    const lo = windowStart(startTs, this.W);
    // One range read of keys for the whole query: a range per window costs more than the head's few windows
    // (lmdb-js cursor set-up), and values are read only for fragments not decoded yet (fragmentColumns).
    for (const key of store.env.head.getKeys({ start: windowKey(e, k, lo), end: windowKey(e, k, endTs) })) {
      const w = windowStart(readOrderedI64(key as Buffer, 8), this.W);
      if (this.dirty[this.dirty.length - 1] !== w) {
        this.dirty.push(w);
        this.dirtyFragments.push([]);
      }
      (this.dirtyFragments[this.dirtyFragments.length - 1] as Buffer[]).push(key as Buffer);
    }
  }

  /**
   * [lo, hi) covering every stored datum of the series in the query range, window/block granular, except that
   * the scans stop as soon as lo ≤ startTs (or hi ≥ endTs) is known: the caller only trims buckets before lo and
   * after hi. A dense series (the usual dashboard) costs one chunk scan and no more, not two per db and tier.
   */
  extent(): { lo: number; hi: number } | undefined {
    const { env } = this.store;
    let lo = Infinity;
    let hi = -Infinity;
    if (this.dirty.length > 0) {
      lo = this.dirty[0] as number;
      hi = (this.dirty[this.dirty.length - 1] as number) + this.W;
    }
    // `tsOff` is also the length of the series prefix: a reverse range ending at the bare prefix (exclusive)
    // includes `from` itself.
    const scan = (db: typeof env.chunks, from: Buffer, to: Buffer, tsOff: number, span: number): void => {
      if (lo > this.startTs)
        for (const key of db.getKeys({ start: from, end: to, limit: 1 }))
          lo = Math.min(lo, readOrderedI64(key as Buffer, tsOff));
      if (hi < this.endTs)
        for (const key of db.getKeys({ start: to, end: from.subarray(0, tsOff), reverse: true, limit: 1 }))
          hi = Math.max(hi, readOrderedI64(key as Buffer, tsOff) + span);
    };
    const w0 = windowStart(this.startTs, this.W);
    scan(env.chunks, windowKey(this.e, this.k, w0), windowKey(this.e, this.k, this.endTs), 8, this.W);
    for (const t of this.tiers) {
      if (lo <= this.startTs && hi >= this.endTs) break;
      const b0 = windowStart(this.startTs, t.blockMs);
      scan(
        env.rollups,
        rollupKey(t.index, this.e, this.k, b0),
        rollupKey(t.index, this.e, this.k, this.endTs),
        9,
        t.blockMs,
      );
    }
    return lo < hi ? { lo, hi } : undefined;
  }

  /** The first dirty window that ends after `c` (the pointer only moves forward: pieces are visited in order). */
  private nextDirty(c: number): number | undefined {
    while (this.dirtyPos < this.dirty.length && (this.dirty[this.dirtyPos] as number) + this.W <= c) this.dirtyPos++;
    return this.dirty[this.dirtyPos];
  }

  /** The merged state of every point in [bs, be) (count 0 when there is none). */
  aggregate(bs: number, be: number): BucketAgg {
    // One fresh state per request bucket, merged into in place: cached rollup buckets are never modified.
    const acc = emptyAgg();
    if (this.top >= 0) {
      if (this.byBoundaries(bs, be, acc)) {
        this.stats.boundaryBuckets++;
        return acc;
      }
      clearAgg(acc);
    }
    let c = bs;
    while (c < be) {
      const d = this.nextDirty(c);
      const inDirty = d !== undefined && d <= c;
      let next: number | undefined;
      if (this.subtract && !inDirty) next = this.overhang(c, be, acc);
      if (!inDirty && next === undefined) {
        for (let ti = this.tiers.length - 1; ti >= 0; ti--) {
          const tier = this.tiers[ti] as TierSpec;
          const T = tier.bucketMs;
          if (c + T > be || !aligned(c, T) || c < (this.tierHorizon[ti] as number)) continue;
          let end = c + Math.floor((be - c) / T) * T;
          if (d !== undefined) end = Math.min(end, windowStart(d, T));
          // Stop where the next coarser tier aligns, so it takes over from there.
          const coarser = this.tiers[ti + 1];
          if (coarser !== undefined) end = Math.min(end, windowStart(c, coarser.bucketMs) + coarser.bucketMs);
          if (end <= c) continue;
          this.tierBuckets(tier, c, end, acc);
          next = end;
          break;
        }
      }
      if (next === undefined) {
        const finest = this.tiers[0] as TierSpec;
        let end = inDirty ? (d as number) + this.W : windowStart(c, finest.bucketMs) + finest.bucketMs;
        end = Math.min(end, be, windowStart(c, this.W) + this.W);
        if (c < this.rawHorizon && !inDirty) this.approximate(c, end, acc);
        else if (inDirty) this.dirtyPiece(c, end, acc);
        else this.rawPiece(c, end, acc);
        next = end;
      }
      c = next;
    }
    return acc;
  }

  /**
   * COUNT/SUM/AVG only, the usual request bucket: S(x) being the state of every point before x, the bucket is
   * S(be) - S(bs). Each boundary x moves to an anchor X(x) on the grid of the coarsest tier no wider than the
   * request interval, and S(x) = S(X) + C(x): the correction C is the raw points between x and the finest tier's
   * nearest boundary, then the finest tier's buckets between that and the next tier's nearest boundary, and so on
   * up, each added or taken out by which side it lies on. So the bucket is the tier buckets of [X(bs), X(be))
   * plus C(be) minus C(bs). Every step moves at most half a bucket of the tier below, and neighbouring request
   * buckets share a boundary, so its correction is computed once. Returns false, leaving `acc` to be cleared,
   * when a dirty window, a horizon or a non-finite double (which cannot be taken out) is in the way; `aggregate`
   * then cuts the bucket piece by piece.
   */
  private byBoundaries(bs: number, be: number, acc: BucketAgg): boolean {
    const from = this.correction(bs);
    if (from === undefined) return false;
    const fromAnchor = from.anchor;
    const fromState = from.state;
    const to = this.correction(be);
    if (to === undefined) return false;
    // the tier buckets of [X(bs), X(be)), coarsest first
    let c = fromAnchor;
    const B = to.anchor;
    if (c < B && this.anyDirty(c, B)) return false;
    // aggregate()'s tier loop without its horizon and dirty-window cuts (checked above): a shared helper with
    // them measured 5-12% slower on the month query
    while (c < B) {
      let ti = this.tiers.length - 1;
      // the anchors are multiples of tier `top`, so some tier fits
      while (
        ti > 0 &&
        (c + (this.tiers[ti] as TierSpec).bucketMs > B || !aligned(c, (this.tiers[ti] as TierSpec).bucketMs))
      )
        ti--;
      const tier = this.tiers[ti] as TierSpec;
      const T = tier.bucketMs;
      let end = c + Math.floor((B - c) / T) * T;
      // stop where the next coarser tier aligns, so it takes over from there
      const coarser = this.tiers[ti + 1];
      if (coarser !== undefined) end = Math.min(end, windowStart(c, coarser.bucketMs) + coarser.bucketMs);
      this.tierBuckets(tier, c, end, acc);
      c = end;
    }
    mergeInto(acc, to.state, 'sums');
    removeAgg(acc, fromState);
    return true;
  }

  /**
   * Boundary x's anchor X and correction C (see byBoundaries), or undefined when a dirty window or a horizon
   * lies between them, or a part of C holds a non-finite double. The last two results are kept: the correction
   * of a bucket's end is asked for again as the next bucket's start. The state is valid until the call after
   * next.
   */
  private correction(x: number): { anchor: number; state: BucketAgg } | undefined {
    const cached = this.corrections[0];
    if (cached !== undefined && cached.x === x) return cached.ok ? cached : undefined;
    const slot = this.corrections[1] ?? { x: NaN, anchor: NaN, state: emptyAgg(), ok: false };
    this.corrections[1] = cached;
    this.corrections[0] = slot;
    slot.x = x;
    slot.ok = false;
    const state = slot.state;
    clearAgg(state);
    // the anchors, level by level: lo..hi is what the correction spans
    const T0 = (this.tiers[0] as TierSpec).bucketMs;
    let X = nearestMultiple(x, T0);
    let lo = Math.min(x, X);
    let hi = Math.max(x, X);
    for (let ti = 1; ti <= this.top; ti++) {
      X = nearestMultiple(X, (this.tiers[ti] as TierSpec).bucketMs);
      lo = Math.min(lo, X);
      hi = Math.max(hi, X);
    }
    if (lo < this.floor || (lo < hi && this.anyDirty(lo, hi))) return undefined;
    // raw points between x and the finest tier's nearest boundary
    let at = nearestMultiple(x, T0);
    if (at !== x) {
      const a = Math.min(x, at);
      const b = Math.max(x, at);
      const cols = this.edges.before(a, b);
      if (cols !== undefined) {
        const span = this.span(cols, a, b);
        if (span.doubleSpecial !== 0) return undefined;
        if (at < x) mergeInto(state, span, 'sums');
        else removeAgg(state, span);
      }
    }
    // then each tier's buckets between its nearest boundary and the next tier's
    for (let ti = 1; ti <= this.top; ti++) {
      const finer = this.tiers[ti - 1] as TierSpec;
      const next = nearestMultiple(at, (this.tiers[ti] as TierSpec).bucketMs);
      if (
        next !== at &&
        !this.tierBuckets(finer, Math.min(at, next), Math.max(at, next), state, next < at ? 1 : -1, true)
      )
        return undefined;
      at = next;
    }
    slot.anchor = at;
    slot.ok = true;
    return slot;
  }

  /**
   * COUNT/SUM/AVG only: the piece from `c` to the next boundary of the second tier (T1, 1 h by default) as the
   * T1 bucket H around it minus the part of H before `c`, or, when H overhangs `be`, [c, be) as H minus the part
   * after `be`: whichever side holds fewer finest-tier (T0) buckets. TB anchors buckets at startTs, so every
   * request bucket starts and ends inside some H. Returns where the next piece starts, or undefined when the
   * ordinary left-to-right cut is cheaper or H cannot be used (not retained, dirty, a non-finite double).
   */
  private overhang(c: number, be: number, acc: BucketAgg): number | undefined {
    const t0 = this.tiers[0] as TierSpec;
    const t1 = this.tiers[1];
    if (t1 === undefined || t0.bucketMs > this.W) return undefined;
    const T0 = t0.bucketMs;
    const S = windowStart(c, t1.bucketMs);
    const E = S + t1.bucketMs;
    let keepTo: number;
    let remFrom: number;
    let remTo: number;
    if (S < c) {
      if (E > be) return undefined;
      keepTo = E;
      remFrom = S;
      remTo = c;
    } else {
      if (E <= be) return undefined;
      keepTo = be;
      remFrom = be;
      remTo = E;
    }
    const forward = (windowStart(keepTo, T0) - alignUp(c, T0)) / T0;
    const backward = 1 + Math.max(0, (windowStart(remTo, T0) - alignUp(remFrom, T0)) / T0);
    if (backward >= forward) return undefined;
    if (
      S < (this.tierHorizon[1] as number) ||
      S < (this.tierHorizon[0] as number) ||
      S < this.rawHorizon ||
      this.anyDirty(S, E)
    )
      return undefined;
    const hb = this.block(t1, windowStart(S, t1.blockMs));
    const h = this.tierBucket(t1, hb, S);
    if (h < 0) return keepTo;
    if (!subtractableBucket(hb.blk, h)) return undefined;
    this.merge(hb.blk, h, acc, 1);
    this.stats.rollupBuckets++;
    this.removeSpan(remFrom, remTo, acc);
    return keepTo;
  }

  /** Whether a dirty window overlaps [from, to). */
  private anyDirty(from: number, to: number): boolean {
    const n = this.dirty.length;
    // the head is the last few windows: most of a long range lies before all of them
    if (n === 0 || to <= (this.dirty[0] as number) || from >= (this.dirty[n - 1] as number) + this.W) return false;
    for (const w of this.dirty) if (w < to && w + this.W > from) return true;
    return false;
  }

  /** Takes the points of [x, y) back out of `acc` (inside one non-dirty T1 bucket whose points `acc` holds). */
  private removeSpan(x: number, y: number, acc: BucketAgg): void {
    const t0 = this.tiers[0] as TierSpec;
    const T0 = t0.bucketMs;
    const lo = alignUp(x, T0);
    const hi = windowStart(y, T0);
    if (lo > hi) {
      this.removeRaw(x, y, acc);
      return;
    }
    this.removeRaw(x, lo, acc);
    if (lo < hi) this.tierBuckets(t0, lo, hi, acc, -1);
    this.removeRaw(hi, y, acc);
  }

  /** Takes the points of [p, q) (inside one T0 bucket B) back out of `acc`: raw, or B minus the rest of B. */
  private removeRaw(p: number, q: number, acc: BucketAgg): void {
    if (q <= p) return;
    const t0 = this.tiers[0] as TierSpec;
    const T0 = t0.bucketMs;
    const b = windowStart(p, T0);
    const cb = this.block(t0, windowStart(b, t0.blockMs));
    const i = this.tierBucket(t0, cb, b);
    const cover = coverage(cb.blk, i, p, q);
    if (cover === 'none') return;
    this.stats.rawPieces++;
    if (cover === 'all') {
      this.merge(cb.blk, i, acc, -1);
      this.stats.rollupBuckets++;
      return;
    }
    if (2 * (q - p) > T0) {
      const cols = this.edges.before(p, b + T0);
      if (cols === undefined) return;
      this.merge(cb.blk, i, acc, -1);
      this.stats.rollupBuckets++;
      this.stats.subtractedPieces++;
      this.rawSpan(cols, b, p, acc, 1);
      this.rawSpan(cols, q, b + T0, acc, 1);
      return;
    }
    const cols = this.edges.before(p, q);
    if (cols !== undefined) this.rawSpan(cols, p, q, acc, -1);
  }

  /** Raw points of [from, to) inside one dirty window (chunk and fragments merged). */
  private dirtyPiece(from: number, to: number, acc: BucketAgg): void {
    const w = windowStart(from, this.W);
    if (this.subtract) {
      const cols = this.plainFragments(w);
      if (cols !== undefined) {
        this.stats.rawPieces++;
        this.stats.plainDirtyPieces++;
        for (const c of cols) this.sumRange(c, from, to, acc);
        return;
      }
    }
    if (this.dirtyCache?.w !== w) {
      let points: TsKv[] = [];
      for (const win of this.store.windowsOf(this.e, this.k, w, w + this.W)) points = win.points;
      this.dirtyCache = { w, points };
    }
    this.stats.rawPieces++;
    for (const p of this.dirtyCache.points) {
      if (p.ts >= from && p.ts < to) {
        addPoint(acc, p.ts, p.value);
        this.stats.rawPoints++;
      }
    }
  }

  /**
   * The fragments of dirty window `w` decoded into columns, when the window's points are exactly theirs: no
   * chunk, and fragments whose ts ranges do not overlap, so no point overwrites another (in-order ingest, the
   * usual head). Otherwise undefined, and dirtyPiece merges the window point by point.
   */
  private plainFragments(w: number): BlockColumns[] | undefined {
    if (this.fragmentCache?.w === w) return this.fragmentCache.cols;
    const keys = this.dirtyFragments[this.dirty.indexOf(w)] ?? [];
    let cols: BlockColumns[] | undefined;
    // 16-byte keys: single points from before fragments existed
    if (!this.edges.has(w) && !keys.some((key) => key.length === 16)) cols = this.columnsIfDisjoint(keys);
    this.fragmentCache = { w, cols };
    return cols;
  }

  /**
   * The fragments (keys ascending by first ts) decoded, when each starts after the previous one ends; else (or
   * when one is gone: compacted since the constructor read the keys) undefined.
   */
  private columnsIfDisjoint(keys: readonly Buffer[]): BlockColumns[] | undefined {
    const cols: BlockColumns[] = [];
    let prevLast = -Infinity;
    for (const key of keys) {
      const c = this.store.fragmentColumns(key);
      if (c === undefined) return undefined;
      if (c.count === 0) continue;
      if (c.tsAt(0) <= prevLast) return undefined;
      prevLast = c.tsAt(c.count - 1);
      cols.push(c);
    }
    return cols;
  }

  /**
   * Raw points of [from, to): inside one chunk window (not dirty, above the raw horizon) and inside one
   * finest-tier bucket B. B's rollup state is consulted first: no B, no points; [from, to) holding all of B's
   * points, B itself; with `subtract` and [from, to) spanning more than half of B, B minus the raw points of
   * the rest of B. Otherwise the points themselves, decoded from the window's chunk (decoded once per window).
   */
  private rawPiece(from: number, to: number, acc: BucketAgg): void {
    this.stats.rawPieces++;
    const finest = this.tiers[0] as TierSpec;
    const T = finest.bucketMs;
    if (T <= this.W && from >= (this.tierHorizon[0] as number)) {
      const b = windowStart(from, T);
      const cb = this.block(finest, windowStart(b, finest.blockMs));
      const i = this.tierBucket(finest, cb, b);
      const cover = coverage(cb.blk, i, from, to);
      if (cover === 'none') return;
      if (cover === 'all') {
        this.merge(cb.blk, i, acc, 1);
        this.stats.rollupBuckets++;
        return;
      }
      if (this.subtract && subtractableBucket(cb.blk, i) && 2 * (to - from) > T) {
        const cols = this.edges.before(from, b + T);
        if (cols !== undefined) {
          this.merge(cb.blk, i, acc, 1);
          this.stats.rollupBuckets++;
          this.stats.subtractedPieces++;
          this.rawSpan(cols, b, from, acc, -1);
          this.rawSpan(cols, to, b + T, acc, -1);
          return;
        }
      }
    }
    const cols = this.edges.before(from, to);
    if (cols === undefined) return;
    if (this.subtract) this.rawSpan(cols, from, to, acc, 1);
    else this.addRange(cols, from, to, acc);
  }

  /** The index in `cb` (the block holding `b`) of the tier's bucket starting at `b`; -1 when it has no points. */
  private tierBucket(tier: TierSpec, cb: CachedBlock, b: number): number {
    const i = seek(cb, tier.bucketMs, b);
    cb.pos = i;
    return i < cb.blk.length && cb.blk.starts[i] === b ? i : -1;
  }

  /**
   * Merges bucket i of `blk` into `acc` (sign 1) or takes it back out (sign -1: removeAgg's terms). For
   * COUNT/SUM/AVG, from the block's columns when the bucket has a compact form: the same fields, in the same
   * order, as mergeInto(…, 'sums') and removeAgg would add.
   */
  private merge(blk: DecodedBlock, i: number, acc: BucketAgg, sign: 1 | -1): void {
    const s = blk.sums;
    const n = blk.length;
    const np = s[SUM_PARTIALS * n + i] as number;
    if (this.fields !== 'sums' || np < 0) {
      const agg = (blk.buckets[i] as RollupBucket).agg;
      if (sign > 0) mergeInto(acc, agg, this.fields);
      else removeAgg(acc, agg);
      return;
    }
    acc.count += sign * (s[SUM_COUNT * n + i] as number);
    acc.longCount += sign * (s[SUM_LONG_COUNT * n + i] as number);
    acc.doubleCount += sign * (s[SUM_DOUBLE_COUNT * n + i] as number);
    const ls = s[SUM_LONG_SUM * n + i] as number;
    if (ls !== 0) acc.longSum = addLong(acc.longSum, sign * ls);
    const p = blk.partials;
    const at = s[SUM_PARTIALS_AT * n + i] as number;
    for (let j = 0; j < np; j++) addPartial(acc.doubleSum, sign * (p[at + j] as number));
  }

  /** Adds the chunk points of [from, to) to `acc` (numbers without a KvValue per point where the block allows). */
  private addRange(cols: BlockColumns, from: number, to: number, acc: BucketAgg): void {
    const i0 = cols.lowerBound(from);
    const i1 = cols.lowerBound(to);
    if (i1 <= i0) return;
    this.stats.rawPoints += i1 - i0;
    const kind = cols.numericKind;
    if (kind === 'NONE') {
      for (let i = i0; i < i1; i++) addPoint(acc, cols.tsAt(i), cols.valueAt(i));
      return;
    }
    const isLong = kind === 'LONG';
    for (let i = i0; i < i1; i++) addNumber(acc, cols.num(i), isLong);
    // first/last exactly as addPoint would leave them: the points are ascending.
    const t0 = cols.tsAt(i0);
    if (t0 < acc.firstTs) {
      acc.firstTs = t0;
      acc.first = cols.valueAt(i0);
    }
    const tn = cols.tsAt(i1 - 1);
    if (tn >= acc.lastTs) {
      acc.lastTs = tn;
      acc.last = cols.valueAt(i1 - 1);
    }
  }

  /**
   * COUNT/SUM/AVG: the chunk points of [from, to) added to `acc` (sign 1) or taken back out of it (sign -1),
   * through the state of the previous such span. TB's buckets share their boundaries, and the raw stretch
   * between a boundary and the edge of the finest-tier bucket around it is wanted by both neighbours, one
   * adding it and the next subtracting it (or the other way round): so each boundary's points are read once.
   */
  private rawSpan(cols: BlockColumns, from: number, to: number, acc: BucketAgg, sign: 1 | -1): void {
    if (to <= from) return;
    const span = this.span(cols, from, to);
    if (sign > 0) mergeInto(acc, span, this.fields);
    else removeAgg(acc, span);
  }

  /** The counts and sums of the chunk points of [from, to): the previous span's state when it is the same one. */
  private span(cols: BlockColumns, from: number, to: number): BucketAgg {
    const span = this.spanAgg;
    if (this.spanFrom !== from || this.spanTo !== to) {
      clearAgg(span);
      this.sumRange(cols, from, to, span);
      this.spanFrom = from;
      this.spanTo = to;
    }
    return span;
  }

  /**
   * Adds the counts and sums of the points of [from, to) of `cols` (a chunk or fragment) to `agg` (the fields
   * COUNT, SUM and AVG finalize from; min/max/first/last are left alone). Longs are summed in a plain number
   * while that stays exact, then added once.
   */
  private sumRange(cols: BlockColumns, from: number, to: number, agg: BucketAgg): void {
    const kind = cols.numericKind;
    // a block of mixed or non-numeric values: point by point, every field
    if (kind === 'NONE') {
      this.addRange(cols, from, to, agg);
      return;
    }
    const i0 = cols.lowerBound(from);
    const i1 = cols.lowerBound(to);
    if (i1 <= i0) return;
    this.stats.rawPoints += i1 - i0;
    const n = i1 - i0;
    const ints = cols.intsUpTo(i1);
    if (kind === 'LONG') {
      let sum = 0;
      for (let i = i0; i < i1; i++) {
        sum += ints === undefined ? cols.num(i) : (ints[i] as number);
        // a sum of safe integers is exact while it stays within ±2^53; past that, point by point
        if (sum > Number.MAX_SAFE_INTEGER || sum < -Number.MAX_SAFE_INTEGER) {
          for (let j = i0; j < i1; j++) addNumber(agg, cols.num(j), true);
          return;
        }
      }
      agg.count += n;
      agg.longCount += n;
      agg.longSum = addLong(agg.longSum, sum);
      return;
    }
    if (ints === undefined || !addScaledExactly(agg.doubleSum, ints, cols.divisor, i0, i1)) {
      for (let i = i0; i < i1; i++) {
        const v = cols.num(i);
        if (Number.isFinite(v)) addPartial(agg.doubleSum, v);
        else agg.doubleSpecial += v;
      }
    }
    agg.count += n;
    agg.doubleCount += n;
  }

  /** Below the raw horizon: the finest retained tier's buckets whose start lies in [from, to). */
  private approximate(from: number, to: number, acc: BucketAgg): void {
    for (let ti = 0; ti < this.tiers.length; ti++) {
      if (from >= (this.tierHorizon[ti] as number)) {
        this.tierBuckets(this.tiers[ti] as TierSpec, from, to, acc);
        return;
      }
    }
  }

  /**
   * Merges the tier's buckets with start in [from, to) into `acc` (sign 1), or takes them out (-1: removeAgg).
   * With `finiteOnly`, stops at a bucket holding a non-finite double and returns false (`acc` then partial).
   */
  private tierBuckets(
    tier: TierSpec,
    from: number,
    to: number,
    acc: BucketAgg,
    sign: 1 | -1 = 1,
    finiteOnly = false,
  ): boolean {
    for (let b = windowStart(from, tier.blockMs); b < to; b += tier.blockMs) {
      const cb = this.block(tier, b);
      const { starts } = cb.blk;
      let i = seek(cb, tier.bucketMs, from);
      for (; i < starts.length && (starts[i] as number) < to; i++) {
        if (finiteOnly && !subtractableBucket(cb.blk, i)) return false;
        this.merge(cb.blk, i, acc, sign);
        this.stats.rollupBuckets++;
      }
      cb.pos = i;
    }
    return true;
  }

  /** The tier's decoded block (one cached per tier), with the index after the last bucket merged from it. */
  private block(tier: TierSpec, blockStart: number): CachedBlock {
    const cached = this.blockCache[tier.index];
    if (cached?.start === blockStart) return cached;
    const cb = { start: blockStart, blk: this.store.rollups.readBlock(tier, this.e, this.k, blockStart), pos: 0 };
    this.blockCache[tier.index] = cb;
    return cb;
  }
}
