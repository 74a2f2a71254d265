/**
 * Device connectivity state, as ThingsBoard's device state service (docs/api.md "Device state"): the SERVER_SCOPE
 * attributes `active`, `lastConnectTime`, `lastDisconnectTime`, `lastActivityTime` and `inactivityAlarmTime` (ms),
 * and the per-device `inactivityTimeout` (ms) users write. This is their one owner: the transports only say
 * `activity`, `connected` and `disconnected` (src/transports/).
 *
 * - A device is inactive when `now >= lastActivityTime + timeout` at a check (every `state.checkIntervalMs`); it
 *   is reported once, when `inactivityAlarmTime` is older than its last activity and it was created at least a
 *   timeout ago: a device never heard from is reported a timeout after its creation. A disconnect does not make
 *   a device inactive. Its next activity makes it active at once.
 * - `active` and `inactivityAlarmTime` are written when they change (rarely). `lastActivityTime`,
 *   `lastConnectTime` and `lastDisconnectTime` live in memory (reads see them at once through `StateAttributes`,
 *   websocket subscribers within REPORT_MS) and go to disk together, every device in one transaction, at most
 *   PERSIST_MS after they changed: a device posting every second costs no write of its own (docs/write-budget.md).
 * - Each change is also a `deviceState` bus event, for what follows activity (alarm rules).
 *
 * Memory: one small record per device.
 */
import type { AttributeScope, DeviceStateKind, EventBus } from '../bus/index.js';
import type { KvValue } from '../model/kv.js';
import type { AttributeKv, AttributeStore } from '../store/attributes.js';
import type { EntityStore } from '../store/entities.js';
import type { EpochMs } from '../types.js';

export const ACTIVE_KEY = 'active';
export const LAST_CONNECT_KEY = 'lastConnectTime';
export const LAST_DISCONNECT_KEY = 'lastDisconnectTime';
export const LAST_ACTIVITY_KEY = 'lastActivityTime';
export const INACTIVITY_ALARM_KEY = 'inactivityAlarmTime';
export const INACTIVITY_TIMEOUT_KEY = 'inactivityTimeout';

/** ms; the longest a lazily kept time waits for its write (a power cut loses at most this much of it) */
export const PERSIST_MS = 4 * 60_000;
/** ms; the longest a websocket subscriber waits to see a lazily kept time change (TB reports every 3 s) */
export const REPORT_MS = 1_000;

/** the times kept in memory and written lazily, as bits of `DeviceState.dirty` */
const LAZY = [LAST_ACTIVITY_KEY, LAST_CONNECT_KEY, LAST_DISCONNECT_KEY] as const;
type LazyKey = (typeof LAZY)[number];
const BIT: Record<LazyKey, number> = { lastActivityTime: 1, lastConnectTime: 2, lastDisconnectTime: 4 };
const STATE_KEYS = [ACTIVE_KEY, INACTIVITY_ALARM_KEY, INACTIVITY_TIMEOUT_KEY, ...LAZY];

interface DeviceState {
  active: boolean;
  lastActivityTime: EpochMs;
  lastConnectTime: EpochMs;
  lastDisconnectTime: EpochMs;
  inactivityAlarmTime: EpochMs;
  /** ms; 0 = the configured default */
  inactivityTimeout: number;
  /** `active` is on disk (a new device's is written at its first check or activity, whichever comes first) */
  recorded: boolean;
  /** writes of `active`/`inactivityAlarmTime` not yet committed, and the time of the last */
  stateWrites: number;
  stateTs: EpochMs;
  readonly createdTime: EpochMs;
  /** open sessions (MQTT connections, CoAP observations, gateway sub-sessions) */
  sessions: number;
  /** lazy keys changed and not yet handed to a write */
  dirty: number;
  /** lazy keys handed to a write not yet committed (reads still take them from memory) */
  writing: number;
  /** lazy keys changed since the last websocket report */
  unreported: number;
}

