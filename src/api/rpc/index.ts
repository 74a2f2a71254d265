/**
 * Server-side RPC REST (docs/api.md), user JWT:
 *   POST /api/plugins/rpc/{oneway|twoway}/{deviceId}   undelivered → 409, unanswered → 408
 *   POST /api/rpc/{oneway|twoway}/{deviceId}           undelivered → 504, unanswered → 504
 * Body `{"method","params"?,"timeout"?,"expirationTime"?}`; timeout default rpc.defaultTimeoutMs (10000),
 * raised to rpc.minTimeoutMs (5000); an absolute `expirationTime` overrides it. One-way → 200 empty once
 * delivered; two-way → 200 with the device's JSON reply (empty reply → 200 empty; not JSON → 406).
 *
 * Also `GET /api/outpost/status` (tenant admin): held long-polls and pending RPCs, for operators and tests.
 */
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import type { HttpContext, HttpRouter, Reply } from '../../uws/adapter.js';
import { jsonText } from '../../uws/adapter.js';
import { type JsonValue, NumLit, isJsonObject, stringifyJson } from '../../ingest/json.js';
import { parseBody } from '../../ingest/payload.js';
import type { RpcOutcome } from '../../rpc/broker.js';
import type { DurationMs } from '../../types.js';
import { principalOf } from '../principal.js';

type Flavour = 'plugins' | 'api';

function numberOf(v: JsonValue | undefined, name: string): number | undefined {
  if (v === undefined || v === null) return undefined;
  const n = typeof v === 'number' ? v : v instanceof NumLit ? Number(v.text) : NaN;
  if (!Number.isFinite(n)) throw new OutpostError('BAD_PAYLOAD', `"${name}" must be a number of milliseconds`);
  return Math.trunc(n);
}

/** The status of each outcome (docs/api.md); bodies of the failure statuses are empty (TB). */
function outcomeReply(o: RpcOutcome, flavour: Flavour): Reply {
  switch (o.kind) {
    case 'delivered':
      return { status: 200, body: '' };
    case 'reply': {
      if (o.body.trim() === '') return { status: 200, body: '' };
      try {
        JSON.parse(o.body);
      } catch {
        return { status: 406, body: '' };
      }
      return jsonText(o.body);
    }
    case 'undelivered':
      return { status: flavour === 'plugins' ? 409 : 504, body: '' };
    case 'unanswered':
      return { status: flavour === 'plugins' ? 408 : 504, body: '' };
    case 'deviceDeleted':
      throw new OutpostError('ENTITY_NOT_FOUND', 'Device was deleted!');
  }
}

function rpcHandler(s: Services, flavour: Flavour) {
  return async (ctx: HttpContext): Promise<Reply> => {
    const principal = principalOf(s, ctx);
    const [kind = '', deviceId = ''] = ctx.params;
    if (kind !== 'oneway' && kind !== 'twoway') throw new OutpostError('NOT_FOUND', `No endpoint POST ${ctx.url}`);
    s.auth.checkAccess(principal, 'DEVICE', deviceId, 'write');
    let body: JsonValue;
    try {
      body = parseBody(await ctx.body());
    } catch (err) {
      if (err instanceof OutpostError && err.code === 'BAD_JSON')
        throw new OutpostError('BAD_PAYLOAD', 'Invalid request body');
      throw err;
    }
    if (!isJsonObject(body)) throw new OutpostError('BAD_PAYLOAD', 'Invalid request body');
    const method = body['method'];
    if (typeof method !== 'string' || method === '')
      throw new OutpostError('BAD_PAYLOAD', 'RPC request must have a "method" string');
    const params = body['params'];
    const now = s.now();
    const requested = numberOf(body['timeout'], 'timeout') ?? s.config.rpc.defaultTimeoutMs;
    let timeoutMs: DurationMs = Math.max(s.config.rpc.minTimeoutMs, requested);
    const expirationTime = numberOf(body['expirationTime'], 'expirationTime');
    if (expirationTime !== undefined) timeoutMs = Math.max(0, expirationTime - now);
    const outcome = await s.rpc.submit(deviceId, {
      method,
      paramsJson: params === undefined ? '{}' : stringifyJson(params),
      oneway: kind === 'oneway',
      timeoutMs,
    });
    return outcomeReply(outcome, flavour);
  };
}

export function registerRpcApi(router: HttpRouter, s: Services): void {
  router.route('post', '/api/plugins/rpc/:kind/:deviceId', rpcHandler(s, 'plugins'));
  router.route('post', '/api/rpc/:kind/:deviceId', rpcHandler(s, 'api'));
}
