/**
 * Alarms (docs/api.md "Alarms"): ThingsBoard's Alarm entity, one uncleared alarm per originator and type.
 *
 * Layout of the `alarms` sub-database: ['A', id] → AlarmRecord; ['O', originatorId, createdTime, id] → 0, an
 * originator's alarms oldest first (listing a device's alarms, the cap); ['U', originatorId, type] → id, the
 * uncleared alarm of that originator and type (create-or-update, the active ones without reading the rest).
 *
 * SD-card wear (docs/write-budget.md): a row is written when an alarm is created, changes severity, is
 * acknowledged, cleared, assigned or unassigned, or is saved over REST, never when a rule re-raises an active
 * alarm without changing its severity: its newer `endTs` and `details` are then kept in memory and go to disk with
 * its next change (after a restart an alarm shows those of its last written change).
 */
import { randomUUID } from 'node:crypto';
import { OutpostError } from '../errors.js';
import { type EntityType, NULL_UUID } from '../types.js';
import type { EntityRecord } from './entity-records.js';
import type { StoreEnv } from './env.js';

/** TB's AlarmSeverity, highest first: the enum order is the rank. */
export const ALARM_SEVERITIES = ['CRITICAL', 'MAJOR', 'MINOR', 'WARNING', 'INDETERMINATE'] as const;
export type AlarmSeverity = (typeof ALARM_SEVERITIES)[number];
export const ALARM_STATUSES = ['ACTIVE_UNACK', 'ACTIVE_ACK', 'CLEARED_UNACK', 'CLEARED_ACK'] as const;
export type AlarmStatus = (typeof ALARM_STATUSES)[number];

export const isSeverity = (s: string): s is AlarmSeverity => (ALARM_SEVERITIES as readonly string[]).includes(s);
/** rank: 0 for CRITICAL, 4 for INDETERMINATE */
export const severityRank = (s: AlarmSeverity): number => ALARM_SEVERITIES.indexOf(s);

export interface AlarmOriginator {
  readonly entityType: EntityType;
  readonly id: string;
}

export interface AlarmRecord {
  readonly id: string;
  readonly createdTime: number;
  readonly tenantId: string;
  /** the originator's customer when the alarm was created; null for none */
  readonly customerId: string | null;
  readonly type: string;
  readonly originator: AlarmOriginator;
  readonly severity: AlarmSeverity;
  readonly acknowledged: boolean;
  readonly cleared: boolean;
  readonly assigneeId: string | null;
  readonly startTs: number;
  readonly endTs: number;
  readonly ackTs: number;
  readonly clearTs: number;
  readonly assignTs: number;
  /** `details` serialized; absent = null */
  readonly detailsJson?: string;
  readonly propagate: boolean;
  readonly propagateToOwner: boolean;
  readonly propagateToTenant: boolean;
  readonly propagateRelationTypes: readonly string[];
}

/** TB's AlarmStatus.toStatus */
export function alarmStatus(a: Pick<AlarmRecord, 'cleared' | 'acknowledged'>): AlarmStatus {
  return `${a.cleared ? 'CLEARED' : 'ACTIVE'}_${a.acknowledged ? 'ACK' : 'UNACK'}`;
}

export interface RaiseOptions {
  /** a rule's raise (default): an active alarm's severity only goes up; REST sets it as given */
  readonly raiseOnly?: boolean;
  /** REST: write the row even when nothing but endTs/details changed (a user's save) */
  readonly always?: boolean;
  /** TB's startTs; default `ts` for a new alarm, kept for an existing one unless given */
  readonly startTs?: number;
  readonly propagate?: boolean;
  readonly propagateToOwner?: boolean;
  readonly propagateToTenant?: boolean;
  readonly propagateRelationTypes?: readonly string[];
  /** REST: a body's `customerId`, which must be the originator's */
  readonly customerId?: string | null;
}

export interface RaiseResult {
  readonly alarm: AlarmRecord;
  readonly created: boolean;
  /** a row was written */
  readonly written: boolean;
}

export interface AlarmStoreOptions {
  /** alarms kept per originator (config `alarms.maxPerDevice`); 0 = no cap */
  readonly maxPerOriginator: number;
}

type Key = Array<string | number>;
const rowKey = (id: string): Key => ['A', id];
const byOriginatorKey = (a: AlarmRecord): Key => ['O', a.originator.id, a.createdTime, a.id];
const activeKey = (originatorId: string, type: string): Key => ['U', originatorId, type];

