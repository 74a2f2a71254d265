import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import type { HttpContext } from '../../uws/adapter.js';
import { tokenPrefix } from '../../status/failures.js';
import type { DeviceRecord } from '../../store/entities.js';

/**
 * docs/api.md: the access token in the path is checked before the body is parsed; unknown → 401, counted and
 * logged with its first characters and the client's address (status/failures.ts); a known one is the device's
 * activity (src/device/state.ts). Call before the first await.
 */
export function authenticateDevice(
  s: Pick<Services, 'entities' | 'failures' | 'state'>,
  ctx: HttpContext,
): DeviceRecord {
  const token = ctx.params[0] ?? '';
  const device = token === '' ? undefined : s.entities.deviceByToken(token);
  if (!device) {
    if (s.failures !== undefined) {
      const source = `${ctx.remoteAddress()} (token ${tokenPrefix(token)})`;
      s.failures.note(
        'deviceToken',
        `http: unknown device access token ${tokenPrefix(token)} from ${ctx.remoteAddress()} on ${ctx.method.toUpperCase()} /api/v1/${tokenPrefix(token)}/${ctx.url.split('/').slice(4).join('/')}`,
        source,
      );
    }
    throw new OutpostError('DEVICE_TOKEN_INVALID');
  }
  // every request of the device API is activity (HTTP has no session: no connect or disconnect, as TB)
  s.state?.activity(device.id);
  return device;
}
