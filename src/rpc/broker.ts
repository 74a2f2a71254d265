/**
 * Server ↔ device messaging for the device API (docs/api.md):
 * - server-side RPC: per-device ids from 1 (TB's Python SDK reads id 0 as "no id"), a bounded pending queue
 *   with expiry, delivery to an open or the next `GET /rpc` or to the device's push sink (its own MQTT session
 *   or CoAP observation, else its gateway's), exactly once whichever way; replies through `POST /rpc/{id}` or MQTT;
 * - shared-attribute changes (bus `attributes`, SHARED_SCOPE of a DEVICE) answer every open
 *   `GET /attributes/updates` of that device;
 * - client-side RPC (`POST /rpc`): registered handlers, built-in `getCurrentTime`, otherwise held until the
 *   client-side timeout;
 * - a deleted device (bus `entityDeleted`) ends its held requests and pending RPCs; a change of its credentials
 *   (bus `credentialsUpdated`) ends its held requests.
 *
 * One timer wheel serves every deadline here, so every queue here is bounded in time. Nothing here knows HTTP: outcomes are values.
 */
import type { EventBus } from '../bus/index.js';
import { OutpostError } from '../errors.js';
import { type KvValue, kvToJson } from '../model/kv.js';
import type { DurationMs, EpochMs } from '../types.js';
import { LongPollRegistry, type PollHandle, type PollOutcome } from './longpoll.js';
import { TimerWheel, type WheelClock, type WheelEntry, realClock } from './timer-wheel.js';

/** A server-side RPC as submitted through REST (docs/api.md). */
export interface RpcSubmission {
  readonly method: string;
  /** `params` as JSON text, forwarded verbatim */
  readonly paramsJson: string;
  readonly oneway: boolean;
  /** ms from now until the RPC expires (already raised to the configured minimum) */
  readonly timeoutMs: DurationMs;
  /** told when the device receives it (an RPC from the upstream counts its deliveries) */
  readonly onDelivered?: () => void;
}

export type RpcOutcome =
  /** one-way: handed to the device */
  | { readonly kind: 'delivered' }
  /** two-way: the device's reply body, verbatim (may be empty or not JSON) */
  | { readonly kind: 'reply'; readonly body: string }
  /** expired before any poll took it */
  | { readonly kind: 'undelivered' }
  /** two-way: delivered, but no reply before it expired */
  | { readonly kind: 'unanswered' }
  | { readonly kind: 'deviceDeleted' };

/** A client-side RPC handler: the JSON reply text, or undefined to decline (the next handler or timeout). */
export type ClientRpcHandler = (call: ClientRpcCall) => string | undefined | Promise<string | undefined>;
export interface ClientRpcCall {
  readonly deviceId: string;
  readonly method: string;
  /** `params` as JSON text ("null" when absent) */
  readonly paramsJson: string;
}

/** A server-side RPC as handed to a push sink. */
export interface RpcDelivery {
  readonly id: number;
  readonly method: string;
  /** `params` as JSON text */
  readonly paramsJson: string;
}

/**
 * Where a device listens without polling (an MQTT subscription to its RPC topic, its gateway's session, a CoAP
 * observation): `deliver` hands the RPC over (written to the connection) or returns false when it can no longer
 * take it. A sink whose device confirms receipt (a CoAP CON notification, ACKed) returns a promise instead: the
 * RPC counts as delivered only once it resolves true; false puts it back at the head of the device's queue for
 * its next listener, and an RPC that expires meanwhile is undelivered.
 */
export interface RpcSink {
  deliver(rpc: RpcDelivery): boolean | Promise<boolean>;
}

export interface RpcBrokerOptions {
  /** pending (queued, undelivered) server-side RPCs per device; one more → 429 */
  readonly maxPendingPerDevice: number;
  /** held requests over all devices; one more → 429 */
  readonly maxOpenPolls: number;
  /** held requests per device; one more answers its oldest as timed out (0 = no cap) */
  readonly maxPollsPerDevice?: number;
  /** held requests per remote address; one more → 429 (0 = no cap) */
  readonly maxPollsPerAddress?: number;
  /** ms; client-side RPC wait before `{"error":"timeout"}` */
  readonly clientSideTimeoutMs: DurationMs;
  readonly now?: () => EpochMs;
  /** injected for tests; the real one unrefs its timer */
  readonly clock?: WheelClock;
  /** ms; wheel bucket width = the most a deadline fires late */
  readonly tickMs?: DurationMs;
  readonly log?: (msg: string) => void;
}

