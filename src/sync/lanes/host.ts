/**
 * What a lane (lanes/log.ts, lanes/outbox.ts) uses of the sync service: the shared parts it does not own.
 * The service owns the slots (how many requests are in flight) and the pump; a lane starts jobs in the slots
 * it is given and gives them back when a job ends.
 */
import type { Config } from '../../config/index.js';
import type { Logger } from '../../context.js';
import type { StoreEnv } from '../../store/env.js';
import type { FragmentRef } from '../../store/outbox.js';
import type { LmdbTimeseriesStore } from '../../store/series/store.js';
import type { Dictionary } from '../../store/encoding/dict.js';
import type { Acks } from '../acks.js';
import type { SyncCounts } from '../counts.js';
import type { Dev, Devices } from '../devices.js';
import type { Link } from '../link.js';
import type { Outcome } from '../transport.js';
import type { SliceTurns } from '../turns.js';
import type { Transport } from '../transport.js';

/** Requests in flight, of every lane: the pump keeps `inFlight` within sync.concurrency. */
export interface Slots {
  inFlight: number;
  /** live jobs in flight (from the log, and of the live outbox lane): at most the pump's `liveCap` */
  liveInFlight: number;
}

export interface LaneHost {
  readonly cfg: Readonly<Config['sync']>;
  readonly env: StoreEnv;
  readonly dict: Dictionary;
  readonly timeseries: LmdbTimeseriesStore;
  readonly log: Logger;
  readonly transport: Transport;
  readonly devices: Devices;
  readonly link: Link;
  readonly counts: SyncCounts;
  readonly acks: Acks;
  /** one slice of sync CPU work per event-loop turn */
  readonly turns: SliceTurns;
  readonly slots: Slots;
  readonly now: () => number;
  stopped(): boolean;
  wake(): void;
  /** a job started: stop() waits for it */
  track(job: Promise<void>): void;
  /** an outbox entry of entity e entered (1) or left (-1) the backlog: the counts and its device's backlog */
  noteQueued(e: number, refs: readonly FragmentRef[], sign: 1 | -1): void;
  /** a 2xx from the upstream */
  succeeded(): void;
  /** any outcome but sent and set aside: the device parked, or the upstream backed off */
  failed(dev: Dev, token: string, outcome: Exclude<Outcome, { kind: 'sent' } | { kind: 'setAside' }>): void;
  /** bytes per point on the wire, estimated from what was sent (the bodies' sizes are cut by it) */
  bytesPerPoint: number;
  /** a job sent `points` in `bytes`: the estimate follows */
  noteSent(points: number, bytes: number): void;
}

/** a job carries at most this many times sync.maxBatchBytes (estimated) of one device */
export const JOB_BATCHES = 4;
