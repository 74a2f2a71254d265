/** Login, refresh, logout and current user (CONTRACT §3). */
import type { Services } from '../../context.js';
import type { HttpRouter } from '../../http/adapter.js';

export function registerAuthApi(_router: HttpRouter, _s: Services): void {
  // filled in by its issue
}
