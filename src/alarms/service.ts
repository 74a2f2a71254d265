/**
 * Alarm rules at work (docs/api.md "Alarm rules"): listens on the bus for a device's committed telemetry and
 * attribute writes and its activity changes, keeps the latest values its profile's rules read, runs them
 * (src/alarms/rules/evaluate.ts) and creates, raises and clears alarms through the alarm store.
 *
 * - Cheap on the write path: a device whose profile has no rules costs two cached entity lookups per event; a
 *   profile's rules are parsed once (per change of its `profileData.alarms`); a reading without a rule's keys
 *   runs nothing.
 * - Writes: an alarm row when it is created, changes severity or clears (the store keeps a re-raise's `endTs` in
 *   memory); the rules' progress when a DURATION starts, a REPEATING counts towards its threshold, or either
 *   resets (store/alarm-rule-state.ts), so it survives a restart and a power cut.
 * - Memory: per device of a profile with rules, its rules' keys' latest values and one progress per rule.
 */
import type { AttributeScope, AttributesEvent, DeviceStateEvent, EventBus, TelemetryEvent } from '../bus/index.js';
import type { KvValue } from '../model/kv.js';
import type { AlarmRecord, AlarmStore } from '../store/alarms.js';
import type { AlarmRuleStateStore, RuleStateRecord } from '../store/alarm-rule-state.js';
import type { AttributeStore } from '../store/attributes.js';
import type { DeviceRecord, EntityStore } from '../store/entities.js';
import type { DeviceProfileRecord } from '../store/profile-records.js';
import type { TimeseriesStore } from '../store/series/interface.js';
import type { EpochMs } from '../types.js';
import {
  type AlarmProgress,
  type CompiledAlarm,
  type CompiledProfile,
  type RuleProgress,
  compileProfile,
  evaluateAlarm,
  forgetAlarm,
  newProgress,
  progressForm,
} from './rules/evaluate.js';
import { parseProfileAlarms } from './rules/model.js';
import { slotOf } from './rules/predicates.js';

/** ms; ThingsBoard's fixed check of DURATION rules held without a new reading */
export const DURATION_CHECK_MS = 60_000;
/** ms; the least time between two log lines of the same kind */
const LOG_EVERY_MS = 60_000;

export interface AlarmRuleOptions {
  /** progress records kept at most (config `alarms.maxPendingRuleStates`; 0 = no cap) */
  readonly maxPending: number;
  readonly now: () => EpochMs;
  readonly log: (msg: string) => void;
}

interface AlarmSlot {
  readonly progress: AlarmProgress;
  /** the uncleared alarm as last known: its id once created (undefined while the create is being written) */
  current: { id: string | undefined; severity: AlarmRecord['severity']; details: unknown } | undefined;
}

interface DeviceRules {
  readonly profileId: string;
  readonly compiled: CompiledProfile;
  readonly values: Map<string, KvValue>;
  /** ms; the ts of the last reading */
  ts: number;
  readonly alarms: Map<string, AlarmSlot>;
  /** the device's alarm writes, in order */
  chain: Promise<void>;
}

const NO_RULES: CompiledProfile = compileProfile([]);
const READ_SCOPES: readonly AttributeScope[] = ['CLIENT_SCOPE', 'SHARED_SCOPE', 'SERVER_SCOPE'];
const ACTIVE_SLOT = slotOf('ATTRIBUTE', 'active');

export class AlarmRuleService {
  private readonly devices = new Map<string, DeviceRules>();
  /** parsed rules by profile record (records are replaced when anything changes) and by profile id and text */
  private readonly byRecord = new WeakMap<DeviceProfileRecord, CompiledProfile>();
  private readonly byProfile = new Map<string, { text: string; compiled: CompiledProfile }>();
  private readonly off: Array<() => void> = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly lastLog = new Map<string, number>();
  private stopped = false;

  constructor(
    private readonly entities: Pick<EntityStore, 'device' | 'get' | 'list'>,
    private readonly attributes: Pick<AttributeStore, 'get'>,
    private readonly timeseries: Pick<TimeseriesStore, 'latest'>,
    private readonly alarms: AlarmStore,
    private readonly states: AlarmRuleStateStore,
    private readonly bus: EventBus,
    private readonly o: AlarmRuleOptions,
  ) {}

