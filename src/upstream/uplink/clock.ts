/**
 * Whether the system clock is synchronized (docs/sync.md, the clock). A Pi has no RTC: until NTP syncs
 * it may run on a stale clock. systemd-timesyncd creates `/run/systemd/timesync/synchronized` once it has
 * synchronized (systemd ≥ 239); chrony and ntpd do not, and Node has no adjtimex binding, so when that
 * directory does not exist at all the answer is null (unknown), not false.
 */
import { existsSync } from 'node:fs';

const TIMESYNC_DIR = '/run/systemd/timesync';

export function clockSynchronized(dir = TIMESYNC_DIR): boolean | null {
  if (existsSync(`${dir}/synchronized`)) return true;
  return existsSync(dir) ? false : null;
}

/** 2000-01-01T00:00:00Z: a point stamped before this comes from a clock that never synced (held, never sent). */
export const MIN_SENDABLE_TS = 946_684_800_000;
/** a point stamped more than this ahead of the clock is held until the clock reaches it */
export const MAX_AHEAD_MS = 86_400_000;
