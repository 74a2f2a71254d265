/**
 * Human output of the technician's commands (docs/cli.md): aligned tables sized to the terminal, local
 * times, colour only on a TTY without NO_COLOR. `--json` output never comes through here.
 */
import type { EpochMs } from '../types.js';

/** Terminal width: the TTY's, else $COLUMNS, else 80. */
export function terminalColumns(): number {
  const fromEnv = Number(process.env['COLUMNS']);
  return process.stdout.columns ?? (Number.isInteger(fromEnv) && fromEnv > 0 ? fromEnv : 80);
}

export function useColour(): boolean {
  return process.stdout.isTTY === true && process.env['NO_COLOR'] === undefined;
}

export interface Style {
  dim(s: string): string;
  bold(s: string): string;
  accent(s: string): string;
}

const PLAIN: Style = { dim: (s) => s, bold: (s) => s, accent: (s) => s };
const ANSI: Style = {
  dim: (s) => `\x1b[2m${s}\x1b[22m`,
  bold: (s) => `\x1b[1m${s}\x1b[22m`,
  accent: (s) => `\x1b[36m${s}\x1b[39m`,
};

export const style = (): Style => (useColour() ? ANSI : PLAIN);

const pad2 = (n: number): string => String(n).padStart(2, '0');

/** `2026-11-24 14:03:05` in the box's local time zone (TZ); `.123` appended when the ms are not zero. */
/** whole seconds as the two largest units: `2d 3h`, `3h 0m`, `0m 4s` */
export function duration(sec: number): string {
  const d = Math.floor(sec / 86400);
  const h = Math.floor((sec % 86400) / 3600);
  const m = Math.floor((sec % 3600) / 60);
  return d > 0 ? `${d}d ${h}h` : h > 0 ? `${h}h ${m}m` : `${m}m ${sec % 60}s`;
}

export function localTime(ts: EpochMs): string {
  const d = new Date(ts);
  const ms = d.getMilliseconds();
  return (
    `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}` +
    (ms === 0 ? '' : `.${String(ms).padStart(3, '0')}`)
  );
}

