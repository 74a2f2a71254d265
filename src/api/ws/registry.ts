/**
 * Live subscriptions and their fan-out (docs/api.md).
 *
 * Cost model: subscriptions are indexed by entityId, so a write touches only the subscribers of the written
 * entity, never every session. Per bus event each distinct update (same keys, same points) is serialised
 * once and shared; a subscriber adds only its `{"subscriptionId":N,...` prefix.
 *
 * Knows nothing of uWS: a session is anything with `send(text)`, so the fan-out is unit-tested without sockets.
 */
import type { Principal } from '../../auth/index.js';
import type { AttributeScope, AttributesEvent, TelemetryDeleteEvent, TelemetryEvent } from '../../bus/index.js';
import { type TsKv, kvToString } from '../../model/kv.js';
import type { EpochMs } from '../../types.js';
import { DELETED_POINT, type RenderedPoint, renderPoint, renderPrefix, renderTail } from './render.js';

export interface WsSink {
  /** Sends one text frame; a closed or overflowing session drops it (the session is closed, not blocked). */
  send(text: string): void;
  /** the user the session acts for (absent for sinks in unit tests) */
  readonly principal?: Principal | undefined;
}

interface SubscriptionBase {
  readonly session: WsSink;
  readonly cmdId: number;
  readonly entityId: string;
  /** undefined = every key */
  readonly keys: ReadonlySet<string> | undefined;
}

export interface TsSubscription extends SubscriptionBase {
  readonly kind: 'TS';
  /** `scope: "LATEST_TELEMETRY"`: points older than the last one sent for their key are suppressed */
  readonly latestOnly: boolean;
  /** key → ts of the newest point sent (latestOnly subscriptions only) */
  readonly lastTs: Map<string, EpochMs>;
}

export interface AttrSubscription extends SubscriptionBase {
  readonly kind: 'ATTR';
  /** undefined = every scope */
  readonly scope: AttributeScope | undefined;
  /**
   * `scope key` → the point its first reply showed, until the key's first change. A write is readable once
   * committed but announced once flushed: one committed just before the first reply would otherwise come again
   * as a change, the same point twice. Each key's entry goes with its first change, shown or not.
   */
  readonly shown?: Map<string, string>;
}

/** The key of AttrSubscription.shown. */
export const shownKey = (scope: AttributeScope, key: string): string => `${scope} ${key}`;

export type Subscription = TsSubscription | AttrSubscription;

/** Counters (unit tests): serialisations vs deliveries show the sharing works. */
export interface FanoutStats {
  /** distinct update tails rendered */
  tailsRendered: number;
  /** frames handed to sessions */
  framesSent: number;
}

type Entries = Array<readonly [string, readonly RenderedPoint[]]>;

export class SubscriptionRegistry {
  private readonly tsByEntity = new Map<string, Set<TsSubscription>>();
  private readonly attrByEntity = new Map<string, Set<AttrSubscription>>();
  private readonly bySession = new Map<WsSink, Map<number, Subscription>>();
  /** subscriptions per user id, over all its sessions (only users holding some) */
  private readonly byUser = new Map<string, number>();
  readonly stats: FanoutStats = { tailsRendered: 0, framesSent: 0 };

  /** Subscriptions a session holds. */
  count(session: WsSink): number {
    return this.bySession.get(session)?.size ?? 0;
  }

  /** Subscriptions a user holds over all its sessions. */
  countUser(userId: string): number {
    return this.byUser.get(userId) ?? 0;
  }

  private countForUser(session: WsSink, delta: number): void {
    const userId = session.principal?.userId;
    if (userId === undefined) return;
    const n = (this.byUser.get(userId) ?? 0) + delta;
    if (n <= 0) this.byUser.delete(userId);
    else this.byUser.set(userId, n);
  }

  has(session: WsSink, cmdId: number): boolean {
    return this.bySession.get(session)?.has(cmdId) ?? false;
  }

