/**
 * Device RPC endpoints (docs/api.md): `GET /rpc` long-poll, `POST /rpc/{id}` reply, `POST /rpc` client-side
 * RPC; plus the long-poll plumbing shared with `GET /attributes/updates`.
 */
import type { Config } from '../../config/index.js';
import type { TransportServices } from '../services.js';
import { OutpostError } from '../../errors.js';
import { type HttpContext, type Reply, jsonText } from '../../uws/adapter.js';
import type { PollHandle, PollOutcome } from '../../device/actions.js';
import type { DurationMs } from '../../types.js';
import { accepted, authenticateDevice } from './auth.js';

/**
 * docs/api.md: `timeout` in ms; absent or 0 → longPoll.defaultTimeoutMs (60000); capped at maxTimeoutMs
 * (300000). Not a non-negative integer → 400.
 */
export function pollTimeout(ctx: HttpContext, config: Readonly<Config>): DurationMs {
  const raw = ctx.query.get('timeout');
  if (raw === null || raw === '') return config.longPoll.defaultTimeoutMs;
  if (!/^\d{1,15}$/.test(raw))
    throw new OutpostError('BAD_PARAM', `"timeout" must be a number of milliseconds, got "${raw}"`);
  const ms = Number(raw);
  if (ms === 0) return config.longPoll.defaultTimeoutMs;
  return Math.min(ms, config.longPoll.maxTimeoutMs);
}

/**
 * Holds the request until the broker settles it. A client that goes away is removed from the registry at
 * once; its handler then finishes with a reply the adapter drops (the socket is gone).
 */
export function holdRequest(
  ctx: HttpContext,
  open: (settle: (o: PollOutcome) => void) => PollHandle | undefined,
): Promise<PollOutcome> {
  return new Promise<PollOutcome>((resolve) => {
    const handle = open(resolve);
    if (handle === undefined) return;
    ctx.onAbort(() => {
      handle.close();
      resolve({ kind: 'timeout' });
    });
  });
}

/**
 * docs/api.md: data → 200 JSON; timeout → 408 with an EMPTY body; device deleted → 403 (TB); credentials
 * changed → 401, as the old token now gets.
 */
export function pollReply(o: PollOutcome): Reply {
  switch (o.kind) {
    case 'data':
      return jsonText(o.body);
    case 'timeout':
      return { status: 408, body: '' };
    case 'deviceDeleted':
      throw new OutpostError('PERMISSION_DENIED', 'Device was deleted!');
    case 'credentialsUpdated':
      throw new OutpostError('DEVICE_TOKEN_INVALID');
  }
}

/** GET /api/v1/{token}/rpc?timeout=: the oldest pending RPC at once, else the next one, else 408. */
export function getRpc(s: TransportServices) {
  return async (ctx: HttpContext): Promise<Reply> => {
    // Only the id is kept while the poll is held, not the whole device record.
    const device = authenticateDevice(s, ctx);
    const deviceId = device.id;
    const timeout = pollTimeout(ctx, s.config);
    s.devices.activity(deviceId);
    const origin = ctx.remoteAddress();
    return pollReply(await holdRequest(ctx, (settle) => s.devices.waitRpc(deviceId, timeout, settle, origin)));
  };
}

/** POST /api/v1/{token}/rpc/{id}: the device's reply; 200 empty even for unknown ids (TB). */
export function postRpcReply(s: TransportServices) {
  return async (ctx: HttpContext): Promise<void> => {
    const device = authenticateDevice(s, ctx);
    const raw = ctx.params[1] ?? '';
    // TB binds {requestId} as a Java Integer: anything else is a 400.
    if (!/^-?\d{1,10}$/.test(raw) || Math.abs(Number(raw)) > 2147483647) {
      throw new OutpostError('BAD_PARAM', `RPC request id must be an integer, got "${raw}"`);
    }
    s.devices.rpcReply(device.id, Number(raw), await ctx.body(), accepted(s, device));
  };
}

/**
 * POST /api/v1/{token}/rpc `{"method","params"}` (client-side RPC): `getCurrentTime` → `{"time":<ms>}`;
 * registered handlers; else `{"error":"timeout"}` after rpc.clientSideTimeoutMs. Missing method → 400.
 */
export function postClientRpc(s: TransportServices) {
  return async (ctx: HttpContext): Promise<Reply> => {
    const device = authenticateDevice(s, ctx);
    const deviceId = device.id;
    const origin = ctx.remoteAddress();
    const call = s.devices.clientRpcCall(deviceId, await ctx.body());
    s.devices.activity(deviceId);
    return pollReply(await holdRequest(ctx, (settle) => s.devices.clientRpc(call, settle, origin)));
  };
}
