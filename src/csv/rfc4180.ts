/**
 * RFC 4180 writing (docs/api.md). A field is quoted when it holds a comma, a double quote, CR or LF; quotes
 * inside are doubled. Records end with LF (as Tempus; RFC 4180 readers accept it). A present-but-empty string
 * value is written as `""` so that it stays distinguishable from a missing cell, which is written as nothing.
 *
 * `CsvBuffer` writes fields straight into one reusable byte buffer, so streaming millions of rows allocates no
 * per-row strings or chunk buffers (a download of any size must run in bounded memory, so that garbage matters).
 */

/** Record terminator. */
export const EOL = '\n';

const NEEDS_QUOTES = /[",\r\n]/;
const COMMA = 0x2c;
const LF = 0x0a;

/** One field of a present value, as text. */
export function csvField(value: string): string {
  if (value === '') return '""';
  if (!NEEDS_QUOTES.test(value)) return value;
  return `"${value.replace(/"/g, '""')}"`;
}

/** One record from present values (every field written with `csvField`), with its terminator. */
export function csvRecord(fields: readonly string[]): string {
  let out = '';
  for (let i = 0; i < fields.length; i++) out += (i === 0 ? '' : ',') + csvField(fields[i] as string);
  return out + EOL;
}

/**
 * A growable byte buffer of CSV text. `view()` returns the bytes written so far without copying; the view is
 * only valid until the next write after `reset()` (the owner hands it to a consumer that copies, e.g. uWS
 * `write`, then resets).
 */
export class CsvBuffer {
  private buf: Buffer;
  private len = 0;

  constructor(initialBytes = 64 * 1024) {
    this.buf = Buffer.allocUnsafe(initialBytes);
  }

  get length(): number {
    return this.len;
  }

  /** A present value as one field (quoted when needed). */
  field(value: string): void {
    if (value === '') {
      this.ensure(2);
      this.buf[this.len++] = 0x22;
      this.buf[this.len++] = 0x22;
      return;
    }
    this.raw(NEEDS_QUOTES.test(value) ? `"${value.replace(/"/g, '""')}"` : value);
  }

  /** A safe integer as a field, written digit by digit (no string allocated: this runs once per cell). */
  integer(n: number): void {
    if (!Number.isSafeInteger(n)) {
      this.raw(String(n));
      return;
    }
    this.ensure(17);
    let v = n;
    if (v < 0) {
      this.buf[this.len++] = 0x2d;
      v = -v;
    }
    let digits = 1;
    for (let x = v; x >= 10; x = Math.floor(x / 10)) digits++;
    for (let i = this.len + digits - 1; i >= this.len; i--) {
      this.buf[i] = 0x30 + (v % 10);
      v = Math.floor(v / 10);
    }
    this.len += digits;
  }

  comma(): void {
    this.ensure(1);
    this.buf[this.len++] = COMMA;
  }

  eol(): void {
    this.ensure(1);
    this.buf[this.len++] = LF;
  }

  /** A whole record of present values. */
  record(fields: readonly string[]): void {
    for (let i = 0; i < fields.length; i++) {
      if (i > 0) this.comma();
      this.field(fields[i] as string);
    }
    this.eol();
  }

  /** Appends bytes [start, end) of another buffer's content (a pre-rendered field). */
  append(src: CsvBuffer, start: number, end: number): void {
    this.ensure(end - start);
    src.buf.copy(this.buf, this.len, start, end);
    this.len += end - start;
  }

  view(): Buffer {
    return this.buf.subarray(0, this.len);
  }

  reset(): void {
    this.len = 0;
  }

  private raw(text: string): void {
    // UTF-8 needs at most 3 bytes per UTF-16 code unit.
    this.ensure(text.length * 3);
    this.len += this.buf.write(text, this.len, 'utf8');
  }

  private ensure(bytes: number): void {
    if (this.len + bytes <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.len + bytes));
    this.buf.copy(next, 0, 0, this.len);
    this.buf = next;
  }
}
