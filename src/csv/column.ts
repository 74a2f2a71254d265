/**
 * A column of the wide CSV: one key's cells in ascending position, loaded page by page into reused typed
 * arrays and one reused byte buffer holding the cells already rendered as CSV fields.
 *
 * Why not objects per cell: a download of millions of rows otherwise leaves pages of {pos, text} objects that
 * live long enough to be promoted to V8's old space, and the heap balloons until a major GC (measured: tens of
 * MB). Here a page is three buffers per column, reused for every page, so RssAnon stays flat.
 */
import { type KvValue, kvToString } from '../model/kv.js';
import { CsvBuffer } from './rfc4180.js';

/** One point of a column: its position (ts or ds) and its cell text (unquoted). */
export interface Cell {
  readonly pos: number;
  readonly text: string;
}

/** The page being filled by a loader. */
export class ColumnPage {
  count = 0;
  pos = new Float64Array(1024);
  /** end offset in `bytes` of each cell's field; a cell starts where the previous one ends */
  ends = new Uint32Array(1024);
  readonly bytes = new CsvBuffer(16 * 1024);

  /** Adds a cell; positions must be strictly ascending across every page of a column. */
  add(pos: number, text: string): void {
    this.bytes.field(text);
    this.commit(pos);
  }

  /** Adds a stored value, rendered as TB renders it (kvToString); integers without an intermediate string. */
  addValue(pos: number, value: KvValue): void {
    if (value.type === 'LONG' && typeof value.v === 'number') this.bytes.integer(value.v);
    else this.bytes.field(kvToString(value));
    this.commit(pos);
  }

  /** Records the cell just written to `bytes`. */
  private commit(pos: number): void {
    if (this.count === this.pos.length) {
      const p = new Float64Array(this.count * 2);
      p.set(this.pos);
      this.pos = p;
      const e = new Uint32Array(this.count * 2);
      e.set(this.ends);
      this.ends = e;
    }
    this.pos[this.count] = pos;
    this.ends[this.count] = this.bytes.length;
    this.count++;
  }

  reset(): void {
    this.count = 0;
    this.bytes.reset();
  }
}

/** Fills `page` with the next cells of a column; adding none means the column is exhausted. */
export type PageLoader = (page: ColumnPage) => void;

export class Column {
  private readonly page = new ColumnPage();
  private i = 0;
  private exhausted = false;

  /** Loads the first page at once, so `done` tells whether the column has any cell. */
  constructor(private readonly load: PageLoader) {
    this.fill();
  }

  /** A column over cells pulled from an iterator, `pageSize` at a time. */
  static of(cells: Iterator<Cell>, pageSize = 1024): Column {
    return new Column((page) => {
      for (let n = 0; n < pageSize; n++) {
        const r = cells.next();
        if (r.done) return;
        page.add(r.value.pos, r.value.text);
      }
    });
  }

  get done(): boolean {
    return this.exhausted;
  }

  /** Position of the current cell. Precondition: !done. */
  get pos(): number {
    return this.page.pos[this.i] as number;
  }

  /** Appends the current cell's field to `out`. Precondition: !done. */
  writeCell(out: CsvBuffer): void {
    const start = this.i === 0 ? 0 : (this.page.ends[this.i - 1] as number);
    out.append(this.page.bytes, start, this.page.ends[this.i] as number);
  }

  advance(): void {
    if (++this.i >= this.page.count) this.fill();
  }

  private fill(): void {
    this.page.reset();
    this.i = 0;
    if (!this.exhausted) this.load(this.page);
    this.exhausted = this.page.count === 0;
  }
}
