/**
 * Reads the backlog back and encodes it off the main thread (issue 16: "the ingest path keeps priority").
 *
 * Draining unpaced, reading points back and encoding them is most of the sync's CPU: measured on the main
 * thread, it kept the event loop busy three quarters of the time, and its garbage brought scavenges, so a device
 * post waited behind it (BENCHMARKS.md "Upstream sync"). Here it runs in a worker thread that opens the same
 * LMDB environment: lmdb-js shares one memory map between threads, so the worker reads the pages the main
 * thread committed, without a copy, and hands back finished bodies (transferred, not copied). The main thread
 * keeps everything else: the outbox scan, pacing, the requests, acknowledgements.
 *
 * The thread is started by the first group and ended after `idleMs` without one, so a gateway whose link is
 * up and whose live points go from memory (service.ts `sendFromLog`) does not carry it. If it dies, what it
 * had in hand is encoded here instead; after MAX_DEATHS deaths in a row everything is, and the log says so.
 */
import { Worker } from 'node:worker_threads';
import type { Logger } from '../context.js';
import type { StoreEnv } from '../store/env.js';
import { type EncodeRequest, type EncodedGroup, encodeGroup } from './encode.js';
import type { EncoderReply, EncoderRequest, EncoderSetup } from './encoder-worker.js';

export interface EncoderOptions {
  /** the main thread's environment, for the fallback */
  readonly env: StoreEnv;
  /** what the worker opens: the same data dir and map size as `env` */
  readonly setup: EncoderSetup;
  readonly log: Logger;
  /** the thread ends after this long without a group */
  readonly idleMs?: number;
  /** the worker's script (tests substitute one that fails) */
  readonly workerUrl?: URL;
  /** false: every group is encoded in the main thread (config sync.encoderThread) */
  readonly thread?: boolean;
}

interface Waiting {
  readonly thread: Worker;
  readonly req: EncodeRequest;
  readonly resolve: (g: EncodedGroup) => void;
  readonly reject: (err: Error) => void;
}

const DEFAULT_IDLE_MS = 30_000;
/** unexpected exits in a row after which groups are encoded in the main thread for good */
const MAX_DEATHS = 3;
/**
 * MB; the thread's young generation (V8's default grows it to tens of MB under an unpaced drain: peak RSS
 * +25 MiB; at 4 MB, +6 to +16 MiB, with the drain as fast: BENCHMARKS.md). Its scavenges stop only this thread.
 */
const YOUNG_GENERATION_MB = 4;
/** how long close() waits for the thread to close its environment before terminating it */
const CLOSE_WAIT_MS = 2_000;

export class GroupEncoder {
  private worker: Worker | undefined;
  private readonly waiting = new Map<number, Waiting>();
  private nextId = 1;
  private idleTimer: NodeJS.Timeout | undefined;
  private deaths = 0;
  private inThreadOnly = false;
  /** threads asked to close, until they exited */
  private readonly retiring = new Set<Promise<void>>();
  private readonly idleMs: number;
  private readonly workerUrl: URL;

  constructor(private readonly opts: EncoderOptions) {
    this.idleMs = opts.idleMs ?? DEFAULT_IDLE_MS;
    this.workerUrl = opts.workerUrl ?? new URL('./encoder-worker.js', import.meta.url);
    this.inThreadOnly = opts.thread === false;
  }

  /** false when groups are encoded in the main thread (configured so, or the thread given up) */
  get threaded(): boolean {
    return !this.inThreadOnly;
  }

  /** whether a thread is running (status, tests) */
  get threadRunning(): boolean {
    return this.worker !== undefined;
  }

  /**
   * The group's bodies. Rejects only when the main thread cannot read or encode it either (a damaged block):
   * the caller sets it aside. A thread that dies does not fail what it had in hand.
   */
  encode(req: EncodeRequest): Promise<EncodedGroup> {
    if (this.inThreadOnly) return this.inThread(req);
    const w = this.worker ?? this.spawn();
    // it keeps the process alive while it has a group in hand, not while idle
    w.ref();
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    const id = this.nextId++;
    return new Promise<EncodedGroup>((resolve, reject) => {
      this.waiting.set(id, { thread: w, req, resolve, reject });
      const msg: EncoderRequest = { id, req };
      w.postMessage(msg);
    });
  }

  /** Ends the thread (after the groups it has in hand). */
  async close(): Promise<void> {
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    if (this.worker !== undefined) this.retire(this.worker);
    await Promise.all([...this.retiring]);
  }

  private inThread(req: EncodeRequest): Promise<EncodedGroup> {
    try {
      return Promise.resolve(encodeGroup(this.opts.env, req));
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  private spawn(): Worker {
    const w = new Worker(this.workerUrl, { workerData: this.opts.setup, resourceLimits: { maxYoungGenerationSizeMb: YOUNG_GENERATION_MB } });
    this.worker = w;
    let failure: string | undefined;
    w.on('message', (m: EncoderReply) => {
      const waiting = this.waiting.get(m.id);
      if (waiting === undefined) return;
      this.waiting.delete(m.id);
      // the main thread tries once more before the group counts as unreadable: a read this thread could not do
      // (no reader slot, say) may well succeed there
      if ('error' in m) this.inThread(waiting.req).then(waiting.resolve, waiting.reject);
      else {
        this.deaths = 0;
        waiting.resolve(m.group);
      }
      if (this.waiting.size === 0 && this.worker === w) {
        w.unref();
        this.idleTimer = setTimeout(() => this.retire(w), this.idleMs);
        this.idleTimer.unref();
      }
    });
    w.on('error', (err) => { failure = err.message; });
    w.once('exit', (code) => {
      if (this.worker === w) {
        // died unasked
        this.worker = undefined;
        clearTimeout(this.idleTimer);
        this.idleTimer = undefined;
        this.deaths++;
        const why = failure ?? `exit code ${code}`;
        if (this.deaths >= MAX_DEATHS) {
          this.inThreadOnly = true;
          this.opts.log.error(`sync: the encoder thread ended ${MAX_DEATHS} times in a row (last: ${why}); encoding in the main thread from now on`);
        } else this.opts.log.warn(`sync: the encoder thread ended (${why}); what it had in hand is encoded in the main thread`);
      }
      // a retired thread answered everything before it closed, unless it had to be terminated
      for (const [id, x] of this.waiting) {
        if (x.thread !== w) continue;
        this.waiting.delete(id);
        this.inThread(x.req).then(x.resolve, x.reject);
      }
    });
    return w;
  }

  private retire(w: Worker): void {
    if (this.worker === w) this.worker = undefined;
    // held until it has closed its environment: an exit mid-close could leave a reader slot taken
    w.ref();
    const exited = new Promise<void>((resolve) => {
      const force = setTimeout(() => { void w.terminate(); }, CLOSE_WAIT_MS);
      force.unref();
      w.once('exit', () => {
        clearTimeout(force);
        resolve();
      });
    });
    this.retiring.add(exited);
    void exited.then(() => this.retiring.delete(exited));
    const msg: EncoderRequest = { close: true };
    w.postMessage(msg);
  }
}