interface PendingRpc {
  readonly id: number;
  readonly deviceId: string;
  readonly oneway: boolean;
  /** `{"id":..,"method":..,"params":..}`: what the device's poll receives */
  readonly body: string;
  readonly method: string;
  readonly paramsJson: string;
  /** sending: handed to a sink that has not yet confirmed it (RpcSink) */
  state: 'queued' | 'sending' | 'delivered' | 'done';
  timer: WheelEntry | undefined;
  readonly onDelivered: (() => void) | undefined;
  readonly resolve: (o: RpcOutcome) => void;
}

interface DeviceRpcState {
  /** queued, oldest first */
  readonly queue: PendingRpc[];
  /** delivered two-way RPCs awaiting `POST /rpc/{id}` */
  readonly awaiting: Map<number, PendingRpc>;
  /** handed to a sink that has yet to confirm them */
  readonly sending: Set<PendingRpc>;
}

export interface RpcStatus {
  readonly openPolls: number;
  readonly attributePolls: number;
  readonly rpcPolls: number;
  readonly clientRpcs: number;
  readonly queuedRpcs: number;
  readonly awaitingReplies: number;
}

export class RpcBroker {
  readonly polls: LongPollRegistry;
  private readonly wheel: TimerWheel;
  private readonly now: () => EpochMs;
  /** next RPC id per device; kept while the daemon runs (TB: per device-actor lifetime) */
  private readonly seq = new Map<string, number>();
  private readonly devices = new Map<string, DeviceRpcState>();
  /** the device's own push sink: the latest to attach (a new MQTT session replaces the old one, as TB) */
  private readonly sinks = new Map<string, RpcSink>();
  /**
   * a LAN gateway's session serving the device: used only while the device has no sink of its own, so a gateway
   * that connects a device never takes the RPCs of the device's own live session (docs/mqtt.md)
   */
  private readonly gatewaySinks = new Map<string, RpcSink>();
  /** devices with an MQTT session subscribed to their shared-attribute updates: how many sessions */
  private readonly attributeWatchers = new Map<string, number>();
  private readonly clientHandlers = new Map<string, ClientRpcHandler>();
  private clientFallback: ClientRpcHandler | undefined;
  private readonly unsubscribe: Array<() => void> = [];

  constructor(
    bus: EventBus,
    private readonly opts: RpcBrokerOptions,
  ) {
    this.now = opts.now ?? Date.now;
    this.wheel = new TimerWheel(opts.tickMs ?? 50, opts.clock ?? realClock, opts.log);
    this.polls = new LongPollRegistry(
      this.wheel,
      opts.maxOpenPolls,
      opts.maxPollsPerDevice ?? 0,
      opts.maxPollsPerAddress ?? 0,
    );
    this.clientHandlers.set('getCurrentTime', () => `{"time":${this.now()}}`);
    this.unsubscribe.push(
      bus.on('attributes', (ev) => {
        // As ThingsBoard (docs/api.md): only SHARED_SCOPE changes of the device wake its `/attributes/updates`.
        if (ev.entityType !== 'DEVICE' || ev.scope !== 'SHARED_SCOPE') return;
        if (this.polls.countFor(ev.entityId, 'attributes') === 0) return;
        if (ev.deleted.length === 0 && ev.updated.length === 0) return;
        this.polls.answerAll(ev.entityId, 'attributes', attributeUpdateBody(ev.updated, ev.deleted));
      }),
      bus.on('entityDeleted', (ev) => {
        if (ev.entityType === 'DEVICE') this.deviceDeleted(ev.entityId);
      }),
      // a request held with the old token must not receive what comes next (an RPC, an attribute change)
      bus.on('credentialsUpdated', (ev) => this.polls.endDevice(ev.deviceId, { kind: 'credentialsUpdated' })),
    );
  }

  // ---- long-polls ------------------------------------------------------------------------------