export interface DeviceStateOptions {
  /** ms; state.inactivityTimeoutMs */
  readonly inactivityTimeoutMs: number;
  /** ms; state.checkIntervalMs */
  readonly checkIntervalMs: number;
  readonly now: () => EpochMs;
  readonly log: (msg: string) => void;
}

const long = (v: number): KvValue => ({ type: 'LONG', v });

function asMs(v: KvValue | undefined): number {
  if (v === undefined) return 0;
  if (v.type === 'LONG') return Number(v.v);
  return 0;
}

/** TB parses `inactivityTimeout` as a long from its text: `3000.0` or `"x"` means the default */
export function parseTimeout(v: KvValue | undefined): number {
  if (v === undefined) return 0;
  const text = v.type === 'LONG' ? String(v.v) : v.type === 'STRING' ? v.v.trim() : '';
  if (!/^\d{1,15}$/.test(text)) return 0;
  return Number(text);
}

export class DeviceStateService {
  private readonly records = new Map<string, DeviceState>();
  /** devices with dirty lazy keys */
  private readonly unsaved = new Set<string>();
  private readonly unreported = new Set<string>();
  private persistTimer: NodeJS.Timeout | undefined;
  private reportTimer: NodeJS.Timeout | undefined;
  private checkTimer: NodeJS.Timeout | undefined;
  private readonly writes = new Set<Promise<void>>();
  private readonly off: Array<() => void> = [];
  private stopped = false;

  constructor(
    private readonly entities: Pick<EntityStore, 'device' | 'list'>,
    /** the store itself, not StateAttributes: writes go the normal way (bus events, websocket) */
    private readonly store: AttributeStore,
    private readonly bus: EventBus,
    private readonly o: DeviceStateOptions,
  ) {
    this.off.push(
      bus.on('attributes', (ev) => {
        if (ev.entityType !== 'DEVICE' || ev.scope !== 'SERVER_SCOPE') return;
        const set = ev.updated.find(([k]) => k === INACTIVITY_TIMEOUT_KEY);
        if (set !== undefined) this.timeoutChanged(ev.entityId, parseTimeout(set[1]));
        else if (ev.deleted.includes(INACTIVITY_TIMEOUT_KEY)) this.timeoutChanged(ev.entityId, 0);
      }),
      bus.on('entityDeleted', (ev) => {
        if (ev.entityType !== 'DEVICE') return;
        this.records.delete(ev.entityId);
        this.unsaved.delete(ev.entityId);
        this.unreported.delete(ev.entityId);
      }),
    );
  }

  /** Loads every device's state and starts the checks. */
  start(): void {
    this.check();
    this.checkTimer = setInterval(() => this.check(), this.o.checkIntervalMs);
    this.checkTimer.unref();
  }

  /** Any uplink of the device (a post, a request, an MQTT packet incl. PINGREQ, a gateway's message for it). */
  activity(deviceId: string): void {
    const r = this.records.get(deviceId) ?? this.load(deviceId);
    if (r === undefined) return;
    const t = this.o.now();
    if (t <= r.lastActivityTime) return;
    r.lastActivityTime = t;
    if (!r.active) this.becomeActive(deviceId, r, t);
    else this.touch(deviceId, r, 'lastActivityTime');
  }

  /** A session of the device opened; the first one open sets `lastConnectTime` (an open is activity too). */
  connected(deviceId: string): void {
    const r = this.records.get(deviceId) ?? this.load(deviceId);
    if (r === undefined) return;
    r.sessions++;
    if (r.sessions === 1) {
      r.lastConnectTime = this.o.now();
      this.touch(deviceId, r, 'lastConnectTime');
      this.event(deviceId, 'CONNECT', r.lastConnectTime, r.active);
    }
    this.activity(deviceId);
  }

