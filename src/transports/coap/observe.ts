/**
 * Observations (RFC 7641) of a device's shared attributes and server-side RPCs: one per device and resource (a
 * newer registration replaces the older), at most `coap.maxObservations` in all and
 * `coap.maxObservationsPerAddress` from one address. Shared-attribute changes come
 * from the bus; RPCs from the broker, to which an RPC observation is the device's push sink (pending RPCs are
 * delivered when it registers). Each notification takes the next Observe number (24 bits); it is CON when the
 * registration was CON. An observation holds its peer, token, numbering and two detach functions, nothing else.
 * A device's deletion or a change of its credentials ends its observations from the server's side: each is sent
 * a final error notification (4.04, 4.01), which ends it at the client (RFC 7641 section 4.2).
 *
 * Liveness (RFC 7641 section 4.5): a NON observer never acknowledges anything, so one that went away would hold
 * its place for good. Every observation not checked for `coap.observeCheckMs` (24 h) is sent its current state
 * in a CON notification (a probe); one answered by an RST, or not acknowledged after the retransmissions, is
 * dropped. Under pressure (the table 90% full) the least recently checked are probed at once, a batch a second,
 * so that observers that are gone make room for devices that are there. The table is kept in the order
 * observations were registered or last probed, the least recently checked first: a sweep reads only its head.
 */
import type { DeviceActions } from '../../device/actions.js';
import type { CoapCounters } from '../../status/metrics.js';
import { type Answer, CONTENT_JSON, uintOption } from './codec.js';
import type { Peer } from './exchange.js';

export type ObservedResource = 'attributes' | 'rpc';

export interface Observation {
  /** `deviceId/resource`: one observation per device and resource */
  readonly key: string;
  /**
   * `deviceId/resource#n`, this registration alone: how the message layer names it back (RST, no ACK), so that
   * a late RST to a replaced or ended observation's notification cannot end the registration that followed it
   */
  readonly tag: string;
  readonly deviceId: string;
  readonly resource: ObservedResource;
  readonly peer: Peer;
  readonly token: Buffer;
  readonly confirmable: boolean;
  /** the request's path and query, for Block2 follow-ups of a large notification */
  readonly uri: string;
  seq: number;
  /** when it was registered or last probed (ms) */
  checkedAt: number;
  /** a probe awaits its ACK */
  probing: boolean;
  detach: (() => void) | undefined;
  /**
   * the RPCs sent in CON notifications the client has yet to acknowledge: told false when the observation is
   * ended by the server, so they go back to the device's queue rather than count as delivered at a late ACK
   */
  unconfirmed: Set<(acked: boolean) => void> | undefined;
}

/**
 * How notifications leave: the listener sends them (block-wise when large) through the message layer, which
 * tells `settled` whether the client acknowledged a CON one.
 */
export type NotifySend = (o: Observation, a: Answer, settled?: (acked: boolean) => void, confirmable?: boolean) => void;

const MAX_OBSERVE = 0xffffff;
/** the share of `coap.maxObservations` from which the least recently checked observers are probed */
const PRESSURE = 0.9;
/** probes sent at most per PRESSURE_MS under pressure */
const PROBE_BATCH = 64;
const PRESSURE_MS = 1_000;

export interface ObservationLimits {
  /** coap.maxObservations */
  readonly max: number;
  /** coap.maxObservationsPerAddress; 0 = no cap */
  readonly maxPerAddress: number;
  /** coap.observeCheckMs */
  readonly checkMs: number;
}

export class ObservationRegistry {
  /** the order is the order of registration or last probe: the least recently checked first */
  private readonly byKey = new Map<string, Observation>();
  /** observations per peer address */
  private readonly perAddress = new Map<string, number>();
  private readonly off: () => void;
  private serial = 0;
  private relievedAt = Number.NEGATIVE_INFINITY;
  /** a registration came while the table was under pressure: the next sweep probes if the last could not */
  private wanted = false;
  private readonly sweep: NodeJS.Timeout;

