/**
 * The device layer's door: what a LAN transport (src/transports/http, mqtt, coap) asks of the daemon on a
 * device's behalf, each action written once. A transport is its codec and session plus calls into this: it finds
 * the device by its credentials here, hands over a request's body (parsed, typed and written here, through the
 * same write path, so "acknowledged" means "on disk" on every transport), reports activity and sessions
 * (src/device/state.ts), holds long-polls and client-side RPCs, and is handed shared-attribute changes and
 * server-side RPCs for the device it serves (`watch`, `attachRpcSink`).
 *
 * Bad input throws OutpostError (400) before anything is written or counted as activity. `{ accepted }`, where
 * an action takes it, runs once the input passed its checks and before the write: HTTP's moment of activity
 * (MQTT and CoAP count each packet or request themselves).
 */
import type { LoginThrottle } from '../auth/throttle.js';
import { OutpostError } from '../errors.js';
import { admitted } from '../ingest/admission.js';
import { parseTelemetryBody } from '../ingest/fastpath.js';
import { isJsonObject, stringifyJson } from '../ingest/json.js';
import { parseAttributes, parseBody } from '../ingest/payload.js';
import { type ClientRpcCall, type ClientRpcHandler, type RpcSink, attributeUpdateBody } from '../rpc/broker.js';
import type { PollHandle, PollOutcome } from '../rpc/longpoll.js';
import { quoted, tokenPrefix } from '../status/failures.js';
import type { DeviceRecord } from '../store/entities.js';
import type { DurationMs } from '../types.js';
import { deviceAttributesJson, keyList } from './attributes.js';
import type { DeviceDeps } from './deps.js';
import { parseDepthTelemetry } from './depth.js';
import { GatewayActions } from './gateway.js';
import { type LoginRequest, type Refusal, guardedLogin } from './login.js';
import { type ProvisionAnswer, provisionDevice } from './provision.js';

export type { DeviceRecord } from '../store/entities.js';
export type { ClientRpcCall, RpcDelivery, RpcSink } from '../rpc/broker.js';
export type { PollHandle, PollOutcome } from '../rpc/longpoll.js';
export type { ProvisionAnswer } from './provision.js';
export type { DeviceDeps } from './deps.js';
export type { LoginRequest, Refusal } from './login.js';
export type { GatewayContext } from './gateway.js';
export { unproven } from './provision.js';
export { overwritesActivityTime } from '../store/entity-records.js';

/** Runs once the input passed its checks, before the write (HTTP's activity). */
export interface Accepted {
  readonly accepted?: () => void;
}

/** A session's view of a device's server-side events (`watch`); each optional. */
export interface DeviceEvents {
  /**
   * a DEVICE's shared attributes changed: `body()` is the update, `{k:v,..}` or `{"deleted":[..]}`, made only
   * when asked for (most devices have no session listening)
   */
  sharedAttributes?(deviceId: string, body: () => string): void;
  /** the device's credentials changed: what a session authenticated with no longer names it */
  credentialsUpdated?(deviceId: string): void;
  /** a DEVICE was deleted */
  deleted?(deviceId: string): void;
  /** a DEVICE was assigned to another owner or unassigned */
  ownerChanged?(deviceId: string): void;
}

/** The keys of an attribute request: undefined = not given. */
export interface AttributeKeys {
  readonly clientKeys: string[] | undefined;
  readonly sharedKeys: string[] | undefined;
}

export class DeviceActions {
  /** the Gateway API's actions for a LAN gateway's sub-devices */
  readonly gateway: GatewayActions;

  constructor(private readonly d: DeviceDeps) {
    this.gateway = new GatewayActions(d);
  }

  // ---- who: credentials --------------------------------------------------------------------

  /** The device an access token names, or undefined. */
  byToken(token: string): DeviceRecord | undefined {
    return token === '' ? undefined : this.d.entities.deviceByToken(token);
  }

  /** The device's stored record now (a session's copy may predate a change). */
  current(deviceId: string): DeviceRecord | undefined {
    return this.d.entities.device(deviceId);
  }

  /**
   * The device an access token in a request names; unknown → 401, counted and logged with the token's first
   * characters (status/failures.ts): `where(prefix)` says from where and on what, the prefix in place of the token.
   */
  authenticate(
    token: string,
    where: (prefix: string) => { readonly message: string; readonly source: string },
  ): DeviceRecord {
    const device = this.byToken(token);
    if (device !== undefined) return device;
    if (this.d.failures !== undefined) {
      const w = where(tokenPrefix(token));
      this.d.failures.note('deviceToken', w.message, w.source);
    }
    throw new OutpostError('DEVICE_TOKEN_INVALID');
  }

  /** MQTT's CONNECT by credentials (src/device/login.ts), behind the failed-login throttle. */
  login(req: LoginRequest, address: string, throttle: LoginThrottle): DeviceRecord | Refusal {
    return guardedLogin(this.d.entities, { throttle, failures: this.d.failures }, req, address);
  }

