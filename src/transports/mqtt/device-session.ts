/**
 * One MQTT client's protocol state (docs/mqtt.md): CONNECT by the device's credentials (src/device/login.ts), exact-topic
 * SUBSCRIBE, and PUBLISH handled by the device, gateway or provisioning topics.
 *
 * Acknowledgements: a QoS 1 PUBACK (QoS 2 PUBREC) is written only once the publish's data is on disk, and in
 * the order the publishes came (MQTT 4.6): publishes are started at once, so the store's group commit takes
 * a client's pipelined messages together, and their acks wait in a FIFO until every earlier one is done. The
 * acks a commit releases are written together, in one socket write (see `settle`). At most `mqtt.maxInflight`
 * wait; beyond that the socket is not read.
 *
 * Bad input: an unknown topic is acknowledged and ignored (MQTT 5: reason 0x90, as TB); a malformed payload
 * stores nothing and gets PUBACK 0x99 on MQTT 5, and closes the connection on 3.1.x (its PUBACK cannot say
 * no). A store failure closes the connection: the client sends again.
 */
import type { X509Certificate } from 'node:crypto';
import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { TLSSocket } from 'node:tls';
import type { IConnectPacket, IPublishPacket, ISubscribePacket, Packet } from 'mqtt-packet';
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import type { DeviceRecord, GatewayContext, PollHandle } from '../../device/actions.js';
import type { LoginThrottle } from '../../auth/throttle.js';
import type { MqttCloseReason, MqttCounters } from '../../status/metrics.js';
import { type MqttConnection, PUBREC_FLAG, type PacketSink, peerAddress } from './connection.js';
import {
  type DeviceContext,
  type PublishOutcome,
  type SubscriptionKind,
  UNKNOWN_TOPIC,
  deviceRoute,
  handleDevicePublish,
  isWrite,
  rpcRequestTopic,
  saveTelemetry,
  subscriptionKind,
} from './device-topics.js';
import { GATEWAY_TOPICS, handleGatewayPublish, isGatewayWrite } from './gateway-topics.js';
import { PROVISION_USERNAME, handleProvisionPublish } from './provision.js';
import type { RegisteredSession, SessionRegistry } from './registry.js';

/** MQTT 5 reason codes used here */
const RC = {
  ok: 0,
  notAuthorized: 0x87,
  topicNameInvalid: 0x90,
  payloadFormatInvalid: 0x99,
  subscribeRefused: 0x80,
} as const;

/** The certificate a TLS client sent (the listener asks for one, never requires it). */
function peerCertificate(socket: Socket): X509Certificate | undefined {
  // getPeerX509Certificate: one parse, not getPeerCertificate's object of every field
  return socket instanceof TLSSocket ? socket.getPeerX509Certificate() : undefined;
}

type Outcome = PublishOutcome | { readonly kind: 'failed'; readonly reason: MqttCloseReason };

interface AckEntry {
  readonly packetId: number;
  readonly qos: 1 | 2;
  readonly t0: number;
  outcome: Outcome | undefined;
}

export interface SessionDeps {
  readonly s: Services;
  readonly registry: SessionRegistry;
  readonly counters: MqttCounters;
  readonly maxInflight: number;
  /** called once per refused connection (the listener logs bursts) */
  readonly refused: (why: string) => void;
  /** failed CONNECTs per credential and per address (src/device/login.ts) */
  readonly throttle: LoginThrottle;
  /** the connection is gone (the listener forgets it) */
  readonly closed?: (conn: MqttConnection) => void;
}

const SETTLED: Promise<void> = Promise.resolve();

/** server-side RPCs one session may have published at QoS 1 without their PUBACK (rpcAcksMap) */
const MAX_AWAITING_PUBACK = 1_000;

