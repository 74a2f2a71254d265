/**
 * A one-pass parser for the common telemetry bodies (docs/api.md) that fills the per-key columns directly,
 * without the intermediate JsonValue tree: `{k:v,..}`, `{"ts":ms,"values":{k:v,..}}` or an array of those,
 * with scalar values. It reads the body's bytes (indexing a Buffer is ~3× faster than charCodeAt here, and
 * the string is never built) and takes ASCII keys and strings only. It answers `undefined` ("not mine") for
 * anything else and for every error, and the general path (parseJson → parseTelemetry) then decides, so each
 * error and each rarity (non-ASCII text, escapes in strings, nested values, duplicate keys, keys starting
 * with a digit, a "ts" that is not a plain integer, null under rejectNull, ...) is handled in exactly one
 * place. A successful answer equals what the general path gives.
 */
import { type SeriesColumn, TelemetryBatch } from '../model/batch.js';
import { type KvValue, kvBool, kvDouble, kvLong, kvString } from '../model/kv.js';
import type { EpochMs } from '../types.js';
import type { KvEntry } from '../model/record.js';
import { MAX_KEY_LENGTH, parseBody, parseTelemetry } from './payload.js';
import { isParsableNumber, typeNumberLiteral } from './typing.js';

/** 10^0 … 10^16, each exact in a double */
const POW10 = Array.from({ length: 17 }, (_, k) => 10 ** k);

/** number() results */
const NUM_LONG = 0;
const NUM_DOUBLE = 1;
const NUM_OTHER = 2;

/** thrown inside this module only: "hand over to the general path" */
const BAIL = Symbol('bail');

/** at most this many keys per object (duplicate detection is quadratic) */
const MAX_FAST_KEYS = 64;

/** A telemetry body → its columns: the fast path when it applies, else parseBody + parseTelemetry. */
export function parseTelemetryBody(body: Buffer, now: EpochMs, rejectNull = false): TelemetryBatch {
  return (
    parseTelemetryFast(body, now, rejectNull) ??
    TelemetryBatch.fromRecords(parseTelemetry(parseBody(body), now, rejectNull))
  );
}

export function parseTelemetryFast(body: Buffer, now: EpochMs, rejectNull: boolean): TelemetryBatch | undefined {
  try {
    return new FastParser(body, now, rejectNull).telemetry();
  } catch {
    // BAIL, or a typing error (a literal out of range) perhaps in a member the general path ignores: it decides
    return undefined;
  }
}

class FastParser {
  private i = 0;
  private readonly n: number;
  /** set by value(): the key "ts"'s integer when the last value was a plain integer */
  private lastInt = 0;
  private lastWasInt = false;
  /** set by number(): LONG (a safe integer in `num`), DOUBLE (in `num`), or OTHER (the value in `numOther`) */
  private numKind = NUM_LONG;
  private num = 0;
  private numOther: KvValue | undefined;
  private readonly batch = new TelemetryBatch();
  /** the column of the key last seen at each position of a "values" object: batches repeat their keys */
  private readonly colKey: string[] = [];
  private readonly colAt: SeriesColumn[] = [];
  /**
   * The last `{"ts":<int>,"values":{<numbers>}}` record's bytes between its values, and its columns: the next
   * records of a batch usually repeat it byte for byte but for the numbers (see recordFromTemplate).
   */
  private template: { readonly segments: Buffer[]; readonly columns: SeriesColumn[] } | undefined;
  /** pourValues' account of the object it read: value spans and columns, and whether all were plain numbers */
  private pourCount = 0;
  private pourNumeric = true;
  private readonly pourStart: number[] = [];
  private readonly pourEnd: number[] = [];
  private readonly pourCols: SeriesColumn[] = [];
  /** recordFromTemplate's numbers, pushed only once the whole record matched */
  private readonly tplKinds: number[] = [];
  private readonly tplNums: number[] = [];
  /** keys of the object being parsed at each level (0: record, 1: its "values"), for duplicate detection; the
   * first `count` entries are the current object's */
  private readonly seen: [string[], string[]] = [[], []];
  /**
   * keys of the previous object at each level by position: a body of many records repeats its keys, and
   * reusing one string per key skips a copy here and lets later Map lookups reuse its cached hash
   */
  private readonly prev: [string[], string[]] = [[], []];

