/**
 * What the downlink keeps in the outbox database: its counters (since the data dir was made, as the sync's),
 * and per device the shared-attribute keys the upstream sent (the keys it is authoritative for: a reconcile
 * deletes locally only those of them the upstream no longer has; shared keys set locally stay).
 *
 * Keys: store/outbox.ts (`DOWNLINK_COUNTERS_KEY`, `upstreamOwnedKey`).
 */
import type { StoreEnv } from '../../store/env.js';
import { DOWNLINK_COUNTERS_KEY as COUNTERS, upstreamOwnedKey as ownedKey } from '../../store/outbox.js';

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

  constructor(private readonly env: StoreEnv) {
    const c = env.outbox.get(COUNTERS) as Partial<DownlinkCounters> | undefined;
    this.counters = {
      attributesApplied: c?.attributesApplied ?? 0,
      lastReconcileTs: c?.lastReconcileTs ?? null,
      rpcReceived: c?.rpcReceived ?? 0,
      rpcDelivered: c?.rpcDelivered ?? 0,
      rpcReplied: c?.rpcReplied ?? 0,
      rpcExpired: c?.rpcExpired ?? 0,
    };
  }

  /** Writes the counters (in the next commit: the caller awaits `env.flushed()` when it must). */
  save(): Promise<boolean> {
    return this.env.outbox.put(COUNTERS, { ...this.counters });
  }

  owned(deviceId: string): Set<string> {
    return new Set((this.env.outbox.get(ownedKey(deviceId)) as string[] | undefined) ?? []);
  }

  setOwned(deviceId: string, keys: ReadonlySet<string>): Promise<boolean> {
    return keys.size === 0
      ? this.env.outbox.remove(ownedKey(deviceId))
      : this.env.outbox.put(ownedKey(deviceId), [...keys]);
  }
}