export class MqttSession implements PacketSink, RegisteredSession {
  private role: 'none' | 'device' | 'gateway' | 'provision' = 'none';
  private device: DeviceRecord | undefined;
  // Created on first use: an idle device's session holds none of them (the memory budget is set for 10,000 idle connections).
  private subsMap: Map<SubscriptionKind, 0 | 1> | undefined;
  private get subs(): Map<SubscriptionKind, 0 | 1> {
    return (this.subsMap ??= new Map());
  }
  private readonly acks: AckEntry[] = [];
  /** QoS 2 packet ids received and not yet released (PUBREL) */
  private qos2Set: Set<number> | undefined;
  private get qos2(): Set<number> {
    return (this.qos2Set ??= new Set());
  }
  /** the publishes that store data and are not done yet (written or failed); a read waits for them */
  private writingSet: Set<Promise<void>> | undefined;
  /** a flushAcks is queued (settle) */
  private flushQueued = false;
  private heldSet: Set<PollHandle> | undefined;
  private get held(): Set<PollHandle> {
    return (this.heldSet ??= new Set());
  }
  private detachList: Array<() => void> | undefined;
  /**
   * server-side RPCs published at QoS 1 and not yet PUBACKed, by packet id: the broker counts one delivered only
   * at its PUBACK, as ThingsBoard marks an RPC DELIVERED then; the connection's end refuses them all, so they go
   * to the device's next listener
   */
  private rpcAcksMap: Map<number, (acked: boolean) => void> | undefined;
  /** ends this session's watch of the device's attribute updates (RpcBroker.watchAttributes) */
  private attributesOff: (() => void) | undefined;
  /**
   * where shared-attribute changes go: the attributes filter the device subscribed last, `v1/devices/me/attributes`
   * or `v2/a` (each filter is the exact topic of its form). One form at a time, as ThingsBoard keeps one topic
   * type per session and sends each change once.
   */
  private attributesTopic: string | undefined;
  private get detach(): Array<() => void> {
    return (this.detachList ??= []);
  }
  /**
   * a gateway's connected sub-devices by name, their RPC detach functions, lookups in progress, and the names
   * refused for their owner (logged once)
   */
  private gw:
    | {
        subDevices: Map<string, DeviceRecord>;
        subDetach: Map<string, () => void>;
        pending: Map<string, Promise<DeviceRecord>>;
        refused: Set<string>;
      }
    | undefined;
  private get subDevices(): Map<string, DeviceRecord> {
    return this.gwState().subDevices;
  }
  private get subDetach(): Map<string, () => void> {
    return this.gwState().subDetach;
  }
  private get pending(): Map<string, Promise<DeviceRecord>> {
    return this.gwState().pending;
  }
  private paused = false;

  constructor(
    private readonly conn: MqttConnection,
    private readonly deps: SessionDeps,
  ) {}

  private gwState(): NonNullable<MqttSession['gw']> {
    return (this.gw ??= { subDevices: new Map(), subDetach: new Map(), pending: new Map(), refused: new Set() });
  }

  get deviceId(): string {
    return this.device?.id ?? '';
  }

  onPacket(p: Packet): void {
    if (this.role === 'none') {
      if (p.cmd === 'connect') this.onConnect(p);
      else this.conn.close('protocol');
      return;
    }
    // every packet of a device or gateway is its activity, PINGREQ included (as TB)
    if (this.device !== undefined) this.deps.s.devices.activity(this.device.id);
    switch (p.cmd) {
      case 'publish':
        this.onPublish(p);
        break;
      case 'pubrel':
        this.qos2Set?.delete(p.messageId ?? 0);
        this.conn.send({ cmd: 'pubcomp', messageId: p.messageId ?? 0 });
        break;
      case 'subscribe':
        this.onSubscribe(p);
        break;
      case 'unsubscribe':
        for (const f of p.unsubscriptions) this.unsubscribe(f);
        this.conn.send({ cmd: 'unsuback', messageId: p.messageId ?? 0, granted: p.unsubscriptions.map(() => 0) });
        break;
      case 'pingreq':
        this.conn.send({ cmd: 'pingresp' });
        break;
      case 'disconnect':
        this.conn.close();
        break;
      case 'puback': {
        const acked = this.rpcAcksMap?.get(p.messageId ?? 0);
        if (acked !== undefined) {
          this.rpcAcksMap?.delete(p.messageId ?? 0);
          acked(true);
        }
        break;
      }
      case 'pubrec':
      case 'pubcomp':
        break; // no retransmission state to clear (TB keeps none)
      default:
        this.conn.close('protocol');
    }
  }

