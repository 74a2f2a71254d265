/**
 * The LMDB environment: one memory-mapped file in the data dir with named sub-databases. Only this module
 * knows their names and encodings; the rest of the store gets typed handles.
 *
 * Multi-process: one process writes the environment, the daemon or else an admin command under the data dir's
 * lock (src/admin/channel.ts; two writing processes lost acknowledged commits, docs/design/storage.md, "One
 * writer"). Other processes (the technician's commands, a test's read-back) open it read-only.
 */
import { mkdirSync, statfsSync } from 'node:fs';
import { restrictToOwner } from '../daemon/private-files.js';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { type Database, type RootDatabase, open as openLmdb } from 'lmdb';
import { OutpostError } from '../errors.js';

export const SCHEMA_VERSION = 1;

/** Buffer keys → Buffer values. */
export type BinaryDb = Database<Buffer, Buffer>;
/** ordered-binary keys (strings, numbers, arrays of them) → msgpack values. */
export type ObjectDb<V> = Database<V, string | number | Array<string | number>>;

export interface StoreEnv {
  readonly root: RootDatabase;
  /** schema version, id counters */
  readonly meta: ObjectDb<unknown>;
  /** entity UUID → entity record */
  readonly entities: ObjectDb<unknown>;
  /** [tenantId, entityType, name] → UUID (unique names per tenant and type) */
  readonly names: ObjectDb<string>;
  /** device access token → device UUID */
  readonly tokens: ObjectDb<string>;
  /** lower-cased email → user UUID */
  readonly users: ObjectDb<string>;
  /**
   * entity relations, each under two keys: ['F', fromId, group, type, toId] and ['T', toId, group, type, fromId]
   * → the relation record (store/relations.ts)
   */
  readonly relations: ObjectDb<unknown>;
  /**
   * alarms (store/alarms.ts): ['A', id] → the alarm; ['O', originatorId, createdTime, id] → 0 (an originator's
   * alarms, oldest first); ['U', originatorId, type] → id (its uncleared alarm of that type)
   */
  readonly alarms: ObjectDb<unknown>;
  /** ['k', name] ↔ ['K', idx]; ['e', uuid] ↔ ['E', idx]: interned ids for compact binary keys */
  readonly dict: ObjectDb<string | number>;
  /** [entity u32][key u32][ts i64] → value: raw points not yet compacted (the head) */
  readonly head: BinaryDb;
  /** [entity u32][key u32] → [ts i64][value]: the newest point of each series */
  readonly latest: BinaryDb;
  /** [entity u32][scope u8][key utf8] → [lastUpdateTs i64][value]: client, shared and server attributes */
  readonly attributes: BinaryDb;
  /** [entity u32][key u32][depth f64 ordered] → value: depth series (docs/api.md) */
  readonly depth: BinaryDb;
  /** [tier u8][entity u32][key u32][bucket i64] → aggregate: rollup blocks of each tier */
  readonly rollups: BinaryDb;
  /** [entity u32][key u32][chunk start i64] → compressed points: compacted windows */
  readonly chunks: BinaryDb;
  /** upstream sync's records (what is left to send, among others); every key layout is listed in outbox.ts */
  readonly outbox: ObjectDb<unknown>;
  /** resolves when every write issued so far is committed and flushed to disk */
  flushed(): Promise<void>;
  /** the error writes are refused with while the filesystem is below its free-space reserve, else undefined */
  refusal(): OutpostError | undefined;
  /**
   * a synchronous transaction (transactionSync) failed: reported as a failed commit (logged once, and
   * flushed() no longer waits for lmdb-js's flush of it, which never comes)
   */
  commitFailed(err: OutpostError): void;
  close(): Promise<void>;
}

