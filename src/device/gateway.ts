/**
 * The device layer's side of TB's Gateway API (docs/mqtt.md): a gateway device acts for its sub-devices, named in
 * the payload. A name the gateway has not used yet is connected first: the device of that name becomes this
 * gateway's sub-device, or it is created (type `default`, the gateway's customer), as TB does. Unlike TB, a
 * gateway acts only for devices of its own owner (its customer, or the tenant when it has none): one LAN gateway
 * is shared by customers, and a gateway that could name any device would write and read for another customer's.
 * A gateway never acts for a gateway. A payload is parsed whole and its names checked before anything is written,
 * so a bad or refused entry stores nothing, and an action resolves once every device's part is on disk. The
 * transport (src/transports/mqtt/gateway-topics.ts) routes topics here and keeps the session's sub-devices.
 */
import { OutpostError } from '../errors.js';
import { admitted } from '../ingest/admission.js';
import { parseTelemetryBody, parseTelemetryFast } from '../ingest/fastpath.js';
import { type JsonValue, NumLit, isJsonObject, stringifyJson } from '../ingest/json.js';
import { parseBody, parseKvObject, parseTelemetry } from '../ingest/payload.js';
import { singleDeviceCandidate, splitDeviceArrays } from '../ingest/split.js';
import type { TelemetryBatch } from '../model/batch.js';
import { kvToJson } from '../model/kv.js';
import type { KvEntry, TsRecord } from '../model/record.js';
import type { DsRecord } from '../store/depth.js';
import type { DeviceRecord } from '../store/entities.js';
import { checkName } from '../store/names.js';
import { NULL_UUID } from '../types.js';
import type { DeviceDeps } from './deps.js';
import { parseDepthTelemetry } from './depth.js';

