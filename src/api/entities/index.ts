/** Devices, customers and assets REST (CONTRACT §2). */
import type { Services } from '../../context.js';
import type { HttpRouter } from '../../http/adapter.js';

export function registerEntityApi(_router: HttpRouter, _s: Services): void {
  // filled in by its issue
}