  /** Adds `sub`, replacing the session's subscription with the same cmdId (cmdIds are unique per session). */
  add(sub: Subscription): void {
    this.remove(sub.session, sub.cmdId);
    let own = this.bySession.get(sub.session);
    if (own === undefined) this.bySession.set(sub.session, (own = new Map()));
    own.set(sub.cmdId, sub);
    this.countForUser(sub.session, 1);
    if (sub.kind === 'TS') indexAdd(this.tsByEntity, sub.entityId, sub);
    else indexAdd(this.attrByEntity, sub.entityId, sub);
  }

  /** Cancels one subscription; false when the session had none with that cmdId. */
  remove(session: WsSink, cmdId: number): boolean {
    const own = this.bySession.get(session);
    const sub = own?.get(cmdId);
    if (own === undefined || sub === undefined) return false;
    own.delete(cmdId);
    if (own.size === 0) this.bySession.delete(session);
    this.countForUser(session, -1);
    this.unindex(sub);
    return true;
  }

  /** Cancels every subscription of a session (unsubscribe with empty entityId, or the socket closed). */
  removeSession(session: WsSink): void {
    const own = this.bySession.get(session);
    if (own === undefined) return;
    this.bySession.delete(session);
    this.countForUser(session, -own.size);
    for (const sub of own.values()) this.unindex(sub);
  }

  /** Subscriptions on an entity (any session), for tests. */
  subscribersOf(entityId: string): number {
    return (this.tsByEntity.get(entityId)?.size ?? 0) + (this.attrByEntity.get(entityId)?.size ?? 0);
  }