/** A gateway's session as the device layer sees it: the sub-devices it serves, kept by the transport. */
export interface GatewayContext {
  readonly gateway: DeviceRecord;
  /** resolves once every publish received before this one is written (or failed) */
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

type GatewayDeps = Pick<
  DeviceDeps,
  'entities' | 'state' | 'log' | 'ingest' | 'admission' | 'attributes' | 'depth' | 'rpc' | 'now'
>;

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
async function subDevice(s: GatewayDeps, ctx: GatewayContext, name: string, type = 'default'): Promise<DeviceRecord> {
  const known = ctx.subDevices.get(name);
  if (known !== undefined) {
    // either may have been assigned to another customer since: the stored records decide, not the session's copies
    const now = s.entities.device(known.id);
    if (now !== undefined && !crossesOwner(s, ctx, now)) {
      s.state?.activity(known.id);
      return known;
    }
    ctx.disconnected(known);
    if (now !== undefined) throw foreign(s, ctx, name);
    // deleted meanwhile: the name is found or created afresh, as a name never used
  }
  let p = ctx.pending.get(name);
  if (p === undefined) {
    p = findOrCreate(s, ctx, name, type).finally(() => ctx.pending.delete(name));
    ctx.pending.set(name, p);
  }
  const d = await p;
  if (!ctx.subDevices.has(name)) ctx.connected(d);
  // whatever the gateway sends for a sub-device is the sub-device's activity (TB's sub-session)
  s.state?.activity(d.id);
  return d;
}

const notForGateway = (name: string): OutpostError =>
  new OutpostError('PERMISSION_DENIED', `device "${name}" is a gateway, not a sub-device`);

const ownerOf = (d: DeviceRecord): string => d.customerId ?? NULL_UUID;

/**
 * The device has another owner than the gateway (another customer; a customer's and the tenant's), by the
 * stored gateway record: the session's copy may predate an assignment.
 */
export function ownersDiffer(s: Pick<GatewayDeps, 'entities'>, gateway: DeviceRecord, d: DeviceRecord): boolean {
  return ownerOf(d) !== ownerOf(s.entities.device(gateway.id) ?? gateway);
}

const crossesOwner = (s: GatewayDeps, ctx: GatewayContext, d: DeviceRecord): boolean => ownersDiffer(s, ctx.gateway, d);

/** The refusal of a device of another owner, logged once per name and session with both names. */
function foreign(s: GatewayDeps, ctx: GatewayContext, name: string): OutpostError {
  if (!ctx.refused.has(name) && ctx.refused.size < 1024) {
    ctx.refused.add(name);
    s.log.warn(
      `mqtt: gateway ${JSON.stringify(ctx.gateway.name)} named device ${JSON.stringify(name)}, which belongs to ` +
        'another owner (another customer, or the tenant and a customer): refused, nothing stored (docs/mqtt.md)',
    );
  }
  // the same words whatever the reason, so the answer tells no more than that the gateway may not
  return new OutpostError('PERMISSION_DENIED', `device "${name}" is not this gateway's to serve`);
}

async function findOrCreate(s: GatewayDeps, ctx: GatewayContext, name: string, type: string): Promise<DeviceRecord> {
  const { entities } = s;
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
  if (crossesOwner(s, ctx, d)) throw foreign(s, ctx, name);
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
async function subDevicesOf(s: GatewayDeps, ctx: GatewayContext, names: readonly string[]): Promise<DeviceRecord[]> {
  // every name is checked before any is created or taken over: one bad name refuses the publish and changes nothing
  for (const name of names) {
    checkName('name', name);
    const known = ctx.subDevices.get(name);
    const d = known !== undefined ? s.entities.device(known.id) : s.entities.byName('DEVICE', name);
    if (known !== undefined && d === undefined) continue; // deleted meanwhile: subDevice below tells
    if (d !== undefined && (d.entityType !== 'DEVICE' || d.gateway === true)) throw notForGateway(name);
    if (d !== undefined && crossesOwner(s, ctx, d)) throw foreign(s, ctx, name);
  }
  const all = await Promise.allSettled(names.map((name) => subDevice(s, ctx, name)));
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

/** The Gateway API's actions, one per kind of publish; each throws OutpostError for bad or refused input. */
export class GatewayActions {
  constructor(private readonly s: GatewayDeps) {}

  /** `{"device":"<name>","type"?:"<type>"}`: the sub-device is connected (found, adopted or created). */
  async connect(ctx: GatewayContext, payload: Buffer): Promise<void> {
    const json = parseBody(payload);
    if (!isJsonObject(json)) bad('connect must be {"device":"<name>","type"?:"<type>"}');
    const type = json['type'];
    if (type !== undefined && (typeof type !== 'string' || type === '')) bad('"type" must be a string');
    await subDevice(this.s, ctx, deviceName(json['device']), type);
  }

  /** `{"device":"<name>"}`: the session stops serving it. */
  disconnect(ctx: GatewayContext, payload: Buffer): void {
    const json = parseBody(payload);
    if (!isJsonObject(json)) bad('disconnect must be {"device":"<name>"}');
    const d = ctx.subDevices.get(deviceName(json['device']));
    if (d !== undefined) ctx.disconnected(d);
  }

  /** `{"<name>":[points..],..}`: each device's points, once all are on disk. */
  telemetry(ctx: GatewayContext, payload: Buffer): Promise<void> {
    const now = this.s.now();
    return admitted(this.s.admission, payload.length, () => this.telemetryAdmitted(ctx, payload, now));
  }

  private async telemetryAdmitted(ctx: GatewayContext, payload: Buffer, now: number): Promise<void> {
    const { s } = this;
    // each device's array through the HTTP body parser; anything unusual through the JSON tree
    const parts = telemetryParts(payload, now);
    if (parts.length === 0) bad('gateway telemetry names no device with data');
    const devices = await subDevicesOf(
      s,
      ctx,
      parts.map(([name]) => name),
    );
    await Promise.all(parts.map(([, records], i) => s.ingest.save('DEVICE', (devices[i] as DeviceRecord).id, records)));
  }

  /** `{"<name>":{k:v},..}`: client attributes of each device, once all are on disk. */
  attributes(ctx: GatewayContext, payload: Buffer): Promise<void> {
    return admitted(this.s.admission, payload.length, () => this.attributesAdmitted(ctx, payload));
  }

  private async attributesAdmitted(ctx: GatewayContext, payload: Buffer): Promise<void> {
    const { s } = this;
    const parts: Array<[string, KvEntry[]]> = perDevice(parseBody(payload), 'gateway attributes', isJsonObject).map(
      ([name, v]) => [name, parseKvObject(v as { [key: string]: JsonValue })],
    );
    const devices = await subDevicesOf(
      s,
      ctx,
      parts.map(([name]) => name),
    );
    const now = s.now();
    await Promise.all(
      parts.map(([, kv], i) => s.attributes.save('DEVICE', (devices[i] as DeviceRecord).id, 'CLIENT_SCOPE', kv, now)),
    );
  }

  /** `{"<name>":[{"ds","values"}..],..}`: depth series of each device, once all are on disk. */
  depth(ctx: GatewayContext, payload: Buffer): Promise<void> {
    return admitted(this.s.admission, payload.length, () => this.depthAdmitted(ctx, payload));
  }

  private async depthAdmitted(ctx: GatewayContext, payload: Buffer): Promise<void> {
    const { s } = this;
    const parts: Array<[string, DsRecord[]]> = perDevice(
      parseBody(payload),
      'gateway depth telemetry',
      Array.isArray,
    ).map(([name, v]) => [name, parseDepthTelemetry(v).filter((r) => r.values.length > 0)]);
    const devices = await subDevicesOf(
      s,
      ctx,
      parts.map(([name]) => name),
    );
    await Promise.all(parts.map(([, records], i) => s.depth.write((devices[i] as DeviceRecord).id, records)));
  }

  /** `{"device","id","data"}`: a sub-device's reply to server-side RPC `id` (`data` a string or any JSON). */
  async rpcReply(ctx: GatewayContext, payload: Buffer): Promise<void> {
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
    const d = await subDevice(this.s, ctx, deviceName(json['device']));
    const data = json['data'];
    this.s.rpc.reply(d.id, n, data === undefined ? '' : typeof data === 'string' ? data : stringifyJson(data));
  }

  /**
   * `{"id","device","client":bool,"key"|"keys"}` → the body of `v1/gateway/attributes/response`:
   * `{"id","device","value"}` when exactly one attribute is found, `{"id","device","values":{..}}` for more;
   * nothing found → only id and device. TB's JsonConverter decides by what it found, not by `key` vs `keys`: its
   * gateway SDK always sends `keys` and reads `value` for a one-key request. `keys: []` asks for all of the scope.
   * Read once the gateway's earlier publishes are written.
   */
  async attributeRequest(ctx: GatewayContext, payload: Buffer): Promise<string> {
    const json = parseBody(payload);
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
    const d = await subDevice(this.s, ctx, name);
    await ctx.previousWrites;
    const found = this.s.attributes.get(d.id, client ? 'CLIENT_SCOPE' : 'SHARED_SCOPE', keys);
    const head = `{"id":${id instanceof NumLit ? id.text : JSON.stringify(id)},"device":${JSON.stringify(name)}`;
    if (found.length === 0) return `${head}}`;
    if (found.length === 1) return `${head},"value":${kvToJson((found[0] as (typeof found)[number]).value)}}`;
    return `${head},"values":{${found.map((a) => `${JSON.stringify(a.key)}:${kvToJson(a.value)}`).join(',')}}}`;
  }

  /** The device has another owner than the gateway, by the stored records (`ownersDiffer` above). */
  ownersDiffer(gateway: DeviceRecord, d: DeviceRecord): boolean {
    return ownersDiffer(this.s, gateway, d);
  }
}
