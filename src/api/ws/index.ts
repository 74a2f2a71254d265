/** Websocket telemetry API (CONTRACT §6). */
import type { TemplatedApp } from 'uWebSockets.js';
import type { Services } from '../../context.js';

export function registerWsApi(_app: TemplatedApp, _s: Services): void {
  // filled in by its issue
}
