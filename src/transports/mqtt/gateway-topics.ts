/**
 * TB's MQTT Gateway API (docs/mqtt.md): a gateway device publishes for its sub-devices, named in the payload.
 * A name the gateway has not used yet is connected first: the device of that name becomes this gateway's
 * sub-device, or it is created (type `default`, the gateway's customer), as TB does. Unlike TB, a gateway acts
 * only for devices of its own owner (its customer, or the tenant when it has none): one LAN gateway is shared by
 * customers, and a gateway that could name any device would write and read for another customer's. A gateway
 * never acts for a gateway. A publish is parsed whole and its names checked before anything is written, so a
 * bad or refused entry stores nothing, and it is answered once every device's part is on disk.
 */
import type { Services } from '../../context.js';
import { parseDepthTelemetry } from '../../device/depth.js';
import { OutpostError } from '../../errors.js';
import { parseTelemetryBody, parseTelemetryFast } from '../../ingest/fastpath.js';
import { type JsonValue, NumLit, isJsonObject, stringifyJson } from '../../ingest/json.js';
import { singleDeviceCandidate, splitDeviceArrays } from '../../ingest/split.js';
import type { TelemetryBatch } from '../../model/batch.js';
import type { KvEntry, TsRecord } from '../../model/record.js';
import { parseKvObject, parseBody, parseTelemetry } from '../../ingest/payload.js';
import { kvToJson } from '../../model/kv.js';
import type { DsRecord } from '../../store/depth.js';
import type { DeviceRecord } from '../../store/entities.js';
import { checkName } from '../../store/names.js';
import { NULL_UUID } from '../../types.js';
import { OK, type PublishOutcome, UNKNOWN_TOPIC } from './device-topics.js';

/** The gateway session as the handlers see it. */
export interface GatewayContext {
  readonly s: Services;
  readonly gateway: DeviceRecord;
  /** publishes to the gateway (QoS 1 unless it subscribed with 0) */
  publish(topic: string, body: string): void;
  readonly previousWrites: Promise<unknown>;
  /** the sub-device is now served by this session (attribute pushes and RPC go to it) */
  connected(sub: DeviceRecord): void;
  disconnected(sub: DeviceRecord): void;
  /** sub-devices this session connected, by name */
  readonly subDevices: Map<string, DeviceRecord>;
  /** lookups and creations in progress, by name, so one name is created once */
  readonly pending: Map<string, Promise<DeviceRecord>>;
  /** names refused for their owner in this session, so each is logged once */
  readonly refused: Set<string>;
}

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

function bad(message: string): never {
  throw new OutpostError('BAD_PAYLOAD', message);
}

function deviceName(v: JsonValue | undefined): string {
  if (typeof v !== 'string' || v.trim() === '') bad('"device" must be a device name');
  checkName('name', v);
  return v;
}

/**
 * The gateway's sub-device of this name: one it connected already, or the device of that name (made over
 * REST, the CLI, HTTP sync or by another gateway, whatever its profile or credentials) when it has the
 * gateway's owner, or a new one. A name that is a gateway's, or another owner's → 403.
 */
export async function subDevice(ctx: GatewayContext, name: string, type = 'default'): Promise<DeviceRecord> {
  const known = ctx.subDevices.get(name);
  if (known !== undefined) {
    // either may have been assigned to another customer since: the stored records decide, not the session's copies
    const now = ctx.s.entities.device(known.id);
    if (now !== undefined && !crossesOwner(ctx, now)) {
      ctx.s.state?.activity(known.id);
      return known;
    }
    ctx.disconnected(known);
    if (now !== undefined) throw foreign(ctx, name);
    // deleted meanwhile: the name is found or created afresh, as a name never used
  }
  let p = ctx.pending.get(name);
  if (p === undefined) {
    p = findOrCreate(ctx, name, type).finally(() => ctx.pending.delete(name));
    ctx.pending.set(name, p);
  }
  const d = await p;
  if (!ctx.subDevices.has(name)) ctx.connected(d);
  // whatever the gateway sends for a sub-device is the sub-device's activity (TB's sub-session)
  ctx.s.state?.activity(d.id);
  return d;
}

const notForGateway = (name: string): OutpostError =>
  new OutpostError('PERMISSION_DENIED', `device "${name}" is a gateway, not a sub-device`);

const ownerOf = (d: DeviceRecord): string => d.customerId ?? NULL_UUID;

/**
 * The device has another owner than the gateway (another customer; a customer's and the tenant's), by the
 * stored gateway record: the session's copy may predate an assignment.
 */
export function ownersDiffer(s: Services, gateway: DeviceRecord, d: DeviceRecord): boolean {
  return ownerOf(d) !== ownerOf(s.entities.device(gateway.id) ?? gateway);
}

const crossesOwner = (ctx: GatewayContext, d: DeviceRecord): boolean => ownersDiffer(ctx.s, ctx.gateway, d);