  start(): void {
    this.stopped = false;
    this.off.push(
      this.bus.on('telemetry', (ev) => this.onTelemetry(ev)),
      this.bus.on('attributes', (ev) => this.onAttributes(ev)),
      this.bus.on('deviceState', (ev) => this.onState(ev)),
      this.bus.on('entityDeleted', (ev) => {
        if (ev.entityType !== 'DEVICE') return;
        this.devices.delete(ev.entityId);
        this.states.deviceDeleted();
      }),
    );
    // devices with progress are loaded now, not at their next event: a silent one's DURATION still escalates
    for (const id of this.states.devices()) this.rulesOf(id);
    this.timer = setInterval(() => this.check(), DURATION_CHECK_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const off of this.off.splice(0)) off();
    clearInterval(this.timer);
    await Promise.all([...this.devices.values()].map((d) => d.chain));
    await this.states.settled();
  }

  /** devices with rules in memory; progress records stored; their writes not yet flushed */
  stats(): { devices: number; pending: number; unflushed: number } {
    return { devices: this.devices.size, pending: this.states.count(), unflushed: this.states.unflushed() };
  }

  /** The minute check: DURATION rules held without a new reading. */
  check(): void {
    const now = this.o.now();
    for (const [id, d] of this.devices) if (d.compiled.timed) this.evaluate(id, d, d.ts, null, now);
  }

  // ---- inputs ----------------------------------------------------------------------------------

  private onTelemetry(ev: TelemetryEvent): void {
    if (ev.entityType !== 'DEVICE' || this.stopped) return;
    const d = this.rulesOf(ev.entityId);
    if (d === undefined || d.compiled.timeseries.size === 0) return;
    const keys = d.compiled.timeseries;
    // the common post: one point per key, one ts: one evaluation, no sorting
    let single = -1;
    let many = false;
    for (const [key, col] of ev.series) {
      if (!keys.has(key) || col.length === 0) continue;
      const ts = col.ts[0] as number;
      if (col.length > 1 || (single >= 0 && ts !== single)) many = true;
      single = ts;
    }
    if (single < 0) return;
    const now = this.o.now();
    const stamps = many ? distinctTs(ev, keys) : [single];
    for (const ts of stamps) {
      const updated = new Set<string>();
      for (const [key, col] of ev.series) {
        const slot = keys.get(key);
        if (slot === undefined) continue;
        // the last point posted at this ts wins
        for (let i = col.length - 1; i >= 0; i--) {
          if (col.ts[i] !== ts) continue;
          const v = col.value(i);
          const old = d.values.get(slot);
          d.values.set(slot, v);
          // TB: an update counts when the value changed or the snapshot's ts did
          if (ts !== d.ts || old === undefined || old.type !== v.type || old.v !== v.v) updated.add(slot);
          break;
        }
      }
      d.ts = ts;
      if (updated.size > 0) this.evaluate(ev.entityId, d, ts, updated, now);
    }
  }

  private onAttributes(ev: AttributesEvent): void {
    if (ev.entityType !== 'DEVICE' || this.stopped) return;
    const d = this.rulesOf(ev.entityId);
    if (d === undefined || d.compiled.attributes.size === 0) return;
    const names = d.compiled.attributes;
    let updated: Set<string> | undefined;
    for (const [key, v] of ev.updated) {
      if (!names.has(key)) continue;
      const slot = slotOf('ATTRIBUTE', key);
      // the state service owns `active` and says each change first as a deviceState event; its write commits
      // later, possibly after a newer change, so its event would replay a stale value
      if (slot === ACTIVE_SLOT && ev.scope === 'SERVER_SCOPE') continue;
      d.values.set(slot, v);
      (updated ??= new Set()).add(slot);
    }
    for (const key of ev.deleted) {
      if (!names.has(key)) continue;
      const slot = slotOf('ATTRIBUTE', key);
      if (d.values.delete(slot)) (updated ??= new Set()).add(slot);
    }
    if (updated === undefined) return;
    const now = this.o.now();
    d.ts = now;
    this.evaluate(ev.entityId, d, now, updated, now);
  }

  private onState(ev: DeviceStateEvent): void {
    if ((ev.kind !== 'ACTIVITY' && ev.kind !== 'INACTIVITY') || this.stopped) return;
    const d = this.rulesOf(ev.deviceId);
    if (d === undefined || !d.compiled.attributes.has('active')) return;
    d.values.set(ACTIVE_SLOT, { type: 'BOOLEAN', v: ev.active });
    d.ts = ev.ts;
    this.evaluate(ev.deviceId, d, ev.ts, new Set([ACTIVE_SLOT]), this.o.now());
  }