export interface OpenOptions {
  readonly dataDir: string;
  readonly mapSizeBytes: number;
  readonly readOnly?: boolean;
  /**
   * with readOnly: a second thread of the process that already has the environment open for writing (the sync
   * thread). lmdb-js then opens the databases in a write transaction, under LMDB's lock: a read-only environment
   * opens them outside it, racing the other thread's writer (lmdb-js open.js, mdb_dbi_open's rule).
   */
  readonly otherThread?: boolean;
  /**
   * told of every failed commit (once per transaction) and every turn's writes refused for want of space (see
   * minFreeBytes), with the error the writes were rejected with
   */
  readonly onCommitFailure?: (err: OutpostError) => void;
  /**
   * bytes; writes are refused (STORE_FULL) while the data dir's filesystem has less free than this, before
   * lmdb-js sees them. Default: 10% of the filesystem, at most 32 MiB.
   */
  readonly minFreeBytes?: number;
}

/** how often the free space of the data dir's filesystem is read */
const FREE_SPACE_CHECK_MS = 1000;
const MAX_MIN_FREE_BYTES = 32 * 1024 * 1024;

interface SpaceCheck {
  readonly low: boolean;
  /** reads the filesystem now (not on the timer) and answers `low` */
  lowNow(): boolean;
  stop(): void;
}

const NO_SPACE_CHECK: SpaceCheck = { low: false, lowNow: () => false, stop: () => undefined };

/**
 * Whether the data dir's filesystem is below its reserve. Read on a timer, not per write, so every write of
 * one event-loop turn (one transaction) gets the same answer: a batch is refused whole or not at all.
 */
class FreeSpace implements SpaceCheck {
  low = false;
  private readonly timer: NodeJS.Timeout;

  private readonly minFree: number;

  /** `minFree` defaults to 10% of the filesystem, at most MAX_MIN_FREE_BYTES */
  constructor(
    private readonly dir: string,
    minFree: number | undefined,
  ) {
    const fs = statfsSync(dir);
    this.minFree = minFree ?? Math.min(MAX_MIN_FREE_BYTES, Math.floor(0.1 * fs.blocks * fs.bsize));
    this.check();
    this.timer = setInterval(() => this.check(), FREE_SPACE_CHECK_MS);
    this.timer.unref();
  }

  lowNow(): boolean {
    this.check();
    return this.low;
  }

  private check(): void {
    try {
      const fs = statfsSync(this.dir);
      this.low = fs.bavail * fs.bsize < this.minFree;
    } catch {
      // an unreadable statfs says nothing about space: lmdb-js' own errors still apply
      this.low = false;
    }
  }

  stop(): void {
    clearInterval(this.timer);
  }
}

/** errno / LMDB codes meaning "the store cannot grow": ENOSPC, EFBIG, EDQUOT, MDB_MAP_FULL (lmdb-js: numbers; node's fs: names) */
const STORE_FULL_CODES: ReadonlySet<number | string> = new Set([28, 27, 122, -30792, 'ENOSPC', 'EFBIG', 'EDQUOT']);

/**
 * A failed write as the API reports it: out of space is 507 STORE_FULL, anything else 500 STORE_FAILED, never a
 * bare errno as a 500. An OutpostError passes unchanged.
 */
export function writeFailure(err: unknown): OutpostError {
  if (err instanceof OutpostError) return err;
  const code = (err as { code?: unknown } | null)?.code;
  const full = (typeof code === 'number' || typeof code === 'string') && STORE_FULL_CODES.has(code);
  return new OutpostError(full ? 'STORE_FULL' : 'STORE_FAILED', undefined, { cause: err });
}
/** how long a failed write waits for lmdb-js to name the cause before it is reported without one */
const CAUSE_WAIT_MS = 1000;

/** `p`'s value, or undefined once `ms` have passed without it. */
async function settledWithin<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The error a failed commit's writes are rejected with. lmdb-js rejects each of them with a generic "Commit
 * failed" whose cause is a second promise (`err.commitError`); that one is handled here, which also keeps it
 * from ending the process as an unhandled rejection (kriszyp/lmdb-js#368: a full disk would otherwise crash
 * the daemon at its first write). Anything else (an exception in a transaction callback) passes unchanged.
 * A failure whose cause names no full-store code, while the filesystem is below its reserve, is taken as the
 * full disk it most likely is: lmdb-js has reported EIO, and no cause at all, for page writes on a full
 * filesystem (test/disk-full under load).
 */
