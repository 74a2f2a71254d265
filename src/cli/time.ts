/**
 * Friendly times and durations of the technician's commands (docs/cli.md). T: epoch ms, ISO-8601 (local
 * time when it names no zone, as a technician reads the box's clock), `now`, or relative `-15m`/`-6h`/`-7d`.
 * D: `30s`, `10m`, `1h`, `1d`, `1w` or plain ms.
 */
import type { DurationMs, EpochMs } from '../types.js';
import { CliError } from './errors.js';

export const HOUR_MS: DurationMs = 3_600_000;

const UNIT_MS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
};

const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)?$/;

export function parseDuration(text: string, what = 'duration'): DurationMs {
  const m = DURATION.exec(text.trim());
  if (!m) throw new CliError(`${what} "${text}": expected e.g. 30s, 10m, 1h, 1d or a number of ms`);
  const ms = Number(m[1]) * (UNIT_MS[m[2] ?? 'ms'] as number);
  if (!Number.isSafeInteger(Math.round(ms))) throw new CliError(`${what} "${text}" is out of range`);
  return Math.round(ms);
}

/** `now` is read once per command, so `--from -1h --to now` spans exactly one hour. */
export function parseTime(text: string, now: EpochMs, what = 'time'): EpochMs {
  const s = text.trim();
  if (s === 'now') return now;
  if (/^\d+$/.test(s)) {
    const ms = Number(s);
    if (!Number.isSafeInteger(ms)) throw new CliError(`${what} "${text}" is out of range`);
    return ms;
  }
  if (s.startsWith('-') && DURATION.test(s.slice(1))) {
    // "-2" is more likely two hours or days than two milliseconds: a relative time names its unit
    if (/^\d+(?:\.\d+)?$/.test(s.slice(1)))
      throw new CliError(`${what} "${text}" needs a unit: e.g. ${s}m, ${s}h or ${s}d`);
    return now - parseDuration(s.slice(1), what);
  }
  if (/^\d{4}-\d{2}-\d{2}/.test(s)) {
    // a bare date is local midnight (JavaScript alone would read it as UTC)
    const ms = Date.parse(/^\d{4}-\d{2}-\d{2}$/.test(s) ? `${s}T00:00` : s);
    if (Number.isFinite(ms)) return ms;
  }
  throw new CliError(`${what} "${text}": expected now, -6h, an ISO-8601 time (2026-11-24T08:00) or epoch ms`);
}
