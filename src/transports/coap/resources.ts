/**
 * ThingsBoard's CoAP device resources under `/api/v1/{token}/` (docs/coap.md), over the device layer HTTP and
 * MQTT use: the same parsers, typing, write path (an upload's 2.01 goes out once it is on disk), attribute
 * reads, RPC broker and provisioning. Codes as TB: unknown token 4.01 before the body is read; bad JSON, a
 * wrong shape or an unknown feature 4.00; a path outside `/api/v1` 4.04; PUT/DELETE 4.05.
 */
import { type DeviceActions, type DeviceRecord, type PollHandle, unproven } from '../../device/actions.js';
import { OutpostError, asOutpostError } from '../../errors.js';
import { type Answer, CONTENT_JSON, uintOption } from './codec.js';
import type { Peer } from './exchange.js';
import type { ObservationRegistry, ObservedResource } from './observe.js';

export interface CoapRequest {
  /** `0.01` GET … */
  readonly code: string;
  readonly path: readonly string[];
  readonly query: readonly string[];
  readonly payload: Buffer;
  /** the Observe option's value, if present */
  readonly observe: number | undefined;
  readonly peer: Peer;
  readonly token: Buffer;
  readonly confirmable: boolean;
  /** path and query: where Block2 follow-ups find a large answer */
  readonly uri: string;
  /** `fn` runs once the answer has been handed to the message layer (an Observe registration's activation) */
  registered(fn: () => void): void;
}

const GET = '0.01';
const POST = '0.02';

/** A held client-side RPC: the listener cancels these on close. */
export type HoldFn = (h: PollHandle) => () => void;

const answer = (code: string, body?: string): Answer =>
  body === undefined ? { code } : { code, payload: Buffer.from(body), contentFormat: CONTENT_JSON };
/** refusals decided from the path alone, before any token was found: never larger than the request */
const refusal = (code: string): Answer => Object.freeze({ code, unproven: true });
const NO_PATH = refusal('4.04');
const NO_METHOD = refusal('4.05');
const NO_DEVICE = refusal('4.01');
/** every upload's answer: one object, never changed (answers are read-only) */
const CREATED: Answer = Object.freeze({ code: '2.01' });

/**
 * TB's codes for an OutpostError: 4.00 bad input, 4.13 too large, 4.29 too many, else 5.00/5.03. A full disk
 * (HTTP's 507, which CoAP has no code for) answers 5.03 Service Unavailable: it passes once space is freed, and
 * a device that retries on 5.03 loses nothing.
 */
export function errorAnswer(err: unknown): Answer {
  const e = asOutpostError(err);
  const code =
    e.status === 400
      ? '4.00'
      : e.status === 401
        ? '4.01'
        : e.status === 404
          ? '4.04'
          : e.status === 413
            ? '4.13'
            : e.status === 429
              ? '4.29'
              : e.status === 503 || e.status === 507
                ? '5.03'
                : '5.00';
  // diagnostic payload (RFC 7252 section 5.5.2): a short human-readable reason, no Content-Format
  return { code, payload: Buffer.from(e.message.slice(0, 200)) };
}

export type Precheck = { readonly device: DeviceRecord | undefined } | { readonly refused: Answer };

/**
 * What can be decided from the method and path alone, before a body is read or assembled: 4.04, 4.05, 4.01,
 * or the device the token names (undefined for provisioning).
 */
export function precheck(devices: Pick<DeviceActions, 'byToken'>, req: Pick<CoapRequest, 'code' | 'path'>): Precheck {
  const p = req.path;
  if (p[0] !== 'api' || p[1] !== 'v1') return { refused: NO_PATH };
  if (req.code !== GET && req.code !== POST) return { refused: NO_METHOD };
  if (p.length === 3 && p[2] === 'provision') return { device: undefined };
  const token = p[2];
  const device = token === undefined ? undefined : devices.byToken(token);
  if (device === undefined) return { refused: NO_DEVICE };
  return { device };
}

export class CoapResources {
  constructor(
    private readonly devices: DeviceActions,
    private readonly observations: ObservationRegistry,
    private readonly hold: HoldFn,
  ) {}

  /**
   * Answers one (reassembled) request. An Observe registration's answer carries Observe 0; it is activated
   * through `req.registered` once that answer has been handed to the message layer.
   */
  async handle(req: CoapRequest): Promise<Answer> {
    const pre = precheck(this.devices, req);
    if ('refused' in pre) return pre.refused;
    if (pre.device === undefined) return this.provision(req);
    this.devices.activity(pre.device.id);
    try {
      return await this.feature(pre.device, req);
    } catch (err) {
      return errorAnswer(err);
    }
  }