  // ---- CONNECT ---------------------------------------------------------------------------------

  private onConnect(p: IConnectPacket): void {
    const c = this.conn;
    c.protocolVersion = p.protocolVersion ?? 4;
    const v5 = c.protocolVersion === 5;
    if (p.username === PROVISION_USERNAME || p.clientId === PROVISION_USERNAME) {
      this.role = 'provision';
    } else {
      const devices = this.deps.s.devices;
      const d = devices.login(
        {
          clientId: p.clientId ?? '',
          username: p.username,
          password: p.password,
          certificate: peerCertificate(c.socket),
        },
        peerAddress(c.socket),
        this.deps.throttle,
      );
      if (!('entityType' in d)) {
        if (!devices.counted) this.deps.refused(d.why);
        c.send(
          v5
            ? { cmd: 'connack', sessionPresent: false, reasonCode: d.reasonCode }
            : { cmd: 'connack', sessionPresent: false, returnCode: d.returnCode },
        );
        c.close('auth');
        return;
      }
      this.device = d;
      this.role = d.gateway === true ? 'gateway' : 'device';
    }
    c.connected = true;
    c.keepAliveMs = (p.keepalive ?? 0) * 1500;
    // sessionPresent is always false: nothing is kept between connections, so clients re-subscribe
    c.send(
      v5
        ? {
            cmd: 'connack',
            sessionPresent: false,
            reasonCode: 0,
            properties: {
              retainAvailable: false,
              wildcardSubscriptionAvailable: false,
              sharedSubscriptionAvailable: false,
              subscriptionIdentifiersAvailable: false,
              maximumQoS: 1,
            },
          }
        : { cmd: 'connack', sessionPresent: false, returnCode: 0 },
    );
    if (this.role !== 'provision') this.deps.registry.register(this);
  }

  // ---- SUBSCRIBE -------------------------------------------------------------------------------

  private onSubscribe(p: ISubscribePacket): void {
    const role = this.role === 'gateway' ? 'gateway' : this.role === 'provision' ? 'provision' : 'device';
    const added: SubscriptionKind[] = [];
    const granted = p.subscriptions.map((sub) => {
      const kind = subscriptionKind(sub.topic, role);
      if (kind === undefined) return RC.subscribeRefused;
      const qos = sub.qos === 0 ? 0 : 1;
      if (!this.subs.has(kind)) added.push(kind);
      this.subs.set(kind, qos);
      if (kind === 'attributes') this.attributesTopic = sub.topic;
      return qos;
    });
    this.conn.send({ cmd: 'suback', messageId: p.messageId ?? 0, granted });
    // after the SUBACK: pending RPCs go out as soon as the device listens
    for (const kind of added) {
      if ((kind === 'rpcRequest' || kind === 'rpcRequestV2') && this.device !== undefined) this.listenRpc(kind);
      if (kind === 'attributes' && this.device !== undefined)
        this.attributesOff ??= this.deps.s.devices.listenAttributes(this.deviceId);
    }
  }

  private listenRpc(kind: 'rpcRequest' | 'rpcRequestV2'): void {
    const family = kind === 'rpcRequest' ? 'v1' : 'v2';
    if (this.subs.has('rpcRequest') && family === 'v2') return; // one way in: the v1 form when both
    const deviceId = this.deviceId;
    this.detach.push(
      this.deps.s.devices.attachRpcSink(deviceId, {
        deliver: (rpc) =>
          this.publishRpc(
            rpcRequestTopic(family, rpc.id),
            `{"method":${JSON.stringify(rpc.method)},"params":${rpc.paramsJson}}`,
            kind,
          ),
      }),
    );
  }

