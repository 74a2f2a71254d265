/** The ThingsBoard device HTTP API, `/api/v1/{token}/...` (CONTRACT §4). */
import type { Services } from '../../context.js';
import type { HttpRouter } from '../../http/adapter.js';
import { postTelemetry } from './telemetry.js';

export function registerDeviceApi(router: HttpRouter, s: Services): void {
  router.route('post', '/api/v1/:token/telemetry', postTelemetry(s));
}
