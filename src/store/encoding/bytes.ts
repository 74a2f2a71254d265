/**
 * Byte-aligned primitives of the point-block codec (gorilla.ts) and the rollup block codec: a growable writer and
 * a reader of varints and zigzag varints, and runs of first or second differences with zero runs collapsed.
 */
/** A growable byte buffer with varint writers. */
export class ByteWriter {
  private buf: Buffer;
  length = 0;

  constructor(initial = 256) {
    this.buf = Buffer.allocUnsafe(initial);
  }

  private ensure(n: number): void {
    if (this.length + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.length + n));
    this.buf.copy(next, 0, 0, this.length);
    this.buf = next;
  }

  u8(v: number): void {
    this.ensure(1);
    this.buf[this.length++] = v;
  }

  /** Unsigned integer 0 ≤ v < 2^53 as a LEB128 varint. */
  uvar(v: number): void {
    this.ensure(8);
    while (v >= 0x80) {
      this.buf[this.length++] = (v % 0x80) | 0x80;
      v = Math.floor(v / 0x80);
    }
    this.buf[this.length++] = v;
  }

  /** Signed integer |v| < 2^52 as a zigzag varint. */
  svar(v: number): void {
    this.uvar(v >= 0 ? v * 2 : -v * 2 - 1);
  }

  bytes(b: Uint8Array): void {
    this.ensure(b.length);
    this.buf.set(b, this.length);
    this.length += b.length;
  }

  f64(v: number): void {
    this.ensure(8);
    this.buf.writeDoubleBE(v, this.length);
    this.length += 8;
  }

  /** Appends what another writer holds. */
  append(other: ByteWriter): void {
    this.ensure(other.length);
    other.buf.copy(this.buf, this.length, 0, other.length);
    this.length += other.length;
  }

  /** A copy of the written bytes (the writer may be reused). */
  finish(): Buffer {
    return Buffer.from(this.buf.subarray(0, this.length));
  }
}

/** Cursor over a block. */
export class ByteReader {
  pos: number;
  constructor(
    readonly buf: Buffer,
    pos = 0,
  ) {
    this.pos = pos;
  }
  u8(): number {
    const v = this.buf[this.pos++];
    if (v === undefined) throw new Error('corrupt block: truncated');
    return v;
  }
  uvar(): number {
    let v = 0;
    let mul = 1;
    for (;;) {
      const b = this.u8();
      v += (b & 0x7f) * mul;
      if (b < 0x80) return v;
      mul *= 0x80;
    }
  }
  svar(): number {
    const z = this.uvar();
    return z % 2 === 0 ? z / 2 : -(z + 1) / 2;
  }
  f64(): number {
    const v = this.buf.readDoubleBE(this.pos);
    this.pos += 8;
    return v;
  }
  slice(n: number): Buffer {
    const s = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return s;
  }
}

/**
 * Writes `ints[from..to)` as differences of order `order` (1 or 2), zigzag varints; a zero is followed by the
 * count of further zeros (zero-run-length: regular timestamps and steady counters collapse, other values cost
 * 1 varint). `base` is subtracted from every value first (timestamps relative to the block's first).
 */
export function writeDiffs(
  w: ByteWriter,
  ints: ArrayLike<number>,
  order: 1 | 2,
  from = 0,
  to = ints.length,
  base = 0,
): void {
  let prev = 0;
  let prevDelta = 0;
  let zeros = -1;
  for (let i = from; i < to; i++) {
    const v = (ints[i] as number) - base;
    const delta = v - prev;
    const out = order === 1 ? delta : delta - prevDelta;
    prev = v;
    prevDelta = delta;
    if (out === 0) {
      zeros++;
      continue;
    }
    if (zeros >= 0) {
      w.u8(0);
      w.uvar(zeros);
      zeros = -1;
    }
    w.svar(out);
  }
  if (zeros >= 0) {
    w.u8(0);
    w.uvar(zeros);
  }
}
/**
 * Reads `n` values written by writeDiffs into `out` (appending). With `stopAtOrAbove`, stops right after the
 * first value ≥ it (ascending streams: the rest is not needed); the reader is then left inside the stream.
 * Varints are decoded inline: this loop is the hot path of every chunk read.
 */
export function readDiffs(r: ByteReader, n: number, order: 1 | 2, out: number[], stopAtOrAbove = Infinity): void {
  const buf = r.buf;
  let pos = r.pos;
  let prev = 0;
  let prevDelta = 0;
  let len = out.length;
  while (len < n) {
    let b = buf[pos++] as number;
    let z = b & 0x7f;
    for (let mul = 0x80; b >= 0x80; mul *= 0x80) {
      b = buf[pos++] as number;
      z += (b & 0x7f) * mul;
    }
    if (b === undefined) throw new Error('corrupt block: truncated');
    const d = z % 2 === 0 ? z / 2 : -(z + 1) / 2;
    let repeats = 1;
    if (d === 0) {
      b = buf[pos++] as number;
      let c = b & 0x7f;
      for (let mul = 0x80; b >= 0x80; mul *= 0x80) {
        b = buf[pos++] as number;
        c += (b & 0x7f) * mul;
      }
      repeats = c + 1;
    }
    for (let j = 0; j < repeats && len < n; j++) {
      const delta = order === 1 ? d : prevDelta + d;
      prev += delta;
      prevDelta = delta;
      out.push(prev);
      len++;
      if (prev >= stopAtOrAbove) {
        r.pos = pos;
        return;
      }
    }
  }
  r.pos = pos;
}