  private unsubscribe(filter: string): void {
    const role = this.role === 'gateway' ? 'gateway' : this.role === 'provision' ? 'provision' : 'device';
    const kind = subscriptionKind(filter, role);
    if (kind === undefined) return;
    this.subs.delete(kind);
    // either form's UNSUBSCRIBE ends the updates, whichever form they went to (as ThingsBoard)
    if (kind === 'attributes') {
      this.attributesOff?.();
      this.attributesOff = undefined;
      this.attributesTopic = undefined;
    }
    if (kind === 'rpcRequest' || kind === 'rpcRequestV2') {
      if (!this.subs.has('rpcRequest') && !this.subs.has('rpcRequestV2')) {
        for (const off of this.detach.splice(0)) off();
      }
    }
  }

  // ---- outbound --------------------------------------------------------------------------------

  /** Publishes to the client at the QoS of its subscription of `kind` (QoS 1 without one, as TB). */
  private publish(topic: string, body: string, kind?: SubscriptionKind): boolean {
    const qos = kind === undefined ? 1 : (this.subs.get(kind) ?? 1);
    const packet: IPublishPacket = {
      cmd: 'publish',
      topic,
      payload: Buffer.from(body),
      qos,
      dup: false,
      retain: false,
    };
    if (qos > 0) packet.messageId = this.conn.packetId();
    return this.conn.send(packet);
  }

  /**
   * A server-side RPC: at QoS 1 delivered once the device's PUBACK comes (rpcAcksMap), as ThingsBoard marks it;
   * at QoS 0 (and 2, whose handshake the session does not track) once written.
   */
  private publishRpc(topic: string, body: string, kind: SubscriptionKind): boolean | Promise<boolean> {
    if ((this.subs.get(kind) ?? 1) !== 1) return this.publish(topic, body, kind);
    // a client that takes RPCs and never acknowledges them gets no more (they stay queued): the map stays bounded
    if ((this.rpcAcksMap?.size ?? 0) >= MAX_AWAITING_PUBACK) return false;
    const messageId = this.conn.packetId();
    const payload = Buffer.from(body);
    if (!this.conn.send({ cmd: 'publish', topic, payload, qos: 1, dup: false, retain: false, messageId })) return false;
    const acks = (this.rpcAcksMap ??= new Map());
    // a packet id still awaited after 65,535 more publishes: the older is given up (its RPC goes back to the queue)
    acks.get(messageId)?.(false);

    return new Promise<boolean>((resolve) => acks.set(messageId, resolve));
  }

  pushAttributes(body: string): void {
    if (this.subsMap?.has('attributes') === true && this.attributesTopic !== undefined)
      this.publish(this.attributesTopic, body, 'attributes');
  }

  pushGatewayAttributes(subDeviceId: string, body: string): void {
    for (const [name, d] of this.gw?.subDevices ?? []) {
      if (d.id === subDeviceId)
        this.publish('v1/gateway/attributes', `{"device":${JSON.stringify(name)},"data":${body}}`, 'gwAttributes');
    }
  }

  /** A sub-device, or this gateway, changed owner: the sub-devices now of another owner are let go. */
  ownerChanged(deviceId: string): void {
    const gateway = this.device;
    if (this.gw === undefined || gateway === undefined) return;
    const devices = this.deps.s.devices;
    for (const [name, d] of [...this.gw.subDevices]) {
      if (deviceId !== this.deviceId && d.id !== deviceId) continue;
      const now = devices.current(d.id);
      if (now === undefined || devices.gateway.ownersDiffer(gateway, now)) this.subDisconnected(name);
    }
  }

