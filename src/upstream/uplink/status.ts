/**
 * What the upstream sync reports (docs/sync.md `GET /api/outpost/sync`): the seam between the sync service and
 * its readers (the sync endpoint, `GET /api/outpost/status`, `/metrics`, `outpost status`).
 */
import type { EpochMs } from '../../types.js';

export type SyncState = 'idle' | 'sending' | 'backoff' | 'off';

export interface DeviceSyncStatus {
  readonly id: string;
  readonly name: string;
  readonly state: 'ok' | 'parked';
  /** why the device is parked; null when it is not */
  readonly reason: string | null;
  readonly backlogPoints: number;
}

/** docs/sync.md "Status", field for field. Counters count since the data dir was created. */
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
  /** when lastError happened; null with it */
  readonly lastErrorTs: EpochMs | null;
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
  enabled: false,
  state: 'off',
  url: null,
  backlogPoints: 0,
  oldestPendingTs: null,
  sentPoints: 0,
  droppedPoints: 0,
  lastSuccessTs: null,
  lastError: null,
  lastErrorTs: null,
  devices: [],
});

export interface SetAsideBatch {
  /** telemetry (its points' timestamps in firstTs..lastTs) or depth series (their depths in firstDs..lastDs) */
  readonly kind: 'telemetry' | 'depth';
  readonly seq: number;
  readonly deviceId: string | null;
  readonly deviceName: string | null;
  readonly points: number;
  readonly firstTs: number | null;
  readonly lastTs: number | null;
  readonly firstDs: number | null;
  readonly lastDs: number | null;
  /** the upstream's answer (400), or 0: could not be read back */
  readonly status: number;
  readonly error: string;
}

/** What `outpost sync` can do with set-aside batches (GET/POST/DELETE /api/outpost/sync/setAside). */
export interface SetAsideAdmin {
  list(limit: number): { readonly batches: SetAsideBatch[]; readonly total: number };
  /** back into the queue; resolves with the points put back */
  retry(): Promise<number>;
  /** forgotten by the sync (the points stay in the store); resolves with the points cleared */
  clear(): Promise<number>;
}
