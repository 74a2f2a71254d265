/**
 * TB's MQTT device API topics (docs/mqtt.md): what a device publishes, and which filters it may subscribe.
 * Plain functions over the same services the HTTP device API uses: the same parsing, typing and write path,
 * so "acknowledged" means "on disk" on both transports.
 */
import type { Services } from '../../context.js';
import { deviceAttributesJson, keyList } from '../../device/attributes.js';
import { parseDepthTelemetry } from '../../device/depth.js';
import { OutpostError } from '../../errors.js';
import { parseTelemetryBody } from '../../ingest/fastpath.js';
import { isJsonObject, stringifyJson } from '../../ingest/json.js';
import { parseAttributes, parseBody } from '../../ingest/payload.js';
import type { PollHandle } from '../../rpc/longpoll.js';

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
  readonly s: Services;
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
  const { s, deviceId } = ctx;
  switch (route.kind) {
    case 'telemetry':
      return saveTelemetry(s, deviceId, payload);
    case 'attributes':
      await s.attributes.save('DEVICE', deviceId, 'CLIENT_SCOPE', parseAttributes(parseBody(payload)), s.now());
      return OK;
    case 'depth': {
      const records = parseDepthTelemetry(parseBody(payload));
      await s.depth.write(
        deviceId,
        records.filter((r) => r.values.length > 0),
      );
      return OK;
    }
    case 'attrRequest': {
      requestId(route.id);
      // TB: `{"clientKeys":"a,b","sharedKeys":"c"}`, either or neither; an empty payload asks for all
      const json = payload.length === 0 ? {} : parseBody(payload);
      if (!isJsonObject(json)) throw new OutpostError('BAD_PAYLOAD', 'attribute request must be a JSON object');
      const keys = (k: string): string[] | undefined => {
        const v = json[k];
        if (v === undefined || v === null) return undefined;
        if (typeof v !== 'string') throw new OutpostError('BAD_PAYLOAD', `"${k}" must be a comma-separated string`);
        return keyList(v);
      };
      const clientKeys = keys('clientKeys');
      const sharedKeys = keys('sharedKeys');
      await ctx.previousWrites;
      ctx.publish(
        attributeResponseTopic(route.family, route.id),
        deviceAttributesJson(s.attributes, deviceId, clientKeys, sharedKeys),
      );
      return OK;
    }
    case 'rpcResponse':
      s.rpc.reply(deviceId, requestId(route.id), payload.toString('utf8'));
      return OK;
    case 'rpcRequest': {
      requestId(route.id);
      const json = parseBody(payload);
      if (!isJsonObject(json))
        throw new OutpostError('BAD_PAYLOAD', 'RPC request must be a JSON object {"method","params"}');
      const method = json['method'];
      if (typeof method !== 'string' || method === '')
        throw new OutpostError('BAD_PAYLOAD', 'RPC request must have a "method" string');
      const params = json['params'];
      const paramsJson = params === undefined ? 'null' : stringifyJson(params);
      const topic = rpcResponseTopic(route.family, route.id);
      const handle = s.rpc.clientRpc({ deviceId, method, paramsJson }, (o) => {
        if (o.kind === 'data') ctx.publish(topic, o.body);
      });
      if (handle !== undefined) ctx.hold(handle);
      return OK;
    }
  }
}

/** A device's telemetry publish: stored through the HTTP API's parser and write path. */
export async function saveTelemetry(s: Services, deviceId: string, payload: Buffer): Promise<PublishOutcome> {
  await s.ingest.save('DEVICE', deviceId, parseTelemetryBody(payload, s.now()));
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
