/** CSV downloads (docs/api.md): GET, user JWT in `Authorization: Bearer` (X-Authorization also accepted). */
import type { Services } from '../../context.js';
import type { HttpRouter } from '../../uws/adapter.js';
import { downloadAttributes } from './attributes.js';
import { downloadSeries } from './series.js';

export function registerDownloadApi(router: HttpRouter, s: Services): void {
  router.route('get', '/api/download/deviceSeriesData', downloadSeries(s));
  router.route('get', '/api/download/deviceAttributesData', downloadAttributes(s));
}
