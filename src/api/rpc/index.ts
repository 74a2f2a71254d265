/** Server-side RPC REST (CONTRACT §7). */
import type { Services } from '../../context.js';
import type { HttpRouter } from '../../http/adapter.js';

export function registerRpcApi(_router: HttpRouter, _s: Services): void {
  // filled in by its issue
}
