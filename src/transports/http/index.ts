/** The ThingsBoard device HTTP API, `/api/v1/{token}/...` (docs/api.md). */
import type { TransportServices } from '../services.js';
import type { HttpRouter } from '../../uws/adapter.js';
import { postDepthTelemetry } from './depth.js';
import { postTelemetry } from './telemetry.js';
import { getAttributeUpdates, getAttributes, postAttributes } from './attributes.js';
import { getRpc, postClientRpc, postRpcReply } from './rpc.js';

export function registerDeviceApi(router: HttpRouter, s: TransportServices): void {
  router.route('post', '/api/v1/:token/telemetry', postTelemetry(s));
  router.route('post', '/api/v1/:token/attributes', postAttributes(s));
  router.route('get', '/api/v1/:token/attributes', getAttributes(s));
  router.route('get', '/api/v1/:token/attributes/updates', getAttributeUpdates(s));
  // docs/api.md: bodies under /rpc/** are capped at http.maxRpcBodyBytes (64 KiB).
  router.route('get', '/api/v1/:token/rpc', getRpc(s));
  router.route('post', '/api/v1/:token/rpc', postClientRpc(s), { maxBody: s.config.http.maxRpcBodyBytes });
  router.route('post', '/api/v1/:token/rpc/:id', postRpcReply(s), { maxBody: s.config.http.maxRpcBodyBytes });
  router.route('post', '/api/v1/:token/depth/telemetry', postDepthTelemetry(s));
}
