/**
 * Device attribute endpoints (docs/api.md): `POST /attributes` (client scope), `GET /attributes` and the
 * `GET /attributes/updates` long-poll.
 */
import type { TransportServices } from '../services.js';
import type { HttpContext, Reply } from '../../uws/adapter.js';
import { jsonText } from '../../uws/adapter.js';
import { accepted, authenticateDevice } from './auth.js';
import { holdRequest, pollReply, pollTimeout } from './rpc.js';

/** POST /api/v1/{token}/attributes: a flat object → CLIENT_SCOPE; nulls skipped; 200 empty once on disk. */
export function postAttributes(s: TransportServices) {
  return async (ctx: HttpContext): Promise<void> => {
    const device = authenticateDevice(s, ctx);
    await s.devices.attributes(device.id, await ctx.body(), accepted(s, device));
  };
}

/**
 * GET /api/v1/{token}/attributes[?clientKeys=a,b][&sharedKeys=c] (docs/api.md): neither → all client and all
 * shared; one → only that section; `{"client":{..},"shared":{..}}` with empty sections omitted.
 */
export function getAttributes(s: TransportServices) {
  return (ctx: HttpContext): Reply => {
    const device = authenticateDevice(s, ctx);
    s.devices.activity(device.id);
    return jsonText(
      s.devices.readAttributes(device.id, s.devices.keys(ctx.query.get('clientKeys'), ctx.query.get('sharedKeys'))),
    );
  };
}

/**
 * GET /api/v1/{token}/attributes/updates?timeout= (docs/api.md): the next SHARED_SCOPE change as a flat
 * `{k:v}` or `{"deleted":[..]}`; 408 with an empty body on timeout.
 */
export function getAttributeUpdates(s: TransportServices) {
  return async (ctx: HttpContext): Promise<Reply> => {
    // Only the id is kept while the poll is held, not the whole device record.
    const device = authenticateDevice(s, ctx);
    const deviceId = device.id;
    const timeout = pollTimeout(ctx, s.config);
    s.devices.activity(deviceId);
    const origin = ctx.remoteAddress();
    return pollReply(await holdRequest(ctx, (settle) => s.devices.waitAttributes(deviceId, timeout, settle, origin)));
  };
}
