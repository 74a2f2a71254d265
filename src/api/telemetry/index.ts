/** Telemetry and attribute REST under /api/plugins/telemetry (docs/api.md). */
import type { Services } from '../../context.js';
import type { HttpRouter } from '../../uws/adapter.js';
import { registerAttributeRoutes } from './attributes.js';
import { registerDepthRoutes } from './depth.js';
import { registerTimeseriesRoutes } from './timeseries.js';

export function registerTelemetryApi(router: HttpRouter, s: Services): void {
  registerTimeseriesRoutes(router, s);
  registerAttributeRoutes(router, s);
  registerDepthRoutes(router, s);
}
