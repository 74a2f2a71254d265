import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import type { HttpContext } from '../../uws/adapter.js';
import { tokenPrefix } from '../../status/failures.js';
import type { DeviceRecord } from '../../store/entities.js';

/**
 * docs/api.md: the access token in the path is checked before the body is parsed; unknown → 401, counted and
 * logged with its first characters and the client's address (status/failures.ts). Call before the first await;
 * the request is the device's activity once it is accepted (`accepted`): bad input changes nothing, its state too.
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
  return device;
}

/**
 * A request of the device API that passed its checks is the device's activity (src/device/state.ts; HTTP has no
 * session: no connect or disconnect, as ThingsBoard). As TB, a body that does not parse is none.
 */
export function accepted(s: Pick<Services, 'state'>, device: Pick<DeviceRecord, 'id'>): void {
  s.state?.activity(device.id);
}
