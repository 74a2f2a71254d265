/** keys/timeseries, latest and history values, timeseries writes and deletes. */
import type { Services } from '../../context.js';
import type { HttpRouter } from '../../http/adapter.js';

export function registerTimeseriesRoutes(_router: HttpRouter, _s: Services): void {
  // filled in by its issue
}
