/**
 * The store's daily write budget (SD-card wear, docs/write-budget.md): every byte the daemon writes (and its
 * filesystem's journal, where there is one) is counted against `store.writeBudgetBytesPerDay`, and the budget
 * decides how long a telemetry commit may wait for others to share it. While the budget has room the answer is 0
 * (each write committed at once, answered within one fsync); only sustained load above the budget's rate spends
 * the reserve, and then the delay grows until what is written per second matches the budget, so the long-run
 * rate holds. Nothing is refused or dropped for it: a delay only groups commits.
 *
 * A token bucket of `reserve` bytes, refilled at AIM_SHARE of the budget's rate. Its upper three quarters are
 * spent at fsync speed (a burst: a catch-up upload); in its lowest quarter the delay rises linearly with what is
 * missing, up to MAX_DELAY_MS when it is empty, and the level settles where the writes match the refill. Bytes
 * the log's own commits and the journal write are debited when they happen; the rest (LMDB applies every few
 * minutes, compaction, sync's bookkeeping) come in bursts of megabytes; they are debited ahead, as the points
 * that will cost them are written, so an apply does not jolt every device's answer time. All are debited in
 * full over the long run.
 *
 * While commits are paced (pacing()), the delay falls on the writers whose bytes drained the reserve (heavy():
 * writer-shares.ts): their batches wait it out whatever they hold, while the light writers' are committed at once
 * from a share of the refill of their own; and the store makes its LMDB applies APPLY_STRETCH times rarer and larger
 * (store/series/append.ts and apply.ts ask).
 *
 * Pure: the clock and the byte counters are given, it keeps no timer (figures are brought up to date whenever
 * asked, at most once per SAMPLE_MS), so it is tested with a fake clock.
 */
import { readFileSync, realpathSync, statfsSync, statSync } from 'node:fs';
import { basename } from 'node:path';
import { LIGHT_SHARE, WriterShares } from './writer-shares.js';

const MINUTE_MS = 60_000;
const HOUR_MS = 60 * MINUTE_MS;
const DAY_MS = 24 * HOUR_MS;
/** the counters are read at most this often (a read of /proc/self/io is ~20 µs) */
export const SAMPLE_MS = 1000;
/** the reserve, as time at the budget's rate (8.3 MB at 1.5 GB/day; docs/write-budget.md says why) */
export const RESERVE_MS = 8 * MINUTE_MS;
/**
 * the share of the budget the pacing aims at: the reserve refills at this much of the budget's rate. What the
 * budget cannot count when it happens (a fresh store's new log segments and the applies, settled over
 * OTHER_SETTLE_MS; what the kernel charges beyond the write calls) made a 10-minute measure read 1–3% over the
 * rate the reserve refilled at (bench:wear, docs/write-budget.md)
 */
export const AIM_SHARE = 0.97;
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
 * simulations in test/store/write-budget.test.ts).
 */
export const OTHER_RATE_WINDOW_MS = HOUR_MS;
/** what the per-point estimate missed (or took ahead) is settled over about this long */
export const OTHER_SETTLE_MS = 15 * MINUTE_MS;
/**
 * The per-point estimate needs PRIOR_POINTS applied points: until the window holds that many, the missing ones
 * count at PRIOR_BYTES_PER_POINT each, so that a few points cannot set it. A fresh store's (or a restarted daemon's) first apply holds the
 * points of a post or two, and writes pages a later apply shares among thousands: the new series' keys, the
 * entities README's walkthrough creates, the tree's first branch pages. Taken as the cost of a point, such an
 * apply priced each point at kilobytes, and a few hundred single posts then drained the reserve into paced
 * commits (up to MAX_DELAY_MS each) while the disk wrote a few megabytes. Two minutes of the reference load (50
 * points a second): its first apply holds more, and from then on the estimate is what the applies cost (a prior
 * kept beside them took its 100 B a point into every later estimate, and held the reference load's delay ~35 ms
 * higher: bench:wear).
 */
export const PRIOR_POINTS = 5000;
/**
 * bytes per point: between what applies and compaction cost at the reference load (19–71 and 20–23) and what an
 * apply costs that writes a fragment per commit (~140) (docs/write-budget.md)
 */
export const PRIOR_BYTES_PER_POINT = 100;

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
   * bytes the data dir's filesystem journal has written since some origin (journalCounter), where it has one:
   * written by the kernel's journal thread, so not in `written`; debited at once, as the log's
   */
  readonly journalWritten?: () => number;
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
    aimShare: number;
    reserveMs: number;
    pacingShare: number;
    maxDelayMs: number;
    otherRateWindowMs: number;
    otherSettleMs: number;
    priorPoints: number;
    priorBytesPerPoint: number;
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
  /** of which the filesystem's journal (its commits' blocks); null where none was found, so none is counted */
  readonly journalSinceStartBytes: number | null;
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
  /** writers (devices) whose commits wait the delay while it is paced: those whose bytes drained the reserve */
  readonly heavyWriters: number;
  /** since start: commits that waited the budget's delay, and commits of light writers made at once while paced */
  readonly pacedCommits: number;
  readonly lightCommits: number;
}

