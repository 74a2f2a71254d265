/**
 * Device lifecycle from the upstream: TB tells a gateway that one of its devices was deleted or renamed with a
 * persistent one-way RPC to the gateway itself (`v1/devices/me/rpc/request/{id}`, method
 * `gateway_device_deleted` with params "<name>", `gateway_device_renamed` with params {"<old>":"<new>"}),
 * re-sent until it expires. Each is answered, logged once, and shown in the status; nothing local changes (the
 * upstream does not delete a gateway's data; a renamed device is renamed here by the operator, if at all).
 */
import type { Logger } from '../../log.js';
import { isJsonObject } from '../../ingest/json.js';
import { parseBody } from '../../ingest/payload.js';
import type { DownlinkStore } from '../../store/outbox.js';
import type { UpstreamConnection } from '../session/connection.js';
import { LIFECYCLE_EVENTS_KEY as EVENTS_KEY } from './state.js';

export interface LifecycleEvent {
  readonly ts: number;
  readonly event: 'deleted' | 'renamed';
  readonly name: string;
  /** the new name upstream (renamed) */
  readonly newName: string | null;
}

/** events kept for the status */
const KEEP = 20;

export class Lifecycle {
  private readonly events: LifecycleEvent[];

  constructor(
    private readonly store: DownlinkStore,
    private readonly session: UpstreamConnection,
    private readonly log: Logger,
    private readonly now: () => number,
  ) {
    this.events = (store.get(EVENTS_KEY) as LifecycleEvent[] | undefined) ?? [];
  }

  get recent(): readonly LifecycleEvent[] {
    return this.events;
  }

  /** A message on the gateway's own RPC topic: answered (and, when new, logged and kept) when this resolves. */
  async request(topic: string, payload: Buffer): Promise<void> {
    const id = topic.slice('v1/devices/me/rpc/request/'.length);
    const msg = parseBody(payload);
    const method = isJsonObject(msg) ? msg['method'] : undefined;
    const params = isJsonObject(msg) ? msg['params'] : undefined;
    let ev: LifecycleEvent | undefined;
    if (method === 'gateway_device_deleted' && typeof params === 'string') {
      ev = { ts: this.now(), event: 'deleted', name: params, newName: null };
    } else if (method === 'gateway_device_renamed' && params !== undefined && isJsonObject(params)) {
      const [old, renamed] = Object.entries(params)[0] ?? [];
      if (typeof old === 'string' && typeof renamed === 'string')
        ev = { ts: this.now(), event: 'renamed', name: old, newName: renamed };
    }
    if (
      ev !== undefined &&
      !this.events.some((e) => e.event === ev.event && e.name === ev.name && e.newName === ev.newName)
    ) {
      this.log.warn(
        ev.event === 'deleted'
          ? `sync: the upstream deleted the device "${ev.name}"; its data here is kept (it is created again upstream if it sends)`
          : `sync: the upstream renamed the device "${ev.name}" to "${ev.newName}"; rename it here to keep them together (outpost device ...)`,
      );
      this.events.push(ev);
      if (this.events.length > KEEP) this.events.shift();
      await this.store.put(EVENTS_KEY, this.events);
      await this.store.flushed();
    }
    const answer =
      ev !== undefined
        ? '{"success":true}'
        : `{"error":"unsupported method ${typeof method === 'string' ? method.replace(/["\\]/g, '') : ''}"}`;
    void this.session.publish(`v1/devices/me/rpc/response/${id}`, answer, true);
  }
}
