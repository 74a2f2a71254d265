/**
 * POST /api/v1/{token}/telemetry (docs/api.md): 401 before the body is read; the three shapes; 400 for bad
 * JSON or shape with nothing stored; 200 with an empty body once the points are on disk.
 */
import type { TransportServices } from '../services.js';
import type { HttpContext } from '../../uws/adapter.js';
import { accepted, authenticateDevice } from './auth.js';

export function postTelemetry(s: TransportServices) {
  return async (ctx: HttpContext): Promise<void> => {
    const device = authenticateDevice(s, ctx);
    const body = await ctx.body();
    await s.devices.telemetry(device.id, body, accepted(s, device));
  };
}
