/** How the LMDB series store is set up (config store.*, downsample.*, query.readCacheBytes), and its counters. */
import { DEFAULTS } from '../../config/index.js';
import type { OutboxRecorder } from '../outbox.js';
import type { WalFs } from '../wal.js';
import type { CommitPacer } from '../write-budget.js';

export interface StoreOptions {
  /** ms; chunk window (config store.chunkWindowMs) */
  readonly windowMs: number;
  /** ms; fragments of windows ending more than this before `now` are compacted (config store.headWindowMs) */
  readonly headWindowMs: number;
  readonly tiersMs: readonly number[];
  readonly tierRetentionMs: readonly number[];
  /** bytes for decoded rollup blocks and chunks kept for readers (config query.readCacheBytes) */
  readonly readCacheBytes?: number;
  /** ms one transaction of a delete may run before yielding the event loop (config downsample.stepBudgetMs) */
  readonly stepBudgetMs?: number;
  /** ms a write may wait for others to share its commit; 0: the next event-loop turn (config store.commitDelayMs) */
  readonly commitDelayMs?: number;
  /** decides the commit delay instead of commitDelayMs (write-budget.ts) */
  readonly pacer?: CommitPacer;
  /** the write-ahead log (wal.ts); absent: a write is acknowledged once its LMDB commit is flushed */
  readonly wal?: LogOptions;
  /**
   * upstream sync's bookkeeping (outbox.ts), when sync is on: given here, not set later, because the log's
   * replay at start records what is left to send too
   */
  readonly outbox?: OutboxRecorder;
}

export interface LogOptions {
  readonly fs: WalFs;
  /** bytes per log segment */
  readonly segmentBytes: number;
  /** ms; logged points are put into LMDB at least this often (config store.applyIntervalMs) */
  readonly applyIntervalMs: number;
  /** logged points not yet in LMDB that make an apply happen before applyIntervalMs */
  readonly applyMaxPoints: number;
}

export const DEFAULT_STORE_OPTIONS: StoreOptions = {
  windowMs: DEFAULTS.store.chunkWindowMs,
  headWindowMs: DEFAULTS.store.headWindowMs,
  tiersMs: DEFAULTS.downsample.tiersMs,
  tierRetentionMs: DEFAULTS.downsample.tierRetentionMs,
};

/** Counters since start (for the status/metrics endpoints). */
export interface CompactionCounters {
  /** windows folded into chunks */
  compactedWindows: number;
  /** head fragments consumed by compaction */
  compactedFragments: number;
  /** late points that arrived for windows whose raw data retention had already dropped (not stored) */
  droppedLatePoints: number;
  /** points older than the raw horizon when compacted: kept in rollups only (a backfill beyond retention) */
  rollupOnlyPoints: number;
}
