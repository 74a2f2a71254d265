/**
 * Ingest: store a parsed telemetry write durably, then publish it on the bus. Device and REST handlers both
 * come through here, so "acknowledged" always means "on disk" (CONTRACT §4) and every listener sees every
 * committed write exactly once.
 */
import type { EventBus } from '../bus/index.js';
import type { TimeseriesStore } from '../store/timeseries.js';
import type { EntityType } from '../types.js';
import type { TsRecord } from './payload.js';

export class TelemetryIngest {
  constructor(private readonly store: TimeseriesStore, private readonly bus: EventBus) {}

  async save(entityType: EntityType, entityId: string, records: readonly TsRecord[]): Promise<void> {
    // filter (a copy) only when some record is empty, the rare case
    const nonEmpty = records.some((r) => r.values.length === 0) ? records.filter((r) => r.values.length > 0) : records;
    if (nonEmpty.length === 0) return;
    await this.store.write(entityId, nonEmpty);
    this.bus.publish('telemetry', { entityType, entityId, records: nonEmpty });
  }
}
