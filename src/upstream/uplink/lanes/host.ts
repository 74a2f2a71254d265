/**
 * What a lane (lanes/log.ts, lanes/outbox.ts) is given: the sync's narrow ports (ports.ts). The service owns
 * the pump; a lane starts jobs in the slots it is given (jobs.ts) and gives them back when a job ends, sends
 * through the sender (sender.ts), and keeps the backlog's books through the accounting (accounting.ts).
 */
import type { SyncPorts } from '../ports.js';

export type LaneHost = SyncPorts;

/** a job carries at most this many times sync.maxBatchBytes (estimated) of one device */
export const JOB_BATCHES = 4;