  takenOver(): void {
    this.conn.close('takeover');
  }

  credentialsUpdated(): void {
    this.conn.close('credentialsUpdated');
  }

  deviceDeleted(deviceId: string): void {
    if (deviceId === this.deviceId) {
      this.conn.close();
      return;
    }
    for (const [name, d] of this.gw?.subDevices ?? []) if (d.id === deviceId) this.subDisconnected(name);
  }

  // ---- PUBLISH ---------------------------------------------------------------------------------

  private onPublish(p: IPublishPacket): void {
    this.deps.counters.messagesIn++;
    const payload = typeof p.payload === 'string' ? Buffer.from(p.payload) : p.payload;
    const packetId = p.messageId ?? 0;
    if (p.qos === 2 && this.qos2Set?.has(packetId) === true) {
      // a resent QoS 2 message already taken: not stored twice; its PUBREC follows once the first is written
      if (!this.acks.some((a) => a.packetId === packetId)) this.conn.send({ cmd: 'pubrec', messageId: packetId });
      return;
    }
    const entry: AckEntry | undefined =
      p.qos === 0 ? undefined : { packetId, qos: p.qos, t0: performance.now(), outcome: undefined };
    if (entry !== undefined) {
      if (p.qos === 2) this.qos2.add(packetId);
      this.acks.push(entry);
      if (this.acks.length >= this.deps.maxInflight && !this.paused) {
        this.paused = true;
        this.conn.pause();
      }
    }
    const { promise, write } = this.dispatch(p.topic, payload);
    if (!write) {
      promise.then(
        (o) => this.settle(entry, o, p.topic),
        (err: unknown) => this.settle(entry, this.failure(err, p.topic), p.topic),
      );
      return;
    }
    // one promise per write past its handler's: its outcome settles the ack, and later reads wait for it
    const writing = (this.writingSet ??= new Set());
    const done: Promise<void> = promise.then(
      (o) => {
        writing.delete(done);
        this.settle(entry, o, p.topic);
      },
      (err: unknown) => {
        writing.delete(done);
        this.settle(entry, this.failure(err, p.topic), p.topic);
      },
    );
    writing.add(done);
  }

  /**
   * The writes received so far, taken now: the promise settles once each is done (written or failed), never
   * rejects, and is made only when a handler asks (most publishes are writes, which do not).
   */
  private writesSoFar(): () => Promise<unknown> {
    const w = this.writingSet;
    if (w === undefined || w.size === 0) return () => SETTLED;
    const earlier = [...w];
    return () => Promise.all(earlier);
  }

  /** What a handler's error means for the client; never throws (`done` must not reject). */
  private failure(err: unknown, topic: string): Outcome {
    if (err instanceof OutpostError && err.code === 'NAME_INVALID') return { kind: 'badName', message: err.message };
    if (err instanceof OutpostError && err.status === 400) return { kind: 'bad', message: err.message };
    if (err instanceof OutpostError && err.status === 403) return { kind: 'denied', message: err.message };
    try {
      this.deps.s.log.error(`mqtt: publish to ${topic} failed: ${err instanceof Error ? err.message : String(err)}`);
    } catch {
      // an error that cannot be told (a throwing toString): the client is closed all the same
    }
    return { kind: 'failed', reason: 'storeError' };
  }

  /**
   * A publish is done (its data on disk, or refused): its ack goes out in order, one microtask later. The
   * publishes of one group commit settle in the same run of microtasks, all queued ahead of that one, so a
   * pipelining client's acks of a commit leave in one socket write rather than one each.
   */
  private settle(entry: AckEntry | undefined, o: Outcome, topic: string): void {
    try {
      if (o.kind === 'bad' || o.kind === 'unknownTopic') this.noteFailure(o, topic);
      if (entry === undefined) this.afterQos0(o);
      else {
        entry.outcome = o;
        if (!this.flushQueued) {
          this.flushQueued = true;
          queueMicrotask(() => {
            this.flushQueued = false;
            this.guarded(() => this.flushAcks());
          });
        }
      }
    } catch (err) {
      this.failedAck(err);
    }
  }

