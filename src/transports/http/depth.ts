/**
 * POST /api/v1/{token}/depth/telemetry (docs/api.md, Tempus' MQTT topic v1/devices/me/depth/telemetry over
 * HTTP): `{"ds":<double>,"values":{..}}` or an array of those. Both fields are required (400 otherwise, where
 * Tempus silently skipped); values are typed as telemetry; same key+depth overwrites; 401 before the body is
 * read; all-or-nothing; 200 with an empty body once on disk.
 */
import type { TransportServices } from '../services.js';
import type { HttpContext } from '../../uws/adapter.js';
import { accepted, authenticateDevice } from './auth.js';

export function postDepthTelemetry(s: TransportServices) {
  return async (ctx: HttpContext): Promise<void> => {
    const device = authenticateDevice(s, ctx);
    await s.devices.depth(device.id, await ctx.body(), accepted(s, device));
  };
}
