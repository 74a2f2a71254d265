/**
 * What the stores tell the upstream sync. The stores are opened before the sync service exists (the
 * recorder must see the write-ahead log's replay at start), so each is given this relay at construction and
 * the service attaches to it once; until then the recorder keeps the stored counts itself, what it records is
 * counted by the service at start (never told again), and depth writes are not recorded (no write reaches the
 * depth store before the service is made, server.ts).
 */
import type { DepthSyncRecorder } from '../../store/depth.js';
import type { EntityIdx } from '../../store/encoding/codec.js';
import type { FragmentRef, OutboxListener } from '../../store/outbox.js';
import type { SeriesColumn } from '../../model/batch.js';

const notRecorded = (): void => undefined;

export class SyncRelay implements OutboxListener, DepthSyncRecorder {
  private outbox: OutboxListener | undefined;
  private depth: DepthSyncRecorder | undefined;

  /** The service's side: once. */
  attach(outbox: OutboxListener, depth: DepthSyncRecorder): void {
    if (this.outbox !== undefined) throw new Error('the sync relay is attached already');
    this.outbox = outbox;
    this.depth = depth;
  }

  committing(): ((seq: number, e: EntityIdx, refs: FragmentRef[]) => void) | undefined {
    return this.outbox?.committing();
  }

  logged(lsn: number, points: ReadonlyMap<string, ReadonlyMap<string, readonly SeriesColumn[]>>): void {
    this.outbox?.logged(lsn, points);
  }

  applied(lsn: number): void {
    this.outbox?.applied(lsn);
  }

  sentApplied(): boolean {
    return this.outbox?.sentApplied() ?? false;
  }

  record(e: EntityIdx, points: number[], count: number): (committed: boolean) => void {
    return this.depth?.record(e, points, count) ?? notRecorded;
  }
}
