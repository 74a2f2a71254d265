/**
 * What the downlink keeps in the outbox database: its counters (since the data dir was made, as the sync's),
 * and per device the shared-attribute keys the upstream sent (the keys it is authoritative for: a reconcile
 * deletes locally only those of them the upstream no longer has; shared keys set locally stay).
 *
 * This module owns the downlink's keys of the outbox database (uppercase first elements, beside the uplink's
 * lowercase ones listed in store/outbox.ts): the RPC records (rpc.ts) and the lifecycle events (lifecycle.ts)
 * are kept under keys built here too.
 */
import type { DownlinkStore } from '../../store/outbox.js';

export type DownlinkRpcKey = ['R', string, number];
/** the upstream's RPC `id` to a device: its state and reply (rpc.ts) */
export const downlinkRpcKey = (deviceId: string, id: number): DownlinkRpcKey => ['R', deviceId, id];
export const DOWNLINK_RPCS: { readonly start: ['R']; readonly end: [string] } = { start: ['R'], end: ['R\u0000'] };
/** string[]: the device's shared-attribute keys the upstream sent (it owns them) */
const ownedKey = (deviceId: string): ['S', string] => ['S', deviceId];
/** the persisted downlink counters */
const COUNTERS: ['D'] = ['D'];
/** the last device lifecycle events from the upstream (lifecycle.ts) */
export const LIFECYCLE_EVENTS_KEY: ['L'] = ['L'];

export interface DownlinkCounters {
  attributesApplied: number;
  lastReconcileTs: number | null;
  rpcReceived: number;
  rpcDelivered: number;
  rpcReplied: number;
  rpcExpired: number;
}

export class DownlinkState {
  readonly counters: DownlinkCounters;

  constructor(private readonly store: DownlinkStore) {
    const c = store.get(COUNTERS) as Partial<DownlinkCounters> | undefined;
    this.counters = {
      attributesApplied: c?.attributesApplied ?? 0,
      lastReconcileTs: c?.lastReconcileTs ?? null,
      rpcReceived: c?.rpcReceived ?? 0,
      rpcDelivered: c?.rpcDelivered ?? 0,
      rpcReplied: c?.rpcReplied ?? 0,
      rpcExpired: c?.rpcExpired ?? 0,
    };
  }

  /** Writes the counters (in the next commit: the caller awaits `store.flushed()` when it must). */
  save(): Promise<boolean> {
    return this.store.put(COUNTERS, { ...this.counters });
  }

  owned(deviceId: string): Set<string> {
    return new Set((this.store.get(ownedKey(deviceId)) as string[] | undefined) ?? []);
  }

  setOwned(deviceId: string, keys: ReadonlySet<string>): Promise<boolean> {
    return keys.size === 0 ? this.store.remove(ownedKey(deviceId)) : this.store.put(ownedKey(deviceId), [...keys]);
  }
}
