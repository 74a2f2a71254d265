/**
 * Reads what a (stopped or killed) daemon left in its data dir, straight from LMDB through the store's own
 * TimeseriesStore seam: the black-box way to check "acknowledged means on disk" without a query API.
 * What was acknowledged may still be in the write-ahead log only (docs/design/write-path.md), so the data file and the log are
 * copied to a scratch dir and opened there as the daemon opens them at start (the log replayed into LMDB):
 * the data dir itself is never written from a test.
 */
import { DEFAULTS } from '../../src/config/index.js';
import { type KvType, kvToString } from '../../src/model/kv.js';
import { Dictionary } from '../../src/store/encoding/dict.js';
import { openStoreEnv } from '../../src/store/env.js';
import { DEFAULT_STORE_OPTIONS } from '../../src/store/series/options.js';
import { LmdbTimeseriesStore } from '../../src/store/series/store.js';
import { nodeWalFs } from '../../src/store/wal.js';
import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { withDaemonEnv } from './store.js';

/** A point as compared in tests: ts, TB type and the TB string rendering of the value. */
export interface StoredPoint {
  readonly ts: number;
  readonly type: KvType;
  readonly value: string;
}

export interface EntityDump {
  /** key → latest point */
  readonly latest: Record<string, StoredPoint>;
  /** key → every raw point, ascending ts */
  readonly points: Record<string, StoredPoint[]>;
}

/** Every series of one entity in `dataDir`. */
export async function readEntity(dataDir: string, entityId: string): Promise<EntityDump> {
  const scratch = mkdtempSync(join(tmpdir(), 'outpost-readback-'));
  cpSync(join(dataDir, 'outpost.mdb'), join(scratch, 'outpost.mdb'));
  if (existsSync(join(dataDir, 'wal'))) cpSync(join(dataDir, 'wal'), join(scratch, 'wal'), { recursive: true });
  const env = openStoreEnv({ dataDir: scratch, mapSizeBytes: DEFAULTS.store.mapSizeBytes });
  try {
    const s = DEFAULTS.store;
    const store = new LmdbTimeseriesStore(env, new Dictionary(env), {
      ...DEFAULT_STORE_OPTIONS,
      wal: {
        fs: nodeWalFs(join(scratch, 'wal')),
        segmentBytes: s.walSegmentBytes,
        applyIntervalMs: s.applyIntervalMs,
        applyMaxPoints: s.applyMaxPoints,
      },
    });
    const latest: Record<string, StoredPoint> = {};
    const points: Record<string, StoredPoint[]> = {};
    for (const [key, p] of store.latest(entityId))
      latest[key] = { ts: p.ts, type: p.value.type, value: kvToString(p.value) };
    for (const key of store.keys(entityId)) {
      points[key] = [
        ...store.range(entityId, key, {
          startTs: Number.MIN_SAFE_INTEGER,
          endTs: Number.MAX_SAFE_INTEGER,
          order: 'ASC',
        }),
      ].map((p) => ({ ts: p.ts, type: p.value.type, value: kvToString(p.value) }));
    }
    await store.closeLog();
    return { latest, points };
  } finally {
    await env.close();
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** Entry counts of the head, chunk and rollup databases of `dataDir` (read-only, safe beside a running daemon). */
export async function storeEntries(dataDir: string): Promise<{ head: number; chunks: number; rollups: number }> {
  return withDaemonEnv(dataDir, (env) => {
    const count = (db: typeof env.head): number => (db.getStats() as { entryCount: number }).entryCount;
    return { head: count(env.head), chunks: count(env.chunks), rollups: count(env.rollups) };
  });
}
