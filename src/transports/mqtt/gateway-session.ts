/**
 * A LAN gateway's sub-sessions in its MQTT session (docs/mqtt.md): the sub-devices it connected, by name, each
 * served by this session (shared-attribute changes on `v1/gateway/attributes`, server-side RPCs on
 * `v1/gateway/rpc`) until the gateway disconnects it, another gateway claims it, it is deleted, changes owner,
 * or the connection ends. Which devices a gateway may serve, and the writes, are the device layer's
 * (src/device/gateway.ts); this keeps the session's side.
 */
import type { DeviceActions, DeviceRecord, GatewayContext } from '../../device/actions.js';
import { overwritesActivityTime } from '../../device/actions.js';
import type { SubscriptionKind } from './device-topics.js';
import type { RegisteredSession, SessionRegistry } from './registry.js';

/** What the sub-sessions need of the gateway's session. */
export interface GatewayOwner extends RegisteredSession {
  /** the connection ended: nothing more is connected */
  readonly closed: boolean;
  publish(topic: string, body: string, kind: SubscriptionKind): boolean;
  publishRpc(topic: string, body: string, kind: SubscriptionKind): boolean | Promise<boolean>;
}

export class GatewaySubSessions {
  /** sub-devices this session connected, by name */
  private readonly subDevices = new Map<string, DeviceRecord>();
  /** each sub-device's RPC detach, by name */
  private readonly subDetach = new Map<string, () => void>();
  /** lookups and creations in progress, by name */
  private readonly pending = new Map<string, Promise<DeviceRecord>>();
  /** names refused for their owner (logged once) */
  private readonly refused = new Set<string>();
  /** when the gateway's own activity last counted for its sub-devices (ms) */
  private sharedActivityAt = 0;

  constructor(
    private readonly owner: GatewayOwner,
    private readonly devices: DeviceActions,
    private readonly registry: SessionRegistry,
  ) {}

  /** The device layer's view of this gateway's session for one publish. */
  context(gateway: DeviceRecord, previous: () => Promise<unknown>): GatewayContext {
    return {
      gateway,
      get previousWrites() {
        return previous();
      },
      connected: (sub) => this.connected(sub),
      disconnected: (sub) => this.disconnected(sub.name),
      subDevices: this.subDevices,
      pending: this.pending,
      refused: this.refused,
    };
  }

  private connected(sub: DeviceRecord): void {
    if (this.owner.closed) return;
    this.subDevices.set(sub.name, sub);
    this.registry.claimSubDevice(this.owner, sub.id);
    const name = JSON.stringify(sub.name);
    this.subDetach.set(
      sub.name,
      this.devices.attachRpcSink(
        sub.id,
        {
          deliver: (rpc) =>
            this.owner.publishRpc(
              'v1/gateway/rpc',
              `{"device":${name},"data":{"id":${rpc.id},"method":${JSON.stringify(rpc.method)},"params":${rpc.paramsJson}}}`,
              'gwRpc',
            ),
        },
        'gateway',
      ),
    );
  }

  private disconnected(name: string): void {
    const d = this.subDevices.get(name);
    if (d === undefined) return;
    this.subDevices.delete(name);
    this.subDetach.get(name)?.();
    this.subDetach.delete(name);
    this.registry.releaseSubDevice(this.owner, d.id);
  }

  /** A sub-device's shared-attribute change. */
  pushAttributes(subDeviceId: string, body: string): void {
    for (const [name, d] of this.subDevices) {
      if (d.id === subDeviceId)
        this.owner.publish(
          'v1/gateway/attributes',
          `{"device":${JSON.stringify(name)},"data":${body}}`,
          'gwAttributes',
        );
    }
  }

  /** A sub-device, or the gateway, changed owner: the sub-devices now of another owner are let go. */
  ownerChanged(gateway: DeviceRecord, deviceId: string): void {
    for (const [name, d] of [...this.subDevices]) {
      if (deviceId !== gateway.id && d.id !== deviceId) continue;
      const now = this.devices.current(d.id);
      if (now === undefined || this.devices.gateway.ownersDiffer(gateway, now)) this.disconnected(name);
    }
  }

  /**
   * A packet of the gateway itself, PINGREQ included: with the gateway's `overwriteActivityTime` on, it is every
   * connected sub-device's activity too (TB), so the sub-devices of a gateway that only pings stay active. At most
   * once a second, read from the gateway's record as it is now (the flag can change while it is connected): TB
   * itself reports a session's activity every 3 s.
   */
  gatewayActive(gatewayId: string, now: number): void {
    if (this.subDevices.size === 0 || now - this.sharedActivityAt < 1000) return;
    this.sharedActivityAt = now;
    if (!overwritesActivityTime(this.devices.current(gatewayId))) return;
    for (const d of this.subDevices.values()) this.devices.activity(d.id);
  }

  /** A sub-device was deleted. */
  deviceDeleted(deviceId: string): void {
    for (const [name, d] of this.subDevices) if (d.id === deviceId) this.disconnected(name);
  }

  /** The connection ended: RPC sinks detached; the ids of the sub-devices it served (the registry releases them). */
  close(): string[] {
    for (const off of this.subDetach.values()) off();
    return [...this.subDevices.values()].map((d) => d.id);
  }
}