function* prefixed(env: StoreEnv, prefix: Key): Generator<{ key: Key; value: unknown }> {
  if (env.alarms === undefined) return; // a read-only open of a store no daemon of this build has opened
  for (const { key, value } of env.alarms.getRange({ start: prefix })) {
    const k = key as Key;
    for (let i = 0; i < prefix.length; i++) if (k[i] !== prefix[i]) return;
    yield { key: k, value };
  }
}

function removeTx(env: StoreEnv, a: AlarmRecord): void {
  void env.alarms.remove(rowKey(a.id));
  void env.alarms.remove(byOriginatorKey(a));
  if (!a.cleared && env.alarms.get(activeKey(a.originator.id, a.type)) === a.id)
    void env.alarms.remove(activeKey(a.originator.id, a.type));
}

/**
 * Every alarm of an originator, and the progress of its alarm rules (store/alarm-rule-state.ts); inside the write
 * transaction that deletes the entity (store/entities.ts).
 */
export function deleteOriginatorAlarmsTx(env: StoreEnv, originatorId: string): number {
  const ids = [...prefixed(env, ['O', originatorId])].map(({ key }) => String(key[3]));
  for (const id of ids) {
    const a = env.alarms.get(rowKey(id)) as AlarmRecord | undefined;
    if (a !== undefined) removeTx(env, a);
  }
  for (const { key } of [...prefixed(env, ['R', originatorId])]) void env.alarms.remove(key);
  return ids.length;
}

/** The customer an alarm of this originator belongs to (TB's `getCustomerId` of the originator), null for none. */
function customerOf(rec: EntityRecord): string | null {
  const c =
    rec.entityType === 'CUSTOMER'
      ? rec.id
      : rec.entityType === 'DEVICE' || rec.entityType === 'ASSET' || rec.entityType === 'USER'
        ? rec.customerId
        : null;
  return c === null || c === NULL_UUID ? null : c;
}

export class AlarmStore {
  /** newer endTs/details of active alarms re-raised without a change worth a row (see the module comment) */
  private readonly unwritten = new Map<string, { endTs: number; detailsJson: string | undefined }>();

  constructor(
    private readonly env: StoreEnv,
    private readonly entity: (id: string) => EntityRecord | undefined,
    private readonly opts: AlarmStoreOptions = { maxPerOriginator: 0 },
  ) {}

  get(id: string): AlarmRecord | undefined {
    if (this.env.alarms === undefined) return undefined;
    const a = this.env.alarms.get(rowKey(id)) as AlarmRecord | undefined;
    if (a === undefined) this.unwritten.delete(id); // deleted, with its device perhaps
    return this.withUnwritten(a);
  }

  /** An originator's alarms, oldest first. */
  byOriginator(originatorId: string): AlarmRecord[] {
    return this.rows(prefixed(this.env, ['O', originatorId]), (k) => String(k[3]));
  }

  /** Every uncleared alarm, without reading the cleared ones. */
  active(): AlarmRecord[] {
    return this.rows(prefixed(this.env, ['U']), (_k, v) => String(v));
  }

  all(): AlarmRecord[] {
    const out: AlarmRecord[] = [];
    for (const { value } of prefixed(this.env, ['A'])) {
      const a = this.withUnwritten(value as AlarmRecord);
      if (a !== undefined) out.push(a);
    }
    return out;
  }

  /** The uncleared alarm of this originator and type. */
  activeOf(originatorId: string, type: string): AlarmRecord | undefined {
    const id = this.env.alarms?.get(activeKey(originatorId, type));
    return typeof id === 'string' ? this.get(id) : undefined;
  }

