/**
 * The LMDB environment: one memory-mapped file in the data dir with named sub-databases. Only this module
 * knows their names and encodings; the rest of the store gets typed handles.
 *
 * Multi-process: the admin CLI opens the same environment while the daemon runs (LMDB's lock file makes
 * that safe). The CLI only writes entities, users and credentials; interned ids and timeseries are written
 * by the daemon alone.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type Database, type RootDatabase, open } from 'lmdb';
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
  /** ['k', name] ↔ ['K', idx]; ['e', uuid] ↔ ['E', idx]: interned ids for compact binary keys */
  readonly dict: ObjectDb<string | number>;
  /** [entity u32][key u32][ts i64] → value: raw points not yet compacted (the head) */
  readonly head: BinaryDb;
  /** [entity u32][key u32] → [ts i64][value]: the newest point of each series */
  readonly latest: BinaryDb;
  /** [entity u32][scope u8][key utf8] → [lastUpdateTs i64][value] (attributes issue) */
  readonly attributes: BinaryDb;
  /** [entity u32][key u32][depth f64 ordered] → value (depth series issue) */
  readonly depth: BinaryDb;
  /** [tier u8][entity u32][key u32][bucket i64] → aggregate (downsampling issue) */
  readonly rollups: BinaryDb;
  /** [entity u32][key u32][chunk start i64] → compressed points (downsampling issue) */
  readonly chunks: BinaryDb;
  /** seq → batch awaiting upstream sync (sync issue) */
  readonly outbox: ObjectDb<unknown>;
  /** resolves when every write issued so far is committed and flushed to disk */
  flushed(): Promise<void>;
  close(): Promise<void>;
}

export interface OpenOptions {
  readonly dataDir: string;
  readonly mapSizeBytes: number;
  readonly readOnly?: boolean;
}

export function openStoreEnv(opts: OpenOptions): StoreEnv {
  let root: RootDatabase;
  try {
    mkdirSync(opts.dataDir, { recursive: true });
    root = open({
      path: join(opts.dataDir, 'outpost.mdb'),
      mapSize: opts.mapSizeBytes,
      // Commit returns before fsync; durability is awaited explicitly through `flushed` (CONTRACT §4).
      overlappingSync: true,
      maxDbs: 32,
      readOnly: opts.readOnly ?? false,
    });
  } catch (err) {
    throw new OutpostError('STORE_FAILED', `opening store at ${opts.dataDir}: ${(err as Error).message}`, { cause: err });
  }
  const obj = <V>(name: string): ObjectDb<V> => root.openDB<V, string | number | Array<string | number>>({ name, encoding: 'msgpack' });
  const bin = (name: string): BinaryDb => root.openDB<Buffer, Buffer>({ name, encoding: 'binary', keyEncoding: 'binary' });

  const env: StoreEnv = {
    root,
    meta: obj('meta'),
    entities: obj('entities'),
    names: obj('names'),
    tokens: obj('tokens'),
    users: obj('users'),
    dict: obj('dict'),
    head: bin('head'),
    latest: bin('latest'),
    attributes: bin('attributes'),
    depth: bin('depth'),
    rollups: bin('rollups'),
    chunks: bin('chunks'),
    outbox: obj('outbox'),
    flushed: () => Promise.resolve(root.flushed).then(() => undefined),
    close: () => root.close(),
  };
  if (!opts.readOnly) {
    const v = env.meta.get('schemaVersion');
    if (v === undefined) env.meta.putSync('schemaVersion', SCHEMA_VERSION);
    else if (v !== SCHEMA_VERSION) {
      throw new OutpostError('STORE_FAILED', `store at ${opts.dataDir} has schema ${String(v)}, this build reads ${SCHEMA_VERSION}`);
    }
  }
  return env;
}
