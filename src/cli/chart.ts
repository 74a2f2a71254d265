/**
 * Terminal charts a technician can read over SSH (docs/cli.md): a braille line chart per key (2×4 dots per
 * character cell) with min/max on the y axis and local times on the x axis, sized to the terminal; and
 * one-line block sparklines. Pure functions of their input (and TZ), so a test can compare them to a fixture.
 */
import type { EpochMs } from '../types.js';
import { shortTime } from './format.js';

export interface NumPoint {
  readonly ts: EpochMs;
  readonly v: number;
}

/** The number a REST value string stands for: numbers and booleans (1/0); other values are not charted. */
export function numericValue(value: unknown): number | undefined {
  if (typeof value === 'number') return Number.isFinite(value) ? value : undefined;
  if (typeof value === 'boolean') return value ? 1 : 0;
  if (typeof value !== 'string' || value === '') return undefined;
  if (value === 'true') return 1;
  if (value === 'false') return 0;
  const n = Number(value);
  return Number.isFinite(n) ? n : undefined;
}

/** A value as a short axis label: at most 4 significant digits, no exponent for ordinary magnitudes. */
export function axisLabel(v: number): string {
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e6 || a < 1e-3) return v.toExponential(2);
  return String(Number(v.toPrecision(4)));
}

// braille dot bits by [column][row] within a cell (Unicode U+2800 block)
const DOT: ReadonlyArray<readonly number[]> = [
  [0x01, 0x02, 0x04, 0x40],
  [0x08, 0x10, 0x20, 0x80],
];

class Canvas {
  private readonly cells: Uint8Array;
  constructor(
    readonly cols: number,
    readonly rows: number,
  ) {
    this.cells = new Uint8Array(cols * rows);
  }

  set(x: number, y: number): void {
    if (x < 0 || y < 0 || x >= this.cols * 2 || y >= this.rows * 4) return;
    const i = Math.floor(y / 4) * this.cols + Math.floor(x / 2);
    this.cells[i] = (this.cells[i] as number) | ((DOT[x % 2] as readonly number[])[y % 4] as number);
  }

  line(x0: number, y0: number, x1: number, y1: number): void {
    const dx = Math.abs(x1 - x0);
    const dy = -Math.abs(y1 - y0);
    const sx = x0 < x1 ? 1 : -1;
    const sy = y0 < y1 ? 1 : -1;
    let err = dx + dy;
    for (;;) {
      this.set(x0, y0);
      if (x0 === x1 && y0 === y1) return;
      const e2 = 2 * err;
      if (e2 >= dy) {
        err += dy;
        x0 += sx;
      }
      if (e2 <= dx) {
        err += dx;
        y0 += sy;
      }
    }
  }

  row(r: number): string {
    let s = '';
    for (let c = 0; c < this.cols; c++) s += String.fromCharCode(0x2800 + (this.cells[r * this.cols + c] as number));
    return s;
  }
}

/** What the data held beyond the averaged line: the points' count and each column's min and max. */
export interface RangeTruth {
  readonly count: number;
  readonly envelope: ReadonlyArray<{ readonly ts: EpochMs; readonly lo: number; readonly hi: number }>;
}

export interface ChartOptions {
  /** total width in columns, labels included */
  readonly width: number;
  /** plot height in text rows */
  readonly height: number;
  /** the x axis spans [from, to] (the query's range) */
  readonly from: EpochMs;
  readonly to: EpochMs;
}

/**
 * One key's line chart: a title line with min/max, `height` plot rows with the y labels (max at the top, min
 * at the bottom), the x axis and a line of local times. Points must be ascending by ts.
 */
