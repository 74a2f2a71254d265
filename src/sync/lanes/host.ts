/**
 * What a lane (lanes/log.ts, lanes/outbox.ts) is given: narrow ports onto the parts it does not own. The
 * service owns the pump; a lane starts jobs in the slots it is given (jobs.ts) and gives them back when a job
 * ends, sends through the sender (sender.ts), and keeps the backlog's books through the accounting
 * (accounting.ts).
 */
import type { Config } from '../../config/index.js';
import type { Logger } from '../../context.js';
import type { StoreEnv } from '../../store/env.js';
import type { LmdbTimeseriesStore } from '../../store/series/store.js';
import type { Dictionary } from '../../store/encoding/dict.js';
import type { Accounting } from '../accounting.js';
import type { Jobs } from '../jobs.js';
import type { Sender } from '../sender.js';

/** The store as the lanes read and write it. */
export interface LaneStore {
  readonly env: StoreEnv;
  readonly dict: Dictionary;
  readonly timeseries: LmdbTimeseriesStore;
}

export interface LaneHost {
  readonly cfg: Readonly<Config['sync']>;
  readonly log: Logger;
  readonly now: () => number;
  readonly store: LaneStore;
  readonly jobs: Jobs;
  readonly sender: Sender;
  readonly accounting: Accounting;
}

/** a job carries at most this many times sync.maxBatchBytes (estimated) of one device */
export const JOB_BATCHES = 4;
