/**
 * The store, opened in-process for unit tests: an LMDB environment in a temp dir (closed, then removed, at
 * teardown), the series store on it, and the loops tests run against it. Daemon-level helpers (a real
 * `outpost serve`, users, status polling) are in server.ts and users.ts.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULTS } from '../../src/config/index.js';
import { Dictionary } from '../../src/store/encoding/dict.js';
import { type StoreEnv, openStoreEnv } from '../../src/store/env.js';
import { DEFAULT_STORE_OPTIONS, type StoreOptions } from '../../src/store/series/options.js';
import { LmdbTimeseriesStore } from '../../src/store/series/store.js';
import type { Teardown } from './server.js';

/** A map big enough for every unit test's data; LMDB only takes the pages it uses. */
const TEST_MAP_BYTES = 256 * 1024 * 1024;

export interface EnvOptions {
  /** an existing directory (left in place); absent: a fresh temp dir, removed at teardown */
  readonly dataDir?: string;
  readonly mapSizeBytes?: number;
  readonly readOnly?: boolean;
}

export interface TestEnv {
  readonly env: StoreEnv;
  readonly dict: Dictionary;
  readonly dataDir: string;
}

/** Opens a store environment and its name dictionary; closed at teardown, before its temp dir goes. */
export function openTestEnv(t: Teardown, opts: EnvOptions = {}): TestEnv {
  const own = opts.dataDir === undefined;
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'outpost-store-'));
  const env = openStoreEnv({
    dataDir,
    mapSizeBytes: opts.mapSizeBytes ?? TEST_MAP_BYTES,
    ...(opts.readOnly ? { readOnly: true } : {}),
  });
  t.teardown(async () => {
    await env.close();
    if (own) rmSync(dataDir, { recursive: true, force: true });
  });
  return { env, dict: new Dictionary(env), dataDir };
}

export interface TestSeries extends TestEnv {
  readonly store: LmdbTimeseriesStore;
}

/** A series store on a fresh environment; `opts` override the daemon's defaults (DEFAULT_STORE_OPTIONS). */
export function openSeriesStore(t: Teardown, opts: Partial<StoreOptions> = {}, envOpts: EnvOptions = {}): TestSeries {
  const fixture = openTestEnv(t, envOpts);
  return {
    ...fixture,
    store: new LmdbTimeseriesStore(fixture.env, fixture.dict, { ...DEFAULT_STORE_OPTIONS, ...opts }),
  };
}

/**
 * The store of a daemon's data dir, opened from this (another) process as the CLI does, with the daemon's map
 * size; read-only unless told otherwise. Closed at teardown; the data dir stays.
 */
export function openDaemonEnv(t: Teardown, dataDir: string, opts: { readOnly?: boolean } = {}): TestEnv {
  return openTestEnv(t, { dataDir, mapSizeBytes: DEFAULTS.store.mapSizeBytes, readOnly: opts.readOnly ?? true });
}

/** Like openDaemonEnv, but open only while `fn` runs (the daemon sees no reader left behind). */
export async function withDaemonEnv<T>(dataDir: string, fn: (env: StoreEnv) => T | Promise<T>): Promise<T> {
  const env = openStoreEnv({ dataDir, mapSizeBytes: DEFAULTS.store.mapSizeBytes, readOnly: true });
  try {
    return await fn(env);
  } finally {
    await env.close();
  }
}

/** Runs compaction steps of `budgetMs` as of `now` until no window is due; resolves with the windows compacted. */
export async function compactAll(store: LmdbTimeseriesStore, now: number, budgetMs = 50): Promise<number> {
  let total = 0;
  for (;;) {
    const r = await store.compactStep(now, budgetMs);
    total += r.compacted;
    if (!r.more) return total;
  }
}