  constructor(
    private readonly devices: DeviceActions,
    private readonly limits: ObservationLimits,
    private readonly counters: CoapCounters,
    private readonly send: NotifySend,
    private readonly now: () => number = Date.now,
  ) {
    this.sweep = setInterval(() => this.check(), Math.min(PRESSURE_MS, Math.max(100, limits.checkMs / 4)));
    this.sweep.unref();
    this.off = devices.watch({
      sharedAttributes: (deviceId, body) => {
        const o = this.byKey.get(`${deviceId}/attributes`);
        if (o !== undefined) this.notify(o, body());
      },
      deleted: (deviceId) => this.endDevice(deviceId, { code: '4.04' }),
      // the token the observations were registered with no longer names the device, as for HTTP's held
      // requests (401) and MQTT's sessions (closed)
      credentialsUpdated: (deviceId) =>
        this.endDevice(deviceId, { code: '4.01', payload: Buffer.from('device credentials changed') }),
    });
  }

  get size(): number {
    return this.byKey.size;
  }

  /**
   * Registers (or replaces) the device's observation of `resource`; returns it with Observe 0 taken, or
   * undefined when `coap.maxObservations` are open, or `coap.maxObservationsPerAddress` from the peer's address
   * (the caller answers as to a plain GET).
   */
  register(
    deviceId: string,
    resource: ObservedResource,
    peer: Peer,
    token: Buffer,
    confirmable: boolean,
    uri: string,
  ): Observation | undefined {
    const key = `${deviceId}/${resource}`;
    const old = this.byKey.get(key);
    const { max, maxPerAddress } = this.limits;
    if (this.byKey.size >= max * PRESSURE) this.relieve();
    const fromAddress = this.perAddress.get(peer.address) ?? 0;
    const sameAddress = old !== undefined && old.peer.address === peer.address;
    if (
      (old === undefined && this.byKey.size >= max) ||
      (maxPerAddress > 0 && !sameAddress && fromAddress >= maxPerAddress)
    ) {
      this.counters.refused.observations++;
      return undefined;
    }
    // an observation is a session: the device's first connects it, its last ending disconnects it (as TB); counted
    // before a replaced one ends, so a re-registration is no disconnect
    this.devices.connected(deviceId);
    if (old !== undefined) {
      // the replaced observer is told, as ThingsBoard does: a notification without Observe ends it at the client
      // (RFC 7641 section 3.2), so it stops waiting for changes that now go to the newer registration
      this.send(old, { code: '2.02' });
      this.remove(key);
    }
    // copied: a slice would keep the whole received datagram alive as long as the observation
    const o: Observation = {
      key,
      tag: `${key}#${++this.serial}`,
      deviceId,
      resource,
      peer: { address: peer.address, port: peer.port },
      token: Buffer.from(token),
      confirmable,
      uri,
      seq: 0,
      checkedAt: this.now(),
      probing: false,
      detach: undefined,
      unconfirmed: undefined,
    };
    this.byKey.set(key, o);
    this.perAddress.set(o.peer.address, (this.perAddress.get(o.peer.address) ?? 0) + 1);
    this.counters.observations = this.byKey.size;
    return o;
  }

  /** After the registration's answer went out: RPCs pending for the device are delivered now. */
  activate(o: Observation): void {
    if (this.byKey.get(o.key) !== o) return;
    if (o.resource === 'attributes') {
      o.detach = this.devices.listenAttributes(o.deviceId);
      return;
    }
    o.detach = this.devices.attachRpcSink(o.deviceId, {
      // As ThingsBoard: a CON notification's RPC is delivered at the client's ACK (the broker waits for it, and
      // one never acknowledged goes back to the device's queue); a NON one once sent.
      deliver: (rpc) => {
        if (this.byKey.get(o.key) !== o) return false;
        const body = `{"id":${rpc.id},"method":${JSON.stringify(rpc.method)},"params":${rpc.paramsJson}}`;
        if (!o.confirmable) {
          this.notify(o, body);
          return true;
        }
        return new Promise<boolean>((settled) => {
          const awaiting = (o.unconfirmed ??= new Set());
          const once = (acked: boolean): void => {
            if (awaiting.delete(once)) settled(acked);
          };
          awaiting.add(once);
          this.notify(o, body, once);
        });
      },
    });
  }

  /** Cancels by a GET with Observe 1 from the registration's peer and token: true when one matched. */
  cancel(key: string, peer: Peer, token: Buffer): boolean {
    const o = this.byKey.get(key);
    if (o === undefined) return false;
    if (o.peer.address !== peer.address || o.peer.port !== peer.port || !o.token.equals(token)) return false;
    this.remove(key);
    return true;
  }