/** The refusal of a device of another owner, logged once per name and session with both names. */
function foreign(ctx: GatewayContext, name: string): OutpostError {
  if (!ctx.refused.has(name) && ctx.refused.size < 1024) {
    ctx.refused.add(name);
    ctx.s.log.warn(
      `mqtt: gateway ${JSON.stringify(ctx.gateway.name)} named device ${JSON.stringify(name)}, which belongs to ` +
        'another owner (another customer, or the tenant and a customer): refused, nothing stored (docs/mqtt.md)',
    );
  }
  // the same words whatever the reason, so the answer tells no more than that the gateway may not
  return new OutpostError('PERMISSION_DENIED', `device "${name}" is not this gateway's to serve`);
}

async function findOrCreate(ctx: GatewayContext, name: string, type: string): Promise<DeviceRecord> {
  const { entities } = ctx.s;
  let existing = entities.byName('DEVICE', name);
  if (existing === undefined) {
    try {
      return await entities.createDevice({ name, type, customerId: ctx.gateway.customerId, gatewayId: ctx.gateway.id });
    } catch (err) {
      // another process (the CLI) created the name meanwhile
      existing = entities.byName('DEVICE', name);
      if (existing === undefined) throw err;
    }
  }
  const d = existing as DeviceRecord;
  if (d.entityType !== 'DEVICE' || d.gateway === true) throw notForGateway(name);
  if (crossesOwner(ctx, d)) throw foreign(ctx, name);
  // TB's lastConnectedGateway, written only when it changes
  const adopted = await entities.setGateway(d.id, ctx.gateway.id);
  if (adopted === undefined) {
    throw new OutpostError('PERMISSION_DENIED', `device "${name}" was deleted or made a gateway meanwhile`);
  }
  return adopted;
}

/**
 * The sub-devices of a publish, each found or created; a refusal of any refuses the publish, once every
 * lookup has ended (so the answer never races a creation still under way).
 */
async function subDevicesOf(ctx: GatewayContext, names: readonly string[]): Promise<DeviceRecord[]> {
  // every name is checked before any is created or taken over: one bad name refuses the publish and changes nothing
  for (const name of names) {
    checkName('name', name);
    const known = ctx.subDevices.get(name);
    const d = known !== undefined ? ctx.s.entities.device(known.id) : ctx.s.entities.byName('DEVICE', name);
    if (known !== undefined && d === undefined) continue; // deleted meanwhile: subDevice below tells
    if (d !== undefined && (d.entityType !== 'DEVICE' || d.gateway === true)) throw notForGateway(name);
    if (d !== undefined && crossesOwner(ctx, d)) throw foreign(ctx, name);
  }
  const all = await Promise.allSettled(names.map((name) => subDevice(ctx, name)));
  const refused = all.find((r) => r.status === 'rejected');
  if (refused !== undefined) throw (refused as PromiseRejectedResult).reason;
  return all.map((r) => (r as PromiseFulfilledResult<DeviceRecord>).value);
}

/** `{"<name>": X, ..}` → entries whose value passes `keep` (TB skips the others); none left → bad. */
function perDevice(json: JsonValue, what: string, keep: (v: JsonValue) => boolean): Array<[string, JsonValue]> {
  if (!isJsonObject(json)) bad(`${what} must be a JSON object keyed by device name`);
  const out: Array<[string, JsonValue]> = [];
  for (const name in json) {
    const v = json[name] as JsonValue;
    if (name.trim() !== '' && keep(v)) out.push([name, v]);
  }
  if (out.length === 0) bad(`${what} names no device with data`);
  return out;
}

/**
 * A telemetry body's devices and their points: the common one-device body parsed in one pass (its array
 * bytes found from both ends, singleDeviceCandidate); several devices cut apart first (splitDeviceArrays);
 * anything unusual through the JSON tree. The same answer whichever way.
 */
export function telemetryParts(payload: Buffer, now: number): Array<[string, TelemetryBatch | TsRecord[]]> {
  const one = singleDeviceCandidate(payload);
  const oneBatch = one === undefined ? undefined : parseTelemetryFast(one[1], now, false);
  if (one !== undefined && oneBatch !== undefined) return one[0].trim() === '' ? [] : [[one[0], oneBatch]];
  const fast = splitDeviceArrays(payload);
  return fast !== undefined
    ? fast.filter(([name]) => name.trim() !== '').map(([name, arr]) => [name, parseTelemetryBody(arr, now)])
    : perDevice(parseBody(payload), 'gateway telemetry', Array.isArray).map(([name, v]) => [
        name,
        parseTelemetry(v, now),
      ]);
}

