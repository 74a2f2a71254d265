/**
 * The in-process event bus. A committed write publishes one event (the one exception: the device state service
 * reports the connectivity times it keeps in memory, src/device/state.ts); long-polls, websocket
 * subscriptions and the sync outbox listen. Publishers never know their listeners, and a listener that
 * throws is logged and skipped, never breaking the write that published.
 */
import type { SeriesColumn } from '../model/batch.js';
import type { KvValue } from '../model/kv.js';
import type { EntityType } from '../types.js';

export type AttributeScope = 'CLIENT_SCOPE' | 'SERVER_SCOPE' | 'SHARED_SCOPE';

export interface TelemetryEvent {
  readonly entityType: EntityType;
  readonly entityId: string;
  /** every stored point: key → its points in posted order (not yet sorted or deduplicated) */
  readonly series: ReadonlyMap<string, SeriesColumn>;
}

export interface TelemetryDeleteEvent {
  readonly entityType: EntityType;
  readonly entityId: string;
  /** keys whose latest value was removed */
  readonly keys: readonly string[];
}

export interface AttributesEvent {
  readonly entityType: EntityType;
  readonly entityId: string;
  readonly scope: AttributeScope;
  /** updated keys with their lastUpdateTs; empty on deletion */
  readonly updated: ReadonlyArray<readonly [string, KvValue]>;
  readonly ts: number;
  /** deleted keys; empty on update */
  readonly deleted: readonly string[];
}

export interface BusEvents {
  telemetry: TelemetryEvent;
  telemetryDeleted: TelemetryDeleteEvent;
  attributes: AttributesEvent;
  /** an entity was deleted (devices: pending long-polls answer, subscriptions close) */
  entityDeleted: { readonly entityType: EntityType; readonly entityId: string };
  /** who may read the entity changed (assigned to, or unassigned from, a customer): live reads are rechecked */
  accessChanged: { readonly entityType: EntityType; readonly entityId: string };
  /**
   * sessions that lost their authority: logged-out session ids, deleted users, deleted customers (their users
   * and access tickets); whatever such a session holds open is closed
   */
  principalsRevoked: PrincipalsRevokedEvent;
  /** a device's credentials changed: its sessions logged in with the old ones close */
  credentialsUpdated: { readonly deviceId: string };
  /**
   * a device connected, disconnected, became active or inactive (src/device/state.ts), published when it
   * happens, before its attributes are on disk: what follows connectivity (alarm rules) listens here
   */
  deviceState: DeviceStateEvent;
}

/** ThingsBoard's CONNECT_EVENT, DISCONNECT_EVENT, ACTIVITY_EVENT (here: inactive → active only), INACTIVITY_EVENT */
export type DeviceStateKind = 'CONNECT' | 'DISCONNECT' | 'ACTIVITY' | 'INACTIVITY';

export interface DeviceStateEvent {
  readonly deviceId: string;
  readonly kind: DeviceStateKind;
  /** ms; when it happened */
  readonly ts: number;
  /** the device's `active` after it */
  readonly active: boolean;
}

export interface PrincipalsRevokedEvent {
  readonly sessionIds: readonly string[];
  readonly userIds: readonly string[];
  readonly customerIds: readonly string[];
}

type Listener<T> = (event: T) => void;

export class EventBus {
  private readonly listeners: { [K in keyof BusEvents]: Set<Listener<BusEvents[K]>> } = {
    telemetry: new Set(),
    telemetryDeleted: new Set(),
    attributes: new Set(),
    entityDeleted: new Set(),
    accessChanged: new Set(),
    principalsRevoked: new Set(),
    credentialsUpdated: new Set(),
    deviceState: new Set(),
  };

  constructor(private readonly log: (msg: string) => void = () => undefined) {}

  /** Returns the function that removes the listener. */
  on<K extends keyof BusEvents>(name: K, fn: Listener<BusEvents[K]>): () => void {
    const set = this.listeners[name] as Set<Listener<BusEvents[K]>>;
    set.add(fn);
    return () => set.delete(fn);
  }

  publish<K extends keyof BusEvents>(name: K, event: BusEvents[K]): void {
    for (const fn of this.listeners[name] as Set<Listener<BusEvents[K]>>) {
      try {
        fn(event);
      } catch (err) {
        this.log(`bus listener for ${name} failed: ${(err as Error)?.stack ?? String(err)}`);
      }
    }
  }

  listenerCount(name: keyof BusEvents): number {
    return this.listeners[name].size;
  }
}
