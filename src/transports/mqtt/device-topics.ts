/**
 * TB's MQTT device API topics (docs/mqtt.md): what a device publishes, and which filters it may subscribe.
 * Plain functions over the device layer the HTTP and CoAP device APIs call (src/device/actions.ts): the same
 * parsing, typing and write path, so "acknowledged" means "on disk" on every transport.
 */
import type { DeviceActions, PollHandle } from '../../device/actions.js';
import { OutpostError } from '../../errors.js';

/** How a publish ends, which the session turns into a PUBACK (or a close on MQTT 3.1.1). */
export type PublishOutcome =
  | { readonly kind: 'ok' }
  /** not a topic of the API: acknowledged and ignored (TB) */
  | { readonly kind: 'unknownTopic' }
  /** malformed or wrongly shaped payload: nothing stored */
  | { readonly kind: 'bad'; readonly message: string }
  /** a gateway named a device that is not its own: nothing stored */
  | { readonly kind: 'denied'; readonly message: string }
  /**
   * a device name that can never be valid (too long, control characters): nothing stored; the message is
   * refused and the session kept, on 3.1.x too (its plain PUBACK drops the message, which resending cannot fix)
   */
  | { readonly kind: 'badName'; readonly message: string };

export const OK: PublishOutcome = { kind: 'ok' };
export const UNKNOWN_TOPIC: PublishOutcome = { kind: 'unknownTopic' };

/** What a topic handler may do besides writing: answer the device, and order a read after earlier writes. */
export interface DeviceContext {
  readonly devices: DeviceActions;
  readonly deviceId: string;
  /** publishes to this client (QoS from its subscription, else 1) */
  publish(topic: string, body: string): void;
  /** resolves once every publish received before this one is written (or failed) */
  readonly previousWrites: Promise<unknown>;
  /** a held client-side RPC, closed with the session */
  hold(handle: PollHandle): void;
}

/** Topic family: `v1/devices/me/...` or TB 3.3+'s short `v2/...` aliases; answers go to the same family. */
type Family = 'v1' | 'v2';

export type DeviceRoute =
  | { readonly kind: 'telemetry' }
  | { readonly kind: 'attributes' }
  | { readonly kind: 'depth' }
  | { readonly kind: 'attrRequest'; readonly id: string; readonly family: Family }
  | { readonly kind: 'rpcResponse'; readonly id: string }
  | { readonly kind: 'rpcRequest'; readonly id: string; readonly family: Family };

const V1_ATTR_REQ = 'v1/devices/me/attributes/request/';
const V1_RPC_RES = 'v1/devices/me/rpc/response/';
const V1_RPC_REQ = 'v1/devices/me/rpc/request/';

const TELEMETRY: DeviceRoute = { kind: 'telemetry' };
const ATTRIBUTES: DeviceRoute = { kind: 'attributes' };
const DEPTH: DeviceRoute = { kind: 'depth' };

/** The device API topic a PUBLISH names, or undefined (exact topics only). */
export function deviceRoute(topic: string): DeviceRoute | undefined {
  switch (topic) {
    case 'v1/devices/me/telemetry':
    case 'v2/t':
      return TELEMETRY;
    case 'v1/devices/me/attributes':
    case 'v2/a':
      return ATTRIBUTES;
    case 'v1/devices/me/depth/telemetry':
      return DEPTH;
  }
  const tail = (prefix: string): string | undefined => {
    if (!topic.startsWith(prefix)) return undefined;
    const id = topic.slice(prefix.length);
    return id !== '' && !id.includes('/') ? id : undefined;
  };
  let id: string | undefined;
  if ((id = tail(V1_ATTR_REQ)) !== undefined) return { kind: 'attrRequest', id, family: 'v1' };
  if ((id = tail('v2/a/req/')) !== undefined) return { kind: 'attrRequest', id, family: 'v2' };
  if ((id = tail(V1_RPC_RES)) !== undefined || (id = tail('v2/r/res/')) !== undefined)
    return { kind: 'rpcResponse', id };
  if ((id = tail(V1_RPC_REQ)) !== undefined) return { kind: 'rpcRequest', id, family: 'v1' };
  if ((id = tail('v2/r/req/')) !== undefined) return { kind: 'rpcRequest', id, family: 'v2' };
  return undefined;
}

/** Routes that only read or answer: they wait for the earlier writes and store nothing. */
export const isWrite = (r: DeviceRoute): boolean =>
  r.kind === 'telemetry' || r.kind === 'attributes' || r.kind === 'depth';