export function lineChart(title: string, points: readonly NumPoint[], o: ChartOptions, truth?: RangeTruth): string[] {
  if (points.length === 0) return [`${title}  (no numeric values)`];
  let min = Infinity;
  let max = -Infinity;
  for (const p of [...points, ...(truth?.envelope ?? []).flatMap((e) => [{ v: e.lo }, { v: e.hi }])]) {
    if (p.v < min) min = p.v;
    if (p.v > max) max = p.v;
  }
  const top = axisLabel(max);
  const bottom = axisLabel(min);
  const labelW = Math.max(top.length, bottom.length);
  const cols = Math.max(10, o.width - labelW - 2);
  const canvas = new Canvas(cols, o.height);
  const xDots = cols * 2 - 1;
  const yDots = o.height * 4 - 1;
  const span = Math.max(1, o.to - o.from);
  const xOf = (ts: number): number => Math.round(((ts - o.from) / span) * xDots);
  const yOf = (v: number): number =>
    max === min ? Math.round(yDots / 2) : yDots - Math.round(((v - min) / (max - min)) * yDots);
  // each column's min–max envelope under the line of its averages: a peak shows even when averaging hides it
  for (const e of truth?.envelope ?? []) {
    const x = xOf(e.ts);
    canvas.line(x, yOf(e.lo), x, yOf(e.hi));
  }
  let prev: [number, number] | undefined;
  for (const p of points) {
    const xy: [number, number] = [xOf(p.ts), yOf(p.v)];
    if (prev) canvas.line(prev[0], prev[1], xy[0], xy[1]);
    else canvas.set(xy[0], xy[1]);
    prev = xy;
  }
  const count = truth?.count ?? points.length;
  const out = [
    `${title}  min ${axisLabel(min)}  max ${axisLabel(max)}  (${count} point${count === 1 ? '' : 's'}${truth === undefined || truth.count === points.length ? '' : `, ${points.length} columns`})`,
  ];
  for (let r = 0; r < o.height; r++) {
    const label = r === 0 ? top : r === o.height - 1 ? bottom : '';
    out.push(`${label.padStart(labelW)} ${r === 0 || r === o.height - 1 ? '┤' : '│'}${canvas.row(r)}`);
  }
  out.push(`${' '.repeat(labelW)} └${'─'.repeat(cols)}`);
  out.push(' '.repeat(labelW + 2) + timeAxis(o.from, o.to, cols));
  return out;
}

/** Local-time labels at the start, the quarters and the end of `cols` columns, as many as fit. */
function timeAxis(from: EpochMs, to: EpochMs, cols: number): string {
  const withDate = to - from > 86_400_000 || new Date(from).getDate() !== new Date(to).getDate();
  const sample = shortTime(from, withDate);
  const slots = Math.max(1, Math.min(4, Math.floor(cols / (sample.length + 4))));
  const chars = Array.from({ length: cols }, () => ' ');
  for (let i = 0; i <= slots; i++) {
    const ts = from + ((to - from) * i) / slots;
    const text = shortTime(Math.round(ts), withDate);
    const at = Math.min(
      cols - text.length,
      Math.max(
        0,
        Math.round((cols - 1) * (i / slots)) -
          (i === 0 ? 0 : i === slots ? text.length - 1 : Math.floor(text.length / 2)),
      ),
    );
    for (let j = 0; j < text.length; j++) chars[at + j] = text[j] as string;
  }
  return chars.join('').trimEnd();
}

const BLOCKS = '▁▂▃▄▅▆▇█';

/**
 * `n` characters over [from, to): each the mean of its bin's points as one of eight block heights between the
 * points' min and max; a space where a bin has no points. Empty string when there are no points at all.
 */
export function sparkline(points: readonly NumPoint[], from: EpochMs, to: EpochMs, n: number): string {
  if (points.length === 0 || n <= 0) return '';
  const sums = new Float64Array(n);
  const counts = new Uint32Array(n);
  const span = Math.max(1, to - from);
  for (const p of points) {
    if (p.ts < from || p.ts >= to) continue;
    const i = Math.min(n - 1, Math.floor(((p.ts - from) / span) * n));
    sums[i] = (sums[i] as number) + p.v;
    counts[i] = (counts[i] as number) + 1;
  }
  let min = Infinity;
  let max = -Infinity;
  for (let i = 0; i < n; i++) {
    if (counts[i] === 0) continue;
    const m = (sums[i] as number) / (counts[i] as number);
    if (m < min) min = m;
    if (m > max) max = m;
  }
  if (min === Infinity) return '';
  let s = '';
  for (let i = 0; i < n; i++) {
    if (counts[i] === 0) {
      s += ' ';
      continue;
    }
    const m = (sums[i] as number) / (counts[i] as number);
    s += BLOCKS[max === min ? 3 : Math.round(((m - min) / (max - min)) * 7)];
  }
  return s;
}