  /** The message layer gave up on a notification of `tag` (an RST, no ACK): its observation ends. */
  gone(tag: string): void {
    const key = tag.slice(0, tag.lastIndexOf('#'));
    if (this.byKey.get(key)?.tag === tag) this.remove(key);
  }

  close(): void {
    clearInterval(this.sweep);
    this.off();
    for (const key of [...this.byKey.keys()]) this.remove(key);
  }

  /**
   * The sweep, every second: observations unchecked for `coap.observeCheckMs` are probed (only the head of the
   * table is read); under pressure, with registrations waiting, the oldest too.
   */
  private check(): void {
    const before = this.now() - this.limits.checkMs;
    for (const o of this.byKey.values()) {
      if (o.checkedAt > before) break;
      this.probe(o);
    }
    if (this.wanted && this.byKey.size >= this.limits.max * PRESSURE) this.relieve();
  }

  /**
   * Probes a batch of the least recently checked observations, at most a batch per PRESSURE_MS, and only while
   * registrations come (a full table of live observers is not probed for nothing).
   */
  private relieve(): void {
    const t = this.now();
    this.wanted = true;
    if (t - this.relievedAt < PRESSURE_MS) return;
    this.relievedAt = t;
    this.wanted = false;
    const batch: Observation[] = [];
    for (const o of this.byKey.values()) {
      if (!o.probing) batch.push(o);
      if (batch.length >= PROBE_BATCH) break;
    }
    for (const o of batch) this.probe(o);
  }

  /**
   * Sends the observation's current state as a CON notification: the shape of its registration's answer (the
   * shared attributes, or 2.03 for rpc), which a client takes as it took that answer. An RST or no ACK ends the
   * observation (the message layer calls `gone`); an ACK keeps it. It goes to the end of the table.
   */
  private probe(o: Observation): void {
    this.byKey.delete(o.key);
    this.byKey.set(o.key, o);
    o.checkedAt = this.now();
    o.probing = true;
    o.seq = o.seq >= MAX_OBSERVE ? 1 : o.seq + 1;
    this.counters.notifications++;
    const options = [{ name: 'Observe', value: uintOption(o.seq) }];
    const state: Answer =
      o.resource === 'rpc'
        ? { code: '2.03', options }
        : {
            code: '2.05',
            payload: Buffer.from(this.devices.sharedJson(o.deviceId)),
            contentFormat: CONTENT_JSON,
            options,
          };
    this.send(
      o,
      state,
      (acked) => {
        if (acked) o.probing = false;
      },
      true,
    );
  }

  private notify(o: Observation, body: string, settled?: (acked: boolean) => void): void {
    o.seq = o.seq >= MAX_OBSERVE ? 1 : o.seq + 1;
    this.counters.notifications++;
    this.send(
      o,
      {
        code: '2.05',
        payload: Buffer.from(body),
        contentFormat: CONTENT_JSON,
        options: [{ name: 'Observe', value: uintOption(o.seq) }],
      },
      settled,
    );
  }

  /**
   * Ends the device's observations from the server's side: each observer is sent `final` (a non-2.xx
   * notification, CON or NON as it registered, the same token), which ends the observation at the client (RFC 7641
   * section 4.2). An RPC still awaiting the client's ACK is not delivered: detached first, it goes back to the
   * head of the device's queue for its next legitimate listener, as a closed MQTT session's unacknowledged ones do.
   */
  private endDevice(deviceId: string, final: Answer): void {
    for (const r of ['attributes', 'rpc'] as const) {
      const o = this.byKey.get(`${deviceId}/${r}`);
      if (o === undefined) continue;
      this.send(o, final);
      this.remove(o.key);
      const refused = o.unconfirmed;
      o.unconfirmed = undefined;
      for (const settle of [...(refused ?? [])]) settle(false);
    }
  }

  private remove(key: string): void {
    const o = this.byKey.get(key);
    if (o === undefined) return;
    this.byKey.delete(key);
    const n = (this.perAddress.get(o.peer.address) ?? 1) - 1;
    if (n > 0) this.perAddress.set(o.peer.address, n);
    else this.perAddress.delete(o.peer.address);
    o.detach?.();
    this.counters.observations = this.byKey.size;
    this.devices.disconnected(o.deviceId);
  }
}
