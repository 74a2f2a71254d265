/**
 * Device attribute endpoints (CONTRACT §4): `POST /attributes` (client scope), `GET /attributes` and the
 * `GET /attributes/updates` long-poll.
 */
import type { Services } from '../../context.js';
import type { HttpContext, Reply } from '../../http/adapter.js';
import { jsonText } from '../../http/adapter.js';
import { parseAttributes, parseBody } from '../../ingest/payload.js';
import { kvToJson } from '../../model/kv.js';
import type { AttributeKv } from '../../store/attributes.js';
import { authenticateDevice } from './auth.js';
import { holdRequest, pollReply, pollTimeout } from './rpc.js';

/** POST /api/v1/{token}/attributes: a flat object → CLIENT_SCOPE; nulls skipped; 200 empty once on disk. */
export function postAttributes(s: Services) {
  return async (ctx: HttpContext): Promise<void> => {
    const device = authenticateDevice(s.entities, ctx);
    const entries = parseAttributes(parseBody(await ctx.body()));
    await s.attributes.save('DEVICE', device.id, 'CLIENT_SCOPE', entries, s.now());
  };
}

/** `a,b` split on ',' without trimming (TB); absent or empty → not given. */
function keyList(raw: string | null): string[] | undefined {
  if (raw === null || raw === '') return undefined;
  return raw.split(',');
}

function section(name: string, attrs: readonly AttributeKv[]): string {
  let out = `${JSON.stringify(name)}:{`;
  attrs.forEach((a, i) => { out += `${i === 0 ? '' : ','}${JSON.stringify(a.key)}:${kvToJson(a.value)}`; });
  return `${out}}`;
}

/**
 * GET /api/v1/{token}/attributes[?clientKeys=a,b][&sharedKeys=c] (CONTRACT §4): neither → all client and all
 * shared; one → only that section; `{"client":{..},"shared":{..}}` with empty sections omitted.
 */
export function getAttributes(s: Services) {
  return (ctx: HttpContext): Reply => {
    const device = authenticateDevice(s.entities, ctx);
    const clientKeys = keyList(ctx.query.get('clientKeys'));
    const sharedKeys = keyList(ctx.query.get('sharedKeys'));
    const neither = clientKeys === undefined && sharedKeys === undefined;
    const client = neither || clientKeys !== undefined ? s.attributes.get(device.id, 'CLIENT_SCOPE', clientKeys) : [];
    const shared = neither || sharedKeys !== undefined ? s.attributes.get(device.id, 'SHARED_SCOPE', sharedKeys) : [];
    const parts: string[] = [];
    if (client.length > 0) parts.push(section('client', client));
    if (shared.length > 0) parts.push(section('shared', shared));
    return jsonText(`{${parts.join(',')}}`);
  };
}

/**
 * GET /api/v1/{token}/attributes/updates?timeout= (CONTRACT §4): the next SHARED_SCOPE change as a flat
 * `{k:v}` or `{"deleted":[..]}`; 408 with an empty body on timeout.
 */
export function getAttributeUpdates(s: Services) {
  return async (ctx: HttpContext): Promise<Reply> => {
    // Only the id is kept while the poll is held, not the whole device record.
    const deviceId = authenticateDevice(s.entities, ctx).id;
    const timeout = pollTimeout(ctx, s.config);
    return pollReply(await holdRequest(ctx, (settle) => s.rpc.waitAttributes(deviceId, timeout, settle)));
  };
}
