/**
 * What the upstream sync reports (CONTRACT §9 `GET /api/outpost/sync`): the seam between the sync service and
 * its readers (the sync endpoint, `GET /api/outpost/status`, `/metrics`, `outpost status`).
 */
import type { EpochMs } from '../types.js';
import type { SetAsideAdmin } from './set-aside.js';

export type SyncState = 'idle' | 'sending' | 'backoff' | 'off';

export interface DeviceSyncStatus {
  readonly id: string;
  readonly name: string;
  readonly state: 'ok' | 'parked';
  /** why the device is parked; null when it is not */
  readonly reason: string | null;
  readonly backlogPoints: number;
}

/** CONTRACT §9, field for field. Counters count since the data dir was created. */
export interface SyncStatus {
  readonly enabled: boolean;
  readonly state: SyncState;
  readonly url: string | null;
  readonly backlogPoints: number;
  readonly oldestPendingTs: EpochMs | null;
  readonly sentPoints: number;
  readonly droppedPoints: number;
  readonly lastSuccessTs: EpochMs | null;
  readonly lastError: string | null;
  readonly devices: readonly DeviceSyncStatus[];
}

/** Anything that can answer the sync status: the sync service when `sync.url` is set. */
export interface SyncStatusSource {
  status(): SyncStatus;
  /** batches set aside: list, retry, clear (`outpost sync`) */
  readonly setAside?: SetAsideAdmin;
}

/** The answer when sync is not configured. */
export const SYNC_OFF: SyncStatus = Object.freeze({
  enabled: false, state: 'off', url: null, backlogPoints: 0, oldestPendingTs: null, sentPoints: 0, droppedPoints: 0,
  lastSuccessTs: null, lastError: null, devices: [],
});
