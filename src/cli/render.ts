/**
 * Human renderings of REST answers for the technician's commands: tables, sparklines, charts, CSV. Input is
 * the JSON text both modes return, so a human view is the same whichever mode produced it.
 */
import { type NumPoint, type RangeTruth, lineChart, numericValue, sparkline } from './chart.js';
import { displayWidth, duration, localTime, safeText, style, table, terminalColumns } from './format.js';
import type { DeviceRow } from './backend.js';
import { HOUR_MS } from './time.js';
import type { EpochMs } from '../types.js';

export type SeriesJson = Record<string, Array<{ ts: number; value: string | null }>>;

/** characters of a "last hour" sparkline */
export const SPARK_WIDTH = 20;

export function numericPoints(points: ReadonlyArray<{ ts: number; value: unknown }>): NumPoint[] {
  const out: NumPoint[] = [];
  for (const p of points) {
    const v = numericValue(p.value);
    if (v !== undefined) out.push({ ts: p.ts, v });
  }
  return out;
}

const shown = (v: string | null): string => (v === null ? '-' : forPeople(v.replace(/[\r\n]+/g, ' ')));

/**
 * A number with more decimals than a person reads (an average: 22.833333333333332) rounded to three decimals, or
 * four significant digits below 1; other values as they are. `--json` and `--csv` keep full precision.
 */
export function forPeople(v: string): string {
  if (!/^-?\d*\.\d{4,}$/.test(v)) return v;
  const n = Number(v);
  if (!Number.isFinite(n)) return v;
  return String(Math.abs(n) >= 1 ? Number(n.toFixed(3)) : Number(n.toPrecision(4)));
}

export function latestTable(latest: SeriesJson, sparks: ReadonlyMap<string, string>): string {
  const rows = Object.entries(latest).map(([key, pts]) => {
    const p = pts[0];
    return [key, shown(p?.value ?? null), p && p.value !== null ? localTime(p.ts) : '-', sparks.get(key) ?? ''];
  });
  return table(
    ['KEY', 'VALUE', 'TIME', 'LAST HOUR'],
    rows,
    terminalColumns(),
    ['l', 'r', 'l', 'l'],
    style(),
    new Set([2]),
  );
}

/** a name is how a technician tells devices apart: cut only past this many characters */
const NAME_KEPT = 32;
/** characters of a sparkline's key kept beside it (the key says what the line is) */
const KEY_KEPT = 8;
/** the narrowest a TYPE or CUSTOMER column is worth showing */
const SHOWN_MIN = 8;

/**
 * `outpost devices`: names, state, last activity and the sparkline keep their width on a narrow terminal (80
 * columns); CUSTOMER, then TYPE, give way first, left out when even at SHOWN_MIN the rest would not fit (`device
 * list` shows them).
 */
export function devicesTable(
  rows: readonly DeviceRow[],
  sparks: ReadonlyMap<string, string>,
  now: EpochMs = Date.now(),
): string {
  const headers = ['NAME', 'TYPE', 'CUSTOMER', 'STATE', 'LAST ACTIVITY', 'LAST HOUR'];
  const cellsOf = (withSince: boolean): string[][] =>
    rows.map((d) => [
      d.name,
      d.type,
      d.customer ?? '-',
      stateCell(d, now, withSince),
      d.lastActivityTs === null ? 'never' : localTime(d.lastActivityTs),
      sparks.get(d.id) ?? '',
    ]);
  const width = terminalColumns();
  const layout = (cells: readonly string[][]): { cols: number[]; floors: number[]; fits: boolean } => {
    const natural = headers.map((h, i) =>
      Math.max(displayWidth(h), ...cells.map((r) => displayWidth(safeText(r[i] ?? '')))),
    );
    const w = (i: number): number => natural[i] as number;
    // the sparkline and the start of its key
    const sparkFloor = Math.min(w(5), SPARK_WIDTH + 1 + KEY_KEPT);
    const floors = [Math.min(w(0), NAME_KEPT), SHOWN_MIN, SHOWN_MIN, w(3), w(4), sparkFloor];
    const fits = (cols: readonly number[]): boolean =>
      cols.reduce((sum, i) => sum + Math.min(w(i), floors[i] as number), 0) + 2 * (cols.length - 1) <= width;
    for (const cols of [
      [0, 1, 2, 3, 4, 5],
      [0, 1, 3, 4, 5],
      [0, 3, 4, 5],
    ]) {
      if (fits(cols)) return { cols, floors, fits: true };
    }
    return { cols: [0, 3, 4, 5], floors, fits: false };
  };
  // on a narrow terminal STATE says active or inactive alone: LAST ACTIVITY beside it says since when
  let cells = cellsOf(true);
  let shape = layout(cells);
  if (!shape.fits) {
    cells = cellsOf(false);
    shape = layout(cells);
  }
  const { cols, floors } = shape;
  return table(
    cols.map((i) => headers[i] as string),
    cells.map((r) => cols.map((i) => r[i] as string)),
    width,
    [],
    style(),
    new Set([cols.indexOf(4)]),
    cols.map((i) => floors[i] as number),
  );
}

