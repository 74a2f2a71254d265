/**
 * The progress of alarm rules (docs/api.md "Alarm rules"): a DURATION's start, a REPEATING's count, per device and
 * profile alarm, so a restart or a power cut loses none of it (ThingsBoard keeps it in memory unless its rule
 * node's "persist state" is on). Kept in the `alarms` sub-database under ['R', deviceId, alarmId]; written only
 * when a rule starts, counts towards its threshold or resets, never once per reading; removed with the device
 * (store/alarms.ts deleteOriginatorAlarmsTx).
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

export class AlarmRuleStateStore {
  private readonly writes = new Set<Promise<void>>();
  private rows = -1;

  constructor(
    private readonly env: StoreEnv,
    private readonly log: (msg: string) => void,
  ) {}

  /** Progress records stored (every device). */
  count(): number {
    if (this.rows < 0) {
      this.rows = 0;
      for (const _ of this.env.alarms.getKeys({ start: ['R'], end: ['R\u0000'] })) this.rows++;
    }
    return this.rows;
  }

  /** The devices with progress stored. */
  devices(): string[] {
    const out = new Set<string>();
    for (const k of this.env.alarms.getKeys({ start: ['R'], end: ['R\u0000'] })) out.add(String((k as Key)[1]));
    return [...out];
  }

  /** A device's progress records by alarm id. */
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
    return out;
  }

  has(deviceId: string, alarmId: string): boolean {
    return this.env.alarms.doesExist(key(deviceId, alarmId));
  }

  /** Writes (or removes, `rec` undefined) one record; flushed in the background, awaited by `settled`. */
  put(deviceId: string, alarmId: string, rec: RuleStateRecord | undefined): void {
    const k = key(deviceId, alarmId);
    const existed = this.env.alarms.doesExist(k);
    if (this.rows >= 0) this.rows += (rec === undefined ? 0 : 1) - (existed ? 1 : 0);
    const w = (rec === undefined ? this.env.alarms.remove(k) : this.env.alarms.put(k, rec))
      .then(() => this.env.flushed())
      .catch((err: unknown) => {
        this.rows = -1;
        this.log(`saving the progress of alarm rules of device ${deviceId}: ${(err as Error).message}`);
      })
      .finally(() => this.writes.delete(w));
    this.writes.add(w);
  }

  /** A device was deleted (its records went with it, in its transaction): counted again when next asked. */
  deviceDeleted(): void {
    this.rows = -1;
  }

  /** writes issued and not yet flushed */
  unflushed(): number {
    return this.writes.size;
  }

  async settled(): Promise<void> {
    await Promise.all([...this.writes]);
  }
}
