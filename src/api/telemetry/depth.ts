/** keys/depthseries and values/depthseries. */
import type { Services } from '../../context.js';
import type { HttpRouter } from '../../http/adapter.js';

export function registerDepthRoutes(_router: HttpRouter, _s: Services): void {
  // filled in by its issue
}
