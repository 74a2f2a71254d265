/**
 * The store's daily write budget (SD-card wear, docs/write-budget.md): every byte the daemon writes is counted
 * against `store.writeBudgetBytesPerDay`, and the budget decides how long a telemetry commit may wait for others
 * to share it. While the budget has room the answer is 0 (each write committed at once, answered within one
 * fsync); only sustained load above the budget's rate spends the reserve, and then the delay grows until what is
 * written per second matches the budget, so the long-run rate holds. Nothing is refused or dropped for it: a
 * delay only groups commits.
 *
 * A token bucket of `reserve` bytes, refilled at the budget's rate. Its upper three quarters are spent at fsync
 * speed (a burst: a catch-up upload); in its lowest quarter the delay rises linearly with what is missing, up to
 * MAX_DELAY_MS when it is empty, and the level settles where the writes match the refill. Bytes the log's own
 * commits write are debited when they happen; the rest (LMDB applies every few minutes, compaction, sync's
 * bookkeeping) come in bursts of megabytes; they are debited ahead, as the points that will cost them are written,
 * so an apply does not jolt every device's answer time. Both are debited in full over the long run.
 *
 * While commits are paced (pacing()), the store also lets a batch wait its delay out unless it fills a page of
 * log, and makes its LMDB applies APPLY_STRETCH times rarer and larger (store/series/append.ts and apply.ts ask).
 *
 * Pure: the clock and the byte counters are given, it keeps no timer (figures are brought up to date whenever
 * asked, at most once per SAMPLE_MS), so it is tested with a fake clock.
 */
import { readFileSync } from 'node:fs';

const MINUTE_MS = 60_000;
const HOUR_MS = 60 * MINUTE_MS;
const DAY_MS = 24 * HOUR_MS;
/** the counters are read at most this often (a read of /proc/self/io is ~20 µs) */
export const SAMPLE_MS = 1000;
/** the reserve, as time at the budget's rate (8.3 MB at 1.5 GB/day; docs/write-budget.md says why) */
export const RESERVE_MS = 8 * MINUTE_MS;
/** the share of the reserve below which commits are paced */
export const PACING_SHARE = 0.25;
/** the longest a commit waits for others, with the reserve empty */
export const MAX_DELAY_MS = 1000;
/**
 * Bytes written by anything but the log's commits (LMDB applies: megabytes every 5 to 15 minutes, compaction,
 * sync's bookkeeping) are debited ahead, as the points that will cost them are written: each point at what the
 * points applied over the last OTHER_RATE_WINDOW_MS cost (bytes per point). When an apply lands it has then
 * mostly been paid for already; what the estimate missed, or took ahead too much, is settled over
 * OTHER_SETTLE_MS. Debited as they came (or within a couple of minutes), each apply pulled the reserve down and
 * every device's wait rose towards MAX_DELAY_MS meanwhile (bench:wear's p99); and a measure of a few minutes
 * that ends with an apply counted it without the delay having paid for it. Every byte is debited in the long
 * run: what is taken ahead is at most the points not yet applied times their rate (docs/write-budget.md, the
 * simulations in test/write-budget.test.ts).
 */
export const OTHER_RATE_WINDOW_MS = HOUR_MS;
/** what the per-point estimate missed (or took ahead) is settled over about this long */
export const OTHER_SETTLE_MS = 15 * MINUTE_MS;

/**
 * applies are this many times rarer and larger while commits are paced: 15 min and 60,000 points by default;
 * the points held cost +5 to +24 MB of RssAnon (bench:wear), and a read of telemetry still applies at once
 */
export const APPLY_STRETCH = 3;

