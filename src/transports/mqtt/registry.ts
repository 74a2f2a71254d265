/**
 * The live MQTT sessions: one per device token (a new connection replaces the old one, as TB), and for each
 * sub-device the gateway session that last connected it. Shared-attribute changes come from the device layer
 * (`DeviceActions.watch`) and go to whichever session listens for that device: its own subscription, or its gateway's session. Each
 * connection and each gateway sub-session is one session of its device for the state service (connect and
 * disconnect times, src/device/state.ts).
 */
import type { DeviceActions } from '../../device/actions.js';

/** What the registry needs of a session (device-session.ts implements it). */
export interface RegisteredSession {
  readonly deviceId: string;
  /** closes the connection because another one took the device's token */
  takenOver(): void;
  /** closes the connection because the device's credentials changed */
  credentialsUpdated(): void;
  /** the device's own shared-attribute change, when it subscribed to it */
  pushAttributes(body: string): void;
  /** a sub-device's shared-attribute change, for a gateway session */
  pushGatewayAttributes(subDeviceId: string, body: string): void;
  /** the device (or a sub-device of this gateway) was deleted */
  deviceDeleted(deviceId: string): void;
  /** the device (a sub-device of this gateway, or the gateway) was assigned or unassigned */
  ownerChanged(deviceId: string): void;
}

export class SessionRegistry {
  private readonly byDevice = new Map<string, RegisteredSession>();
  private readonly gatewayOf = new Map<string, RegisteredSession>();
  private readonly off: () => void;

  constructor(private readonly devices: Pick<DeviceActions, 'watch' | 'connected' | 'disconnected'>) {
    this.off = devices.watch({
      sharedAttributes: (deviceId, body) => this.onAttributes(deviceId, body),
      credentialsUpdated: (deviceId) => this.byDevice.get(deviceId)?.credentialsUpdated(),
      deleted: (deviceId) => {
        this.byDevice.get(deviceId)?.deviceDeleted(deviceId);
        this.gatewayOf.get(deviceId)?.deviceDeleted(deviceId);
        this.gatewayOf.delete(deviceId);
      },
      // a gateway serves only devices of its own owner: an assignment may end that (docs/mqtt.md)
      ownerChanged: (deviceId) => {
        this.gatewayOf.get(deviceId)?.ownerChanged(deviceId);
        this.byDevice.get(deviceId)?.ownerChanged(deviceId);
      },
    });
  }

  get size(): number {
    return this.byDevice.size;
  }

  /** Registers a connected session; the device's earlier session is closed. */
  register(s: RegisteredSession): void {
    const old = this.byDevice.get(s.deviceId);
    this.byDevice.set(s.deviceId, s);
    this.devices.connected(s.deviceId);
    if (old !== undefined && old !== s) old.takenOver();
  }

  /** Removes a session (and the sub-devices it served) unless another has replaced it. */
  unregister(s: RegisteredSession, subDeviceIds: Iterable<string>): void {
    if (this.byDevice.get(s.deviceId) === s) this.byDevice.delete(s.deviceId);
    // the gateway's connection ending ends each of its sub-sessions
    for (const id of subDeviceIds) this.releaseSubDevice(s, id);
    this.devices.disconnected(s.deviceId);
  }

  /** A gateway session now serves this sub-device (the last one to connect it wins). */
  claimSubDevice(gateway: RegisteredSession, subDeviceId: string): void {
    this.gatewayOf.set(subDeviceId, gateway);
    this.devices.connected(subDeviceId);
  }

  releaseSubDevice(gateway: RegisteredSession, subDeviceId: string): void {
    if (this.gatewayOf.get(subDeviceId) === gateway) this.gatewayOf.delete(subDeviceId);
    this.devices.disconnected(subDeviceId);
  }

  close(): void {
    this.off();
  }

  private onAttributes(deviceId: string, body: () => string): void {
    const own = this.byDevice.get(deviceId);
    const gw = this.gatewayOf.get(deviceId);
    if (own === undefined && gw === undefined) return;
    own?.pushAttributes(body());
    gw?.pushGatewayAttributes(deviceId, body());
  }
}
