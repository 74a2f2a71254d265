/** Attribute reads, writes and deletes. */
import type { Services } from '../../context.js';
import type { HttpRouter } from '../../http/adapter.js';

export function registerAttributeRoutes(_router: HttpRouter, _s: Services): void {
  // filled in by its issue
}
