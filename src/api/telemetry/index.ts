/** Telemetry and attribute REST /api/plugins/telemetry (CONTRACT §5). */
import type { Services } from '../../context.js';
import type { HttpRouter } from '../../http/adapter.js';

export function registerTelemetryApi(_router: HttpRouter, _s: Services): void {
  // filled in by its issue
}
