/**
 * The sync thread (thread.ts): opens the data dir's LMDB environment to read, encodes each group it is asked
 * for and keeps its bodies until they are posted (or hands them over at once, for a transport that sends from
 * the main thread: MQTT), and makes the upstream requests it is given, with a client of its own. Groups are
 * encoded one at a time, in the order asked; requests run concurrently.
 */
import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { openRefSource } from '../../store/outbox-lmdb.js';
import { type UpstreamAnswer, UpstreamClient } from './client.js';
import { type EncodeRequest, type EncodedGroup, encodeGroup } from './encode.js';

const THREAD_NICE = 10;

export interface ThreadSetup {
  readonly dataDir: string;
  readonly mapSizeBytes: number;
  /** the upstream (sync.url), its connections (sync.concurrency) and its timeout (sync.requestTimeoutMs) */
  readonly url: string;
  readonly concurrency: number;
  readonly requestTimeoutMs: number;
}

/** A group as the thread answers it: its bodies stay in the thread (stash = the request's id) until posted. */
export interface GroupSummary extends Omit<EncodedGroup, 'bodies'> {
  readonly bodies: ReadonlyArray<{ readonly points: number; readonly lastTs: number; readonly bytes: number }>;
}

export type ThreadRequest =
  /** `handOver`: the bodies go back with the answer (transferred, not copied) instead of staying here */
  | { readonly id: number; readonly encode: EncodeRequest; readonly handOver?: boolean }
  /** posts body `index` of the group encoded by request `stash`, then forgets it */
  | { readonly id: number; readonly path: string; readonly stash: number; readonly index: number }
  | { readonly id: number; readonly path: string; readonly body: Uint8Array }
  /** forgets the bodies of a group not posted (its job stopped) */
  | { readonly drop: number }
  /** ends the requests in flight (they answer status 0): the service is stopping */
  | { readonly abort: true }
  | { readonly close: true };

export type ThreadReply =
  | { readonly id: number; readonly group: GroupSummary; readonly bodies?: Uint8Array[] }
  | { readonly id: number; readonly error: string }
  | { readonly id: number; readonly answer: UpstreamAnswer };

/**
 * Ingest first: this thread alone goes to nice 10 (Linux keeps a nice value per thread; /proc/thread-self names
 * this one), so on busy cores the main thread's device posts run before it. Elsewhere it keeps the process's.
 */
function lowerPriority(): void {
  try {
    setPriority(Number(readlinkSync('/proc/thread-self').split('/').pop()), THREAD_NICE);
  } catch {
    // not Linux, or no /proc: the same priority as the main thread
  }
}

function serve(port: NonNullable<typeof parentPort>, setup: ThreadSetup): void {
  lowerPriority();
  const refs = openRefSource({ dataDir: setup.dataDir, mapSizeBytes: setup.mapSizeBytes });
  let client = new UpstreamClient(setup.url, setup.concurrency, setup.requestTimeoutMs);
  /** bodies encoded and not posted yet, by the id of the request that encoded them */
  const stashes = new Map<number, Array<Uint8Array | undefined>>();
  let inFlight = 0;
  let closing = false;
  const reply = (m: ThreadReply): void => port.postMessage(m);
  const finishClose = (): void => {
    client.close();
    void refs.close().finally(() => port.close());
  };
  const post = (id: number, path: string, body: Uint8Array | undefined): void => {
    if (body === undefined) {
      reply({ id, answer: { status: 0, body: '', error: 'no such body in the sync thread' } });
      return;
    }
    inFlight++;
    void client.post(path, body).then((answer) => {
      inFlight--;
      reply({ id, answer });
      if (closing && inFlight === 0) finishClose();
    });
  };
  port.on('message', (m: ThreadRequest) => {
    if ('close' in m) {
      closing = true;
      if (inFlight === 0) finishClose();
      return;
    }
    if ('abort' in m) {
      // the agent's sockets are destroyed: every request in flight answers at once; later ones get a new agent
      client.close();
      client = new UpstreamClient(setup.url, setup.concurrency, setup.requestTimeoutMs);
      return;
    }
    if ('drop' in m) {
      stashes.delete(m.drop);
      return;
    }
    if ('body' in m) {
      post(m.id, m.path, m.body);
      return;
    }
    if ('stash' in m) {
      const bodies = stashes.get(m.stash);
      const body = bodies?.[m.index];
      if (bodies !== undefined) {
        bodies[m.index] = undefined;
        if (bodies.every((b) => b === undefined)) stashes.delete(m.stash);
      }
      post(m.id, m.path, body);
      return;
    }
    try {
      // lmdb-js keeps a thread's read transaction until a timer of its own resets it, and a request can come
      // before that timer: without a fresh one, this thread would read a snapshot older than the commit that
      // recorded the entries it was asked for (test/upstream/sync-thread.test.ts)
      refs.fresh();
      const group = encodeGroup(refs, m.encode);
      const summary: GroupSummary = {
        ...group,
        bodies: group.bodies.map((b) => ({ points: b.points, lastTs: b.lastTs, bytes: b.body.byteLength })),
      };
      if (m.handOver === true) {
        // each body has an ArrayBuffer of its own (encode.ts): moved to the main thread without a copy
        const bodies = group.bodies.map((b) => b.body);
        port.postMessage(
          { id: m.id, group: summary, bodies } satisfies ThreadReply,
          bodies.map((b) => b.buffer as ArrayBuffer),
        );
        return;
      }
      if (group.bodies.length > 0)
        stashes.set(
          m.id,
          group.bodies.map((b) => b.body),
        );
      reply({ id: m.id, group: summary });
    } catch (err) {
      reply({ id: m.id, error: (err as Error).message });
    }
  });
}

if (parentPort !== null) serve(parentPort, workerData as ThreadSetup);