  /**
   * TB's create-or-update: the uncleared alarm of this originator and type is updated, else one is created
   * (acknowledged false, cleared false). What a rule engine calls on each true reading: a row is written only
   * when the alarm is new or its severity changes.
   */
  async createOrUpdateActive(
    originator: AlarmOriginator,
    type: string,
    severity: AlarmSeverity,
    details: unknown,
    ts: number,
    o: RaiseOptions = {},
  ): Promise<RaiseResult> {
    const detailsJson = details === undefined || details === null ? undefined : JSON.stringify(details);
    const raiseOnly = o.raiseOnly ?? true;
    const cur = this.activeOf(originator.id, type);
    if (cur !== undefined && o.always !== true) {
      const next = raiseOnly && severityRank(severity) > severityRank(cur.severity) ? cur.severity : severity;
      if (next === cur.severity) {
        const endTs = Math.max(cur.endTs, ts);
        this.unwritten.set(cur.id, { endTs, detailsJson });
        return { alarm: { ...cur, endTs, ...this.detailsOf(detailsJson) }, created: false, written: false };
      }
    }
    const outcome = await this.env.root.transaction(() => {
      const old = this.activeOfTx(originator.id, type);
      if (old !== undefined) {
        const sev = raiseOnly && severityRank(severity) > severityRank(old.severity) ? old.severity : severity;
        const startTs = o.startTs ?? old.startTs;
        const a: AlarmRecord = {
          ...old,
          severity: sev,
          startTs,
          // a rule's readings may come out of order: its endTs never goes back; REST sets it as given
          endTs: o.always === true ? Math.max(ts, startTs) : Math.max(old.endTs, ts),
          ...this.detailsOf(detailsJson),
          ...this.propagationOf(o, old),
        };
        void this.env.alarms.put(rowKey(a.id), a);
        return { alarm: a, created: false };
      }
      const rec = this.entity(originator.id);
      if (rec === undefined || rec.entityType !== originator.entityType)
        throw new OutpostError(
          'ENTITY_NOT_FOUND',
          `${originator.entityType} with id [${originator.id}] is not found (an alarm needs its originator)`,
        );
      const customerId = customerOf(rec);
      if (o.customerId !== undefined && o.customerId !== null && o.customerId !== customerId)
        throw new OutpostError('BAD_PARAM', "Alarm's customer must be the customer of its originator!");
      this.makeRoomTx(originator);
      const now = Date.now();
      const startTs = o.startTs ?? ts;
      const a: AlarmRecord = {
        id: randomUUID(),
        createdTime: now,
        tenantId: rec.tenantId,
        customerId,
        type,
        originator: { entityType: originator.entityType, id: originator.id },
        severity,
        acknowledged: false,
        cleared: false,
        assigneeId: null,
        startTs,
        endTs: Math.max(ts, startTs),
        ackTs: 0,
        clearTs: 0,
        assignTs: 0,
        ...this.detailsOf(detailsJson),
        ...this.propagationOf(o, undefined),
      };
      void this.env.alarms.put(rowKey(a.id), a);
      void this.env.alarms.put(byOriginatorKey(a), 0);
      void this.env.alarms.put(activeKey(originator.id, type), a.id);
      return { alarm: a, created: true };
    });
    await this.env.flushed();
    this.unwritten.delete(outcome.alarm.id);
    return { ...outcome, written: true };
  }

  /** REST's save of an alarm by id: severity, times, details, propagation as given. */
  async update(
    id: string,
    patch: Pick<AlarmRecord, 'severity' | 'startTs' | 'endTs'> & { detailsJson?: string | undefined },
    o: RaiseOptions,
  ): Promise<AlarmRecord> {
    return this.change(id, (a) => ({
      ...a,
      ...patch,
      ...this.detailsOf(patch.detailsJson),
      ...this.propagationOf(o, a),
    }));
  }

  /** TB's acknowledge_alarm: sets the flag and its ts once; undefined when it was already acknowledged. */
  ack(id: string, ts: number): Promise<AlarmRecord | undefined> {
    return this.changeIf(id, (a) => (a.acknowledged ? undefined : { ...a, acknowledged: true, ackTs: ts }));
  }

  /** TB's clear_alarm: sets the flag and its ts once, may replace `details`; undefined when already cleared. */
  clear(id: string, ts: number, details?: unknown): Promise<AlarmRecord | undefined> {
    return this.changeIf(id, (a) =>
      a.cleared
        ? undefined
        : {
            ...a,
            cleared: true,
            clearTs: ts,
            ...(details === undefined ? {} : this.detailsOf(details === null ? undefined : JSON.stringify(details))),
          },
    );
  }

  /** Assigns (userId) or unassigns (null); undefined when it already was. */
  assign(id: string, userId: string | null, ts: number): Promise<AlarmRecord | undefined> {
    return this.changeIf(id, (a) => (a.assigneeId === userId ? undefined : { ...a, assigneeId: userId, assignTs: ts }));
  }

  /** Unassigns every alarm of a user that is deleted (TB's unassignDeletedUserAlarms). */
  async unassignUser(userId: string, ts: number): Promise<void> {
    const mine = this.all().filter((a) => a.assigneeId === userId);
    for (const a of mine) await this.assign(a.id, null, ts);
  }

  async delete(id: string): Promise<boolean> {
    const gone = await this.env.root.transaction(() => {
      const a = this.env.alarms.get(rowKey(id)) as AlarmRecord | undefined;
      if (a !== undefined) removeTx(this.env, a);
      return a !== undefined;
    });
    await this.env.flushed();
    this.unwritten.delete(id);
    return gone;
  }