  /** A session of the device closed; the last one closing sets `lastDisconnectTime`. */
  disconnected(deviceId: string): void {
    const r = this.records.get(deviceId);
    if (r === undefined || r.sessions === 0) return;
    r.sessions--;
    if (r.sessions > 0) return;
    r.lastDisconnectTime = this.o.now();
    this.touch(deviceId, r, 'lastDisconnectTime');
    this.event(deviceId, 'DISCONNECT', r.lastDisconnectTime, r.active);
  }

  /** devices known and how many of them are active */
  counts(): { devices: number; active: number } {
    let active = 0;
    for (const r of this.records.values()) if (r.active) active++;
    return { devices: this.records.size, active };
  }

  /**
   * What memory holds of a device's state and the disk does not yet, for reads (StateAttributes): the lazily kept
   * times, and `active`/`inactivityAlarmTime` while their write is being committed.
   */
  unwritten(deviceId: string): AttributeKv[] {
    const r = this.records.get(deviceId);
    if (r === undefined) return [];
    const out: AttributeKv[] = [];
    if (r.stateWrites > 0) {
      out.push({
        scope: 'SERVER_SCOPE',
        key: ACTIVE_KEY,
        lastUpdateTs: r.stateTs,
        value: { type: 'BOOLEAN', v: r.active },
      });
      if (r.inactivityAlarmTime > 0)
        out.push({
          scope: 'SERVER_SCOPE',
          key: INACTIVITY_ALARM_KEY,
          lastUpdateTs: r.inactivityAlarmTime,
          value: long(r.inactivityAlarmTime),
        });
    }
    const bits = r.dirty | r.writing;
    for (const k of LAZY)
      if ((bits & BIT[k]) !== 0) out.push({ scope: 'SERVER_SCOPE', key: k, lastUpdateTs: r[k], value: long(r[k]) });
    return out;
  }

  /** Stops the timers and writes what memory holds; resolves once on disk. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const off of this.off) off();
    clearInterval(this.checkTimer);
    clearTimeout(this.persistTimer);
    clearTimeout(this.reportTimer);
    this.persist();
    await Promise.all([...this.writes]);
  }

  // ---- the checks ----------------------------------------------------------------------------

  /** Finds devices created since the last check, and reports those gone inactive. */
  check(): void {
    if (this.stopped) return;
    const t = this.o.now();
    // a scan of the entities each check is cheap at gateway scale; devices created between checks are found here
    for (const d of this.entities.list('DEVICE')) if (!this.records.has(d.id)) this.load(d.id);
    for (const [id, r] of this.records) this.checkOne(id, r, t);
  }

  private timeoutOf(r: DeviceState): number {
    return r.inactivityTimeout > 0 ? r.inactivityTimeout : this.o.inactivityTimeoutMs;
  }

  private checkOne(id: string, r: DeviceState, t: EpochMs): void {
    const timeout = this.timeoutOf(r);
    const expired = t >= r.lastActivityTime + timeout;
    const report =
      expired &&
      (r.inactivityAlarmTime === 0 || r.inactivityAlarmTime <= r.lastActivityTime) &&
      r.createdTime + timeout <= t;
    const entries: Array<[string, KvValue]> = [];
    if (expired && (report || r.active)) {
      if (report) {
        r.inactivityAlarmTime = t;
        entries.push([INACTIVITY_ALARM_KEY, long(t)]);
      }
      if (r.active || !r.recorded) entries.push([ACTIVE_KEY, { type: 'BOOLEAN', v: false }]);
      r.active = false;
    } else if (!r.recorded) entries.push([ACTIVE_KEY, { type: 'BOOLEAN', v: r.active }]);
    r.recorded = true;
    if (entries.length > 0) this.write(id, r, entries, t);
    if (report) this.event(id, 'INACTIVITY', t, false);
  }