  /**
   * A committed telemetry write: each subscriber of the entity gets one frame with its subscribed keys of
   * that write, each key's points ascending by ts (so `latestValues` holds the newest). LATEST_TELEMETRY
   * subscriptions drop points older than the last sent for that key (ts equal to it passes, as in TB).
   */
  onTelemetry(ev: TelemetryEvent): void {
    const subs = this.tsByEntity.get(ev.entityId);
    if (subs === undefined || subs.size === 0) return;
    const perKey = new Map<string, RenderedPoint[]>();
    for (const [key, col] of ev.series) {
      if (col.length === 0) continue;
      const pts: RenderedPoint[] = [];
      for (let i = 0; i < col.length; i++) pts.push(renderPoint(col.ts[i] as number, kvToString(col.value(i))));
      perKey.set(key, pts);
    }
    const keys = [...perKey.keys()].sort();
    const points: RenderedPoint[][] = keys.map((k) => {
      const pts = perKey.get(k) as RenderedPoint[];
      if (pts.length > 1) pts.sort((a, b) => a.ts - b.ts);
      return pts;
    });
    const tails = new Map<string, string>();
    for (const sub of subs) {
      let signature = '';
      const chosen: Entries = [];
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i] as string;
        if (sub.keys !== undefined && !sub.keys.has(key)) continue;
        const pts = points[i] as RenderedPoint[];
        let start = 0;
        if (sub.latestOnly) {
          const last = sub.lastTs.get(key);
          if (last !== undefined) while (start < pts.length && (pts[start] as RenderedPoint).ts < last) start++;
          if (start === pts.length) continue;
        }
        signature += `${i}@${start};`;
        chosen.push([key, start === 0 ? pts : pts.slice(start)]);
      }
      if (chosen.length === 0) continue;
      if (sub.latestOnly) {
        for (const [key, pts] of chosen) sub.lastTs.set(key, (pts[pts.length - 1] as RenderedPoint).ts);
      }
      this.deliver(sub, tails, signature, chosen);
    }
  }

  /**
   * Latest values removed or rewritten (REST delete): per subscribed key the new latest value when the delete
   * promoted an older point (`current` has it), else `[0,""]`. LATEST state follows.
   */
  onTelemetryDeleted(
    ev: TelemetryDeleteEvent,
    current: (keys: readonly string[]) => ReadonlyMap<string, TsKv> = () => new Map(),
  ): void {
    const subs = this.tsByEntity.get(ev.entityId);
    if (subs === undefined || subs.size === 0 || ev.keys.length === 0) return;
    const keys = [...new Set(ev.keys)].sort();
    const now = current(keys);
    const points = keys.map((k): RenderedPoint => {
      const p = now.get(k);
      return p === undefined ? DELETED_POINT : renderPoint(p.ts, kvToString(p.value));
    });
    const tails = new Map<string, string>();
    for (const sub of subs) {
      const chosen: Entries = [];
      let signature = '';
      keys.forEach((key, i) => {
        if (sub.keys !== undefined && !sub.keys.has(key)) return;
        const p = points[i] as RenderedPoint;
        chosen.push([key, [p]]);
        signature += `${i};`;
        if (p === DELETED_POINT) sub.lastTs.delete(key);
        else if (sub.latestOnly) sub.lastTs.set(key, p.ts);
      });
      if (chosen.length > 0) this.deliver(sub, tails, signature, chosen);
    }
  }

  /** Attribute changes of one scope: `[lastUpdateTs,"v"]` per updated key, `[0,""]` per deleted key. */
  onAttributes(ev: AttributesEvent): void {
    const subs = this.attrByEntity.get(ev.entityId);
    if (subs === undefined || subs.size === 0) return;
    const all: Array<readonly [string, RenderedPoint]> = [];
    for (const [key, value] of ev.updated) all.push([key, renderPoint(ev.ts, kvToString(value))]);
    for (const key of ev.deleted) all.push([key, DELETED_POINT]);
    all.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    const tails = new Map<string, string>();
    for (const sub of subs) {
      if (sub.scope !== undefined && sub.scope !== ev.scope) continue;
      const chosen: Entries = [];
      let signature = '';
      all.forEach(([key, p], i) => {
        if (sub.keys !== undefined && !sub.keys.has(key)) return;
        if (sub.shown !== undefined && sub.shown.size > 0) {
          const k = shownKey(ev.scope, key);
          const first = sub.shown.get(k);
          if (first !== undefined) {
            sub.shown.delete(k);
            if (first === p.json) return;
          }
        }
        chosen.push([key, [p]]);
        signature += `${i};`;
      });
      if (chosen.length > 0) this.deliver(sub, tails, signature, chosen);
    }
  }

  /**
   * The entity is gone, or who may read it changed: every subscription on it for which `endFrame` gives a
   * frame ends, and its session gets that frame (the error a new subscription would get). Off the write path:
   * runs on entity changes only, over the entity's own subscribers.
   */
  endWhere(entityId: string, endFrame: (sub: Subscription) => string | undefined): number {
    let ended = 0;
    for (const index of [this.tsByEntity, this.attrByEntity] as Array<Map<string, Set<Subscription>>>) {
      const subs = index.get(entityId);
      if (subs === undefined) continue;
      for (const sub of [...subs]) {
        const frame = endFrame(sub);
        if (frame === undefined) continue;
        this.remove(sub.session, sub.cmdId);
        sub.session.send(frame);
        ended++;
      }
    }
    return ended;
  }

  /** Renders the tail once per distinct signature of this event, then sends prefix + tail. */
  private deliver(sub: Subscription, tails: Map<string, string>, signature: string, chosen: Entries): void {
    let tail = tails.get(signature);
    if (tail === undefined) {
      tail = renderTail(chosen);
      tails.set(signature, tail);
      this.stats.tailsRendered++;
    }
    this.stats.framesSent++;
    sub.session.send(renderPrefix(sub.cmdId) + tail);
  }

  private unindex(sub: Subscription): void {
    if (sub.kind === 'TS') indexRemove(this.tsByEntity, sub.entityId, sub);
    else indexRemove(this.attrByEntity, sub.entityId, sub);
  }
}

function indexAdd<S>(index: Map<string, Set<S>>, entityId: string, sub: S): void {
  let set = index.get(entityId);
  if (set === undefined) index.set(entityId, (set = new Set()));
  set.add(sub);
}

function indexRemove<S>(index: Map<string, Set<S>>, entityId: string, sub: S): void {
  const set = index.get(entityId);
  if (set === undefined) return;
  set.delete(sub);
  if (set.size === 0) index.delete(entityId);
}
