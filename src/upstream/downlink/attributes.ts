/**
 * Shared attributes from the upstream, over the gateway session: pushes (`v1/gateway/attributes
 * {"device","data":{..,"deleted":[..]}}`) applied as the local REST API applies a write (the attribute store
 * stores, flushes, then publishes on the bus: HTTP long-polls, MQTT subscribers and websocket subscriptions see
 * it), durably before the PUBACK; and after every (re)connect, a reconcile of each announced device.
 *
 * The reconcile is exact despite TB's attribute-request quirks (`keys: []` merges client and shared into one
 * `values`; a single attribute comes as `value` without its name):
 *   1. `{"client":false,"keys":[]}` gives the names upstream (client and shared together);
 *   2. `{"client":false,"keys":[those names, the local shared keys]}` gives, by the names asked, the values of
 *      the shared ones only (one name asked: `value`, named by the asking);
 *   3. shared keys upstream are set where new or changed; keys the upstream sent before (those it owns,
 *      downlink/state.ts) and has no more are deleted; keys set locally stay. A push that arrives meanwhile
 *      wins over the reconcile for its keys.
 * One case TB's answers cannot name: a device whose only attribute upstream (client and shared together) is a
 * shared key this gateway never saw. It is logged and arrives with its next change.
 */
import type { Logger } from '../../log.js';
import { isJsonObject, type JsonValue } from '../../ingest/json.js';
import { parseAttributes, parseBody } from '../../ingest/payload.js';
import { type KvValue, kvEquals } from '../../model/kv.js';
import type { AttributeStore } from '../../store/attributes.js';
import type { EntityStore } from '../../store/entities.js';
import type { DownlinkStore } from '../../store/outbox.js';
import type { Candidate } from '../session/announce.js';
import type { DownlinkState } from './state.js';
import type { UpstreamConnection } from '../session/connection.js';

export interface SharedDownlinkOptions {
  /** the downlink's state: what is applied is flushed to it before the PUBACK */
  readonly store: DownlinkStore;
  readonly session: UpstreamConnection;
  readonly entities: EntityStore;
  readonly attributes: AttributeStore;
  readonly state: DownlinkState;
  readonly timeoutMs: number;
  readonly log: Logger;
  readonly now: () => number;
}

type Answer =
  | { readonly kind: 'values'; readonly values: Record<string, JsonValue> }
  | { readonly kind: 'value'; readonly value: JsonValue }
  | { readonly kind: 'none' };

/** reconciles running at once (each is two requests) */
const RECONCILE_CONCURRENCY = 4;

export class SharedDownlink {
  private nextId = 1;
  private readonly waiting = new Map<number, (a: Answer) => void>();
  /** device id → keys pushed while its reconcile runs (the push is newer than the reconcile's answer) */
  private readonly touched = new Map<string, Set<string>>();
  private readonly queue: Candidate[] = [];
  private running = 0;
  private readonly unknownLogged = new Set<string>();

  constructor(private readonly o: SharedDownlinkOptions) {}

  /** `v1/gateway/attributes` from upstream: applied and durable when this resolves. */
  async pushed(payload: Buffer): Promise<void> {
    const msg = parseBody(payload);
    const body = isJsonObject(msg) ? msg['data'] : undefined;
    if (!isJsonObject(msg) || typeof msg['device'] !== 'string' || body === undefined || !isJsonObject(body)) {
      this.o.log.warn('sync: a shared-attribute message from upstream without "device" or "data"; ignored');
      return;
    }
    const id = this.deviceId(msg['device']);
    if (id === undefined) return;
    const data: Record<string, JsonValue> = { ...body };
    const deleted = Array.isArray(data['deleted'])
      ? data['deleted'].filter((k): k is string => typeof k === 'string')
      : [];
    delete data['deleted'];
    const entries = parseAttributes(data);
    const touched = this.touched.get(id);
    for (const [k] of entries) touched?.add(k);
    for (const k of deleted) touched?.add(k);
    const owned = this.o.state.owned(id);
    for (const [k] of entries) owned.add(k);
    for (const k of deleted) owned.delete(k);
    void this.o.state.setOwned(id, owned);
    await this.apply(id, entries, deleted);
  }

  /** `v1/gateway/attributes/response`: the answer to one of our requests. */
  answered(payload: Buffer): void {
    let msg: JsonValue;
    try {
      msg = parseBody(payload);
    } catch {
      return;
    }
    if (!isJsonObject(msg) || typeof msg['id'] !== 'number') return;
    const resolve = this.waiting.get(msg['id']);
    if (resolve === undefined) return;
    this.waiting.delete(msg['id']);
    const values = msg['values'];
    if (values !== undefined && isJsonObject(values)) resolve({ kind: 'values', values });
    else if ('value' in msg) resolve({ kind: 'value', value: msg['value'] as JsonValue });
    else resolve({ kind: 'none' });
  }

  /** The device was announced in a new session: its shared attributes are reconciled (queued, a few at once). */
  reconcile(c: Candidate): void {
    if (this.queue.some((q) => q.id === c.id)) return;
    this.queue.push(c);
    this.next();
  }