  /** A bad payload or an unknown topic, counted and logged (at most a line a minute of each: status/failures.ts). */
  private noteFailure(o: Outcome, topic: string): void {
    this.deps.s.devices.badPublish(
      this.device?.name ?? '?',
      this.conn.socket.remoteAddress ?? '?',
      topic,
      o.kind === 'bad' ? o.message : undefined,
    );
  }

  /** Runs `f`; a throw closes this client, never the daemon (an uncaught error or rejection would end it). */
  private guarded(f: () => void): void {
    try {
      f();
    } catch (err) {
      this.failedAck(err);
    }
  }

  private failedAck(err: unknown): void {
    try {
      this.deps.s.log.error(
        `mqtt: acknowledging a publish failed: ${err instanceof Error ? err.message : String(err)}`,
      );
    } catch {
      // an error that cannot be told (a throwing toString): the client is closed all the same
    }
    this.conn.close('protocol');
  }

  /** Routes a publish to its handler; `write` = it stores data (reads wait for it). */
  private dispatch(topic: string, payload: Buffer): { promise: Promise<PublishOutcome>; write: boolean } {
    const s = this.deps.s;
    if (this.role === 'provision') {
      return {
        promise: handleProvisionPublish(s.devices, topic, payload, this.conn.socket.remoteAddress ?? '?', (t, b) =>
          this.publish(t, b, 'provisionResponse'),
        ),
        write: false,
      };
    }
    if (this.role === 'gateway' && GATEWAY_TOPICS.has(topic)) {
      const publish = (t: string, b: string): void => {
        this.publish(t, b, 'gwAttrResponse');
      };
      return {
        promise: handleGatewayPublish(s.devices, this.gatewayContext(), topic, payload, publish),
        write: isGatewayWrite(topic),
      };
    }
    const route = deviceRoute(topic);
    if (route === undefined) return { promise: Promise.resolve(UNKNOWN_TOPIC), write: false };
    // the bulk of the traffic: no context to build for it
    if (route.kind === 'telemetry') return { promise: saveTelemetry(s.devices, this.deviceId, payload), write: true };
    return { promise: handleDevicePublish(this.deviceContext(), route, payload), write: isWrite(route) };
  }

  private deviceContext(): DeviceContext {
    const previous = this.writesSoFar();
    return {
      devices: this.deps.s.devices,
      deviceId: this.deviceId,
      get previousWrites() {
        return previous();
      },
      publish: (topic, body) => {
        this.publish(
          topic,
          body,
          topic.includes('/rpc/') || topic.startsWith('v2/r/') ? 'rpcResponse' : 'attrResponse',
        );
      },
      hold: (h) => {
        if (h.settled) return;
        if (this.held.size >= 16) for (const old of this.held) if (old.settled) this.held.delete(old);
        this.held.add(h);
      },
    };
  }

  private gatewayContext(): GatewayContext {
    const previous = this.writesSoFar();
    return {
      gateway: this.device as DeviceRecord,
      get previousWrites() {
        return previous();
      },
      connected: (sub) => this.subConnected(sub),
      disconnected: (sub) => this.subDisconnected(sub.name),
      subDevices: this.subDevices,
      pending: this.pending,
      refused: this.gwState().refused,
    };
  }

  private subConnected(sub: DeviceRecord): void {
    if (this.conn.closed) return;
    this.subDevices.set(sub.name, sub);
    this.deps.registry.claimSubDevice(this, sub.id);
    const name = JSON.stringify(sub.name);
    this.subDetach.set(
      sub.name,
      this.deps.s.devices.attachRpcSink(
        sub.id,
        {
          deliver: (rpc) =>
            this.publishRpc(
              'v1/gateway/rpc',
              `{"device":${name},"data":{"id":${rpc.id},"method":${JSON.stringify(rpc.method)},"params":${rpc.paramsJson}}}`,
              'gwRpc',
            ),
        },
        'gateway',
      ),
    );
  }

