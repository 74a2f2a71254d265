import { OutpostError } from '../../errors.js';
import type { HttpContext } from '../../http/adapter.js';
import type { EntityStore, DeviceRecord } from '../../store/entities.js';

/** docs/api.md: the access token in the path is checked before the body is parsed; unknown → 401. */
export function authenticateDevice(entities: EntityStore, ctx: HttpContext): DeviceRecord {
  const token = ctx.params[0] ?? '';
  const device = token === '' ? undefined : entities.deviceByToken(token);
  if (!device) throw new OutpostError('DEVICE_TOKEN_INVALID');
  return device;
}
