/** CSV downloads (CONTRACT §8). */
import type { Services } from '../../context.js';
import type { HttpRouter } from '../../http/adapter.js';

export function registerDownloadApi(_router: HttpRouter, _s: Services): void {
  // filled in by its issue
}