async function commitFailure(err: unknown, spaceLow: () => boolean): Promise<unknown> {
  const pending = (err as { commitError?: unknown } | null)?.commitError;
  if (!(pending instanceof Promise)) return err;
  const cause = await settledWithin(
    pending.then(
      () => undefined,
      (e: unknown) => e,
    ),
    CAUSE_WAIT_MS,
  );
  const code = (cause as { code?: unknown } | undefined)?.code;
  const full = ((typeof code === 'number' || typeof code === 'string') && STORE_FULL_CODES.has(code)) || spaceLow();
  // the cause is lmdb-js' own error, the same object for every write of the transaction
  return new OutpostError(full ? 'STORE_FULL' : 'STORE_FAILED', undefined, { cause: cause ?? err });
}

/**
 * lmdb-js also rejects a promise of its own for each failed event-turn batch, which nothing can reach: the
 * one it makes for the batch's start instruction. Its error is the same "Commit failed", with `commitError`.
 * Those two are dropped here (the writes' own promises, guarded below, carry the failure to their callers);
 * any other unhandled rejection is thrown on, so it ends the process as it would without this listener.
 */
let rejectionGuardInstalled = false;
function installRejectionGuard(): void {
  if (rejectionGuardInstalled) return;
  rejectionGuardInstalled = true;
  process.on('unhandledRejection', (reason: unknown) => {
    const pending = (reason as { commitError?: unknown } | null)?.commitError;
    if (reason instanceof Error && pending instanceof Promise) {
      pending.catch(() => undefined);
      return;
    }
    throw reason;
  });
}

type Writer = (...args: never[]) => Promise<unknown>;

/** What the guarded writes report: every failed commit, and whether the latest one failed. */
interface CommitWatch {
  /** the latest commit failed: lmdb-js then waits for its flush forever (`flushed`, `close`) */
  lastFailed: boolean;
  /** writes are refused before lmdb-js sees them (the filesystem is below its reserve) */
  readonly space: SpaceCheck;
  failed(err: OutpostError): void;
  /** the error for writes refused for want of space, one per event-loop turn, reported once: lmdb-js never sees them */
  refusal(): OutpostError;
  /** calls `cb` at the next failed commit, unless the returned function is called first */
  onNextFailure(cb: () => void): () => void;
}

/**
 * Wraps `db`'s write methods so their promises reject with commitFailure's error and never go unhandled: a
 * `void` put in a failed transaction must not end the process, and whoever awaits the transaction learns
 * what failed. lmdb-js hands every write of one transaction the same promise, so each transaction's is
 * wrapped once; the resolved promises of writes inside a transaction callback pass through as they are.
 * While the filesystem is below its reserve, writes are refused here: lmdb-js' native code, once a commit
 * failed on a full disk, has been seen to corrupt its heap (glibc aborts the process later, at exit or
 * sooner), so it is kept from running into the full disk at all where we can see it coming.
 */
function guardWrites(db: object, methods: readonly string[], watch: CommitWatch): void {
  let lastIn: Promise<unknown> | undefined;
  let lastOut: Promise<unknown> | undefined;
  const refuse = (): Promise<unknown> => {
    const p = Promise.reject(watch.refusal());
    p.catch(() => undefined);
    return p;
  };
  const guard = (p: Promise<unknown>): Promise<unknown> => {
    if (p === lastIn) return lastOut as Promise<unknown>;
    if ((p as { isSync?: boolean }).isSync === true) return p;
    const out = p.then(
      (v) => {
        watch.lastFailed = false;
        return v;
      },
      async (err: unknown) => {
        const failure = await commitFailure(err, () => watch.space.lowNow());
        if (failure instanceof OutpostError) watch.failed(failure);
        throw failure;
      },
    );
    out.catch(() => undefined);
    lastIn = p;
    lastOut = out;
    return out;
  };
  const target = db as Record<string, Writer>;
  for (const name of methods) {
    const write = (target[name] as Writer).bind(db);
    target[name] = ((...args: never[]) => (watch.space.low ? refuse() : guard(write(...args)))) as Writer;
  }
}

