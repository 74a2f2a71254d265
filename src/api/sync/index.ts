/**
 * The gateway's side of upstream sync (docs/sync.md): `GET /api/outpost/sync` (tenant admin), the sync status, and `POST /api/v1/provision`,
 * TB's device provisioning (strategy "allow create new devices") so one Outpost can sync into another and LAN
 * devices can provision themselves. TB answers every provisioning outcome with HTTP 200.
 */
import type { Services } from '../../context.js';
import type { HttpContext, HttpRouter, Reply } from '../../uws/adapter.js';
import { json } from '../../uws/adapter.js';
import { SYNC_OFF } from '../../upstream/uplink/status.js';
import { principalOf } from '../principal.js';

function provision(s: Services) {
  return async (ctx: HttpContext): Promise<Reply> => {
    const address = ctx.remoteAddress();
    return json(await s.devices.provision(await ctx.body(), address));
  };
}

export function registerSyncApi(router: HttpRouter, s: Services): void {
  router.route('post', '/api/v1/provision', provision(s));
  router.route('get', '/api/outpost/sync', (ctx) => {
    s.auth.requireTenantAdmin(principalOf(s, ctx));
    return json(s.sync?.status() ?? SYNC_OFF);
  });
  // batches set aside (refused with 400, or unreadable): listed, retried or cleared (`outpost sync`)
  router.route('get', '/api/outpost/sync/setAside', (ctx) => {
    s.auth.requireTenantAdmin(principalOf(s, ctx));
    return json(s.sync?.setAside?.list(1000) ?? { batches: [], total: 0 });
  });
  router.route('post', '/api/outpost/sync/setAside/retry', async (ctx) => {
    s.auth.requireTenantAdmin(principalOf(s, ctx));
    return json({ points: (await s.sync?.setAside?.retry()) ?? 0 });
  });
  router.route('del', '/api/outpost/sync/setAside', async (ctx) => {
    s.auth.requireTenantAdmin(principalOf(s, ctx));
    return json({ points: (await s.sync?.setAside?.clear()) ?? 0 });
  });
}