  /**
   * `GET /attributes/updates`: held until the next shared-attribute change of the device or `timeoutMs`.
   * Throws 429 when the registry is full.
   */
  waitAttributes(
    deviceId: string,
    timeoutMs: DurationMs,
    settle: (o: PollOutcome) => void,
    origin?: string,
  ): PollHandle {
    return this.polls.open(deviceId, 'attributes', timeoutMs, settle, origin);
  }

  /**
   * `GET /rpc`: the oldest queued RPC at once (settled synchronously, returns undefined), else held until an
   * RPC arrives or `timeoutMs`. Throws 429 when the registry is full.
   */
  waitRpc(
    deviceId: string,
    timeoutMs: DurationMs,
    settle: (o: PollOutcome) => void,
    origin?: string,
  ): PollHandle | undefined {
    const st = this.devices.get(deviceId);
    const next = st?.queue.shift();
    if (next !== undefined) {
      this.delivered(next);
      settle({ kind: 'data', body: next.body });
      return undefined;
    }
    return this.polls.open(deviceId, 'rpc', timeoutMs, settle, origin);
  }

  // ---- server-side RPC -------------------------------------------------------------------------

  /**
   * Queues an RPC for the device, or hands it to an open poll at once. Resolves with its outcome (docs/api.md).
   * Throws 429 (nothing queued) when the device already has `maxPendingPerDevice` queued RPCs.
   */
  submit(deviceId: string, req: RpcSubmission): Promise<RpcOutcome> {
    const had = this.devices.get(deviceId);
    if (had !== undefined && had.queue.length + had.sending.size >= this.opts.maxPendingPerDevice) {
      throw new OutpostError(
        'TOO_MANY_REQUESTS',
        `Too many pending RPC requests for device ${deviceId} (limit ${this.opts.maxPendingPerDevice})`,
      );
    }
    const st = this.deviceState(deviceId);
    const id = this.seq.get(deviceId) ?? 1;
    this.seq.set(deviceId, id >= 2147483647 ? 1 : id + 1);
    const body = `{"id":${id},"method":${JSON.stringify(req.method)},"params":${req.paramsJson}}`;
    return new Promise<RpcOutcome>((resolve) => {
      const p: PendingRpc = {
        id,
        deviceId,
        oneway: req.oneway,
        body,
        method: req.method,
        paramsJson: req.paramsJson,
        state: 'queued',
        timer: undefined,
        resolve,
        onDelivered: req.onDelivered,
      };
      p.timer = this.wheel.schedule(req.timeoutMs, () => this.expire(p));
      if (this.polls.answerOldest(deviceId, 'rpc', body)) {
        this.delivered(p);
        return;
      }
      const sink = this.sinkOf(deviceId);
      if (sink === undefined || !this.handTo(sink, p)) st.queue.push(p);
    });
  }

  /**
   * A device now listens by push (MQTT): every queued RPC is handed to `sink` at once, and later ones as they
   * come (an open long-poll still goes first). Replaces the device's earlier sink of the same kind: `own` (its
   * MQTT session, its CoAP observation) or `gateway` (a LAN gateway's session), the latter served only while
   * the device has no sink of its own. Returns the detach function, which does nothing once another sink has
   * replaced this one; detaching the device's own sink hands what is queued to its gateway's.
   */
  attachSink(deviceId: string, sink: RpcSink, via: 'own' | 'gateway' = 'own'): () => void {
    const slot = via === 'own' ? this.sinks : this.gatewaySinks;
    slot.set(deviceId, sink);
    this.drain(deviceId);
    return () => {
      if (slot.get(deviceId) !== sink) return;
      slot.delete(deviceId);
      if (via === 'own') this.drain(deviceId);
    };
  }

  private sinkOf(deviceId: string): RpcSink | undefined {
    return this.sinks.get(deviceId) ?? this.gatewaySinks.get(deviceId);
  }

  /** Hands the device's queued RPCs to its sink, oldest first, until the sink can take no more. */
  private drain(deviceId: string): void {
    const sink = this.sinkOf(deviceId);
    const st = this.devices.get(deviceId);
    while (sink !== undefined && st !== undefined && st.queue.length > 0) {
      const next = st.queue.shift() as PendingRpc;
      if (!this.handTo(sink, next)) {
        st.queue.unshift(next);
        break;
      }
    }
  }

