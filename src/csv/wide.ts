/**
 * The wide-row merger behind the CSV downloads (docs/api.md): k columns, each one key's cells ascending by
 * position (ts or ds), become one row per distinct position, ascending, with one cell per column (empty when
 * that column has no point there). Columns are pulled page by page, so memory is O(k pages) plus one output
 * chunk whatever the number of rows.
 */
import type { Column } from './column.js';
import { CsvBuffer } from './rfc4180.js';

export interface WideCsv {
  /** header fields: the position column's name, then one name per column */
  readonly header: readonly string[];
  /** one per header field after the first */
  readonly columns: readonly Column[];
  /** renders the first column; 'integer' writes safe integers digit by digit (ts, last_update_ts) */
  readonly formatPos: ((pos: number) => string) | 'integer';
}

/**
 * Yields the CSV (header, then rows) in chunks of at least `chunkBytes` bytes (the last may be shorter).
 * Each yielded Buffer is a view of one reused buffer: the consumer must copy or send it before resuming
 * the generator.
 */
export function* wideCsvChunks(table: WideCsv, chunkBytes: number): Generator<Buffer, void, undefined> {
  const out = new CsvBuffer(chunkBytes + 4096);
  out.record(table.header);
  const cols = table.columns;
  const k = cols.length;
  for (;;) {
    // Linear minimum: a row costs O(k) to write anyway, and k (keys of one device) is small.
    let min = Infinity;
    let any = false;
    for (let i = 0; i < k; i++) {
      const c = cols[i] as Column;
      if (!c.done && (!any || c.pos < min)) {
        min = c.pos;
        any = true;
      }
    }
    if (!any) break;
    if (table.formatPos === 'integer') out.integer(min);
    else out.field(table.formatPos(min));
    for (let i = 0; i < k; i++) {
      out.comma();
      const c = cols[i] as Column;
      if (!c.done && c.pos === min) {
        c.writeCell(out);
        c.advance();
      }
    }
    out.eol();
    if (out.length >= chunkBytes) {
      yield out.view();
      out.reset();
    }
  }
  if (out.length > 0) yield out.view();
}
