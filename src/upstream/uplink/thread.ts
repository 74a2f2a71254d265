/**
 * The sync's work off the main thread (the ingest path keeps priority: docs/sync.md).
 *
 * Draining unpaced, reading points back and encoding them is most of the sync's CPU, and the requests that carry
 * them are most of the rest (node:http: about 0.3 ms of CPU each, two to three per 1000 points). On the main
 * thread, that kept the event loop busy three quarters of the time, and a device post waited behind it
 * (BENCHMARKS.md "Upstream sync"). Here a worker thread does both. It opens the same LMDB environment (lmdb-js
 * shares one memory map between threads, so it reads the pages the main thread committed, without a copy),
 * encodes a group and keeps its bodies; the main thread, which keeps every decision (the outbox scan, pacing,
 * what an answer means, acknowledgements), then has it post them one by one. While the thread runs, the live
 * lane's requests go through it too.
 *
 * The thread is started by the first group and ended after `idleMs` without a request, so a gateway whose link is
 * up and whose live points go from memory (lanes/log.ts) does not carry it: its few requests are
 * made here. If it dies, what it was encoding is encoded here instead and the requests it had in hand answer as
 * a network error would (status 0: the batch is retried, at least once as always); after MAX_DEATHS deaths in a
 * row everything is done here, and the log says so.
 */
import { Worker } from 'node:worker_threads';
import type { Logger } from '../../log.js';
import type { RefSource } from '../../store/outbox.js';
import type { UpstreamAnswer, UpstreamClient } from './client.js';
import { type EncodeRequest, type EncodedGroup, encodeGroup } from './encode.js';
import type { GroupSummary, ThreadReply, ThreadRequest, ThreadSetup } from './thread-worker.js';

export interface SyncThreadOptions {
  /** the refs' points as the main thread reads them, for the fallback */
  readonly refs: RefSource;
  /**
   * the main thread's client: requests while no thread runs, and a group encoded here; absent for a transport
   * that sends by other means and only has groups encoded (MQTT: encodeHandedOver)
   */
  readonly client?: UpstreamClient;
  /** what the worker opens and posts to: the same data dir, map size and upstream as the main thread's */
  readonly setup: ThreadSetup;
  readonly log: Logger;
  /** the thread ends after this long without a request */
  readonly idleMs?: number;
  /** the worker's script (tests substitute one that fails) */
  readonly workerUrl?: URL;
  /** false: everything in the main thread (config sync.encoderThread) */
  readonly thread?: boolean;
}

/** A group ready to send: what it holds, and where its bodies are (here, or in the thread that encoded them). */
export interface ReadyGroup extends GroupSummary {
  /** @internal */
  readonly at: { readonly local: Uint8Array[] } | { readonly thread: Worker; readonly stash: number; posted: number };
}

type Waiting =
  | {
      readonly thread: Worker;
      readonly req: EncodeRequest;
      readonly resolve: (g: ReadyGroup) => void;
      readonly reject: (err: Error) => void;
    }
  | { readonly thread: Worker; readonly answer: (a: UpstreamAnswer) => void };

const DEFAULT_IDLE_MS = 30_000;
/** unexpected exits in a row after which everything is done in the main thread for good */
const MAX_DEATHS = 3;
/**
 * MB; the thread's young generation (V8's default grows it to tens of MB under an unpaced drain: peak RSS
 * +25 MiB; at 4 MB, +6 to +16 MiB, with the drain as fast: BENCHMARKS.md). Its scavenges stop only this thread.
 */
const YOUNG_GENERATION_MB = 4;
/** how long close() waits for the thread to finish its requests and close its environment before terminating it */
const CLOSE_WAIT_MS = 2_000;

const utf8 = new TextEncoder();

function local(g: EncodedGroup): ReadyGroup {
  return {
    ...g,
    bodies: g.bodies.map((b) => ({ points: b.points, lastTs: b.lastTs, bytes: b.body.byteLength })),
    at: { local: g.bodies.map((b) => b.body) },
  };
}

/** Body `index` of a group whose bodies are in this thread (encoded here, or handed over: encodeHandedOver). */
export function localBody(group: ReadyGroup, index: number): Uint8Array | undefined {
  return 'local' in group.at ? group.at.local[index] : undefined;
}