  constructor(
    private readonly buf: Buffer,
    private readonly now: EpochMs,
    private readonly rejectNull: boolean,
  ) {
    this.n = buf.length;
  }

  telemetry(): TelemetryBatch {
    this.ws();
    const c = this.buf[this.i];
    if (c === 123) {
      this.record();
    } else if (c === 91) {
      this.i++;
      this.ws();
      if (this.buf[this.i] === 93) {
        this.i++;
      } else {
        for (;;) {
          this.ws();
          if (this.buf[this.i] !== 123) throw BAIL;
          if (!this.recordFromTemplate()) this.record();
          this.ws();
          const d = this.buf[this.i++];
          if (d === 44) continue;
          if (d === 93) break;
          throw BAIL;
        }
      }
    } else {
      throw BAIL;
    }
    this.ws();
    if (this.i !== this.n) throw BAIL;
    return this.batch;
  }

  /**
   * One telemetry object at `{`, the flat or the timestamped form, into the batch's columns. The common
   * `{"ts":<int>,"values":{..}}` pours its values straight into the columns; the rest collects entries first,
   * since the form is known only at the object's end.
   */
  private record(): void {
    const recStart = this.i;
    this.i++; // '{'
    let tsStart = 0;
    let tsEnd = 0;
    // The flat form's entries, allocated only when a member other than "ts" and "values" appears: a batch of
    // timestamped records then allocates nothing here. "ts" is kept aside with its position, in case the
    // object turns out to be the flat form after all (a device key named "ts").
    let flat: KvEntry[] | undefined;
    let tsValue: KvValue | undefined;
    let tsAt = 0;
    let keyCount = 0;
    let hasTs = false;
    let ts = 0;
    let values: KvEntry[] | undefined;
    /** "values" went straight into the columns (with `ts`) */
    let poured = false;
    let hasValues = false;
    if (this.emptyObjectRest()) return;
    for (;;) {
      this.ws();
      const key = this.key(0, keyCount++);
      this.ws();
      const c = this.buf[this.i];
      if (key === 'values' && c === 123) {
        hasValues = true;
        // With an integer "ts" already seen, this object is the timestamped form whatever follows (key()
        // refuses a second "values" or "ts", and any error discards the whole batch).
        if (hasTs && !Number.isNaN(ts)) {
          this.pourValues(ts);
          poured = true;
        } else {
          values = this.flatObject();
        }
      } else {
        const valueStart = this.i;
        const v = this.value();
        if (key === 'ts') {
          tsStart = valueStart;
          tsEnd = this.i;
          // key() refuses a duplicate, so this runs at most once per object
          hasTs = true;
          ts = this.lastWasInt ? this.lastInt : NaN;
          tsValue = v;
          tsAt = flat === undefined ? 0 : flat.length;
        } else {
          if (key === 'values') hasValues = true;
          if (v !== undefined) (flat ??= []).push([key, v]);
        }
      }
      this.ws();
      const d = this.buf[this.i++];
      if (d === 44) continue;
      if (d === 125) break;
      throw BAIL;
    }
    if (poured) {
      // {"ts":<int>,"values":{..}} and nothing else, all values plain numbers: the next record's template
      if (keyCount === 2 && tsStart < tsEnd && this.pourNumeric && this.pourCount > 0)
        this.makeTemplate(recStart, tsStart, tsEnd);
      return;
    }
    if (hasTs && hasValues) {
      // the timestamped form: values must be an object, ts a plain integer (anything else → general path)
      if (values === undefined || Number.isNaN(ts)) throw BAIL;
      this.entriesAt(ts, values);
      return;
    }
    // the flat form: a "values" object would be a JSON-typed value (rare: general path)
    if (values !== undefined) throw BAIL;
    const entries = flat ?? [];
    if (tsValue !== undefined) entries.splice(tsAt, 0, ['ts', tsValue]);
    this.entriesAt(this.now, entries);
  }

