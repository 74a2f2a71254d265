/**
 * The encoder thread (encoder.ts): opens the data dir's LMDB environment to read and answers each group with
 * its encoded bodies, one at a time, in the order asked.
 */
import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { type StoreEnv, openStoreEnv } from '../store/env.js';
import { type EncodeRequest, type EncodedGroup, encodeGroup } from './encode.js';

const ENCODER_NICE = 10;

export interface EncoderSetup {
  readonly dataDir: string;
  readonly mapSizeBytes: number;
}

export type EncoderRequest = { readonly id: number; readonly req: EncodeRequest } | { readonly close: true };
export type EncoderReply = { readonly id: number; readonly group: EncodedGroup } | { readonly id: number; readonly error: string };

/**
 * lmdb-js keeps a thread's read transaction until a timer of its own resets it, and a request can come before
 * that timer: without a fresh one, this thread would read a snapshot older than the commit that recorded the
 * entries it was asked for (test/sync-encoder.test.ts). `resetReadTxn` is lmdb-js API its typings leave out.
 */
function freshSnapshot(env: StoreEnv): void {
  (env.root as unknown as { resetReadTxn(): void }).resetReadTxn();
}

/**
 * Ingest first: this thread alone goes to nice 10 (Linux keeps a nice value per thread; /proc/thread-self names
 * this one), so on busy cores the main thread's device posts run before it. Elsewhere it keeps the process's.
 */
function lowerPriority(): void {
  try {
    setPriority(Number(readlinkSync('/proc/thread-self').split('/').pop()), ENCODER_NICE);
  } catch {
    // not Linux, or no /proc: the same priority as the main thread
  }
}

function serve(port: NonNullable<typeof parentPort>, setup: EncoderSetup): void {
  lowerPriority();
  const env = openStoreEnv({ dataDir: setup.dataDir, mapSizeBytes: setup.mapSizeBytes, readOnly: true, otherThread: true });
  port.on('message', (m: EncoderRequest) => {
    if ('close' in m) {
      void env.close().finally(() => port.close());
      return;
    }
    let reply: EncoderReply;
    try {
      freshSnapshot(env);
      reply = { id: m.id, group: encodeGroup(env, m.req) };
    } catch (err) {
      reply = { id: m.id, error: (err as Error).message };
    }
    port.postMessage(reply, 'group' in reply ? reply.group.bodies.map((b) => b.body.buffer as ArrayBuffer) : []);
  });
}

if (parentPort !== null) serve(parentPort, workerData as EncoderSetup);