export interface WriteBudgetOptions {
  /** `store.writeBudgetBytesPerDay` */
  readonly bytesPerDay: number;
  /** `store.cardEnduranceBytes`: what the card is rated to have written over its life */
  readonly cardEnduranceBytes: number;
  /** a fixed commit delay (an explicit `store.commitDelayMs`): counted and shown, not paced */
  readonly fixedDelayMs?: number;
  /** ms since the epoch; local midnight starts "today" */
  readonly now: () => number;
  /** bytes the process has written since some origin, never decreasing (processWriteBytes) */
  readonly written: () => number;
  /** bytes the log's commits have written since some origin; absent: everything counts as "other" */
  readonly logWritten?: () => number;
  /**
   * of `logWritten`, what is debited over OTHER_SETTLE_MS rather than at once: new segments' zeros, 1 MiB each
   * (while no spare is left, as on a fresh store). Debited at once, each pulled the reserve down by a megabyte and
   * every device's wait up by half a second; counted with the others, they went into the per-point estimate of
   * the applies and had commits paced for points that would never cost them.
   */
  readonly logSpreadWritten?: () => number;
  /**
   * bytes the process has passed to write calls (`wchar` of /proc/self/io, read with `written`), and of those the
   * log's: what the others' (LMDB's page writes) can have cost at most. Where the kernel charges `written` for
   * whole large folios, each of LMDB's 4-KiB page writes into one is charged up to the folio's size, and the
   * others count as the smaller of the two (docs/write-budget.md)
   */
  readonly writeCalls?: () => number;
  readonly logWriteCalls?: () => number;
  /**
   * points the store has been given to write since start, and of those put into LMDB (applied): others' bytes
   * are debited ahead, per point written; absent, they are debited as they come, settled over OTHER_SETTLE_MS
   */
  readonly pointsWritten?: () => number;
  readonly pointsApplied?: () => number;
  /** where `written` comes from, for the status */
  readonly source: WriteSource;
  /** the constants below, for experiments */
  readonly tuning?: Partial<{
    reserveMs: number;
    pacingShare: number;
    maxDelayMs: number;
    otherRateWindowMs: number;
    otherSettleMs: number;
  }>;
}

/** `proc`: the kernel's count of the whole process (/proc/self/io); `log`: the log's own count only (a lower bound) */
export type WriteSource = 'proc' | 'log';

/** The figures `GET /api/outpost/status` shows (bytes; rates per day). */
export interface WriteFigures {
  readonly source: WriteSource;
  readonly budgetBytesPerDay: number;
  readonly reserveBytes: number;
  /** what is left of the reserve now */
  readonly reserveLeftBytes: number;
  readonly todayBytes: number;
  readonly lastHourBytes: number;
  readonly sinceStartBytes: number;
  /** of which the log's commits (its pages and segment fills) */
  readonly logSinceStartBytes: number;
  /** the rate over the last 24 h (since start when younger), per day */
  readonly bytesPerDay: number;
  readonly cardEnduranceBytes: number;
  /** years the card lasts at the budget, and at the measured rate (null until a minute has been measured) */
  readonly cardLifeYearsAtBudget: number;
  readonly cardLifeYears: number | null;
  /** the delay commits wait now, ms, and whether it is the budget's (false: a fixed store.commitDelayMs) */
  readonly commitDelayMs: number;
  readonly paced: boolean;
  /** the last hour wrote more than the budget and the reserve allow: the card wears faster than planned */
  readonly overBudget: boolean;
}

/** Local midnight at or before `ms`. */
export function dayStart(ms: number): number {
  const d = new Date(ms);
  d.setHours(0, 0, 0, 0);
  return d.getTime();
}

export class WriteBudget {
  /** bytes per ms the budget refills */
  private readonly rate: number;
  readonly reserve: number;
  private level: number;
  /** bytes written by others than the log, and points applied, per minute over OTHER_RATE_WINDOW_MS: their cost per point */
  private readonly otherMinutes = new Map<number, number>();
  private readonly appliedMinutes = new Map<number, number>();
  /** bytes written by others than the log, minus what was debited for them (< 0: debited ahead) */
  private otherOwed = 0;
  private lastPointsWritten = 0;
  private lastPointsApplied = 0;
  private lastAt: number;
  private lastWritten: number;
  private lastLog: number;
  private lastSpread = 0;
  private lastCalls = 0;
  private lastLogCalls = 0;
  /** write calls the log's own count has not caught up with yet (its stats are updated after the call returns) */
  private callsBehind = 0;
  private readonly startedAt: number;
  private sinceStart = 0;
  private logSinceStart = 0;
  private today = 0;
  private todayStart: number;
  /** bytes per minute over the last hour and per hour over the last day, by minute / hour index */
  private readonly minutes = new Map<number, number>();
  private readonly hours = new Map<number, number>();
  private delay = 0;
  private readonly tune: {
    reserveMs: number;
    pacingShare: number;
    maxDelayMs: number;
    otherRateWindowMs: number;
    otherSettleMs: number;
  };

  constructor(private readonly opts: WriteBudgetOptions) {
    if (!(opts.bytesPerDay > 0)) throw new RangeError('the write budget must be > 0 bytes a day');
    this.rate = opts.bytesPerDay / DAY_MS;
    this.tune = {
      reserveMs: RESERVE_MS,
      pacingShare: PACING_SHARE,
      maxDelayMs: MAX_DELAY_MS,
      otherRateWindowMs: OTHER_RATE_WINDOW_MS,
      otherSettleMs: OTHER_SETTLE_MS,
      ...opts.tuning,
    };
    this.reserve = this.rate * this.tune.reserveMs;
    this.level = this.reserve;
    const now = opts.now();
    this.lastAt = now;
    this.startedAt = now;
    this.todayStart = dayStart(now);
    // both counters start at 0 with the process (the kernel's with its exec, the log's with its open), so what
    // the store wrote before the first sample (opening, replaying the log) counts too
    this.lastWritten = 0;
    this.lastLog = 0;
    if (opts.fixedDelayMs !== undefined) this.delay = opts.fixedDelayMs;
  }

