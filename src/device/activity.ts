/**
 * When each device was last heard from: ThingsBoard's SERVER_SCOPE attribute `lastActivityTime` (ms), shown as
 * LAST ACTIVITY by `outpost device list` and `devices` (docs/cli.md). A device is heard from when telemetry or
 * client attributes are stored for it, whatever their timestamps (a device posting yesterday's readings was
 * heard from now).
 *
 * The time is written at most once per ACTIVITY_WRITE_MS per device, the first time after start at once: a
 * device posting every second costs one small write every few minutes, not one per post (the SD card's write
 * budget, docs/design/storage.md). So the stored time may be up to ACTIVITY_WRITE_MS older than the last post.
 */
import type { EventBus } from '../bus/index.js';
import type { AttributeStore } from '../store/attributes.js';

export const ACTIVITY_WRITE_MS = 5 * 60_000;
export const LAST_ACTIVITY_KEY = 'lastActivityTime';

/** Follows the bus; the returned function stops. One map entry per device that posted (bounded by devices). */
export function trackActivity(
  bus: EventBus,
  attributes: Pick<AttributeStore, 'save'>,
  now: () => number,
  onError: (msg: string) => void,
): () => void {
  const written = new Map<string, number>();
  const heard = (deviceId: string): void => {
    const t = now();
    const last = written.get(deviceId);
    if (last !== undefined && t - last < ACTIVITY_WRITE_MS) return;
    written.set(deviceId, t);
    attributes
      .save('DEVICE', deviceId, 'SERVER_SCOPE', [[LAST_ACTIVITY_KEY, { type: 'LONG', v: t }]], t)
      .catch((err: unknown) => onError(`recording the last activity of ${deviceId}: ${(err as Error).message}`));
  };
  const stops = [
    bus.on('telemetry', (ev) => {
      if (ev.entityType === 'DEVICE') heard(ev.entityId);
    }),
    bus.on('attributes', (ev) => {
      if (ev.entityType === 'DEVICE' && ev.scope === 'CLIENT_SCOPE' && ev.updated.length > 0) heard(ev.entityId);
    }),
    bus.on('entityDeleted', (ev) => {
      written.delete(ev.entityId);
    }),
  ];
  return () => {
    for (const stop of stops) stop();
  };
}