/** Handles one `v1/gateway/*` publish; throws OutpostError as the device handlers do. */
export async function handleGatewayPublish(
  ctx: GatewayContext,
  topic: string,
  payload: Buffer,
): Promise<PublishOutcome> {
  const { s } = ctx;
  switch (topic) {
    case 'v1/gateway/connect': {
      const json = parseBody(payload);
      if (!isJsonObject(json)) bad('connect must be {"device":"<name>","type"?:"<type>"}');
      const type = json['type'];
      if (type !== undefined && (typeof type !== 'string' || type === '')) bad('"type" must be a string');
      await subDevice(ctx, deviceName(json['device']), type);
      return OK;
    }
    case 'v1/gateway/disconnect': {
      const json = parseBody(payload);
      if (!isJsonObject(json)) bad('disconnect must be {"device":"<name>"}');
      const d = ctx.subDevices.get(deviceName(json['device']));
      if (d !== undefined) ctx.disconnected(d);
      return OK;
    }
    case 'v1/gateway/telemetry': {
      const now = s.now();
      // each device's array through the HTTP body parser; anything unusual through the JSON tree
      const parts = telemetryParts(payload, now);
      if (parts.length === 0) bad('gateway telemetry names no device with data');
      const devices = await subDevicesOf(
        ctx,
        parts.map(([name]) => name),
      );
      await Promise.all(
        parts.map(([, records], i) => s.ingest.save('DEVICE', (devices[i] as DeviceRecord).id, records)),
      );
      return OK;
    }
    case 'v1/gateway/attributes': {
      const parts: Array<[string, KvEntry[]]> = perDevice(parseBody(payload), 'gateway attributes', isJsonObject).map(
        ([name, v]) => [name, parseKvObject(v as { [key: string]: JsonValue })],
      );
      const devices = await subDevicesOf(
        ctx,
        parts.map(([name]) => name),
      );
      const now = s.now();
      await Promise.all(
        parts.map(([, kv], i) => s.attributes.save('DEVICE', (devices[i] as DeviceRecord).id, 'CLIENT_SCOPE', kv, now)),
      );
      return OK;
    }
    case 'v1/gateway/depth/telemetry': {
      const parts: Array<[string, DsRecord[]]> = perDevice(
        parseBody(payload),
        'gateway depth telemetry',
        Array.isArray,
      ).map(([name, v]) => [name, parseDepthTelemetry(v).filter((r) => r.values.length > 0)]);
      const devices = await subDevicesOf(
        ctx,
        parts.map(([name]) => name),
      );
      await Promise.all(parts.map(([, records], i) => s.depth.write((devices[i] as DeviceRecord).id, records)));
      return OK;
    }
    case 'v1/gateway/attributes/request':
      await attributeRequest(ctx, parseBody(payload));
      return OK;
    case 'v1/gateway/rpc': {
      const json = parseBody(payload);
      if (!isJsonObject(json)) bad('RPC reply must be {"device","id","data"}');
      const id = json['id'];
      const n =
        id instanceof NumLit
          ? Number(id.text)
          : typeof id === 'number'
            ? id
            : typeof id === 'string' && /^\d+$/.test(id)
              ? Number(id)
              : NaN;
      if (!Number.isInteger(n)) bad('"id" must be the RPC id');
      const d = await subDevice(ctx, deviceName(json['device']));
      const data = json['data'];
      s.rpc.reply(d.id, n, data === undefined ? '' : typeof data === 'string' ? data : stringifyJson(data));
      return OK;
    }
  }
  return UNKNOWN_TOPIC;
}

/**
 * `{"id","device","client":bool,"key"|"keys"}` → `v1/gateway/attributes/response` `{"id","device","value"}`
 * when exactly one attribute is found, `{"id","device","values":{..}}` for more; nothing found → only id and
 * device. TB's JsonConverter decides by what it found, not by `key` vs `keys`: its gateway SDK always sends
 * `keys` and reads `value` for a one-key request. `keys: []` asks for all of the scope.
 */
async function attributeRequest(ctx: GatewayContext, json: JsonValue): Promise<void> {
  if (!isJsonObject(json)) bad('attribute request must be {"id","device","client","key"|"keys"}');
  const id = json['id'];
  if (!(id instanceof NumLit) && typeof id !== 'number' && typeof id !== 'string') bad('"id" is required');
  const client = json['client'];
  if (typeof client !== 'boolean') bad('"client" must be true or false');
  const name = deviceName(json['device']);
  let keys: string[] | undefined;
  if (typeof json['key'] === 'string') {
    keys = [json['key']];
  } else if (Array.isArray(json['keys'])) {
    keys = json['keys'].map((k) => (typeof k === 'string' ? k : bad('"keys" must hold strings')));
    if (keys.length === 0) keys = undefined;
  } else {
    bad('"key" or "keys" is required');
  }
  const d = await subDevice(ctx, name);
  await ctx.previousWrites;
  const found = ctx.s.attributes.get(d.id, client ? 'CLIENT_SCOPE' : 'SHARED_SCOPE', keys);
  const head = `{"id":${id instanceof NumLit ? id.text : JSON.stringify(id)},"device":${JSON.stringify(name)}`;
  let body: string;
  if (found.length === 0) body = `${head}}`;
  else if (found.length === 1) body = `${head},"value":${kvToJson((found[0] as (typeof found)[number]).value)}}`;
  else body = `${head},"values":{${found.map((a) => `${JSON.stringify(a.key)}:${kvToJson(a.value)}`).join(',')}}}`;
  ctx.publish('v1/gateway/attributes/response', body);
}