  /**
   * A device's MQTT session subscribed to its shared-attribute updates: a local listener, as an open attributes
   * long-poll is (listeningDevices; the sync announces such devices upstream so that their updates come down).
   * Returns the detach function (the unsubscribe or the session's close), which counts once.
   */
  watchAttributes(deviceId: string): () => void {
    this.attributeWatchers.set(deviceId, (this.attributeWatchers.get(deviceId) ?? 0) + 1);
    let attached = true;
    return () => {
      if (!attached) return;
      attached = false;
      const n = (this.attributeWatchers.get(deviceId) ?? 1) - 1;
      if (n > 0) this.attributeWatchers.set(deviceId, n);
      else this.attributeWatchers.delete(deviceId);
    };
  }

  /**
   * Hands a queued RPC (taken off its queue by the caller) to a sink: false when the sink cannot take it. One the
   * sink will confirm later waits in `sending`; refused then, it goes back to the head of its device's queue.
   */
  private handTo(sink: RpcSink, p: PendingRpc): boolean {
    const taken = sink.deliver({ id: p.id, method: p.method, paramsJson: p.paramsJson });
    if (taken === true) this.delivered(p);
    if (typeof taken === 'boolean') return taken;
    p.state = 'sending';
    this.deviceState(p.deviceId).sending.add(p);
    taken.then(
      (confirmed) => this.confirmed(p, confirmed),
      () => this.confirmed(p, false),
    );
    return true;
  }

  private confirmed(p: PendingRpc, confirmed: boolean): void {
    if (p.state !== 'sending') return;
    const st = this.deviceState(p.deviceId);
    st.sending.delete(p);
    if (confirmed) {
      this.delivered(p);
      return;
    }
    p.state = 'queued';
    // the next listener gets it first, as a poll gets the oldest queued RPC
    st.queue.unshift(p);
    this.drain(p.deviceId);
  }

  private deviceState(deviceId: string): DeviceRpcState {
    let st = this.devices.get(deviceId);
    if (st === undefined) {
      st = { queue: [], awaiting: new Map(), sending: new Set() };
      this.devices.set(deviceId, st);
    }
    return st;
  }

  /** `POST /rpc/{id}`: the device's reply to a delivered two-way RPC. Unknown or stale ids are ignored. */
  reply(deviceId: string, id: number, body: string): boolean {
    const st = this.devices.get(deviceId);
    let p = st?.awaiting.get(id);
    if (p === undefined && st !== undefined) {
      // a reply can come before the device's confirmation of receipt (an MQTT client may publish its answer
      // ahead of its PUBACK): the reply shows it was received
      for (const s of st.sending) if (s.id === id && !s.oneway) p = s;
      if (p !== undefined) {
        st.sending.delete(p);
        p.onDelivered?.();
      }
    }
    if (p === undefined) return false;
    this.finish(p, { kind: 'reply', body });
    return true;
  }

  // ---- client-side RPC -------------------------------------------------------------------------

  /** Registers a handler for a client-side RPC method (replaces an earlier one). */
  registerClientRpc(method: string, handler: ClientRpcHandler): void {
    this.clientHandlers.set(method, handler);
  }

  /** A handler for methods nobody registered (upstream sync forwards them to the server). */
  setClientRpcFallback(handler: ClientRpcHandler | undefined): void {
    this.clientFallback = handler;
  }

  /**
   * `POST /rpc` (docs/api.md): a registered handler's reply, or the fallback's, else `{"error":"timeout"}`
   * after the client-side timeout. The wait is a held request: bounded, and dropped on client abort.
   */
  clientRpc(call: ClientRpcCall, settle: (o: PollOutcome) => void, origin?: string): PollHandle | undefined {
    const handler = this.clientHandlers.get(call.method) ?? this.clientFallback;
    const out = handler?.(call);
    if (typeof out === 'string') {
      settle({ kind: 'data', body: out });
      return undefined;
    }
    const poll = this.polls.open(
      call.deviceId,
      'clientRpc',
      this.opts.clientSideTimeoutMs,
      (o) => {
        settle(o.kind === 'timeout' ? { kind: 'data', body: '{"error":"timeout"}' } : o);
      },
      origin,
    );
    out?.then(
      (body) => {
        if (body !== undefined) poll.answer(body);
      },
      (err: unknown) => {
        this.opts.log?.(`client-side RPC ${call.method} failed: ${String(err)}`);
      },
    );
    return poll;
  }