/** A request id in a topic: TB parses it as an int. */
function requestId(raw: string): number {
  if (!/^\d{1,10}$/.test(raw) || Number(raw) > 2147483647)
    throw new OutpostError('BAD_PAYLOAD', `request id must be an integer, got "${raw}"`);
  return Number(raw);
}

export const attributeResponseTopic = (family: Family, id: string | number): string =>
  family === 'v1' ? `v1/devices/me/attributes/response/${id}` : `v2/a/res/${id}`;
export const rpcResponseTopic = (family: Family, id: string | number): string =>
  family === 'v1' ? `${V1_RPC_RES}${id}` : `v2/r/res/${id}`;
export const rpcRequestTopic = (family: Family, id: number): string =>
  family === 'v1' ? `${V1_RPC_REQ}${id}` : `v2/r/req/${id}`;

/**
 * Handles one device-API publish. Throws OutpostError for bad input (the session maps 400 → "bad", 403 →
 * "denied") and for store failures (the session closes the connection).
 */
export async function handleDevicePublish(
  ctx: DeviceContext,
  route: DeviceRoute,
  payload: Buffer,
): Promise<PublishOutcome> {
  const { devices, deviceId } = ctx;
  switch (route.kind) {
    case 'telemetry':
      return saveTelemetry(devices, deviceId, payload);
    case 'attributes':
      await devices.attributes(deviceId, payload);
      return OK;
    case 'depth':
      await devices.depth(deviceId, payload);
      return OK;
    case 'attrRequest': {
      requestId(route.id);
      const keys = devices.requestedKeys(payload);
      await ctx.previousWrites;
      ctx.publish(attributeResponseTopic(route.family, route.id), devices.readAttributes(deviceId, keys));
      return OK;
    }
    case 'rpcResponse':
      devices.rpcReply(deviceId, requestId(route.id), payload);
      return OK;
    case 'rpcRequest': {
      requestId(route.id);
      const call = devices.clientRpcCall(deviceId, payload);
      const topic = rpcResponseTopic(route.family, route.id);
      const handle = devices.clientRpc(call, (o) => {
        if (o.kind === 'data') ctx.publish(topic, o.body);
      });
      if (handle !== undefined) ctx.hold(handle);
      return OK;
    }
  }
}

/** A device's telemetry publish: stored through the HTTP API's parser and write path. */
export async function saveTelemetry(
  devices: DeviceActions,
  deviceId: string,
  payload: Buffer,
): Promise<PublishOutcome> {
  await devices.telemetry(deviceId, payload);
  return OK;
}

/** What a subscription filter stands for; undefined = refused (SUBACK 0x80). */
export type SubscriptionKind =
  | 'attributes'
  | 'attrResponse'
  | 'rpcRequest'
  | 'rpcRequestV2'
  | 'rpcResponse'
  | 'gwAttributes'
  | 'gwAttrResponse'
  | 'gwRpc'
  | 'provisionResponse';

const DEVICE_FILTERS: ReadonlyMap<string, SubscriptionKind> = new Map([
  ['v1/devices/me/attributes', 'attributes'],
  ['v2/a', 'attributes'],
  ['v1/devices/me/attributes/response/+', 'attrResponse'],
  ['v2/a/res/+', 'attrResponse'],
  ['v1/devices/me/rpc/request/+', 'rpcRequest'],
  ['v2/r/req/+', 'rpcRequestV2'],
  ['v1/devices/me/rpc/response/+', 'rpcResponse'],
  ['v2/r/res/+', 'rpcResponse'],
]);
const GATEWAY_FILTERS: ReadonlyMap<string, SubscriptionKind> = new Map([
  ['v1/gateway/attributes', 'gwAttributes'],
  ['v1/gateway/attributes/response', 'gwAttrResponse'],
  ['v1/gateway/rpc', 'gwRpc'],
]);

/** Exact filters only: wildcards other than the API's own `+` forms, and other devices' topics, are refused. */
export function subscriptionKind(
  filter: string,
  role: 'device' | 'gateway' | 'provision',
): SubscriptionKind | undefined {
  if (role === 'provision') return filter === '/provision/response' ? 'provisionResponse' : undefined;
  return DEVICE_FILTERS.get(filter) ?? (role === 'gateway' ? GATEWAY_FILTERS.get(filter) : undefined);
}