export class SyncThread {
  private worker: Worker | undefined;
  private readonly waiting = new Map<number, Waiting>();
  /** groups whose bodies the running thread holds, not all posted yet: it is not idle while there are any */
  private stashed = 0;
  private nextId = 1;
  private idleTimer: NodeJS.Timeout | undefined;
  private deaths = 0;
  private inThreadOnly = false;
  /** threads asked to close, until they exited */
  private readonly retiring = new Set<Promise<void>>();
  private readonly idleMs: number;
  private readonly workerUrl: URL;

  constructor(private readonly opts: SyncThreadOptions) {
    this.idleMs = opts.idleMs ?? DEFAULT_IDLE_MS;
    this.workerUrl = opts.workerUrl ?? new URL('./thread-worker.js', import.meta.url);
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
   * The group read back and encoded. Rejects only when the main thread cannot read or encode it either (a
   * damaged block): the caller sets it aside. A thread that dies does not fail what it had in hand.
   */
  encode(req: EncodeRequest): Promise<ReadyGroup> {
    return this.encodeIn(req, false);
  }

  /**
   * The group read back and encoded in the thread, its bodies handed over to this thread (localBody), for a
   * transport that sends from here (MQTT: one session, MQTT.js in the main thread). Rejects as encode.
   */
  encodeHandedOver(req: EncodeRequest): Promise<ReadyGroup> {
    return this.encodeIn(req, true);
  }

  private encodeIn(req: EncodeRequest, handOver: boolean): Promise<ReadyGroup> {
    if (this.inThreadOnly) return this.inThread(req);
    const w = this.worker ?? this.spawn();
    const id = this.ask(w);
    return new Promise<ReadyGroup>((resolve, reject) => {
      this.waiting.set(id, { thread: w, req, resolve, reject });
      const msg: ThreadRequest = handOver ? { id, encode: req, handOver } : { id, encode: req };
      w.postMessage(msg);
    });
  }

  /** Posts body `index` of `group` to `path` (relative to the upstream's URL). */
  postBody(group: ReadyGroup, index: number, path: string): Promise<UpstreamAnswer> {
    const at = group.at;
    if ('local' in at) return this.mainPost(path, at.local[index] as Uint8Array);
    if (at.thread !== this.worker)
      return Promise.resolve({ status: 0, body: '', error: 'the sync thread that held this batch ended' });
    at.posted++;
    if (at.posted === group.bodies.length) this.stashed--;
    return this.request(at.thread, { path, stash: at.stash, index });
  }

  /** The thread forgets the bodies of `group` not posted (its job stopped before them). */
  release(group: ReadyGroup): void {
    const at = group.at;
    if ('local' in at || at.posted >= group.bodies.length) return;
    at.posted = group.bodies.length;
    if (at.thread !== this.worker) return;
    this.stashed--;
    const msg: ThreadRequest = { drop: at.stash };
    at.thread.postMessage(msg);
    this.idleWhenDone(at.thread);
  }

  /** Posts `body` to `path`: through the thread while it runs (it is not started for this), else here. */
  post(path: string, body: string): Promise<UpstreamAnswer> {
    const w = this.worker;
    if (w === undefined) return this.mainPost(path, body);
    const bytes = utf8.encode(body);
    return this.request(w, { path, body: bytes }, [bytes.buffer as ArrayBuffer]);
  }

  /** Requests in flight in the thread answer at once, as a network error (the service is stopping). */
  abortRequests(): void {
    const msg: ThreadRequest = { abort: true };
    this.worker?.postMessage(msg);
  }

  /** Ends the thread (after the groups and requests it has in hand). */
  async close(): Promise<void> {
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    if (this.worker !== undefined) this.retire(this.worker);
    await Promise.all([...this.retiring]);
  }

  private mainPost(path: string, body: string | Uint8Array): Promise<UpstreamAnswer> {
    if (this.opts.client === undefined)
      return Promise.resolve({ status: 0, body: '', error: 'no HTTP client (a transport that only encodes here)' });
    return this.opts.client.post(path, body);
  }

  private request(
    w: Worker,
    m: { path: string; stash: number; index: number } | { path: string; body: Uint8Array },
    transfer: ArrayBuffer[] = [],
  ): Promise<UpstreamAnswer> {
    const id = this.ask(w);
    return new Promise<UpstreamAnswer>((resolve) => {
      this.waiting.set(id, { thread: w, answer: resolve });
      const msg: ThreadRequest = { id, ...m };
      w.postMessage(msg, transfer);
    });
  }

  /** An id for a request to `w`, which keeps the process alive and is not idle until it is answered. */
  private ask(w: Worker): number {
    w.ref();
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    return this.nextId++;
  }

  private inThread(req: EncodeRequest): Promise<ReadyGroup> {
    try {
      return Promise.resolve(local(encodeGroup(this.opts.refs, req)));
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  private idleWhenDone(w: Worker): void {
    if (this.waiting.size > 0 || this.stashed > 0 || this.worker !== w || this.idleTimer !== undefined) return;
    w.unref();
    this.idleTimer = setTimeout(() => this.retire(w), this.idleMs);
    this.idleTimer.unref();
  }

  private spawn(): Worker {
    const w = new Worker(this.workerUrl, {
      workerData: this.opts.setup,
      resourceLimits: { maxYoungGenerationSizeMb: YOUNG_GENERATION_MB },
    });
    this.worker = w;
    this.stashed = 0;
    let failure: string | undefined;
    w.on('message', (m: ThreadReply) => {
      const waiting = this.waiting.get(m.id);
      if (waiting === undefined) return;
      this.waiting.delete(m.id);
      if ('answer' in waiting) {
        if ('answer' in m) waiting.answer(m.answer);
      } else if ('error' in m) {
        // the main thread tries once more before the group counts as unreadable: a read this thread could not do
        // (no reader slot, say) may well succeed there
        this.inThread(waiting.req).then(waiting.resolve, waiting.reject);
      } else if ('group' in m) {
        this.deaths = 0;
        const g = m.group;
        if (m.bodies !== undefined) waiting.resolve({ ...g, at: { local: m.bodies } });
        else {
          if (g.bodies.length > 0 && this.worker === w) this.stashed++;
          waiting.resolve({ ...g, at: { thread: w, stash: m.id, posted: 0 } });
        }
      }
      this.idleWhenDone(w);
    });
    w.on('error', (err) => {
      failure = err.message;
    });
    w.once('exit', (code) => {
      if (this.worker === w) {
        // died unasked
        this.worker = undefined;
        this.stashed = 0;
        clearTimeout(this.idleTimer);
        this.idleTimer = undefined;
        this.deaths++;
        const why = failure ?? `exit code ${code}`;
        if (this.deaths >= MAX_DEATHS) {
          this.inThreadOnly = true;
          this.opts.log.error(
            `sync: the sync thread ended ${MAX_DEATHS} times in a row (last: ${why}); encoding and sending in the main thread from now on`,
          );
        } else
          this.opts.log.warn(
            `sync: the sync thread ended (${why}); what it was encoding is encoded in the main thread, its requests are retried`,
          );
      }
      // a retired thread answered everything before it closed, unless it had to be terminated
      for (const [id, x] of this.waiting) {
        if (x.thread !== w) continue;
        this.waiting.delete(id);
        if ('answer' in x)
          x.answer({ status: 0, body: '', error: `the sync thread ended (${failure ?? `exit code ${code}`})` });
        else this.inThread(x.req).then(x.resolve, x.reject);
      }
    });
    return w;
  }

  private retire(w: Worker): void {
    if (this.worker === w) {
      this.worker = undefined;
      this.stashed = 0;
    }
    // held until it has closed its environment: an exit mid-close could leave a reader slot taken
    w.ref();
    const exited = new Promise<void>((resolve) => {
      const force = setTimeout(() => {
        void w.terminate();
      }, CLOSE_WAIT_MS);
      force.unref();
      w.once('exit', () => {
        clearTimeout(force);
        resolve();
      });
    });
    this.retiring.add(exited);
    void exited.then(() => this.retiring.delete(exited));
    const msg: ThreadRequest = { close: true };
    w.postMessage(msg);
  }
}
