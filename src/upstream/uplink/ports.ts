/**
 * The narrow ports the sync's parts get from the service (lanes/, attribute-marks.ts, held.ts, drops.ts,
 * depth.ts): the store they read and write, the jobs' slots (jobs.ts), the sender (sender.ts) and the backlog's
 * books (accounting.ts). No part sees the service itself.
 */
import type { Config } from '../../config/index.js';
import type { Logger } from '../../log.js';
import type { Dictionary } from '../../store/encoding/dict.js';
import type { Outbox } from '../../store/outbox.js';
import type { LmdbTimeseriesStore } from '../../store/series/store.js';
import type { Accounting } from './accounting.js';
import type { Jobs } from './jobs.js';
import type { Sender } from './sender.js';

/** The store as the sync reads and writes it. */
export interface StorePort {
  readonly outbox: Outbox;
  readonly dict: Dictionary;
  readonly timeseries: LmdbTimeseriesStore;
}

export interface SyncPorts {
  readonly cfg: Readonly<Config['sync']>;
  readonly log: Logger;
  readonly now: () => number;
  readonly store: StorePort;
  readonly jobs: Jobs;
  readonly sender: Sender;
  readonly accounting: Accounting;
}