  /**
   * Whatever is answered before the key and secret were found good (bad JSON, a wrong secret, a rate limit) is
   * marked unproven: cut to the request's size, as a spoofed source's provisioning request must not be an
   * amplifier.
   */
  private async provision(req: CoapRequest): Promise<Answer> {
    if (req.code !== POST) return NO_METHOD;
    try {
      const out = await this.devices.provision(req.payload, req.peer.address);
      const a = answer(out.status === 'SUCCESS' ? '2.01' : '4.00', JSON.stringify(out));
      return unproven(out) ? { ...a, unproven: true } : a;
    } catch (err) {
      return { ...errorAnswer(err), unproven: true };
    }
  }

  private async feature(device: DeviceRecord, req: CoapRequest): Promise<Answer> {
    const { devices } = this;
    const feature = req.path[3];
    /** segments after the feature's */
    const more = req.path.length - 4;
    if (feature === 'telemetry' && more === 0 && req.code === POST) {
      await devices.telemetry(device.id, req.payload);
      return CREATED;
    }
    if (feature === 'attributes' && req.code === POST && more === 0) {
      await devices.attributes(device.id, req.payload);
      return CREATED;
    }
    if (feature === 'attributes' && req.code === GET) {
      // TB reads segment 4 (`attributes/updates`) as nothing but the observed resource
      if (req.observe === 0) return this.observe(device, 'attributes', req);
      if (req.observe === 1) this.observations.cancel(`${device.id}/attributes`, req.peer, req.token);
      const q = queryMap(req.query);
      const body = devices.readAttributes(device.id, devices.keys(q.get('clientKeys'), q.get('sharedKeys')));
      return body === '{}' ? answer('4.04') : answer('2.05', body);
    }
    if (feature === 'rpc' && req.code === GET && more === 0) {
      if (req.observe === 0) return this.observe(device, 'rpc', req);
      if (req.observe === 1 && this.observations.cancel(`${device.id}/rpc`, req.peer, req.token)) return answer('2.02');
      throw new OutpostError('BAD_PARAM', 'GET rpc needs Observe');
    }
    if (feature === 'rpc' && req.code === POST) {
      const reqId = req.path[4];
      const id = more === 1 && /^\d{1,10}$/.test(reqId as string) ? Number(reqId) : undefined;
      if (id !== undefined && id <= 2147483647) {
        // CoAP takes only JSON replies (docs/coap.md): anything else is a 4.00
        devices.rpcReply(device.id, id, req.payload, { json: true });
        return CREATED;
      }
      return this.clientRpc(device, req);
    }
    throw new OutpostError('BAD_PARAM', `unknown resource ${req.path.slice(3).join('/') || '(none)'}`);
  }

  private observe(device: DeviceRecord, resource: ObservedResource, req: CoapRequest): Answer {
    const o = this.observations.register(device.id, resource, req.peer, req.token, req.confirmable, req.uri);
    if (o === undefined) {
      // no room: answered as a plain GET (RFC 7641 section 4.1), without Observe
      if (resource === 'rpc') return { code: '5.03', payload: Buffer.from('too many observations') };
      return answer('2.05', this.devices.sharedJson(device.id));
    }
    req.registered(() => this.observations.activate(o));
    const obs0 = [{ name: 'Observe', value: uintOption(0) }];
    if (resource === 'rpc') return { code: '2.03', options: obs0 };
    return { ...answer('2.05', this.devices.sharedJson(device.id)), options: obs0 };
  }

  private clientRpc(device: DeviceRecord, req: CoapRequest): Promise<Answer> {
    const call = this.devices.clientRpcCall(device.id, req.payload);
    return new Promise<Answer>((resolve) => {
      let release: (() => void) | undefined;
      const handle = this.devices.clientRpc(call, (o) => {
        release?.();
        // a change of the device's credentials while it was held: the token it came with no longer names it
        const ended = o.kind === 'credentialsUpdated' ? '4.01' : '4.04';
        resolve(o.kind === 'data' ? answer('2.05', o.body) : answer(ended));
      });
      if (handle !== undefined) release = this.hold(handle);
    });
  }
}

function queryMap(query: readonly string[]): Map<string, string> {
  const m = new Map<string, string>();
  for (const q of query) {
    const i = q.indexOf('=');
    if (i > 0) m.set(q.slice(0, i), q.slice(i + 1));
  }
  return m;
}