  /** Keeps the bytes around the values of the record just parsed (see recordFromTemplate). */
  private makeTemplate(recStart: number, tsStart: number, tsEnd: number): void {
    const buf = this.buf;
    const n = this.pourCount;
    // views, not copies: the template lives as long as this parser, which lives as long as the body
    const segments = [buf.subarray(recStart, tsStart), buf.subarray(tsEnd, this.pourStart[0])];
    for (let j = 1; j < n; j++) segments.push(buf.subarray(this.pourEnd[j - 1], this.pourStart[j]));
    segments.push(buf.subarray(this.pourEnd[n - 1], this.i));
    this.template = { segments, columns: this.pourCols.slice(0, n) };
  }

  /**
   * A record at `{` that repeats the template's bytes exactly but for its numbers (an integer ts and plain
   * LONG/DOUBLE values): its values go straight to the template's columns, with no key scanning, duplicate
   * checks or column lookups; the keys and structure were checked when the template was made. Anything else
   * (other keys, spacing, a null, a string, a literal the general typing must see) → false with nothing
   * consumed or stored, and record() parses it.
   */
  private recordFromTemplate(): boolean {
    const tpl = this.template;
    if (tpl === undefined) return false;
    const { segments, columns } = tpl;
    const start = this.i;
    let seg = segments[0] as Buffer;
    if (!this.bytesAt(seg, start)) return false;
    this.i = start + seg.length;
    this.lastWasInt = false;
    if (!this.atNumber()) {
      this.i = start;
      return false;
    }
    this.number();
    if (!this.lastWasInt) {
      this.i = start;
      return false;
    }
    const ts = this.lastInt;
    const kinds = this.tplKinds;
    const nums = this.tplNums;
    const n = columns.length;
    for (let j = 0; j <= n; j++) {
      seg = segments[j + 1] as Buffer;
      if (!this.bytesAt(seg, this.i)) {
        this.i = start;
        return false;
      }
      this.i += seg.length;
      if (j === n) break;
      if (!this.atNumber()) {
        this.i = start;
        return false;
      }
      this.number();
      if (this.numKind === NUM_OTHER) {
        this.i = start;
        return false;
      }
      kinds[j] = this.numKind;
      nums[j] = this.num;
    }
    for (let j = 0; j < n; j++) {
      const col = columns[j] as SeriesColumn;
      if (kinds[j] === NUM_LONG) col.pushLong(ts, nums[j] as number);
      else col.pushDouble(ts, nums[j] as number);
    }
    return true;
  }

  private atNumber(): boolean {
    const c = this.buf[this.i] as number;
    return c === 45 || (c >= 48 && c <= 57);
  }

  /** Whether the body holds `bytes` at `at`. */
  private bytesAt(bytes: Uint8Array, at: number): boolean {
    const buf = this.buf;
    if (at + bytes.length > this.n) return false;
    for (let j = 0; j < bytes.length; j++) if (buf[at + j] !== bytes[j]) return false;
    return true;
  }

  /** Whether the body holds the ASCII `word` at `at`. */
  private wordAt(word: string, at: number): boolean {
    const buf = this.buf;
    if (at + word.length > this.n) return false;
    for (let j = 0; j < word.length; j++) if (buf[at + j] !== word.charCodeAt(j)) return false;
    return true;
  }

  /** The ASCII bytes [start, end) as a string. */
  private ascii(start: number, end: number): string {
    return this.buf.toString('latin1', start, end);
  }

  /** The column of `key`, found at position `pos` of a "values" object (created at its first point). */
  private columnAt(pos: number, key: string): SeriesColumn {
    const col = this.colAt[pos];
    if (col !== undefined && this.colKey[pos] === key) return col;
    const found = this.batch.column(key);
    this.colAt[pos] = found;
    this.colKey[pos] = key;
    return found;
  }

  private entriesAt(ts: number, entries: readonly KvEntry[]): void {
    for (const [key, v] of entries) this.batch.column(key).push(ts, v);
  }