  private subDisconnected(name: string): void {
    const d = this.subDevices.get(name);
    if (d === undefined) return;
    this.subDevices.delete(name);
    this.subDetach.get(name)?.();
    this.subDetach.delete(name);
    this.deps.registry.releaseSubDevice(this, d.id);
  }

  private afterQos0(o: Outcome): void {
    if (o.kind === 'failed') this.conn.close(o.reason);
    // 3.1.x cannot refuse a QoS 0 message either: bad input closes the connection (TB)
    else if ((o.kind === 'bad' || o.kind === 'denied') && this.conn.protocolVersion !== 5)
      this.conn.close('badPayload');
  }

  /**
   * Writes the acks at the head of the FIFO whose publishes are done, in order: the plain ones gathered into
   * one write, sent before anything else this writes (an ack with a reason code, a close).
   */
  private flushAcks(): void {
    const c = this.conn;
    const plain: number[] = [];
    const flushPlain = (): void => {
      if (plain.length > 0) c.sendAcks(plain.splice(0));
    };
    while (this.acks.length > 0 && (this.acks[0] as AckEntry).outcome !== undefined) {
      const a = this.acks.shift() as AckEntry;
      const o = a.outcome as Outcome;
      if (c.closed) continue;
      if (o.kind === 'failed') {
        flushPlain();
        c.close(o.reason);
        continue;
      }
      let reasonCode: number = RC.ok;
      if (o.kind === 'unknownTopic') reasonCode = RC.topicNameInvalid;
      else if (o.kind === 'badName') reasonCode = RC.payloadFormatInvalid;
      else if (o.kind === 'bad' || o.kind === 'denied') {
        if (c.protocolVersion !== 5) {
          flushPlain();
          c.close('badPayload');
          continue;
        }
        reasonCode = o.kind === 'bad' ? RC.payloadFormatInvalid : RC.notAuthorized;
      }
      // MQTT 5: a PUBREC with a failure code ends the QoS 2 exchange (no PUBREL follows)
      if (a.qos === 2 && c.protocolVersion === 5 && reasonCode >= 0x80) this.qos2.delete(a.packetId);
      // 3.1.x has no reason code: an unknown topic's ack is a plain one there
      if (reasonCode === RC.ok || c.protocolVersion !== 5)
        plain.push(a.qos === 1 ? a.packetId : PUBREC_FLAG | a.packetId);
      else {
        flushPlain();
        c.send({ cmd: a.qos === 1 ? 'puback' : 'pubrec', messageId: a.packetId, reasonCode });
      }
      if (reasonCode === RC.ok) this.deps.counters.pubackLatency.observe((performance.now() - a.t0) / 1000);
    }
    flushPlain();
    if (this.paused && this.acks.length < this.deps.maxInflight / 2) {
      this.paused = false;
      c.resume();
    }
  }

  onClose(): void {
    this.deps.closed?.(this.conn);
    for (const h of this.heldSet ?? []) h.close();
    this.heldSet = undefined;
    for (const off of this.detachList ?? []) off();
    this.detachList = undefined;
    this.attributesOff?.();
    this.attributesOff = undefined;
    const subIds: string[] = [];
    if (this.gw !== undefined) {
      for (const off of this.gw.subDetach.values()) off();
      for (const d of this.gw.subDevices.values()) subIds.push(d.id);
      this.gw = undefined;
    }
    // after the sinks' detach: the refused RPCs go back to the queue, not to this closed session
    for (const refuse of this.rpcAcksMap?.values() ?? []) refuse(false);
    this.rpcAcksMap = undefined;
    if (this.role !== 'none' && this.role !== 'provision') this.deps.registry.unregister(this, subIds);
  }
}