/** Local midnight at or before `ms`. */
export function dayStart(ms: number): number {
  const d = new Date(ms);
  d.setHours(0, 0, 0, 0);
  return d.getTime();
}

export class WriteBudget {
  /** bytes per ms the reserve refills: the budget's rate times the aim */
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
  private lastJournal = 0;
  private journalSinceStart = 0;
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
  /** others' bytes per point, the estimate last used to debit them ahead */
  private perPoint: number;
  private readonly shares: WriterShares;
  private pacedCommits = 0;
  private lightCommits = 0;
  private readonly tune: {
    aimShare: number;
    reserveMs: number;
    pacingShare: number;
    maxDelayMs: number;
    otherRateWindowMs: number;
    otherSettleMs: number;
    priorPoints: number;
    priorBytesPerPoint: number;
  };

  constructor(private readonly opts: WriteBudgetOptions) {
    if (!(opts.bytesPerDay > 0)) throw new RangeError('the write budget must be > 0 bytes a day');
    this.tune = {
      aimShare: AIM_SHARE,
      reserveMs: RESERVE_MS,
      pacingShare: PACING_SHARE,
      maxDelayMs: MAX_DELAY_MS,
      otherRateWindowMs: OTHER_RATE_WINDOW_MS,
      otherSettleMs: OTHER_SETTLE_MS,
      priorPoints: PRIOR_POINTS,
      priorBytesPerPoint: PRIOR_BYTES_PER_POINT,
      ...opts.tuning,
    };
    this.rate = (opts.bytesPerDay / DAY_MS) * this.tune.aimShare;
    this.reserve = (opts.bytesPerDay / DAY_MS) * this.tune.reserveMs;
    this.level = this.reserve;
    this.perPoint = this.tune.priorBytesPerPoint;
    this.shares = new WriterShares(this.rate * LIGHT_SHARE, opts.now);
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

  /**
   * Whether `writer`'s commits wait the delay now: only while paced, and only for the writers whose bytes drained
   * the reserve (writer-shares.ts); the others are committed at once from their protected share.
   */
  heavy(writer: string): boolean {
    return this.pacing() && this.shares.heavy(writer);
  }

  /**
   * Charges a writer what its part of a commit costs: `logBytes` of the log's pages (its share of them) and its
   * `points` at what applying a point costs (the estimate the budget debits ahead with).
   */
  charge(writer: string, logBytes: number, points: number, light = false): void {
    this.shares.charge(writer, logBytes + points * this.perPoint, light);
  }

  /** Counts a commit: whether it waited the budget's delay, or was a light writer's made at once while paced. */
  noteCommit(kind: 'paced' | 'light'): void {
    if (kind === 'paced') this.pacedCommits++;
    else this.lightCommits++;
  }

  /** what `writer` owes (bytes, decayed), for tests */
  owed(writer: string): number {
    return this.shares.owed(writer);
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
      journalSinceStartBytes: this.opts.journalWritten === undefined ? null : this.journalSinceStart,
      bytesPerDay: Math.round(perDay),
      cardEnduranceBytes: this.opts.cardEnduranceBytes,
      cardLifeYearsAtBudget: round1(years(this.opts.bytesPerDay)),
      // minutes of a young daemon (its start's writes, a first burst) say nothing of a day: an hour at least
      cardLifeYears: span < HOUR_MS || perDay <= 0 ? null : round1(years(perDay)),
      commitDelayMs: Math.round(this.delay),
      paced: this.opts.fixedDelayMs === undefined,
      overBudget: lastHour > (this.opts.bytesPerDay / DAY_MS) * HOUR_MS + this.reserve,
      heavyWriters: this.opts.fixedDelayMs === undefined ? this.shares.heavyWriters() : 0,
      pacedCommits: this.pacedCommits,
      lightCommits: this.lightCommits,
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
    const journalTotal = this.opts.journalWritten?.() ?? 0;
    const journal = Math.max(0, journalTotal - this.lastJournal);
    this.lastJournal = journalTotal;
    const others = this.othersAtMost(charged - logBytes);
    const bytes = logBytes + journal + others;

    this.sinceStart += bytes;
    this.logSinceStart += logBytes;
    this.journalSinceStart += journal;
    const day = dayStart(now);
    if (day !== this.todayStart) {
      this.todayStart = day;
      this.today = 0;
    }
    this.today += bytes;
    bump(this.minutes, Math.floor(now / MINUTE_MS), bytes, 60);
    bump(this.hours, Math.floor(now / HOUR_MS), bytes, 24);

    // the spread part of the log's bytes is settled with what the others' estimate missed, outside that estimate
    this.otherOwed += others + spread;
    this.level = Math.min(
      this.reserve,
      this.level + this.rate * elapsed - (logBytes - spread) - journal - this.debitOthers(now, elapsed, others),
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
  private debitOthers(now: number, elapsed: number, sampled: number): number {
    const written = this.opts.pointsWritten?.() ?? 0;
    const applied = this.opts.pointsApplied?.() ?? 0;
    // Bytes of a sample in which no point was applied (compaction, retention, sync's bookkeeping, entities) are
    // already written and will not come again with the points logged meanwhile: they stay out of the per-point
    // estimate, which took them ahead again for every point not yet applied (in a fresh store's first quarter
    // hour, with one or two applies in the window, that held the reference load's delay at 1 s while it wrote
    // ~1 GB/day: the simulation in test/store/write-budget.test.ts). Under load (points written in the sample)
    // they are debited at once, as the log's, so the delay answers for them; on a quiet gateway they are settled
    // as any miss, so a one-off write paces no one.
    let bytes = sampled;
    let atOnce = 0;
    if (this.opts.pointsApplied !== undefined && applied <= this.lastPointsApplied) {
      bytes = 0;
      if (written > this.lastPointsWritten) {
        atOnce = sampled;
        this.otherOwed -= atOnce;
      }
    }
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
    // the prior fills in for the points the window lacks, and is gone once it holds priorPoints
    const priorPoints = Math.max(0, this.tune.priorPoints - appliedInWindow);
    const perPoint = (others + priorPoints * this.tune.priorBytesPerPoint) / (appliedInWindow + priorPoints);
    this.perPoint = perPoint;
    const aheadTarget = -perPoint * Math.max(0, written - applied);
    const settle = (this.otherOwed - aheadTarget) * Math.min(1, elapsed / this.tune.otherSettleMs);
    const debit = perPoint * newPoints + settle;
    this.otherOwed -= debit;
    return debit + atOnce;
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

export interface JournalStats {
  readonly transactions: number;
  /** the average since mount, a whole number (0 before the first transaction) */
  readonly loggedPerTransaction: number;
}

/** jbd2's /proc/fs/jbd2/<device>-<inode>/info: transactions since mount and blocks logged per transaction. */
export function parseJournalInfo(text: string): JournalStats | undefined {
  const transactions = /^(\d+) transactions/m.exec(text);
  const logged = /^\s*(\d+) logged blocks per transaction/m.exec(text);
  // no average is shown before the first transaction
  return transactions
    ? { transactions: Number(transactions[1]), loggedPerTransaction: logged ? Number(logged[1]) : 0 }
    : undefined;
}

/**
 * The journal of the filesystem `dir` is on, where it has one (ext3/ext4's jbd2, internal journal): a count of
 * the bytes its commits have written since this call, from /proc/fs/jbd2/<device>-8/info, else undefined.
 *
 * A file written every few seconds keeps a journal transaction going: each write() updates the inode's mtime
 * (and, on ext4, its i_version, which `lazytime` does not defer), so each periodic commit (every 5 s by default)
 * logs a descriptor, the inode's table block and a commit block, ~12 KiB; LMDB growing its file adds extents and
 * bitmaps. At the reference load that is ~50 B a point (docs/write-budget.md), written by the kernel's journal
 * thread, so no process is charged for it. The count is the filesystem's, every process's transactions; a
 * daemon that writes every few seconds keeps one going anyway, and others' writes mostly share it. The blocks
 * written back to their home places later (checkpoints: a few per 30 s) are not in it.
 */
export function journalCounter(dir: string): { device: string; written: () => number } | undefined {
  let device: string;
  let blockBytes: number;
  try {
    // glibc's major()/minor() of st_dev
    const dev = statSync(dir, { bigint: true }).dev;
    const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn);
    const minor = (dev & 0xffn) | ((dev >> 12n) & ~0xffn);
    device = basename(realpathSync(`/sys/dev/block/${major}:${minor}`));
    blockBytes = statfsSync(dir).bsize;
  } catch {
    return undefined;
  }
  const info = `/proc/fs/jbd2/${device}-8/info`;
  const read = (): JournalStats | undefined => {
    try {
      return parseJournalInfo(readFileSync(info, 'utf8'));
    } catch {
      return undefined;
    }
  };
  let last = read();
  if (last === undefined) return undefined;
  let bytes = 0;
  return {
    device,
    written: () => {
      const now = read();
      if (now !== undefined) {
        // the kernel keeps the blocks per transaction as an average since mount (a whole number): the new
        // transactions are counted at it
        bytes +=
          Math.max(0, now.transactions - (last as JournalStats).transactions) * now.loggedPerTransaction * blockBytes;
        last = now;
      }
      return bytes;
    },
  };
}

/** What the store's group commit asks (store/series/append.ts and apply.ts). */
export interface CommitPacer {
  /** how long a batch may wait for others */
  commitDelayMs(): number;
  /** by how much store.applyIntervalMs and store.applyMaxPoints are multiplied now (1: as configured) */
  applyStretch(): number;
  /** whether commits are being paced (the reserve is low): then a heavy writer's batch waits its delay out */
  pacing(): boolean;
  /** whether this writer's commits wait the delay now (false: committed at once, from the light writers' share) */
  heavy(writer: string): boolean;
  /** charges a writer its share of a commit: log bytes, and points at their estimated apply cost */
  charge(writer: string, logBytes: number, points: number, light: boolean): void;
  noteCommit(kind: 'paced' | 'light'): void;
}
