/**
 * CONTRACT §9 on this side: `GET /api/outpost/sync` (tenant admin), the sync status, and `POST /api/v1/provision`,
 * TB's device provisioning (strategy "allow create new devices") so one Outpost can sync into another and LAN
 * devices can provision themselves. TB answers every provisioning outcome with HTTP 200.
 */
import { timingSafeEqual } from 'node:crypto';
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import type { HttpContext, HttpRouter, Reply } from '../../http/adapter.js';
import { json } from '../../http/adapter.js';
import { isJsonObject } from '../../ingest/json.js';
import { parseBody } from '../../ingest/payload.js';
import { NULL_UUID } from '../../types.js';
import { SYNC_OFF } from '../../sync/status.js';
import { principalOf } from '../principal.js';

/** Equal strings, compared in constant time (a provision secret must not leak through timing). */
function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function provision(s: Services) {
  return async (ctx: HttpContext): Promise<Reply> => {
    const body = parseBody(await ctx.body());
    if (!isJsonObject(body)) throw new OutpostError('BAD_PAYLOAD', 'provisioning request must be a JSON object');
    const str = (k: string): string => {
      const v = body[k];
      return typeof v === 'string' ? v : '';
    };
    const { key, secret } = s.config.provision;
    if (key === '' || !sameSecret(str('provisionDeviceKey'), key) || !sameSecret(str('provisionDeviceSecret'), secret)) {
      return json({ status: 'NOT_FOUND', errorMsg: 'Provision data was not found!' });
    }
    const name = str('deviceName');
    if (name === '') return json({ status: 'FAILURE', errorMsg: 'Device name is required!' });
    if (s.entities.byName('DEVICE', name) !== undefined) {
      return json({ status: 'FAILURE', errorMsg: 'Failed to provision device: device with this name already exists!' });
    }
    const token = str('token');
    try {
      const d = await s.entities.createDevice({ name, type: str('deviceType') || 'default', token: token || undefined, customerId: NULL_UUID });
      return json({ credentialsType: 'ACCESS_TOKEN', credentialsValue: d.token, status: 'SUCCESS' });
    } catch (err) {
      // a concurrent request created the same name, or the requested token is taken
      return json({ status: 'FAILURE', errorMsg: `Failed to provision device: ${(err as Error).message}` });
    }
  };
}

export function registerSyncApi(router: HttpRouter, s: Services): void {
  router.route('post', '/api/v1/provision', provision(s));
  router.route('get', '/api/outpost/sync', (ctx) => {
    s.auth.requireTenantAdmin(principalOf(s, ctx));
    return json(s.sync?.status() ?? SYNC_OFF);
  });
}