/** `active 3h 5m` / `inactive 2d 1h`: for how long (docs/cli.md), or the word alone; `-` when not recorded */
function stateCell(d: DeviceRow, now: EpochMs, withSince: boolean): string {
  if (d.active === null) return '-';
  const word = d.active ? 'active' : 'inactive';
  return d.activeSinceTs === null || !withSince
    ? word
    : `${word} ${duration(Math.max(0, Math.floor((now - d.activeSinceTs) / 1000)))}`;
}

/** One row per distinct ts (ascending), one column per key. */
function wideRows(series: SeriesJson): { keys: string[]; rows: Array<[number, Array<string | null>]> } {
  const keys = Object.keys(series);
  const byTs = new Map<number, Array<string | null>>();
  keys.forEach((k, i) => {
    for (const p of series[k] ?? []) {
      let row = byTs.get(p.ts);
      if (!row) {
        row = keys.map(() => null);
        byTs.set(p.ts, row);
      }
      row[i] = p.value;
    }
  });
  return { keys, rows: [...byTs.entries()].sort((a, b) => a[0] - b[0]) };
}

/** `timeHeader`: what the time column holds (aggregates: the bucket's middle) */
export function historyTable(series: SeriesJson, timeHeader = 'TIME'): string {
  const { keys, rows } = wideRows(series);
  if (keys.length === 0) return '(no data in this range)';
  return table(
    [timeHeader, ...keys],
    rows.map(([ts, cells]) => [localTime(ts), ...cells.map((c) => (c === null ? '' : shown(c)))]),
    terminalColumns(),
    ['l', ...keys.map(() => 'r' as const)],
    style(),
    new Set([0]),
  );
}

const csvField = (s: string): string => (/[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s);

/** `ts,<key>...` rows like the CSV download's layout (RFC 4180), from a query's answer. */
export function historyCsv(series: SeriesJson): string {
  const { keys, rows } = wideRows(series);
  const lines = [['ts', ...keys].map(csvField).join(',')];
  for (const [ts, cells] of rows)
    lines.push([String(ts), ...cells.map((c) => (c === null ? '' : csvField(c)))].join(','));
  return `${lines.join('\n')}\n`;
}

/** `--chart` (docs/cli.md): each key as a braille line chart over [from, to], as wide as the terminal. */
export function historyCharts(
  series: SeriesJson,
  from: number,
  to: number,
  width = terminalColumns(),
  height = 10,
  /** per key: the buckets' MIN, MAX and COUNT answers over the same buckets as `series` (raw data's truth) */
  truth?: { readonly min: SeriesJson; readonly max: SeriesJson; readonly count: SeriesJson },
): string {
  const keys = Object.keys(series);
  if (keys.length === 0) return '(no data in this range)';
  return keys
    .map((k) =>
      lineChart(safeText(k), numericPoints(series[k] ?? []), { width, height, from, to }, truthOf(k)).join('\n'),
    )
    .join('\n\n');

  function truthOf(k: string): RangeTruth | undefined {
    if (truth === undefined) return undefined;
    const lo = new Map(numericPoints(truth.min[k] ?? []).map((p) => [p.ts, p.v]));
    const envelope = numericPoints(truth.max[k] ?? []).flatMap((p) => {
      const l = lo.get(p.ts);
      return l === undefined ? [] : [{ ts: p.ts, lo: l, hi: p.v }];
    });
    const count = numericPoints(truth.count[k] ?? []).reduce((n, p) => n + p.v, 0);
    return { count, envelope };
  }
}

/** A last-hour sparkline from an aggregated (AVG) history answer of one key. */
export function sparkOf(points: ReadonlyArray<{ ts: number; value: string | null }>, now: number): string {
  return sparkline(numericPoints(points), now - HOUR_MS, now, SPARK_WIDTH);
}