  /** A `{k: scalar, ..}` object at `{` → straight into the columns at `ts`, numbers unboxed; nulls skipped. */
  private pourValues(ts: number): void {
    this.i++;
    let keyCount = 0;
    this.pourCount = 0;
    this.pourNumeric = true;
    if (this.emptyObjectRest()) return;
    for (;;) {
      this.ws();
      const pos = keyCount;
      const key = this.key(1, keyCount++);
      this.ws();
      if (this.atNumber()) {
        const start = this.i;
        this.number();
        const col = this.columnAt(pos, key);
        if (this.numKind === NUM_LONG) col.pushLong(ts, this.num);
        else if (this.numKind === NUM_DOUBLE) col.pushDouble(ts, this.num);
        else {
          col.push(ts, this.numOther as KvValue);
          this.pourNumeric = false;
        }
        this.pourStart[pos] = start;
        this.pourEnd[pos] = this.i;
        this.pourCols[pos] = col;
        this.pourCount = keyCount;
      } else {
        this.pourNumeric = false;
        const v = this.value();
        if (v !== undefined) this.columnAt(pos, key).push(ts, v);
      }
      this.ws();
      const d = this.buf[this.i++];
      if (d === 44) continue;
      if (d === 125) return;
      throw BAIL;
    }
  }

  /** A `{k: scalar, ..}` object at `{` → typed entries, nulls skipped. */
  private flatObject(): KvEntry[] {
    this.i++;
    const out: KvEntry[] = [];
    let keyCount = 0;
    if (this.emptyObjectRest()) return out;
    for (;;) {
      this.ws();
      const key = this.key(1, keyCount++);
      this.ws();
      const v = this.value();
      if (v !== undefined) out.push([key, v]);
      this.ws();
      const d = this.buf[this.i++];
      if (d === 44) continue;
      if (d === 125) return out;
      throw BAIL;
    }
  }

  /**
   * A member name at `"` and its `:`. BAIL for escapes, keys checkKey would refuse or that JS would enumerate
   * out of document order (array indices: first character a digit), "__proto__", and duplicates.
   */
  private key(level: 0 | 1, count: number): string {
    const buf = this.buf;
    if (buf[this.i] !== 34 || count >= MAX_FAST_KEYS) throw BAIL;
    const start = ++this.i;
    for (;;) {
      if (this.i >= this.n) throw BAIL;
      const c = buf[this.i] as number;
      if (c === 34) break;
      if (c === 92 || c < 32 || c >= 128) throw BAIL;
      this.i++;
    }
    const len = this.i - start;
    const c0 = buf[start] as number;
    // printable ASCII first character, not a digit: not blank, not an array index
    if (len === 0 || len > MAX_KEY_LENGTH || c0 <= 32 || c0 >= 127 || (c0 >= 48 && c0 <= 57)) throw BAIL;
    const prev = this.prev[level];
    const candidate = prev[count];
    let key: string;
    if (candidate !== undefined && candidate.length === len && this.wordAt(candidate, start)) {
      key = candidate;
    } else {
      key = this.ascii(start, this.i);
      prev[count] = key;
    }
    this.i++;
    if (key === '__proto__') throw BAIL;
    const seen = this.seen[level];
    for (let k = 0; k < count; k++) if (seen[k] === key) throw BAIL;
    seen[count] = key;
    this.ws();
    if (buf[this.i] !== 58) throw BAIL;
    this.i++;
    return key;
  }