  /** Counts and logs through status/failures.ts; false when there is no failure log (unit tests). */
  get counted(): boolean {
    return this.d.failures !== undefined;
  }

  /**
   * An MQTT publish refused for its payload (`message`) or its topic (no message), counted and logged at most a
   * line a minute of each kind (status/failures.ts).
   */
  badPublish(deviceName: string, address: string, topic: string, message?: string): void {
    const failures = this.d.failures;
    if (failures === undefined) return;
    const source = `device ${quoted(deviceName)} at ${address}`;
    if (message !== undefined)
      failures.note('mqttPayload', `mqtt: ${source} published a bad payload to ${quoted(topic)}: ${message}`, source);
    else
      failures.note(
        'mqttTopic',
        `mqtt: ${source} published to ${quoted(topic)}, not a topic of the device or gateway API (docs/mqtt.md); ignored`,
        source,
      );
  }

  // ---- connectivity (src/device/state.ts) --------------------------------------------------

  /** The device did something: a request that passed its checks, an MQTT packet, a CoAP request. */
  activity(deviceId: string): void {
    this.d.state?.activity(deviceId);
  }

  /** A session of the device opened: an MQTT connection, a gateway's sub-session, a CoAP observation. */
  connected(deviceId: string): void {
    this.d.state?.connected(deviceId);
  }

  /** A session of the device closed. */
  disconnected(deviceId: string): void {
    this.d.state?.disconnected(deviceId);
  }

  // ---- uploads -----------------------------------------------------------------------------

  /** Telemetry in the device API's three shapes; resolves once on disk. */
  telemetry(deviceId: string, body: Buffer, o?: Accepted): Promise<void> {
    const now = this.d.now();
    return admitted(this.d.admission, body.length, () => {
      const records = parseTelemetryBody(body, now);
      o?.accepted?.();
      return this.d.ingest.save('DEVICE', deviceId, records);
    });
  }

  /** A flat object → CLIENT_SCOPE attributes (nulls skipped); resolves once on disk. */
  attributes(deviceId: string, body: Buffer, o?: Accepted): Promise<void> {
    return admitted(this.d.admission, body.length, async () => {
      const entries = parseAttributes(parseBody(body));
      o?.accepted?.();
      await this.d.attributes.save('DEVICE', deviceId, 'CLIENT_SCOPE', entries, this.d.now());
    });
  }

  /** Depth telemetry (docs/api.md): `{"ds","values"}` or an array of those; resolves once on disk. */
  depth(deviceId: string, body: Buffer, o?: Accepted): Promise<void> {
    return admitted(this.d.admission, body.length, async () => {
      const records = parseDepthTelemetry(parseBody(body));
      o?.accepted?.();
      await this.d.depth.write(
        deviceId,
        records.filter((r) => r.values.length > 0),
      );
    });
  }

  // ---- reads -------------------------------------------------------------------------------

  /** `a,b` key lists as the HTTP and CoAP queries carry them (absent or empty: not given). */
  keys(clientKeys: string | null | undefined, sharedKeys: string | null | undefined): AttributeKeys {
    return { clientKeys: keyList(clientKeys), sharedKeys: keyList(sharedKeys) };
  }

  /**
   * MQTT's attribute request body, `{"clientKeys":"a,b","sharedKeys":"c"}` (either or neither; an empty body
   * asks for all).
   */
  requestedKeys(body: Buffer): AttributeKeys {
    const json = body.length === 0 ? {} : parseBody(body);
    if (!isJsonObject(json)) throw new OutpostError('BAD_PAYLOAD', 'attribute request must be a JSON object');
    const keys = (k: string): string[] | undefined => {
      const v = json[k];
      if (v === undefined || v === null) return undefined;
      if (typeof v !== 'string') throw new OutpostError('BAD_PAYLOAD', `"${k}" must be a comma-separated string`);
      return keyList(v);
    };
    return { clientKeys: keys('clientKeys'), sharedKeys: keys('sharedKeys') };
  }

  /** `{"client":{..},"shared":{..}}` with empty sections omitted (src/device/attributes.ts). */
  readAttributes(deviceId: string, k: AttributeKeys): string {
    return deviceAttributesJson(this.d.attributes, deviceId, k.clientKeys, k.sharedKeys);
  }

  /**
   * Every shared attribute as one flat object, the shape of a change notification: `{"k":v,..}`, `{}` when there
   * is none (CoAP's Observe 0 answer and probes). ThingsBoard's own CoAP tests compare the Observe 0 answer to
   * exactly this (not the read's `{"shared":{..}}`), so a client handles the first answer and every later one with
   * the same code.
   */
  sharedJson(deviceId: string): string {
    const shared = this.d.attributes.get(deviceId, 'SHARED_SCOPE');
    if (shared.length === 0) return '{}';
    return attributeUpdateBody(
      shared.map((a) => [a.key, a.value] as const),
      [],
    );
  }