  // ---- status and lifecycle --------------------------------------------------------------------

  /**
   * Devices listening now: an open long-poll (RPC or attributes), a push sink (MQTT, or a LAN gateway's session),
   * or an MQTT subscription to the device's attribute updates.
   */
  *listeningDevices(): IterableIterator<string> {
    yield* this.sinks.keys();
    for (const id of this.gatewaySinks.keys()) if (!this.sinks.has(id)) yield id;
    const pushed = (id: string): boolean => this.sinks.has(id) || this.gatewaySinks.has(id);
    for (const id of this.polls.devices()) {
      if (!pushed(id) && (this.polls.countFor(id, 'rpc') > 0 || this.polls.countFor(id, 'attributes') > 0)) yield id;
    }
    for (const id of this.attributeWatchers.keys()) if (!pushed(id)) yield id;
  }

  status(): RpcStatus {
    let queued = 0;
    let awaiting = 0;
    for (const st of this.devices.values()) {
      queued += st.queue.length + st.sending.size;
      awaiting += st.awaiting.size;
    }
    return {
      openPolls: this.polls.openCount,
      attributePolls: this.polls.countKind('attributes'),
      rpcPolls: this.polls.countKind('rpc'),
      clientRpcs: this.polls.countKind('clientRpc'),
      queuedRpcs: queued,
      awaitingReplies: awaiting,
    };
  }

  /** Shutdown: forget held requests and stop the timer (the server closes the connections). */
  close(): void {
    for (const off of this.unsubscribe) off();
    this.polls.closeAll();
    this.wheel.close();
  }

  // ---- internals -------------------------------------------------------------------------------

  private delivered(p: PendingRpc): void {
    p.onDelivered?.();
    if (p.oneway) {
      this.finish(p, { kind: 'delivered' });
      return;
    }
    p.state = 'delivered';
    this.deviceState(p.deviceId).awaiting.set(p.id, p);
  }

  private expire(p: PendingRpc): void {
    if (p.state === 'done') return;
    this.finish(p, p.state === 'delivered' ? { kind: 'unanswered' } : { kind: 'undelivered' });
  }

  private finish(p: PendingRpc, o: RpcOutcome): void {
    if (p.state === 'done') return;
    const st = this.devices.get(p.deviceId);
    if (st !== undefined) {
      if (p.state === 'queued') {
        const i = st.queue.indexOf(p);
        if (i >= 0) st.queue.splice(i, 1);
      }
      st.awaiting.delete(p.id);
      st.sending.delete(p);
      if (st.queue.length === 0 && st.awaiting.size === 0 && st.sending.size === 0) this.devices.delete(p.deviceId);
    }
    p.state = 'done';
    p.timer?.cancel();
    p.resolve(o);
  }

  private deviceDeleted(deviceId: string): void {
    this.polls.endDevice(deviceId);
    const st = this.devices.get(deviceId);
    if (st !== undefined) {
      for (const p of [...st.queue, ...st.sending, ...st.awaiting.values()]) this.finish(p, { kind: 'deviceDeleted' });
    }
    this.devices.delete(deviceId);
    this.seq.delete(deviceId);
    this.sinks.delete(deviceId);
    this.gatewaySinks.delete(deviceId);
    this.attributeWatchers.delete(deviceId);
  }
}

/**
 * As ThingsBoard (docs/api.md): a flat `{k:v}` of the changed shared keys with typed values, or `{"deleted":[..]}`; the same
 * body goes to HTTP long-polls and MQTT subscribers.
 */
export function attributeUpdateBody(
  updated: ReadonlyArray<readonly [string, KvValue]>,
  deleted: readonly string[],
): string {
  if (deleted.length > 0) return JSON.stringify({ deleted });
  let out = '{';
  for (let i = 0; i < updated.length; i++) {
    const [k, v] = updated[i] as readonly [string, KvValue];
    out += `${i === 0 ? '' : ','}${JSON.stringify(k)}:${kvToJson(v)}`;
  }
  return `${out}}`;
}
