/**
 * TB's MQTT Gateway API topics (docs/mqtt.md): a gateway device publishes for its sub-devices, named in the
 * payload. Each topic is one action of the device layer's gateway part (src/device/gateway.ts: which devices a
 * gateway may serve, found, adopted or created, and the writes); the session keeps the sub-devices it serves.
 */
import type { DeviceActions, GatewayContext } from '../../device/actions.js';
import { OK, type PublishOutcome, UNKNOWN_TOPIC } from './device-topics.js';

export const GATEWAY_TOPICS = new Set([
  'v1/gateway/connect',
  'v1/gateway/disconnect',
  'v1/gateway/telemetry',
  'v1/gateway/attributes',
  'v1/gateway/attributes/request',
  'v1/gateway/rpc',
  'v1/gateway/depth/telemetry',
]);

/** Topics that only read or answer (they wait for earlier writes). */
export const isGatewayWrite = (topic: string): boolean =>
  topic === 'v1/gateway/telemetry' || topic === 'v1/gateway/attributes' || topic === 'v1/gateway/depth/telemetry';

/** Handles one `v1/gateway/*` publish; throws OutpostError as the device handlers do. */
export async function handleGatewayPublish(
  devices: DeviceActions,
  ctx: GatewayContext,
  topic: string,
  payload: Buffer,
  publish: (topic: string, body: string) => void,
): Promise<PublishOutcome> {
  const g = devices.gateway;
  switch (topic) {
    case 'v1/gateway/connect':
      await g.connect(ctx, payload);
      return OK;
    case 'v1/gateway/disconnect':
      g.disconnect(ctx, payload);
      return OK;
    case 'v1/gateway/telemetry':
      await g.telemetry(ctx, payload);
      return OK;
    case 'v1/gateway/attributes':
      await g.attributes(ctx, payload);
      return OK;
    case 'v1/gateway/depth/telemetry':
      await g.depth(ctx, payload);
      return OK;
    case 'v1/gateway/attributes/request':
      publish('v1/gateway/attributes/response', await g.attributeRequest(ctx, payload));
      return OK;
    case 'v1/gateway/rpc':
      await g.rpcReply(ctx, payload);
      return OK;
  }
  return UNKNOWN_TOPIC;
}