  // ---- RPC ---------------------------------------------------------------------------------

  /**
   * The device's reply to server-side RPC `id`, handed to the REST caller as the device sent it. `json`: the
   * transport takes only JSON replies (CoAP, docs/coap.md); a body that does not parse is a 400.
   * Unknown or stale ids are ignored.
   */
  rpcReply(deviceId: string, id: number, body: Buffer | string, o?: Accepted & { readonly json?: boolean }): void {
    if (o?.json === true) parseBody(body);
    o?.accepted?.();
    this.d.rpc.reply(deviceId, id, typeof body === 'string' ? body : body.toString('utf8'));
  }

  /** A client-side RPC request, `{"method","params"}`: the one check every transport makes. */
  clientRpcCall(deviceId: string, body: Buffer): ClientRpcCall {
    const json = parseBody(body);
    if (!isJsonObject(json))
      throw new OutpostError('BAD_PAYLOAD', 'RPC request must be a JSON object {"method","params"}');
    const method = json['method'];
    if (typeof method !== 'string' || method === '')
      throw new OutpostError('BAD_PAYLOAD', 'RPC request must have a "method" string');
    const params = json['params'];
    return { deviceId, method, paramsJson: params === undefined ? 'null' : stringifyJson(params) };
  }

  /** Asks the client-side RPC (docs/api.md): a held request, settled with the answer or `{"error":"timeout"}`. */
  clientRpc(call: ClientRpcCall, settle: (o: PollOutcome) => void, origin?: string): PollHandle | undefined {
    return this.d.rpc.clientRpc(call, settle, origin);
  }

  /** Answers a client-side RPC method here (a transport's own, as MQTT's `getSessionLimits`). */
  registerClientRpc(method: string, handler: ClientRpcHandler): void {
    this.d.rpc.registerClientRpc(method, handler);
  }

  /** HTTP's `GET /rpc` long-poll. */
  waitRpc(
    deviceId: string,
    timeout: DurationMs,
    settle: (o: PollOutcome) => void,
    origin?: string,
  ): PollHandle | undefined {
    return this.d.rpc.waitRpc(deviceId, timeout, settle, origin);
  }

  /** HTTP's `GET /attributes/updates` long-poll. */
  waitAttributes(
    deviceId: string,
    timeout: DurationMs,
    settle: (o: PollOutcome) => void,
    origin?: string,
  ): PollHandle | undefined {
    return this.d.rpc.waitAttributes(deviceId, timeout, settle, origin);
  }

  // ---- delivery to a session ----------------------------------------------------------------

  /**
   * The device's server-side RPCs go to `sink` (an MQTT subscription, a gateway's session, a CoAP observation);
   * pending ones at once. Returns the detach.
   */
  attachRpcSink(deviceId: string, sink: RpcSink, via?: 'own' | 'gateway'): () => void {
    return this.d.rpc.attachSink(deviceId, sink, via);
  }

  /** A session listens for the device's shared-attribute changes (the sync announces it). Returns the detach. */
  listenAttributes(deviceId: string): () => void {
    return this.d.rpc.watchAttributes(deviceId);
  }

  /** Server-side events of devices, for a transport's sessions; returns the unsubscribe. */
  watch(e: DeviceEvents): () => void {
    const { bus } = this.d;
    const off: Array<() => void> = [];
    const { sharedAttributes, credentialsUpdated, deleted, ownerChanged } = e;
    if (sharedAttributes !== undefined)
      off.push(
        bus.on('attributes', (ev) => {
          if (ev.entityType !== 'DEVICE' || ev.scope !== 'SHARED_SCOPE') return;
          if (ev.updated.length === 0 && ev.deleted.length === 0) return;
          let made: string | undefined;
          sharedAttributes(ev.entityId, () => (made ??= attributeUpdateBody(ev.updated, ev.deleted)));
        }),
      );
    if (credentialsUpdated !== undefined)
      off.push(bus.on('credentialsUpdated', (ev) => credentialsUpdated(ev.deviceId)));
    if (deleted !== undefined)
      off.push(
        bus.on('entityDeleted', (ev) => {
          if (ev.entityType === 'DEVICE') deleted(ev.entityId);
        }),
      );
    if (ownerChanged !== undefined)
      off.push(
        bus.on('accessChanged', (ev) => {
          if (ev.entityType === 'DEVICE') ownerChanged(ev.entityId);
        }),
      );
    return () => {
      for (const f of off.splice(0)) f();
    };
  }

  // ---- provisioning -------------------------------------------------------------------------

  /** TB's device provisioning (src/device/provision.ts): throws for a body that is not a JSON object. */
  provision(body: Buffer, address: string): Promise<ProvisionAnswer> {
    return provisionDevice(this.d, body, address);
  }
}
