/**
 * Opens the timeseries store with its write budget (store/write-budget.ts): the budget counts every byte the
 * process writes and sets the commit delay unless store.commitDelayMs fixes one; the store is what the budget
 * paces, and the write-ahead log's bytes and the points counted are the store's. Both are made here, so the
 * one reference from the budget back to the store is bound in one place.
 */
import { join } from 'node:path';
import type { Config } from '../config/index.js';
import type { Logger } from '../log.js';
import type { Dictionary } from './encoding/dict.js';
import type { StoreEnv } from './env.js';
import type { OutboxRecorder } from './outbox.js';
import { LmdbTimeseriesStore } from './series/store.js';
import { nodeWalFs } from './wal.js';
import { WriteBudget, journalCounter, writeCounter } from './write-budget.js';

export interface OpenedTimeseries {
  readonly timeseries: LmdbTimeseriesStore;
  readonly writeBudget: WriteBudget;
}

/**
 * The timeseries store over `env` and its write budget. `outbox` (the upstream sync's recorder) is given before
 * the log is replayed, so the replay is recorded too.
 */
export function openTimeseries(
  config: Readonly<Config>,
  env: StoreEnv,
  dict: Dictionary,
  outbox: OutboxRecorder | undefined,
  log: Logger,
): OpenedTimeseries {
  // the budget is made first (it paces the store): what it reads of the store is read once the store is open
  let store: LmdbTimeseriesStore | undefined;
  const logBytes = (): number => {
    const w = store?.walStats;
    // 4-KiB pages: what each append's fdatasync writes (wal.ts); a new segment's zeros (debited spread out)
    return w === undefined ? 0 : w.pagesWritten * 4096 + w.preallocatedBytes;
  };
  const counter = writeCounter(logBytes);
  // the filesystem's journal writes for the store too, charged to no process (store/write-budget.ts)
  const journal = journalCounter(config.dataDir);
  if (journal !== undefined) log.info(`the write budget counts the journal of ${journal.device} too`);
  const fixedDelayMs = config.store.commitDelayMs >= 0 ? config.store.commitDelayMs : undefined;
  const writeBudget = new WriteBudget({
    bytesPerDay: config.store.writeBudgetBytesPerDay,
    cardEnduranceBytes: config.store.cardEnduranceBytes,
    ...(fixedDelayMs === undefined ? {} : { fixedDelayMs }),
    now: Date.now,
    written: counter.written,
    logWritten: logBytes,
    ...(journal === undefined ? {} : { journalWritten: journal.written }),
    logSpreadWritten: () => store?.walStats?.preallocatedBytes ?? 0,
    ...(counter.writeCalls === undefined
      ? {}
      : { writeCalls: counter.writeCalls, logWriteCalls: () => store?.walStats?.writeCallBytes ?? 0 }),
    pointsWritten: () => (store === undefined ? 0 : store.pointCounts.put + store.pointCounts.logged),
    pointsApplied: () => store?.pointCounts.put ?? 0,
    source: counter.source,
  });
  store = new LmdbTimeseriesStore(env, dict, {
    outbox,
    windowMs: config.store.chunkWindowMs,
    headWindowMs: config.store.headWindowMs,
    tiersMs: config.downsample.tiersMs,
    tierRetentionMs: config.downsample.tierRetentionMs,
    readCacheBytes: config.query.readCacheBytes,
    stepBudgetMs: config.downsample.stepBudgetMs,
    commitDelayMs: fixedDelayMs ?? 0,
    ...(fixedDelayMs === undefined ? { pacer: writeBudget } : {}),
    wal: config.store.wal
      ? {
          fs: nodeWalFs(join(config.dataDir, 'wal')),
          segmentBytes: config.store.walSegmentBytes,
          applyIntervalMs: config.store.applyIntervalMs,
          applyMaxPoints: config.store.applyMaxPoints,
        }
      : undefined,
  });
  return { timeseries: store, writeBudget };
}