/** `14:03` (or `11-24 14:03` when `withDate`), for chart axes. */
export function shortTime(ts: EpochMs, withDate: boolean): string {
  const d = new Date(ts);
  const hm = `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
  return withDate ? `${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${hm}` : hm;
}

/**
 * Text that came from a device or the store (names, keys, values), made safe for a terminal: every C0 control,
 * DEL and C1 control is shown as `\x1b`-style text, so a name or value can never set the window title, clear
 * the screen, move the cursor, open a link or overwrite a line. Human output only: `--json` and CSV stay exact.
 */
export function safeText(s: string): string {
  return CONTROL.test(s) ? s.replace(CONTROL_ALL, escapeControl) : s;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: C0, DEL and C1 controls
const CONTROL = /[\x00-\x1f\x7f-\x9f]/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: C0, DEL and C1 controls
const CONTROL_ALL = /[\x00-\x1f\x7f-\x9f]/g;
const escapeControl = (c: string): string => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`;

/** Display width of a string (ANSI escapes excluded; every other code point counts one column). */
export function displayWidth(s: string): number {
  let n = 0;
  // biome-ignore lint/suspicious/noControlCharactersInRegex: ANSI colour sequences start with ESC (0x1b)
  for (const _ of s.replace(/\x1b\[[0-9;]*m/g, '')) n++;
  return n;
}

/** `\x1b`-style escapes written by safeText: a cut keeps or drops each one whole. */
const ESCAPED_OR_CHAR = /\\x[0-9a-f]{2}|[\s\S]/gu;

/** `s` (already safeText) shortened to `width` columns with `…`, never cutting inside an escape. */
export function cut(s: string, width: number): string {
  if (displayWidth(s) <= width) return s;
  let out = '';
  let used = 0;
  for (const m of s.matchAll(ESCAPED_OR_CHAR)) {
    const w = m[0].length > 1 && m[0].startsWith('\\x') ? m[0].length : 1;
    if (used + w > width - 1) break;
    out += m[0];
    used += w;
  }
  return `${out}…`;
}

/**
 * An aligned table no wider than `width`: when it does not fit, the widest column is shortened (with `…`)
 * until it does. `align` per column, 'r' for numbers.
 */
export function table(
  headers: readonly string[],
  rows: ReadonlyArray<readonly string[]>,
  width: number,
  align: ReadonlyArray<'l' | 'r'> = [],
  st: Style = PLAIN,
  /** columns never cut (times): the others give way */
  whole: ReadonlySet<number> = new Set(),
  /** widths a column keeps while the others can still give way (a sparkline), then it gives way too */
  minWidths: ReadonlyArray<number> = [],
): string {
  const n = headers.length;
  headers = headers.map(safeText);
  rows = rows.map((r) => r.map(safeText));
  const widths = headers.map((h, i) => Math.max(displayWidth(h), ...rows.map((r) => displayWidth(r[i] ?? ''))));
  narrowWidths(widths, width, whole, minWidths);
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) => {
        const w = widths[i] as number;
        const text = cut(c, w);
        const gap = ' '.repeat(Math.max(0, w - displayWidth(text)));
        return align[i] === 'r' ? gap + text : i === n - 1 ? text : text + gap;
      })
      .join('  ')
      .trimEnd();
  return [st.bold(line(headers)), ...rows.map(line)].join('\n');
}

/**
 * Column widths (two spaces apart) shrunk in place until they fit `width`: the widest column above its floor
 * loses a character at a time, first down to `minWidths`, then down to 4; `whole` columns never shrink.
 */
function narrowWidths(
  widths: number[],
  width: number,
  whole: ReadonlySet<number>,
  minWidths: ReadonlyArray<number>,
): void {
  const total = (): number => widths.reduce((a, b) => a + b, 0) + 2 * (widths.length - 1);
  const narrow = (floor: (i: number) => number): void => {
    while (total() > width) {
      const room = widths.map((w, i) => (whole.has(i) || w <= floor(i) ? 0 : w));
      const widest = room.indexOf(Math.max(...room));
      if ((room[widest] as number) === 0) return;
      widths[widest] = (widths[widest] as number) - 1;
    }
  };
  narrow((i) => Math.max(4, minWidths[i] ?? 0));
  narrow(() => 4);
}

/**
 * One row of cells (already safeText) for a line of their own, two spaces apart, shortened as `table` shortens
 * its columns so that the line fits `width`: the widest cut with `…` first, `whole` ones never.
 */
export function fitCells(cells: readonly string[], width: number, whole: ReadonlySet<number> = new Set()): string[] {
  const widths = cells.map(displayWidth);
  narrowWidths(widths, width, whole, []);
  return cells.map((c, i) => cut(c, widths[i] as number));
}

/** A line of free text (an error message): cut with `…` to the width rather than broken. */
export interface CutLine {
  cut: string;
}

/**
 * Labelled lines (`label      figures`, already safeText) no wider than `width`, never wrapped by the
 * terminal: a wider line breaks at its field boundaries (`, `, `; ` and `: ` outside parentheses) into lines
 * indented under its text; a field still too wide, and a `CutLine`, is cut with `…` (`--json` has it whole).
 */
export function fitLines(lines: ReadonlyArray<string | CutLine>, width: number): string[] {
  const out: string[] = [];
  for (const l of lines) {
    if (typeof l !== 'string') out.push(cut(l.cut, width));
    else if (displayWidth(l) <= width) out.push(l);
    else out.push(...breakLine(l, width));
  }
  return out;
}

function breakLine(line: string, width: number): string[] {
  // under the text after the label (`sync       `, `outpost 0.1.0  `), or under a continuation's own indent
  const lead = /^ +/.exec(line)?.[0].length ?? /^\S+(?: \S+)*? {2,}/.exec(line)?.[0].length ?? 2;
  const indent = ' '.repeat(lead <= width / 3 ? lead : 2);
  const fields: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === '(') depth++;
    else if (c === ')') depth = Math.max(0, depth - 1);
    else if (depth === 0 && (c === ',' || c === ';' || c === ':') && line[i + 1] === ' ') {
      fields.push(line.slice(start, i + 1));
      start = i + 2;
    }
  }
  fields.push(line.slice(start));
  const out: string[] = [];
  let cur = fields[0] as string;
  for (const f of fields.slice(1)) {
    if (displayWidth(cur) + 1 + displayWidth(f) <= width) cur += ` ${f}`;
    else {
      out.push(cut(cur, width));
      cur = indent + f;
    }
  }
  out.push(cut(cur, width));
  return out;
}