  /** The session closed: requests waiting answer nothing (their reconciles are retried in the next session). */
  sessionDown(): void {
    for (const resolve of this.waiting.values()) resolve({ kind: 'none' });
    this.waiting.clear();
    this.queue.length = 0;
  }

  private next(): void {
    while (this.running < RECONCILE_CONCURRENCY && this.queue.length > 0) {
      const c = this.queue.shift() as Candidate;
      this.running++;
      void this.reconcileOne(c)
        .catch((err: unknown) => {
          this.o.log.warn(`sync: reconciling the shared attributes of ${c.name} failed: ${(err as Error).message}`);
        })
        .finally(() => {
          this.running--;
          this.next();
        });
    }
  }

  private async reconcileOne(c: Candidate): Promise<void> {
    const touched = new Set<string>();
    this.touched.set(c.id, touched);
    try {
      const all = await this.request({ device: c.name, client: false, keys: [] });
      if (all === undefined) return;
      const localShared = new Map(this.o.attributes.get(c.id, 'SHARED_SCOPE').map((a) => [a.key, a.value] as const));
      const names = new Set<string>(localShared.keys());
      if (all.kind === 'values') for (const k of Object.keys(all.values)) names.add(k);
      let lone: JsonValue | undefined;
      if (all.kind === 'value') {
        lone = all.value;
        // the lone attribute may be one of the device's client attributes: asked by name too
        for (const a of this.o.attributes.get(c.id, 'CLIENT_SCOPE')) names.add(a.key);
      }
      const upstream = new Map<string, KvValue>();
      if (names.size > 0) {
        const asked = [...names];
        const shared = await this.request({ device: c.name, client: false, keys: asked });
        if (shared === undefined) return;
        const obj: Record<string, JsonValue> =
          shared.kind === 'values'
            ? shared.values
            : shared.kind === 'value' && asked.length === 1
              ? { [asked[0] as string]: shared.value }
              : {};
        for (const [k, v] of parseAttributes(obj)) upstream.set(k, v);
      }
      if (lone !== undefined && upstream.size === 0 && !this.isClientValue(c.id, lone)) {
        if (!this.unknownLogged.has(c.id)) {
          this.unknownLogged.add(c.id);
          this.o.log.warn(
            `sync: ${c.name} has one attribute upstream whose name the upstream's answer does not give; it arrives with its next change`,
          );
        }
      }
      const set: Array<readonly [string, KvValue]> = [];
      for (const [k, v] of upstream) {
        if (touched.has(k)) continue;
        const cur = localShared.get(k);
        if (cur === undefined || !kvEquals(cur, v)) set.push([k, v]);
      }
      const owned = this.o.state.owned(c.id);
      const gone = [...owned].filter((k) => !upstream.has(k) && !touched.has(k) && localShared.has(k));
      const nowOwned = new Set([...upstream.keys(), ...[...owned].filter((k) => touched.has(k))]);
      void this.o.state.setOwned(c.id, nowOwned);
      await this.apply(c.id, set, gone);
      this.o.state.counters.lastReconcileTs = this.o.now();
      await this.o.state.save();
    } finally {
      this.touched.delete(c.id);
    }
  }

  private isClientValue(id: string, v: JsonValue): boolean {
    let parsed: KvValue;
    try {
      parsed = (parseAttributes({ v }) as Array<readonly [string, KvValue]>)[0]?.[1] as KvValue;
    } catch {
      return false;
    }
    return this.o.attributes.get(id, 'CLIENT_SCOPE').some((a) => kvEquals(a.value, parsed));
  }

  private async apply(
    id: string,
    set: ReadonlyArray<readonly [string, KvValue]>,
    deleted: readonly string[],
  ): Promise<void> {
    if (set.length > 0) await this.o.attributes.save('DEVICE', id, 'SHARED_SCOPE', set, this.o.now());
    const removed = deleted.length > 0 ? await this.o.attributes.delete('DEVICE', id, 'SHARED_SCOPE', deleted) : [];
    if (set.length + removed.length === 0) {
      await this.o.store.flushed();
      return;
    }
    this.o.state.counters.attributesApplied += set.length + removed.length;
    void this.o.state.save();
    await this.o.store.flushed();
  }

  private request(body: { device: string; client: boolean; keys: string[] }): Promise<Answer | undefined> {
    const id = this.nextId++;
    if (this.nextId > 2_000_000_000) this.nextId = 1;
    return new Promise<Answer | undefined>((resolve) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        resolve(undefined);
      }, this.o.timeoutMs);
      timer.unref();
      this.waiting.set(id, (a) => {
        clearTimeout(timer);
        resolve(this.o.session.state === 'up' ? a : undefined);
      });
      void this.o.session.publish('v1/gateway/attributes/request', JSON.stringify({ id, ...body })).then((out) => {
        if (out.kind !== 'sent' && this.waiting.delete(id)) {
          clearTimeout(timer);
          resolve(undefined);
        }
      });
    });
  }

  private deviceId(name: string): string | undefined {
    const rec = this.o.entities.byName('DEVICE', name);
    if (rec === undefined) {
      if (!this.unknownLogged.has(name)) {
        this.unknownLogged.add(name);
        this.o.log.warn(`sync: a downlink for "${name}", which is not a device here; ignored`);
      }
      return undefined;
    }
    return rec.id;
  }
}