  /** How long the next commit may wait for others to share it, ms. */
  commitDelayMs(): number {
    this.sample();
    return this.delay;
  }

  /**
   * While commits are paced, LMDB applies come APPLY_STRETCH times rarer and larger: an apply touches each series
   * written since the last one once, however many points it got, so its bytes per point fall (BENCHMARKS.md).
   */
  applyStretch(): number {
    return this.pacing() ? APPLY_STRETCH : 1;
  }

  pacing(): boolean {
    this.sample();
    return this.opts.fixedDelayMs === undefined && this.level < this.reserve * this.tune.pacingShare;
  }

  figures(): WriteFigures {
    this.sample(true);
    const now = this.lastAt;
    let lastHour = 0;
    for (const [m, b] of this.minutes) if (m > Math.floor(now / MINUTE_MS) - 60) lastHour += b;
    let lastDay = 0;
    for (const [h, b] of this.hours) if (h > Math.floor(now / HOUR_MS) - 24) lastDay += b;
    const span = Math.min(DAY_MS, now - this.startedAt);
    const perDay = span <= 0 ? 0 : (lastDay * DAY_MS) / span;
    const years = (perDayBytes: number): number => this.opts.cardEnduranceBytes / perDayBytes / 365.25;
    return {
      source: this.opts.source,
      budgetBytesPerDay: this.opts.bytesPerDay,
      reserveBytes: Math.round(this.reserve),
      reserveLeftBytes: Math.round(Math.max(0, this.level)),
      todayBytes: this.today,
      lastHourBytes: lastHour,
      sinceStartBytes: this.sinceStart,
      logSinceStartBytes: this.logSinceStart,
      bytesPerDay: Math.round(perDay),
      cardEnduranceBytes: this.opts.cardEnduranceBytes,
      cardLifeYearsAtBudget: round1(years(this.opts.bytesPerDay)),
      cardLifeYears: span < MINUTE_MS || perDay <= 0 ? null : round1(years(perDay)),
      commitDelayMs: Math.round(this.delay),
      paced: this.opts.fixedDelayMs === undefined,
      overBudget: lastHour > this.rate * HOUR_MS + this.reserve,
    };
  }

  /** Reads the counters (at most once per SAMPLE_MS unless forced) and updates the bucket and the delay. */
  private sample(force = false): void {
    const now = this.opts.now();
    const dt = now - this.lastAt;
    // a clock set back (NTP's first sync on a board without an RTC): that sample counts no time, never negative
    if (dt >= 0 && dt < SAMPLE_MS && !(force && dt > 0)) return;
    const elapsed = Math.max(0, dt);
    this.lastAt = now;
    const written = this.opts.written();
    const log = this.opts.logWritten?.() ?? 0;
    const charged = Math.max(0, written - this.lastWritten);
    const logBytes = Math.min(charged, Math.max(0, log - this.lastLog));
    this.lastWritten = written;
    this.lastLog = log;
    const spreadTotal = this.opts.logSpreadWritten?.() ?? 0;
    const spread = Math.min(logBytes, Math.max(0, spreadTotal - this.lastSpread));
    this.lastSpread = spreadTotal;
    const bytes = logBytes + this.othersAtMost(charged - logBytes);

    this.sinceStart += bytes;
    this.logSinceStart += logBytes;
    const day = dayStart(now);
    if (day !== this.todayStart) {
      this.todayStart = day;
      this.today = 0;
    }
    this.today += bytes;
    bump(this.minutes, Math.floor(now / MINUTE_MS), bytes, 60);
    bump(this.hours, Math.floor(now / HOUR_MS), bytes, 24);

    // the spread part of the log's bytes is settled with what the others' estimate missed, outside that estimate
    this.otherOwed += bytes - logBytes + spread;
    this.level = Math.min(
      this.reserve,
      this.level + this.rate * elapsed - (logBytes - spread) - this.debitOthers(now, elapsed, bytes - logBytes),
    );
    if (this.opts.fixedDelayMs !== undefined) return;
    const band = this.reserve * this.tune.pacingShare;
    const max = this.tune.maxDelayMs;
    this.delay = this.level >= band ? 0 : Math.min(max, (max * (band - this.level)) / band);
  }