  /** Uncleared alarms by severity: `outpost status`, `/metrics`. */
  activeBySeverity(): Record<AlarmSeverity, number> {
    const out = { CRITICAL: 0, MAJOR: 0, MINOR: 0, WARNING: 0, INDETERMINATE: 0 };
    for (const a of this.active()) out[a.severity]++;
    return out;
  }

  private async changeIf(
    id: string,
    fn: (a: AlarmRecord) => AlarmRecord | undefined,
  ): Promise<AlarmRecord | undefined> {
    const cur = this.get(id);
    if (cur === undefined) throw notFound(id);
    if (fn(cur) === undefined) return undefined;
    return this.change(id, (a) => fn(a) ?? a);
  }

  private async change(id: string, fn: (a: AlarmRecord) => AlarmRecord): Promise<AlarmRecord> {
    const a = await this.env.root.transaction(() => {
      const old = this.withUnwritten(this.env.alarms.get(rowKey(id)) as AlarmRecord | undefined);
      if (old === undefined) throw notFound(id);
      const next = fn(old);
      void this.env.alarms.put(rowKey(id), next);
      if (next.cleared && !old.cleared && this.env.alarms.get(activeKey(old.originator.id, old.type)) === id)
        void this.env.alarms.remove(activeKey(old.originator.id, old.type));
      return next;
    });
    await this.env.flushed();
    this.unwritten.delete(id);
    return a;
  }

  private activeOfTx(originatorId: string, type: string): AlarmRecord | undefined {
    const id = this.env.alarms.get(activeKey(originatorId, type));
    return typeof id === 'string'
      ? this.withUnwritten(this.env.alarms.get(rowKey(id)) as AlarmRecord | undefined)
      : undefined;
  }

  /**
   * At the cap, the originator's oldest cleared alarms go to make room for a new one; when every one is
   * uncleared the new one is refused (docs/configuration.md "Alarms").
   */
  private makeRoomTx(originator: AlarmOriginator): void {
    const max = this.opts.maxPerOriginator;
    if (max <= 0) return;
    const ids = [...prefixed(this.env, ['O', originator.id])].map(({ key }) => String(key[3]));
    let excess = ids.length - max + 1;
    for (const id of ids) {
      if (excess <= 0) return;
      const a = this.env.alarms.get(rowKey(id)) as AlarmRecord | undefined;
      if (a === undefined || !a.cleared) continue;
      removeTx(this.env, a);
      this.unwritten.delete(a.id);
      excess--;
    }
    if (excess > 0)
      throw new OutpostError(
        'BAD_PARAM',
        `${originator.entityType} [${originator.id}] has ${ids.length} uncleared alarms, the most alarms.maxPerDevice allows: clear one first`,
      );
  }

  private detailsOf(detailsJson: string | undefined): { detailsJson?: string } {
    return detailsJson === undefined ? {} : { detailsJson };
  }

  private propagationOf(o: RaiseOptions, old: AlarmRecord | undefined) {
    return {
      propagate: o.propagate ?? old?.propagate ?? false,
      propagateToOwner: o.propagateToOwner ?? old?.propagateToOwner ?? false,
      propagateToTenant: o.propagateToTenant ?? old?.propagateToTenant ?? false,
      propagateRelationTypes: o.propagateRelationTypes ?? old?.propagateRelationTypes ?? [],
    };
  }

  /** the row with what a re-raise left in memory; forgotten once the alarm is cleared (by any process) */
  private withUnwritten(a: AlarmRecord | undefined): AlarmRecord | undefined {
    if (a === undefined) return undefined;
    const u = this.unwritten.get(a.id);
    if (u === undefined) return a;
    if (a.cleared) {
      this.unwritten.delete(a.id);
      return a;
    }
    return { ...a, endTs: Math.max(a.endTs, u.endTs), ...this.detailsOf(u.detailsJson) };
  }

  private rows(entries: Iterable<{ key: Key; value: unknown }>, idOf: (k: Key, v: unknown) => string): AlarmRecord[] {
    const out: AlarmRecord[] = [];
    for (const { key, value } of entries) {
      const a = this.get(idOf(key, value));
      if (a !== undefined) out.push(a);
    }
    return out;
  }
}

export function notFound(id: string): OutpostError {
  return new OutpostError('ENTITY_NOT_FOUND', `Alarm with id [${id}] is not found`);
}