/** how long closing waits for lmdb-js after a failed commit (see CommitWatch.lastFailed) */
const CLOSE_AFTER_FAILURE_MS = 2000;

async function syncFile(path: string): Promise<void> {
  const file = await open(path, 'r');
  try {
    await file.datasync();
  } finally {
    await file.close();
  }
}

/**
 * Opens of a store a daemon is writing, read-only (a local CLI command, a test's read-back), now and then find
 * one of its databases missing: lmdb-js then answers `undefined` for it, and the first use fails with a
 * TypeError. Seen once in thousands of opens beside compaction (test/store/compaction-crash.test.ts); opened again,
 * it is there. A store that really lacks one is not an Outpost store.
 */
const READ_ONLY_OPEN_ATTEMPTS = 5;

export function openStoreEnv(opts: OpenOptions): StoreEnv {
  for (let attempt = 1; ; attempt++) {
    const missing: string[] = [];
    const env = openOnce(opts, missing);
    if (missing.length === 0) return env;
    void env.root.close();
    if (attempt >= READ_ONLY_OPEN_ATTEMPTS) {
      throw new OutpostError(
        'STORE_FAILED',
        `store at ${opts.dataDir} has no ${missing.join(', ')} database${missing.length === 1 ? '' : 's'}: not an Outpost store`,
      );
    }
  }
}