  /** `charged`, or what the others' write calls passed, when less (large folios: see writeCalls). */
  private othersAtMost(charged: number): number {
    if (this.opts.writeCalls === undefined || this.opts.logWriteCalls === undefined) return charged;
    const calls = this.opts.writeCalls();
    const logCalls = this.opts.logWriteCalls();
    const passed = this.callsBehind + Math.max(0, calls - this.lastCalls) - Math.max(0, logCalls - this.lastLogCalls);
    this.lastCalls = calls;
    this.lastLogCalls = logCalls;
    this.callsBehind = Math.min(0, passed);
    return Math.min(charged, Math.max(0, passed));
  }

  /**
   * What to debit for others' bytes over the `elapsed` ms just sampled, in which `bytes` of them were written:
   * the points written meanwhile at the recent cost per point, plus a share of how far what is owed is from what
   * should be (the points written but not yet applied, taken ahead at that cost).
   */
  private debitOthers(now: number, elapsed: number, bytes: number): number {
    const written = this.opts.pointsWritten?.() ?? 0;
    const applied = this.opts.pointsApplied?.() ?? 0;
    const newPoints = Math.max(0, written - this.lastPointsWritten);
    const keep = Math.ceil(this.tune.otherRateWindowMs / MINUTE_MS);
    const minute = Math.floor(now / MINUTE_MS);
    bump(this.otherMinutes, minute, bytes, keep);
    bump(this.appliedMinutes, minute, Math.max(0, applied - this.lastPointsApplied), keep);
    this.lastPointsWritten = written;
    this.lastPointsApplied = applied;
    let others = 0;
    for (const b of this.otherMinutes.values()) others += b;
    let appliedInWindow = 0;
    for (const n of this.appliedMinutes.values()) appliedInWindow += n;
    const perPoint = appliedInWindow > 0 ? others / appliedInWindow : 0;
    const aheadTarget = -perPoint * Math.max(0, written - applied);
    const settle = (this.otherOwed - aheadTarget) * Math.min(1, elapsed / this.tune.otherSettleMs);
    const debit = perPoint * newPoints + settle;
    this.otherOwed -= debit;
    return debit;
  }
}

function bump(slots: Map<number, number>, slot: number, bytes: number, keep: number): void {
  slots.set(slot, (slots.get(slot) ?? 0) + bytes);
  for (const s of slots.keys()) if (s <= slot - keep) slots.delete(s);
}

const round1 = (x: number): number => Math.round(x * 10) / 10;

/**
 * The byte counter the budget reads: the kernel's count of the whole process where there is one, else the log's
 * own count (`logWritten`: its pages and segment fills), which misses LMDB's commits and so is a lower bound.
 */
export function writeCounter(logWritten: () => number): {
  written: () => number;
  /** `wchar` as of the last `written()` (the same read of /proc/self/io); absent with the log's count */
  writeCalls?: () => number;
  source: WriteSource;
} {
  let last = processIo();
  if (last === undefined) return { written: logWritten, source: 'log' };
  return {
    written: () => {
      // a failed read (never seen) repeats the last count rather than restarting it
      last = processIo() ?? (last as ProcessIo);
      return last.writeBytes;
    },
    writeCalls: () => (last as ProcessIo).writeCalls,
    source: 'proc',
  };
}

interface ProcessIo {
  /**
   * bytes this process (every thread: lmdb-js' writer, the sync thread) caused to be written to storage,
   * `write_bytes`: charged as each page cache folio is dirtied, the whole folio
   */
  readonly writeBytes: number;
  /** bytes it passed to write calls, `wchar`: files, pipes and sockets written with write(2)/writev(2) alike */
  readonly writeCalls: number;
}

/** The kernel's counts of what this process wrote (/proc/self/io); undefined where the kernel does not keep them. */
function processIo(): ProcessIo | undefined {
  try {
    const io = readFileSync('/proc/self/io', 'utf8');
    const bytes = /^write_bytes:\s+(\d+)$/m.exec(io);
    const calls = /^wchar:\s+(\d+)$/m.exec(io);
    return bytes && calls ? { writeBytes: Number(bytes[1]), writeCalls: Number(calls[1]) } : undefined;
  } catch {
    return undefined;
  }
}

/** The kernel's count of bytes this process caused to be written to storage; undefined where it keeps none. */
export function processWriteBytes(): number | undefined {
  return processIo()?.writeBytes;
}

/** What the store's group commit asks (store/series/append.ts and apply.ts). */
export interface CommitPacer {
  /** how long a batch may wait for others */
  commitDelayMs(): number;
  /** by how much store.applyIntervalMs and store.applyMaxPoints are multiplied now (1: as configured) */
  applyStretch(): number;
  /** whether commits are being paced (the reserve is low): then a batch waits its delay out unless it fills a page */
  pacing(): boolean;
}