  // ---- evaluation --------------------------------------------------------------------------------

  private evaluate(
    deviceId: string,
    d: DeviceRules,
    ts: number,
    updated: ReadonlySet<string> | null,
    now: number,
  ): void {
    for (const a of d.compiled.alarms) {
      const slot = d.alarms.get(a.def.id);
      if (slot === undefined) continue;
      try {
        this.evaluateOne(deviceId, d, a, slot, ts, updated, now);
      } catch (err) {
        // one alarm's failure (a store read) leaves the device's other alarms and the write that published alone
        this.logOnce('eval', `alarm rules: "${a.def.alarmType}" on device ${deviceId}: ${(err as Error).message}`);
      }
    }
  }

  private evaluateOne(
    deviceId: string,
    d: DeviceRules,
    a: CompiledAlarm,
    slot: AlarmSlot,
    ts: number,
    updated: ReadonlySet<string> | null,
    now: number,
  ): void {
    this.verifyCurrent(deviceId, a, slot, d);
    const cur = slot.current;
    const canStart =
      this.o.maxPending <= 0 || this.states.count() < this.o.maxPending || this.states.has(deviceId, a.def.id);
    const ev = evaluateAlarm(a, slot.progress, {
      values: d.values,
      ts,
      updated,
      current: cur,
      now,
      canStart,
    });
    if (ev.startRefused)
      this.logOnce(
        'cap',
        `alarm rules: alarms.maxPendingRuleStates (${this.o.maxPending}) reached; DURATION and REPEATING rules of further devices do not start`,
      );
    if (ev.progressChanged) this.persist(deviceId, d, a, slot);
    const out = ev.outcome;
    if (out.kind === 'raise') this.raise(deviceId, d, a, slot, out.severity, out.details, out.startTs, now);
    else if (out.kind === 'clear') this.clear(deviceId, d, a, slot, out.details, now);
  }

  /** A user cleared or deleted the alarm: the rules start over (TB forgets it). */
  private verifyCurrent(deviceId: string, a: CompiledAlarm, slot: AlarmSlot, d: DeviceRules): void {
    const id = slot.current?.id;
    if (id === undefined) return;
    const found = this.alarms.activeOf(deviceId, a.def.alarmType);
    if (found?.id === id) return;
    slot.current = found === undefined ? undefined : currentOf(found);
    if (forgetAlarm(a, slot.progress, d.values)) this.persist(deviceId, d, a, slot);
  }

  private raise(
    deviceId: string,
    d: DeviceRules,
    a: CompiledAlarm,
    slot: AlarmSlot,
    severity: AlarmRecord['severity'],
    details: unknown,
    startTs: number,
    now: number,
  ): void {
    const cur = slot.current;
    const newer = cur === undefined || rank(severity) < rank(cur.severity);
    if (cur !== undefined && !newer) {
      // the same or a lower severity: the store keeps the newer endTs/details in memory, no row
      if (cur.id !== undefined)
        this.enqueue(d, async () => {
          await this.alarms.createOrUpdateActive(
            { entityType: 'DEVICE', id: deviceId },
            a.def.alarmType,
            cur.severity,
            details ?? cur.details,
            now,
          );
        });
      if (details !== undefined) cur.details = details;
      return;
    }
    const next = { id: cur?.id, severity, details: details ?? cur?.details ?? {} };
    slot.current = next;
    const def = a.def;
    this.enqueue(d, async () => {
      try {
        const r = await this.alarms.createOrUpdateActive(
          { entityType: 'DEVICE', id: deviceId },
          def.alarmType,
          severity,
          next.details,
          cur === undefined ? startTs : now,
          {
            ...(cur === undefined ? { startTs } : {}),
            propagate: def.propagate,
            propagateToOwner: def.propagateToOwner,
            propagateToTenant: def.propagateToTenant,
            propagateRelationTypes: def.propagateRelationTypes,
          },
        );
        if (slot.current === next) next.id = r.alarm.id;
      } catch (err) {
        if (slot.current === next) slot.current = cur;
        this.logOnce(
          'raise',
          `alarm rules: raising "${def.alarmType}" on device ${deviceId}: ${(err as Error).message}`,
        );
      }
    });
  }