/** One open; the names of databases a read-only open did not find go to `missing` (openStoreEnv retries). */
function openOnce(opts: OpenOptions, missing: string[]): StoreEnv {
  let root: RootDatabase;
  const dataFile = join(opts.dataDir, 'outpost.mdb');
  try {
    mkdirSync(opts.dataDir, { recursive: true, mode: 0o700 });
    root = openLmdb({
      path: dataFile,
      mapSize: opts.mapSizeBytes,
      // Commit returns before fsync; durability is awaited explicitly through `flushed` (docs/api.md).
      overlappingSync: true,
      maxDbs: 32,
      readOnly: (opts.readOnly ?? false) && opts.otherThread !== true,
    });
  } catch (err) {
    throw new OutpostError('STORE_FAILED', `opening store at ${opts.dataDir}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  if (!opts.readOnly) restrictToOwner(dataFile, `${dataFile}-lock`);
  if (!opts.readOnly) installRejectionGuard();
  // One failure reaches onCommitFailure once, however many databases its transaction wrote.
  let reported: unknown;
  // bounded by the flushed() calls still waiting: each removes itself when its flush comes
  const failureWaiters = new Set<() => void>();
  let refusal: OutpostError | undefined;
  const watch: CommitWatch = {
    lastFailed: false,
    space: opts.readOnly ? NO_SPACE_CHECK : new FreeSpace(opts.dataDir, opts.minFreeBytes),
    refusal() {
      if (refusal === undefined) {
        refusal = new OutpostError('STORE_FULL', undefined, {
          cause: new Error("the data dir's filesystem is below its free-space reserve"),
        });
        opts.onCommitFailure?.(refusal);
        setImmediate(() => {
          refusal = undefined;
        });
      }
      return refusal;
    },
    failed(err) {
      watch.lastFailed = true;
      const waiters = [...failureWaiters];
      failureWaiters.clear();
      for (const cb of waiters) cb();
      if (err.cause === reported) return;
      reported = err.cause;
      opts.onCommitFailure?.(err);
    },
    onNextFailure(cb) {
      failureWaiters.add(cb);
      return () => {
        failureWaiters.delete(cb);
      };
    },
  };
  const guarded = <D extends object>(db: D): D => {
    if (!opts.readOnly) guardWrites(db, ['put', 'remove'], watch);
    return db;
  };
  if (!opts.readOnly) guardWrites(root, ['transaction'], watch);
  // lmdb-js's typings promise a database; a read-only open gives undefined for one it did not find
  const found = <D>(name: string, db: D | undefined): D => {
    if (db === undefined) missing.push(name);
    return db as D;
  };
  const obj = <V>(name: string): ObjectDb<V> =>
    guarded(found(name, root.openDB<V, string | number | Array<string | number>>({ name, encoding: 'msgpack' })));
  // added after the first stores shipped: a read-only open of a store no daemon of this build has opened yet
  // finds none, which is no sign of a broken open (read-only processes never read relations)
  const optionalObj = <V>(name: string): ObjectDb<V> =>
    guarded(root.openDB<V, string | number | Array<string | number>>({ name, encoding: 'msgpack' }));
  const bin = (name: string): BinaryDb =>
    guarded(found(name, root.openDB<Buffer, Buffer>({ name, encoding: 'binary', keyEncoding: 'binary' })));

  const env: StoreEnv = {
    root,
    meta: obj('meta'),
    entities: obj('entities'),
    names: obj('names'),
    tokens: obj('tokens'),
    users: obj('users'),
    relations: optionalObj('relations'),
    alarms: optionalObj('alarms'),
    dict: obj('dict'),
    head: bin('head'),
    latest: bin('latest'),
    attributes: bin('attributes'),
    depth: bin('depth'),
    rollups: bin('rollups'),
    chunks: bin('chunks'),
    outbox: obj('outbox'),
    // lmdb-js waits on the flush of the latest transaction, which never comes when that one failed. A failed
    // transaction wrote nothing, so after a failure, already seen or still to come, one fdatasync of the file
    // of our own covers every transaction committed before it.
    flushed: () => {
      if (watch.lastFailed) return syncFile(dataFile);
      return new Promise<void>((resolve, reject) => {
        const forget = watch.onNextFailure(() => {
          syncFile(dataFile).then(resolve, reject);
        });
        root.flushed.then(
          () => {
            forget();
            resolve();
          },
          (err: unknown) => {
            forget();
            reject(err);
          },
        );
      });
    },
    refusal: () => (watch.space.low ? watch.refusal() : undefined),
    commitFailed: (err) => watch.failed(err),
    close: () => {
      watch.space.stop();
      if (!watch.lastFailed) return root.close();
      return settledWithin(root.close(), CLOSE_AFTER_FAILURE_MS).then(() => undefined);
    },
  };
  if (!opts.readOnly) {
    const v = env.meta.get('schemaVersion');
    if (v === undefined) env.meta.putSync('schemaVersion', SCHEMA_VERSION);
    else if (v !== SCHEMA_VERSION) {
      throw new OutpostError(
        'STORE_FAILED',
        `store at ${opts.dataDir} has schema ${String(v)}, this build reads ${SCHEMA_VERSION}`,
      );
    }
  }
  return env;
}

/**
 * The value under `key` copied out of lmdb-js' shared read buffer (getBinaryFast's), for a cache to keep:
 * getBinary's copies hold ~4 KB each. Values below 4 KB (chunks, rollup blocks) are slices of Node's 8-KB
 * Buffer pool: a month query's 800 copies were each an ArrayBuffer of its own, a tenth of its first run.
 */
export function readOwnCopy(db: BinaryDb, key: Buffer): Buffer | undefined {
  const fast = db.getBinaryFast(key);
  if (fast === undefined) return undefined;
  const own = Buffer.allocUnsafe(fast.length);
  own.set(new Uint8Array(fast.buffer, fast.byteOffset, fast.length));
  return own;
}
