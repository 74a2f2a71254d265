/**
 * Ingest: store a parsed telemetry write durably, then publish it on the bus. Device and REST handlers both
 * come through here, so "acknowledged" always means "on disk" (docs/api.md) and every listener sees every
 * committed write exactly once.
 */
import type { EventBus } from '../bus/index.js';
import { TelemetryBatch } from '../model/batch.js';
import type { TimeseriesStore } from '../store/series/interface.js';
import type { EntityType } from '../types.js';
import type { TsRecord } from '../model/record.js';

export class TelemetryIngest {
  constructor(
    private readonly store: TimeseriesStore,
    private readonly bus: EventBus,
  ) {}

  /** Records (TB's shape, from the general parser) are converted to the columnar batch. */
  async save(entityType: EntityType, entityId: string, points: TelemetryBatch | readonly TsRecord[]): Promise<void> {
    const batch = points instanceof TelemetryBatch ? points : TelemetryBatch.fromRecords(points);
    if (batch.pointCount === 0) return;
    await this.store.write(entityId, batch);
    this.bus.publish('telemetry', { entityType, entityId, series: batch.series });
  }
}