  /** A scalar value → its TB typing; undefined for null (skipped); BAIL for objects, arrays, escapes. */
  private value(): KvValue | undefined {
    const buf = this.buf;
    this.lastWasInt = false;
    const c = buf[this.i] as number;
    if (c === 34) {
      const start = ++this.i;
      for (;;) {
        if (this.i >= this.n) throw BAIL;
        const d = buf[this.i] as number;
        if (d === 34) break;
        if (d === 92 || d < 32 || d >= 128) throw BAIL;
        this.i++;
      }
      const s = this.ascii(start, this.i);
      this.i++;
      return isParsableNumber(s) ? typeNumberLiteral(s) : kvString(s);
    }
    if (c === 45 || (c >= 48 && c <= 57)) {
      this.number();
      if (this.numKind === NUM_LONG) return kvLong(this.num);
      if (this.numKind === NUM_DOUBLE) return kvDouble(this.num);
      return this.numOther;
    }
    if (c === 116) {
      if (this.wordAt('true', this.i)) {
        this.i += 4;
        return kvBool(true);
      }
      throw BAIL;
    }
    if (c === 102) {
      if (this.wordAt('false', this.i)) {
        this.i += 5;
        return kvBool(false);
      }
      throw BAIL;
    }
    if (c === 110) {
      if (!this.wordAt('null', this.i) || this.rejectNull) throw BAIL;
      this.i += 4;
      return undefined;
    }
    throw BAIL;
  }

  /**
   * The general parser's number grammar and its split: plain safe integers are numbers, the rest literals.
   * The result goes to numKind/num/numOther, so a column takes it without a KvValue.
   */
  private number(): void {
    const buf = this.buf;
    const n = this.n;
    const start = this.i;
    let i = start;
    if ((buf[i] as number) === 45) i++;
    const intStart = i;
    let c = buf[i] as number;
    let acc = 0;
    if (c === 48) {
      i++;
    } else if (c >= 49 && c <= 57) {
      while (i < n && (c = buf[i] as number) >= 48 && c <= 57) {
        acc = acc * 10 + (c - 48);
        i++;
      }
    } else {
      throw BAIL;
    }
    const intLen = i - intStart;
    c = buf[i] as number;
    if (intLen <= 15 && c !== 46 && c !== 101 && c !== 69 && !(acc === 0 && start !== intStart)) {
      this.i = i;
      const v = start !== intStart ? -acc : acc;
      this.lastWasInt = true;
      this.lastInt = v;
      this.numKind = NUM_LONG;
      this.num = v;
      return;
    }
    let simple = true;
    let fracLen = 0;
    let exp = false;
    if (c === 46) {
      simple = false;
      i++;
      const f = i;
      while (i < n && (c = buf[i] as number) >= 48 && c <= 57) {
        acc = acc * 10 + (c - 48);
        i++;
      }
      if (i === f) throw BAIL;
      fracLen = i - f;
    }
    c = buf[i] as number;
    if (c === 101 || c === 69) {
      simple = false;
      exp = true;
      i++;
      c = buf[i] as number;
      if (c === 43 || c === 45) i++;
      const e = i;
      while (i < n && (c = buf[i] as number) >= 48 && c <= 57) i++;
      if (i === e) throw BAIL;
    }
    this.i = i;
    // a simple decimal (no exponent) with at most 16 fraction digits is a DOUBLE (typeNumberLiteral's first rule).
    // With at most 15 digits in all, digits ÷ 10^fracLen is exact ÷ exact, one rounding: the same double as
    // Number(literal) (Clinger's fast path), without the string.
    if (fracLen >= 1 && fracLen <= 16 && !exp) {
      if (intLen + fracLen <= 15) {
        const v = acc / (POW10[fracLen] as number);
        this.numKind = NUM_DOUBLE;
        this.num = start !== intStart ? -v : v;
        return;
      }
      this.numKind = NUM_DOUBLE;
      this.num = Number(this.ascii(start, i));
      return;
    }
    const lit = this.ascii(start, i);
    if (simple && lit !== '-0') {
      const v = Number(lit);
      if (Number.isSafeInteger(v)) {
        this.numKind = NUM_LONG;
        this.num = v;
        return;
      }
    }
    this.numKind = NUM_OTHER;
    this.numOther = typeNumberLiteral(lit);
  }

  /** Just past an object's `{`: whether it is empty, its `}` then consumed. */
  private emptyObjectRest(): boolean {
    this.ws();
    if (this.buf[this.i] !== 125) return false;
    this.i++;
    return true;
  }

  private ws(): void {
    const buf = this.buf;
    while (this.i < this.n) {
      const c = buf[this.i] as number;
      if (c === 32 || c === 10 || c === 13 || c === 9) this.i++;
      else break;
    }
  }
}
