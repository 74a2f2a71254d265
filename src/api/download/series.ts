/**
 * GET /api/download/deviceSeriesData?deviceId=&type=ts|ds&startValue=&endValue=[&keys=] (docs/api.md): the device's
 * time series (type=ts, epoch-ms bounds) or depth series (type=ds, depth bounds) as a wide CSV, bounds
 * inclusive, streamed. Order of checks: 401 (no valid user), 400 (parameters), 404 (unknown device),
 * 403 (not the user's device).
 */
import type { Services } from '../../context.js';
import type { HttpContext, StreamReply } from '../../uws/adapter.js';
import { principalOf } from '../principal.js';
import { type SeriesParams, seriesParams } from './params.js';
import { depthColumn, formatDs, formatTs, timeseriesColumn } from './sources.js';
import { type WideTable, csvAttachment } from './stream.js';

export function downloadSeries(s: Services) {
  return (ctx: HttpContext): StreamReply => {
    const principal = principalOf(s, ctx);
    const q = seriesParams(ctx);
    s.auth.checkAccess(principal, 'DEVICE', q.deviceId, 'read');
    return csvAttachment('device_data.csv', seriesTable(s, q));
  };
}

/** The wide table of one device's series in [start, end] (inclusive); `outpost export` reads it locally. */
export function seriesTable(s: Pick<Services, 'timeseries' | 'depth' | 'config'>, q: SeriesParams): WideTable {
  const all = q.type === 'ts' ? s.timeseries.keys(q.deviceId) : s.depth.keys(q.deviceId);
  const keys = q.keys === undefined ? all : q.keys.filter((k) => all.includes(k));
  const named =
    q.type === 'ts'
      ? keys.map(
          (k) =>
            [k, timeseriesColumn(s.timeseries, q.deviceId, k, q.start, q.end, s.config.store.chunkWindowMs)] as const,
        )
      : keys.map((k) => [k, depthColumn(s.depth, q.deviceId, k, q.start, q.end)] as const);
  return { positionColumn: q.type, named, formatPos: q.type === 'ts' ? formatTs : formatDs };
}