  private timeoutChanged(id: string, timeout: number): void {
    const r = this.records.get(id) ?? this.load(id);
    if (r === undefined || r.inactivityTimeout === timeout) return;
    r.inactivityTimeout = timeout;
    // applied at once, both ways, as ThingsBoard
    const t = this.o.now();
    if (!r.active && r.lastActivityTime > 0 && t < r.lastActivityTime + this.timeoutOf(r)) this.becomeActive(id, r, t);
    else this.checkOne(id, r, t);
  }

  // ---- records -------------------------------------------------------------------------------

  /** The device's state from its attributes; undefined when it is not a device. */
  private load(id: string): DeviceState | undefined {
    if (this.stopped) return undefined;
    const d = this.entities.device(id);
    if (d === undefined) return undefined;
    const stored = new Map(this.store.get(id, 'SERVER_SCOPE', STATE_KEYS).map((a) => [a.key, a.value] as const));
    const r: DeviceState = {
      active: false,
      lastActivityTime: asMs(stored.get(LAST_ACTIVITY_KEY)),
      lastConnectTime: asMs(stored.get(LAST_CONNECT_KEY)),
      lastDisconnectTime: asMs(stored.get(LAST_DISCONNECT_KEY)),
      inactivityAlarmTime: asMs(stored.get(INACTIVITY_ALARM_KEY)),
      inactivityTimeout: parseTimeout(stored.get(INACTIVITY_TIMEOUT_KEY)),
      createdTime: d.createdTime,
      recorded: true,
      stateWrites: 0,
      stateTs: 0,
      sessions: 0,
      dirty: 0,
      writing: 0,
      unreported: 0,
    };
    this.records.set(id, r);
    const active = stored.get(ACTIVE_KEY);
    if (active?.type === 'BOOLEAN') r.active = active.v;
    else {
      // never written (a new device, or one from before this was kept): as the clock says
      r.active = this.o.now() < r.lastActivityTime + this.timeoutOf(r);
      r.recorded = false;
    }
    return r;
  }

  private becomeActive(id: string, r: DeviceState, t: EpochMs): void {
    r.active = true;
    r.recorded = true;
    // the time goes with it: one write
    r.dirty &= ~BIT.lastActivityTime;
    this.write(
      id,
      r,
      [
        [ACTIVE_KEY, { type: 'BOOLEAN', v: true }],
        [LAST_ACTIVITY_KEY, long(r.lastActivityTime)],
      ],
      t,
    );
    this.event(id, 'ACTIVITY', t, true);
  }

  private touch(id: string, r: DeviceState, key: LazyKey): void {
    r.dirty |= BIT[key];
    r.unreported |= BIT[key];
    this.unsaved.add(id);
    this.unreported.add(id);
    if (this.stopped) return;
    this.schedulePersist();
    if (this.reportTimer === undefined) {
      this.reportTimer = setTimeout(() => this.report(), REPORT_MS);
      this.reportTimer.unref();
    }
  }

  private schedulePersist(): void {
    if (this.stopped || this.persistTimer !== undefined) return;
    this.persistTimer = setTimeout(() => this.persist(), PERSIST_MS);
    this.persistTimer.unref();
  }

  private event(deviceId: string, kind: DeviceStateKind, ts: EpochMs, active: boolean): void {
    this.bus.publish('deviceState', { deviceId, kind, ts, active });
  }

  // ---- writes --------------------------------------------------------------------------------

  /** Writes `active` and what goes with it; reads take them from memory until committed. */
  private write(id: string, r: DeviceState, entries: Array<[string, KvValue]>, t: EpochMs): void {
    r.stateWrites++;
    r.stateTs = t;
    const w = this.store
      .save('DEVICE', id, 'SERVER_SCOPE', entries, t)
      .catch((err: unknown) => this.o.log(`recording the state of device ${id}: ${(err as Error).message}`))
      .finally(() => {
        r.stateWrites--;
        this.writes.delete(w);
      });
    this.writes.add(w);
  }

