/**
 * Device attribute endpoints (docs/api.md): `POST /attributes` (client scope), `GET /attributes` and the
 * `GET /attributes/updates` long-poll.
 */
import type { Services } from '../../context.js';
import type { HttpContext, Reply } from '../../uws/adapter.js';
import { jsonText } from '../../uws/adapter.js';
import { parseAttributes, parseBody } from '../../ingest/payload.js';
import { deviceAttributesJson, keyList } from '../../device/attributes.js';
import { accepted, authenticateDevice } from './auth.js';
import { holdRequest, pollReply, pollTimeout } from './rpc.js';

/** POST /api/v1/{token}/attributes: a flat object → CLIENT_SCOPE; nulls skipped; 200 empty once on disk. */
export function postAttributes(s: Services) {
  return async (ctx: HttpContext): Promise<void> => {
    const device = authenticateDevice(s, ctx);
    const entries = parseAttributes(parseBody(await ctx.body()));
    accepted(s, device);
    await s.attributes.save('DEVICE', device.id, 'CLIENT_SCOPE', entries, s.now());
  };
}

/**
 * GET /api/v1/{token}/attributes[?clientKeys=a,b][&sharedKeys=c] (docs/api.md): neither → all client and all
 * shared; one → only that section; `{"client":{..},"shared":{..}}` with empty sections omitted.
 */
export function getAttributes(s: Services) {
  return (ctx: HttpContext): Reply => {
    const device = authenticateDevice(s, ctx);
    accepted(s, device);
    return jsonText(
      deviceAttributesJson(
        s.attributes,
        device.id,
        keyList(ctx.query.get('clientKeys')),
        keyList(ctx.query.get('sharedKeys')),
      ),
    );
  };
}

/**
 * GET /api/v1/{token}/attributes/updates?timeout= (docs/api.md): the next SHARED_SCOPE change as a flat
 * `{k:v}` or `{"deleted":[..]}`; 408 with an empty body on timeout.
 */
export function getAttributeUpdates(s: Services) {
  return async (ctx: HttpContext): Promise<Reply> => {
    // Only the id is kept while the poll is held, not the whole device record.
    const device = authenticateDevice(s, ctx);
    const deviceId = device.id;
    const timeout = pollTimeout(ctx, s.config);
    accepted(s, device);
    const origin = ctx.remoteAddress();
    return pollReply(await holdRequest(ctx, (settle) => s.rpc.waitAttributes(deviceId, timeout, settle, origin)));
  };
}
