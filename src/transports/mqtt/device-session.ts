/**
 * One MQTT client's protocol state (docs/mqtt.md), one small handler per packet kind: CONNECT (who it is and its
 * CONNACK: connect.ts), exact-topic SUBSCRIBE and UNSUBSCRIBE, what is published to the client (shared attributes,
 * server-side RPC at the QoS of its subscription), and PUBLISH routed to the device, gateway or provisioning
 * topics. Publishes and their acks are publish-acks.ts's; a gateway's sub-devices gateway-session.ts's; the
 * topics' actions are the device layer's (src/device/actions.ts).
 */
import type { IConnectPacket, IPublishPacket, ISubscribePacket, Packet } from 'mqtt-packet';
import type { TransportServices } from '../services.js';
import type { DeviceRecord, GatewayContext, PollHandle } from '../../device/actions.js';
import type { LoginThrottle } from '../../auth/throttle.js';
import type { MqttCounters } from '../../status/metrics.js';
import { connack, whoConnects } from './connect.js';
import type { MqttConnection, PacketSink } from './connection.js';
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
import { type GatewayOwner, GatewaySubSessions } from './gateway-session.js';
import { PublishAcks, type PublishRouter, type Routed } from './publish-acks.js';
import { handleProvisionPublish } from './provision.js';
import type { SessionRegistry } from './registry.js';

/** SUBACK's refusal of a filter */
const SUBSCRIBE_REFUSED = 0x80;

export interface SessionDeps {
  readonly s: TransportServices;
  readonly log: TransportServices['log'];
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

/** server-side RPCs one session may have published at QoS 1 without their PUBACK (rpcAcksMap) */
const MAX_AWAITING_PUBACK = 1_000;

export class MqttSession implements PacketSink, PublishRouter, GatewayOwner {
  private role: 'none' | 'device' | 'gateway' | 'provision' = 'none';
  private device: DeviceRecord | undefined;
  // Created on first use: an idle device's session holds none of them (the memory budget is set for 10,000 idle connections).
  private subsMap: Map<SubscriptionKind, 0 | 1> | undefined;
  private get subs(): Map<SubscriptionKind, 0 | 1> {
    return (this.subsMap ??= new Map());
  }
  /** made at the first PUBLISH */
  private publishes: PublishAcks | undefined;
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
  /** a gateway's sub-devices, made when it connects the first */
  private gw: GatewaySubSessions | undefined;

  constructor(
    private readonly conn: MqttConnection,
    private readonly deps: SessionDeps,
  ) {}

  get deviceId(): string {
    return this.device?.id ?? '';
  }

  get closed(): boolean {
    return this.conn.closed;
  }

  onPacket(p: Packet): void {
    if (this.role === 'none') {
      if (p.cmd === 'connect') this.onConnect(p);
      else this.conn.close('protocol');
      return;
    }
    // every packet of a device or gateway is its activity, PINGREQ included (as TB)
    if (this.device !== undefined) {
      this.deps.s.devices.activity(this.device.id);
      this.gw?.gatewayActive(this.device.id, Date.now());
    }
    switch (p.cmd) {
      case 'publish':
        (this.publishes ??= new PublishAcks(this.conn, this.deps, this)).publish(p);
        break;
      case 'pubrel':
        if (this.publishes === undefined) this.conn.send({ cmd: 'pubcomp', messageId: p.messageId ?? 0 });
        else this.publishes.release(p.messageId ?? 0);
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
    const who = whoConnects(p, c.socket, this.deps.s.devices, this.deps.throttle);
    if ('refusal' in who) {
      if (!this.deps.s.devices.counted) this.deps.refused(who.refusal.why);
      c.send(connack(c.protocolVersion, who.refusal));
      c.close('auth');
      return;
    }
    this.role = who.role;
    this.device = who.device;
    c.connected = true;
    c.keepAliveMs = (p.keepalive ?? 0) * 1500;
    c.send(connack(c.protocolVersion));
    if (this.role !== 'provision') this.deps.registry.register(this);
  }

  // ---- SUBSCRIBE -------------------------------------------------------------------------------

  private onSubscribe(p: ISubscribePacket): void {
    const role = this.role === 'gateway' ? 'gateway' : this.role === 'provision' ? 'provision' : 'device';
    const added: SubscriptionKind[] = [];
    const granted = p.subscriptions.map((sub) => {
      const kind = subscriptionKind(sub.topic, role);
      if (kind === undefined) return SUBSCRIBE_REFUSED;
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
  publish(topic: string, body: string, kind?: SubscriptionKind): boolean {
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
  publishRpc(topic: string, body: string, kind: SubscriptionKind): boolean | Promise<boolean> {
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
    this.gw?.pushAttributes(subDeviceId, body);
  }

  /** A sub-device, or this gateway, changed owner: the sub-devices now of another owner are let go. */
  ownerChanged(deviceId: string): void {
    if (this.device !== undefined) this.gw?.ownerChanged(this.device, deviceId);
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
    this.gw?.deviceDeleted(deviceId);
  }

  // ---- PUBLISH ---------------------------------------------------------------------------------

  /** A bad payload or an unknown topic, counted and logged (at most a line a minute of each: status/failures.ts). */
  refused(o: PublishOutcome, topic: string): void {
    this.deps.s.devices.badPublish(
      this.device?.name ?? '?',
      this.conn.socket.remoteAddress ?? '?',
      topic,
      o.kind === 'bad' ? o.message : undefined,
    );
  }

  /** Routes a publish to its handler; `write` = it stores data (reads wait for it). */
  route(topic: string, payload: Buffer): Routed {
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
    const previous = (this.publishes as PublishAcks).writesSoFar();
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
    const gw = (this.gw ??= new GatewaySubSessions(this, this.deps.s.devices, this.deps.registry));
    return gw.context(this.device as DeviceRecord, (this.publishes as PublishAcks).writesSoFar());
  }

  onClose(): void {
    this.deps.closed?.(this.conn);
    for (const h of this.heldSet ?? []) h.close();
    this.heldSet = undefined;
    for (const off of this.detachList ?? []) off();
    this.detachList = undefined;
    this.attributesOff?.();
    this.attributesOff = undefined;
    const subIds = this.gw?.close() ?? [];
    this.gw = undefined;
    // after the sinks' detach: the refused RPCs go back to the queue, not to this closed session
    for (const refuse of this.rpcAcksMap?.values() ?? []) refuse(false);
    this.rpcAcksMap = undefined;
    if (this.role !== 'none' && this.role !== 'provision') this.deps.registry.unregister(this, subIds);
  }
}