  /**
   * Every device's lazily kept times, each device one save issued in the same turn: lmdb-js commits them in one
   * transaction, so the batch costs about what one device's write would.
   */
  private persist(): void {
    this.persistTimer = undefined;
    const t = this.o.now();
    // a full disk fails every device's write: one line per batch, and the batch is tried again later
    let failed = 0;
    for (const id of this.unsaved) {
      const r = this.records.get(id);
      if (r === undefined || r.dirty === 0) continue;
      const bits = r.dirty;
      const entries: Array<[string, KvValue]> = [];
      for (const k of LAZY) if ((bits & BIT[k]) !== 0) entries.push([k, long(r[k])]);
      r.dirty = 0;
      r.writing |= bits;
      const w = this.store.save('DEVICE', id, 'SERVER_SCOPE', entries, t).then(
        () => {
          r.writing &= ~bits;
        },
        (err: unknown) => {
          r.writing &= ~bits;
          r.dirty |= bits;
          this.unsaved.add(id);
          this.schedulePersist();
          if (failed++ === 0) this.o.log(`recording the devices' activity times: ${(err as Error).message}`);
        },
      );
      const tracked = w.finally(() => this.writes.delete(tracked));
      this.writes.add(tracked);
    }
    this.unsaved.clear();
  }

  /** Tells websocket subscribers of the times that changed in memory (an attributes event without a write). */
  private report(): void {
    this.reportTimer = undefined;
    const t = this.o.now();
    for (const id of this.unreported) {
      const r = this.records.get(id);
      if (r === undefined || r.unreported === 0) continue;
      const updated: Array<[string, KvValue]> = [];
      for (const k of LAZY) if ((r.unreported & BIT[k]) !== 0) updated.push([k, long(r[k])]);
      r.unreported = 0;
      this.bus.publish('attributes', {
        entityType: 'DEVICE',
        entityId: id,
        scope: 'SERVER_SCOPE',
        updated,
        ts: t,
        deleted: [],
      });
    }
    this.unreported.clear();
  }
}

/**
 * The attribute store as readers see it: the lazily kept times of the state service over what is on disk, so a
 * REST read, a websocket subscription's first answer or an entity query shows a device's activity at once.
 */
export class StateAttributes implements AttributeStore {
  constructor(
    private readonly inner: AttributeStore,
    private readonly state: Pick<DeviceStateService, 'unwritten'>,
  ) {}

  save(...args: Parameters<AttributeStore['save']>): Promise<void> {
    return this.inner.save(...args);
  }

  delete(...args: Parameters<AttributeStore['delete']>): Promise<string[]> {
    return this.inner.delete(...args);
  }

  get(entityId: string, scope?: AttributeScope, keys?: readonly string[]): AttributeKv[] {
    const out = this.inner.get(entityId, scope, keys);
    if (scope !== undefined && scope !== 'SERVER_SCOPE') return out;
    for (const kv of this.state.unwritten(entityId)) {
      if (keys !== undefined && !keys.includes(kv.key)) continue;
      const at = out.findIndex((a) => a.scope === 'SERVER_SCOPE' && a.key === kv.key);
      if (at >= 0) {
        out[at] = kv;
        continue;
      }
      // sorted by key within the scope, scopes in CLIENT, SERVER, SHARED order
      let i = out.findIndex(
        (a) => a.scope === 'SHARED_SCOPE' || (a.scope === 'SERVER_SCOPE' && byteOrder(a.key, kv.key) > 0),
      );
      if (i < 0) i = out.length;
      out.splice(i, 0, kv);
    }
    return out;
  }

  keys(entityId: string, scope?: AttributeScope): string[] {
    const out = this.inner.keys(entityId, scope);
    if (scope !== undefined && scope !== 'SERVER_SCOPE') return out;
    const mem = this.state.unwritten(entityId);
    if (mem.length === 0) return out;
    const server = new Set(scope === undefined ? this.inner.keys(entityId, 'SERVER_SCOPE') : out);
    for (const { key } of mem) if (!server.has(key)) out.push(key);
    return out;
  }
}

function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}
