import type { TransportServices } from '../services.js';
import type { DeviceRecord } from '../../device/actions.js';
import type { HttpContext } from '../../uws/adapter.js';

/**
 * docs/api.md: the access token in the path is checked before the body is parsed; unknown → 401, counted and
 * logged with its first characters and the client's address (status/failures.ts). Call before the first await;
 * the request is the device's activity once it is accepted (`accepted`): bad input changes nothing, its state too.
 */
export function authenticateDevice(s: Pick<TransportServices, 'devices'>, ctx: HttpContext): DeviceRecord {
  return s.devices.authenticate(ctx.params[0] ?? '', (prefix) => {
    const source = `${ctx.remoteAddress()} (token ${prefix})`;
    return {
      message: `http: unknown device access token ${prefix} from ${ctx.remoteAddress()} on ${ctx.method.toUpperCase()} /api/v1/${prefix}/${ctx.url.split('/').slice(4).join('/')}`,
      source,
    };
  });
}

/**
 * A request of the device API that passed its checks is the device's activity (src/device/state.ts; HTTP has no
 * session: no connect or disconnect, as ThingsBoard). As TB, a body that does not parse is none.
 */
export function accepted(
  s: Pick<TransportServices, 'devices'>,
  device: Pick<DeviceRecord, 'id'>,
): { accepted: () => void } {
  return { accepted: () => s.devices.activity(device.id) };
}