  private clear(
    deviceId: string,
    d: DeviceRules,
    a: CompiledAlarm,
    slot: AlarmSlot,
    details: unknown,
    now: number,
  ): void {
    const cur = slot.current;
    slot.current = undefined;
    if (cur === undefined) return;
    this.enqueue(d, async () => {
      // the create this follows has been written by now: its id is known, or it failed
      const id = cur.id ?? this.alarms.activeOf(deviceId, a.def.alarmType)?.id;
      if (id === undefined) return;
      try {
        await this.alarms.clear(id, now, details);
      } catch (err) {
        this.logOnce(
          'clear',
          `alarm rules: clearing "${a.def.alarmType}" on device ${deviceId}: ${(err as Error).message}`,
        );
      }
    });
  }

  private enqueue(d: DeviceRules, op: () => Promise<void>): void {
    d.chain = d.chain.then(op).catch((err: unknown) => this.logOnce('write', `alarm rules: ${(err as Error).message}`));
  }

  private persist(deviceId: string, d: DeviceRules, a: CompiledAlarm, slot: AlarmSlot): void {
    const create: Record<string, number> = {};
    let any = false;
    a.create.forEach((c, i) => {
      const f = progressForm(c.rule.rule, slot.progress.create[i] as RuleProgress, d.values);
      if (f !== 0) {
        create[c.severity] = f;
        any = true;
      }
    });
    const clear = a.clear === null ? 0 : progressForm(a.clear.rule, slot.progress.clear, d.values);
    const rec: RuleStateRecord | undefined = any || clear !== 0 ? { profileId: d.profileId, create, clear } : undefined;
    if (rec === undefined && !this.states.has(deviceId, a.def.id)) return;
    this.states.put(deviceId, a.def.id, rec);
  }

  // ---- devices and profiles --------------------------------------------------------------------

  /** The device's rules and values; undefined when its profile has none (nothing kept for it). */
  private rulesOf(deviceId: string): DeviceRules | undefined {
    const dev = this.entities.device(deviceId);
    if (dev === undefined) return undefined;
    const prof = this.entities.get(dev.deviceProfileId);
    const compiled = prof?.entityType === 'DEVICE_PROFILE' ? this.compiledOf(prof) : NO_RULES;
    const d = this.devices.get(deviceId);
    if (compiled === NO_RULES) {
      if (d !== undefined) this.devices.delete(deviceId);
      return undefined;
    }
    if (d !== undefined && d.compiled === compiled) return d;
    const fresh = this.load(dev, dev.deviceProfileId, compiled, d);
    this.devices.set(deviceId, fresh);
    return fresh;
  }

  private compiledOf(p: DeviceProfileRecord): CompiledProfile {
    const hit = this.byRecord.get(p);
    if (hit !== undefined) return hit;
    // a record from before profiles carried profileData has none
    const raw = p.profileData?.['alarms'];
    const text = raw === undefined || raw === null ? '' : JSON.stringify(raw);
    const known = this.byProfile.get(p.id);
    let compiled: CompiledProfile;
    if (known !== undefined && known.text === text) compiled = known.compiled;
    else {
      const parsed = text === '' ? undefined : parseProfileAlarms(raw);
      if (parsed !== undefined && !parsed.ok)
        this.logOnce(`profile ${p.id}`, `alarm rules of profile "${p.name}" not evaluated: ${parsed.error}`);
      compiled = parsed?.ok === true && parsed.alarms.length > 0 ? compileProfile(parsed.alarms) : NO_RULES;
      this.byProfile.set(p.id, { text, compiled });
    }
    this.byRecord.set(p, compiled);
    return compiled;
  }

