/**
 * Per-key columns for the wide CSV (docs/api.md): each holds one key's points in [start, end] ascending.
 * Timeseries points come through `TimeseriesStore.range` (so the downloads see whatever the store holds:
 * head fragments, chunks), read in pages so no store iterator is held while the response waits on a slow
 * client; depth points come through `DepthStore.range`, which pages itself.
 */
import { Column } from '../../csv/column.js';
import { javaDouble } from '../../model/kv.js';
import type { DepthStore } from '../../store/depth.js';
import type { TimeseriesStore } from '../../store/series/interface.js';

/** Points per timeseries page, at least (a page ends on a store window boundary, see below). */
const PAGE = 1024;

/**
 * One key's points with startTs ≤ ts ≤ endTs (inclusive, epoch ms), ascending.
 *
 * Each page is one `range` call, closed before anything is written. The store decodes whole chunk windows
 * of `windowMs` (config store.chunkWindowMs), so a page is cut only where a new window begins once it holds
 * PAGE points: every window is decoded once. `windowMs` is a performance hint only; any value is correct.
 */
export function timeseriesColumn(
  store: TimeseriesStore,
  entityId: string,
  key: string,
  startTs: number,
  endTs: number,
  windowMs: number,
): Column {
  let from = startTs;
  // The store's ranges are [startTs, endTs): +1 makes endTs inclusive (timestamps are integers).
  const until = endTs + 1;
  const windowOf = (ts: number): number => Math.floor(ts / windowMs);
  return new Column((page) => {
    if (from >= until) return;
    const it = store.range(entityId, key, { startTs: from, endTs: until, order: 'ASC' });
    let lastWindow = 0;
    from = until;
    for (let r = it.next(); !r.done; r = it.next()) {
      const p = r.value;
      if (page.count >= PAGE && windowOf(p.ts) !== lastWindow) {
        from = p.ts;
        break;
      }
      page.addValue(p.ts, p.value);
      lastWindow = windowOf(p.ts);
    }
    it.return?.();
  });
}

/** Depth points per page (the depth store pages its LMDB reads itself). */
const DEPTH_PAGE = 1024;

/** One key's depth points with startDs ≤ ds ≤ endDs, ascending. */
export function depthColumn(store: DepthStore, entityId: string, key: string, startDs: number, endDs: number): Column {
  const it = store.range(entityId, key, { startDs, endDs });
  return new Column((page) => {
    for (let n = 0; n < DEPTH_PAGE; n++) {
      const r = it.next();
      if (r.done) return;
      page.addValue(r.value.ds, r.value.value);
    }
  });
}

/** The first column of a row: ts as integer ms, ds as Java's Double.toString (Tempus: "4000.0"). */
export const formatTs = 'integer';
export const formatDs = (ds: number): string => javaDouble(ds);
