/**
 * Client attributes upstream: a device's client-attribute write marks it in the outbox, in the write's own
 * transaction (`['a', uuid]`, store/outbox.ts; the value is rewritten by every change), and the pump posts the
 * latest attributes of one marked device at a time; the mark goes once they went through and no change came
 * meanwhile.
 */
import type { LmdbAttributeStore } from '../../store/attributes.js';
import type { EntityStore } from '../../store/entities.js';
import { ATTRIBUTE_MARKS, type Outbox } from '../../store/outbox.js';
import type { SyncPorts } from './ports.js';
import { wireValue } from './wire.js';

/** The devices whose client attributes wait to go up (at most `limit`). */
export function* markedDevices(outbox: Outbox, limit: number): IterableIterator<string> {
  for (const key of outbox.marks.keys({ ...ATTRIBUTE_MARKS, limit })) yield key[1];
}

export class AttributeSender {
  private busy = false;

  constructor(
    private readonly ports: SyncPorts,
    private readonly entities: EntityStore,
    private readonly attributes: LmdbAttributeStore,
  ) {}

  /** Posts the latest client attributes of one marked device unless a post is under way; returns jobs started. */
  send(): number {
    if (this.busy) return 0;
    const { store, jobs, sender, accounting } = this.ports;
    const { outbox, dict } = store;
    const { devices, counts } = accounting;
    for (const { key, value } of outbox.marks.entries({ ...ATTRIBUTE_MARKS, limit: 64 })) {
      const id = key[1];
      const rec = this.entities.device(id);
      const e = dict.entityIdx(id);
      const dev = e === undefined ? undefined : devices.ofEntity(e);
      if (rec === undefined || dev === undefined) {
        void outbox.unmark(id);
        continue;
      }
      if (dev.parked !== null) continue;
      this.busy = true;
      jobs.slots.inFlight++;
      jobs.track(
        (async () => {
          try {
            const token = await devices.tokenFor(dev);
            if (token === undefined) return;
            const attrs = this.attributes.get(id, 'CLIENT_SCOPE');
            const body = `{${attrs.map((a) => `${JSON.stringify(a.key)}:${wireValue(a.value)}`).join(',')}}`;
            const o = await sender.transport.attributes(token, body);
            if (o.kind === 'sent') {
              sender.succeeded();
              // removed only if no change came meanwhile (the marker is rewritten by every change)
              await outbox.unmark(id, value);
            } else if (o.kind === 'setAside') {
              counts.error(`400 from upstream for the attributes of ${dev.name}`);
              await outbox.unmark(id);
            } else {
              sender.failed(dev, token, o);
            }
          } finally {
            this.busy = false;
            jobs.slots.inFlight--;
            jobs.wake();
          }
        })(),
      );
      return 1;
    }
    return 0;
  }
}