  /**
   * A device's snapshot as TB's first message fetches it: the latest telemetry of the rules' keys, their attributes
   * (client, then shared, then server: the later scope wins), the entity fields; progress from the store when made
   * under the same profile (else discarded); the uncleared alarms re-read, so none is created twice.
   */
  private load(
    dev: DeviceRecord,
    profileId: string,
    compiled: CompiledProfile,
    prev: DeviceRules | undefined,
  ): DeviceRules {
    const values = new Map<string, KvValue>();
    if (compiled.timeseries.size > 0)
      for (const [k, p] of this.timeseries.latest(dev.id, [...compiled.timeseries.keys()]))
        values.set(slotOf('TIME_SERIES', k), p.value);
    if (compiled.attributes.size > 0) {
      const names = [...compiled.attributes];
      for (const scope of READ_SCOPES)
        for (const a of this.attributes.get(dev.id, scope, names)) values.set(slotOf('ATTRIBUTE', a.key), a.value);
    }
    for (const f of compiled.entityFields) {
      const v = entityField(dev, f);
      if (v !== undefined) values.set(slotOf('ENTITY_FIELD', f), v);
    }
    const stored = this.states.load(dev.id);
    const alarms = new Map<string, AlarmSlot>();
    for (const a of compiled.alarms) {
      const kept = prev?.profileId === profileId ? prev.alarms.get(a.def.id) : undefined;
      const progress = newProgress(a);
      const rec = stored.get(a.def.id);
      if (kept !== undefined)
        copyProgress(
          a,
          kept.progress,
          progress,
          prev?.compiled.alarms.find((x) => x.def.id === a.def.id),
        );
      else if (rec !== undefined && rec.profileId === profileId) restore(a, rec, progress);
      const found = this.alarms.activeOf(dev.id, a.def.alarmType);
      alarms.set(a.def.id, { progress, current: found === undefined ? undefined : currentOf(found) });
    }
    // progress of alarms the profile no longer has, or of another profile
    for (const [id, rec] of stored)
      if (rec.profileId !== profileId || !alarms.has(id)) this.states.put(dev.id, id, undefined);
    return { profileId, compiled, values, ts: prev?.ts ?? 0, alarms, chain: prev?.chain ?? Promise.resolve() };
  }

  private logOnce(kind: string, msg: string): void {
    const now = Date.now();
    if (now - (this.lastLog.get(kind) ?? -Infinity) < LOG_EVERY_MS) return;
    this.lastLog.set(kind, now);
    this.o.log(msg);
  }
}

const SEVERITY_RANK = ['CRITICAL', 'MAJOR', 'MINOR', 'WARNING', 'INDETERMINATE'];
const rank = (s: string): number => SEVERITY_RANK.indexOf(s);

function currentOf(a: AlarmRecord): NonNullable<AlarmSlot['current']> {
  let details: unknown = {};
  try {
    details = a.detailsJson === undefined ? {} : JSON.parse(a.detailsJson);
  } catch {
    /* details as written by another build: kept as none */
  }
  return { id: a.id, severity: a.severity, details };
}

function distinctTs(ev: TelemetryEvent, keys: ReadonlyMap<string, string>): number[] {
  const all = new Set<number>();
  for (const [key, col] of ev.series) if (keys.has(key)) for (const ts of col.ts) all.add(ts);
  return [...all].sort((a, b) => a - b);
}

/** TB's ENTITY_FIELD keys of a device */
function entityField(d: DeviceRecord, f: string): KvValue | undefined {
  switch (f) {
    case 'name':
      return { type: 'STRING', v: d.name };
    case 'type':
      return { type: 'STRING', v: d.type };
    case 'label':
      return d.label ? { type: 'STRING', v: d.label } : undefined;
    case 'createdTime':
      return { type: 'LONG', v: d.createdTime };
    default:
      return undefined;
  }
}

/** A stored record back into progress: DURATION held since `form` (duration 0 from there), REPEATING `form` counts. */
function restore(a: CompiledAlarm, rec: RuleStateRecord, p: AlarmProgress): void {
  const put = (rule: CompiledAlarm['create'][number]['rule'], rp: RuleProgress, form: number | undefined): void => {
    if (form === undefined || form === 0) return;
    if (rule.rule.spec.type === 'DURATION') rp.lastEventTs = form;
    else if (rule.rule.spec.type === 'REPEATING') rp.eventCount = form;
  };
  a.create.forEach((c, i) => {
    put(c.rule, p.create[i] as RuleProgress, rec.create[c.severity]);
  });
  if (a.clear !== null) put(a.clear, p.clear, rec.clear);
}

/** A profile update keeps the progress of the rules of an alarm it keeps, by severity. */
function copyProgress(a: CompiledAlarm, from: AlarmProgress, to: AlarmProgress, old: CompiledAlarm | undefined): void {
  if (old === undefined) return;
  a.create.forEach((c, i) => {
    const j = old.create.findIndex((x) => x.severity === c.severity);
    const src = j >= 0 ? from.create[j] : undefined;
    if (src !== undefined) Object.assign(to.create[i] as RuleProgress, src);
  });
  Object.assign(to.clear, from.clear);
}
