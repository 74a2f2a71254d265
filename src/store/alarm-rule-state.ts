/**
 * The progress of alarm rules (docs/api.md "Alarm rules"): a DURATION's start, a REPEATING's count, per device and
 * profile alarm, so a restart or a power cut keeps it (ThingsBoard keeps it in memory unless its rule node's
 * "persist state" is on). Kept in the `alarms` sub-database under ['R', deviceId, alarmId]; changed only when a
 * rule starts, counts towards its threshold or resets, never once per reading; removed with the device
 * (store/alarms.ts deleteOriginatorAlarmsTx).
 *
 * Changes are gathered for `flushMs` and written in one flushed commit: on an SD card each LMDB commit costs its
 * pages and the meta page (several KiB) whatever it holds, and fifty devices' rules moving at their own moments
 * would otherwise pay one each (docs/write-budget.md). A power cut loses at most the last `flushMs` of progress,
 * never an alarm (alarms are written at once, store/alarms.ts); a stop writes what is gathered.
 */
import type { StoreEnv } from './env.js';

/** One profile alarm's progress: each create rule's by severity, the clear rule's; 0 = none (never stored). */
export interface RuleStateRecord {
  /** the profile the progress was made under: a device moved to another profile starts fresh */
  readonly profileId: string;
  readonly create: Readonly<Record<string, number>>;
  readonly clear: number;
}

type Key = Array<string | number>;
const key = (deviceId: string, alarmId: string): Key => ['R', deviceId, alarmId];
const gatherKey = (deviceId: string, alarmId: string): string => `${deviceId}\u0000${alarmId}`;

export class AlarmRuleStateStore {
  private readonly writes = new Set<Promise<void>>();
  /** changes not yet written: key → record, or undefined for a removal; one key per device and alarm */
  private readonly gathered = new Map<
    string,
    { deviceId: string; alarmId: string; rec: RuleStateRecord | undefined }
  >();
  private timer: NodeJS.Timeout | undefined;
  private rows = -1;

  /** `flushMs`: how long changes are gathered before one commit writes them (0: each at once) */
  constructor(
    private readonly env: StoreEnv,
    private readonly log: (msg: string) => void,
    private readonly flushMs = 0,
  ) {}

  /** Progress records kept (every device; the gathered changes over what is stored). */
  count(): number {
    if (this.rows < 0) {
      this.rows = 0;
      for (const k of this.env.alarms.getKeys({ start: ['R'], end: ['R\u0000'] })) {
        const kk = k as Key;
        if (!this.gathered.has(gatherKey(String(kk[1]), String(kk[2])))) this.rows++;
      }
      for (const g of this.gathered.values()) if (g.rec !== undefined) this.rows++;
    }
    return this.rows;
  }

  /** The devices with progress kept. */
  devices(): string[] {
    const out = new Set<string>();
    for (const k of this.env.alarms.getKeys({ start: ['R'], end: ['R\u0000'] })) {
      const kk = k as Key;
      const g = this.gathered.get(gatherKey(String(kk[1]), String(kk[2])));
      if (g === undefined || g.rec !== undefined) out.add(String(kk[1]));
    }
    for (const g of this.gathered.values()) if (g.rec !== undefined) out.add(g.deviceId);
    return [...out];
  }

  /** A device's progress records by alarm id (the gathered changes over what is stored). */
  load(deviceId: string): Map<string, RuleStateRecord> {
    const out = new Map<string, RuleStateRecord>();
    for (const { key: k, value } of this.env.alarms.getRange({
      start: ['R', deviceId],
      end: ['R', `${deviceId}\u0000`],
    })) {
      const kk = k as Key;
      if (kk[1] !== deviceId) continue;
      out.set(String(kk[2]), value as RuleStateRecord);
    }
    for (const g of this.gathered.values()) {
      if (g.deviceId !== deviceId) continue;
      if (g.rec === undefined) out.delete(g.alarmId);
      else out.set(g.alarmId, g.rec);
    }
    return out;
  }

  has(deviceId: string, alarmId: string): boolean {
    const g = this.gathered.get(gatherKey(deviceId, alarmId));
    return g === undefined ? this.env.alarms.doesExist(key(deviceId, alarmId)) : g.rec !== undefined;
  }

  /** Sets (or removes, `rec` undefined) one record; written within `flushMs`, awaited by `settled`. */
  put(deviceId: string, alarmId: string, rec: RuleStateRecord | undefined): void {
    const existed = this.has(deviceId, alarmId);
    if (this.rows >= 0) this.rows += (rec === undefined ? 0 : 1) - (existed ? 1 : 0);
    this.gathered.set(gatherKey(deviceId, alarmId), { deviceId, alarmId, rec });
    if (this.flushMs <= 0) this.write();
    else this.timer ??= setTimeout(() => this.write(), this.flushMs);
  }

  /** One commit for every gathered change, flushed. */
  private write(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.gathered.size === 0) return;
    const changes = [...this.gathered.values()];
    this.gathered.clear();
    const w = this.env.alarms
      .transaction(() => {
        for (const { deviceId, alarmId, rec } of changes) {
          const k = key(deviceId, alarmId);
          if (rec === undefined) void this.env.alarms.remove(k);
          else void this.env.alarms.put(k, rec);
        }
      })
      .then(() => this.env.flushed())
      .catch((err: unknown) => {
        this.rows = -1;
        this.log(`saving the progress of alarm rules (${changes.length} changes): ${(err as Error).message}`);
      })
      .finally(() => this.writes.delete(w));
    this.writes.add(w);
  }

  /** A device was deleted (its records went with it, in its transaction): counted again when next asked. */
  deviceDeleted(): void {
    this.rows = -1;
  }

  /** changes gathered or written and not yet flushed */
  unflushed(): number {
    return this.gathered.size + this.writes.size;
  }

  /** Writes what is gathered now and waits until every write is flushed (a stop; tests). */
  async settled(): Promise<void> {
    this.write();
    await Promise.all([...this.writes]);
  }
}
