/**
 * The write-ahead log of telemetry (SD-card endurance: docs/design/write-path.md). A device's post is acknowledged once its
 * record is in the log and the log is fdatasync'ed; LMDB gets the points later, many posts in one transaction
 * (series/apply.ts `applyLogged`), because every LMDB commit copies each B-tree page it touches (tens of KB)
 * while a log append costs the one page it lands on.
 *
 * Segments are preallocated and filled with zeros once, then recycled (renamed) instead of deleted, so an
 * append never changes a file's size or allocates a block: ext4's fdatasync then writes the data page alone,
 * without a journal commit (PostgreSQL's WAL does the same).
 *
 * A record: [u32 payload length][u32 crc32 of (length, lsn, payload)][u64 lsn][payload]. Records of a segment
 * are consecutive LSNs starting at the LSN in the segment's name; reading stops at the first record that is
 * torn (bad checksum), stale (a previous life of a recycled segment: a smaller LSN) or missing (zeros), and
 * continues in the segment named with the next LSN. So recovery reads back exactly a prefix of what was
 * written, and every record it returns is whole.
 *
 * Order of durability: a record is acknowledged only after its segment's data is fdatasync'ed and, when the
 * segment was created or renamed for it, after that file and the directory are synced. A segment is recycled
 * only once every record in it is in LMDB *and* LMDB has synced (markApplied).
 *
 * The file operations go through `WalFs` so the crash test can substitute a layer that loses whatever was not
 * synced (test/store/wal-crash.test.ts).
 */
import * as fs from 'node:fs';
import { join } from 'node:path';
import * as zlib from 'node:zlib';
import { pack, unpack } from 'msgpackr';
import { type ColumnKind, SeriesColumn } from '../model/batch.js';
import type { KvValue } from '../model/kv.js';

/** One open segment file. Reads are synchronous (recovery only, at start); writes and syncs are not. */
export interface WalFile {
  readonly size: number;
  read(pos: number, len: number): Buffer;
  write(buf: Buffer, pos: number): Promise<void>;
  datasync(): Promise<void>;
  close(): void;
}

/** The directory of segments. */
export interface WalFs {
  /** names of the files in the directory */
  list(): string[];
  open(name: string): WalFile;
  /** a new file of `size` zero bytes, its data and the directory entry synced */
  create(name: string, size: number): Promise<WalFile>;
  /** renames, then syncs the directory */
  rename(from: string, to: string): Promise<void>;
  remove(name: string): void;
}

const HEADER = 16;
/** spare segments kept for reuse (16 MiB of disk at the default store.walSegmentBytes) */
const MAX_SPARE_SEGMENTS = 16;
/** 4 KiB pages: an append costs the page(s) it touches, whatever the record's size */
const PAGE = 4096;

const crc32: (data: Uint8Array, value?: number) => number =
  (zlib as { crc32?: (d: Uint8Array, v?: number) => number }).crc32 ?? crc32Table;

let table: Uint32Array | undefined;
/** zlib.crc32 is Node ≥ 20.15; the same CRC (IEEE) for older ones */
function crc32Table(data: Uint8Array, value = 0): number {
  if (table === undefined) {
    table = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      table[n] = c >>> 0;
    }
  }
  let c = ~value >>> 0;
  for (let i = 0; i < data.length; i++) c = (table[(c ^ (data[i] as number)) & 0xff] as number) ^ (c >>> 8);
  return ~c >>> 0;
}

function checksum(buf: Buffer, at: number, len: number): number {
  return crc32(buf.subarray(at + 8, at + HEADER + len), crc32(buf.subarray(at, at + 4)));
}

/** One record framed for the log. */
export function frame(lsn: number, payload: Buffer): Buffer {
  const buf = Buffer.allocUnsafe(HEADER + payload.length);
  buf.writeUInt32LE(payload.length, 0);
  buf.writeBigUInt64LE(BigInt(lsn), 8);
  payload.copy(buf, HEADER);
  buf.writeUInt32LE(checksum(buf, 0, payload.length), 4);
  return buf;
}

const NAME = /^wal-([0-9a-f]{16})\.seg$/;
const segName = (lsn: number): string => `wal-${lsn.toString(16).padStart(16, '0')}.seg`;
/** a spare made ahead, before any record was in it (see prepareSpare): never read, renamed when used */
const SPARE_NAME = /^wal-spare-(\d+)\.seg$/;

interface Segment {
  readonly name: string;
  readonly start: number;
  file: WalFile | undefined;
  /**
   * read through at start: its pages may be cached in large folios by readahead (see nodeWalFs), so it is
   * removed rather than reused once applied, and appends go to a new segment
   */
  readAtStart?: boolean;
}

export interface LoggedRecord {
  readonly lsn: number;
  readonly payload: Buffer;
}

export interface WalStats {
  /** records appended since open */
  records: number;
  /** fdatasync calls since open (one per group of records) */
  syncs: number;
  /** 4-KiB pages dirtied by appends since open: what the appends cost the card */
  pagesWritten: number;
  /** bytes written creating segments (zero fill) since open */
  preallocatedBytes: number;
  /** bytes passed to write calls since open (records and zero fill): the log's share of the process's `wchar` */
  writeCallBytes: number;
}

interface Waiter {
  readonly rec: Buffer;
  readonly lsn: number;
  resolve(): void;
  reject(err: unknown): void;
}

export interface WalOptions {
  /** bytes per segment (a record larger than this gets a segment of its own size) */
  readonly segmentBytes: number;
  /** every record up to this LSN is durably in LMDB: recovery returns the ones after it */
  readonly appliedLsn: number;
}

const noop = (): void => undefined;

export class Wal {
  readonly stats: WalStats = { records: 0, syncs: 0, pagesWritten: 0, preallocatedBytes: 0, writeCallBytes: 0 };
  /** the segment appends go to, and where */
  private cur: Segment | undefined;
  private pos = 0;
  private nextLsn: number;
  /** segments in LSN order, the current one last */
  private segments: Segment[] = [];
  /** segments whose records are all applied (or never were used), ready to be renamed for reuse */
  private spare: Segment[] = [];
  private appliedLsn: number;
  private queue: Waiter[] = [];
  /** the spare being made ahead, if one is */
  private preparing: Promise<void> | undefined;
  private nextSpareId = 0;
  /** appendLazy's records, waiting for the next append */
  private lazy: Buffer[] = [];
  private writing = false;
  private closed = false;

  private constructor(
    private readonly fsys: WalFs,
    private readonly opts: WalOptions,
  ) {
    this.appliedLsn = opts.appliedLsn;
    this.nextLsn = opts.appliedLsn + 1;
  }

  /**
   * Opens the log in `fsys` and reads back every whole record after `opts.appliedLsn`, in LSN order.
   * Synchronous: it runs once at start, before anything is served.
   */
  static open(fsys: WalFs, opts: WalOptions): { wal: Wal; records: LoggedRecord[] } {
    const wal = new Wal(fsys, opts);
    const all: Segment[] = [];
    for (const name of fsys.list()) {
      const m = NAME.exec(name);
      const spare = SPARE_NAME.exec(name);
      if (m) all.push({ name, start: parseInt(m[1] as string, 16), file: undefined });
      else if (spare) {
        wal.spare.push({ name, start: 0, file: undefined });
        wal.nextSpareId = Math.max(wal.nextSpareId, Number(spare[1]) + 1);
      } else if (name.endsWith('.seg.tmp')) {
        // a segment whose zeros were being written when the process stopped
        fsys.remove(name);
      }
    }
    all.sort((a, b) => a.start - b.start);
    const records: LoggedRecord[] = [];
    let expected = opts.appliedLsn + 1;
    // the segment that holds `expected`: the last one starting at or before it
    let i = -1;
    for (let j = 0; j < all.length; j++) if ((all[j] as Segment).start <= expected) i = j;
    const visited: Segment[] = [];
    while (i >= 0 && i < all.length) {
      const seg = all[i] as Segment;
      seg.file = fsys.open(seg.name);
      seg.readAtStart = true;
      visited.push(seg);
      const scanned = scan(seg, expected, records);
      expected = Math.max(expected, scanned.next);
      // the records continue in the segment named with the next LSN, if there is one
      const following = all.findIndex((s) => s.start === expected);
      i = following > i ? following : -1;
    }
    // appends start a new segment named with the next LSN (a read-through segment is not appended to)
    wal.cur = undefined;
    wal.nextLsn = expected;
    // Segments before the first visited hold applied records only: spares. One named at or after `expected`
    // holds no record (it was made for one that never got to disk) or is stale: removed, as its name is the
    // next segment's.
    wal.segments = [];
    for (const s of all) {
      if (s.start >= expected) {
        s.file?.close();
        fsys.remove(s.name);
      } else if (visited.includes(s)) {
        wal.segments.push(s);
      } else {
        wal.spare.push(s);
      }
    }
    wal.recycle();
    return { wal, records };
  }

  /** The LSN the next append gets. */
  get lsn(): number {
    return this.nextLsn;
  }

  /**
   * Appends `payload` as one record. Returns its LSN at once (the caller records it in LMDB with the points,
   * see markApplied) and a promise that resolves once the record is on disk. Appends made while a sync is
   * under way go out together with the next one (group commit).
   */
  append(payload: Buffer): { lsn: number; durable: Promise<void> } {
    if (this.closed) return { lsn: this.nextLsn, durable: Promise.reject(new Error('the log is closed')) };
    for (const lazy of this.lazy) {
      const l = this.nextLsn++;
      this.queue.push({ rec: frame(l, lazy), lsn: l, resolve: noop, reject: noop });
    }
    this.lazy = [];
    const lsn = this.nextLsn++;
    const durable = new Promise<void>((resolve, reject) => {
      this.queue.push({ rec: frame(lsn, payload), lsn, resolve, reject });
    });
    if (!this.writing) void this.drain();
    return { lsn, durable };
  }

  /**
   * Appends `payload` with the next append's group commit (before it, with a lower LSN), never with a sync of
   * its own: for records whose loss costs little (sync's sent marks: a crash re-sends those points), so they
   * cost the card no page writes of their own. Dropped if the log closes first.
   */
  appendLazy(payload: Buffer): void {
    if (!this.closed) this.lazy.push(payload);
  }

  /**
   * Every record up to `lsn` is in LMDB and LMDB has synced: segments holding nothing newer become spares.
   */
  markApplied(lsn: number): void {
    if (lsn <= this.appliedLsn) return;
    this.appliedLsn = lsn;
    this.recycle();
  }

  /** Waits for the appends under way, then closes the files. */
  async close(): Promise<void> {
    this.closed = true;
    while (this.writing) await new Promise<void>((r) => setImmediate(r));
    await this.preparing;
    for (const s of [...this.segments, ...this.spare]) s.file?.close();
  }

  private recycle(): void {
    // a segment is done when the one after it starts at or below appliedLsn + 1
    while (this.segments.length > 1) {
      const [first, second] = this.segments as [Segment, Segment];
      if (second.start > this.appliedLsn + 1) break;
      this.segments.shift();
      if (first.readAtStart === true) {
        first.file?.close();
        this.fsys.remove(first.name);
      } else {
        this.spare.push(first);
      }
    }
    // Spares for the appends until the next apply, up to MAX_SPARE_SEGMENTS: a segment made anew costs its zero
    // fill (1 MiB), a reused one a rename. At one page per commit a 15-minute apply interval fills ~9 segments;
    // with a single spare kept, 8 were made anew each time (a fifth of what the log wrote at the reference load).
    // Their files are closed until reused.
    while (this.spare.length > MAX_SPARE_SEGMENTS) {
      const s = this.spare.shift() as Segment;
      s.file?.close();
      this.fsys.remove(s.name);
    }
    for (const s of this.spare.slice(1)) {
      s.file?.close();
      s.file = undefined;
    }
  }

  /** Writes and syncs the queued records, group by group, until the queue is empty. */
  private async drain(): Promise<void> {
    this.writing = true;
    try {
      while (this.queue.length > 0) {
        const group = this.queue;
        this.queue = [];
        const startSeg = this.cur;
        const startPos = this.pos;
        try {
          let parts: Buffer[] = [];
          // A group that fits in one page but not in what is left of the current one starts on the next page:
          // its fdatasync then writes one page, not two (a record straddling a boundary cost 13% more pages).
          // The gap is not written; recovery looks for the next record at the next page (scan).
          const bytes = group.reduce((n, w) => n + w.rec.length, 0);
          if (bytes <= PAGE && (this.pos % PAGE) + bytes > PAGE && this.cur !== undefined) {
            const next = this.pos - (this.pos % PAGE) + PAGE;
            if (next + bytes <= (this.cur.file as WalFile).size) this.pos = next;
          }
          let partsAt = this.pos;
          for (const w of group) {
            if (this.cur === undefined || this.pos + w.rec.length > (this.cur.file as WalFile).size) {
              await this.flush(parts, partsAt);
              parts = [];
              await this.switchSegment(w.lsn, w.rec.length);
              partsAt = 0;
            }
            parts.push(w.rec);
            this.pos += w.rec.length;
          }
          await this.flush(parts, partsAt);
          this.stats.records += group.length;
          for (const w of group) w.resolve();
        } catch (err) {
          // Nothing of the group is acknowledged. The next records overwrite it from where it began, under the
          // same LSNs, so a torn part of it can never sit between acknowledged records.
          if (startSeg !== undefined && startSeg !== this.cur) {
            this.cur = startSeg;
            this.segments = this.segments.filter((s) => s.start <= startSeg.start);
          }
          this.pos = startPos;
          this.nextLsn = (group[0] as Waiter).lsn;
          for (const w of [...group, ...this.queue]) w.reject(err);
          this.queue = [];
        }
      }
    } finally {
      this.writing = false;
    }
  }

  private async flush(parts: Buffer[], at: number): Promise<void> {
    if (parts.length === 0) return;
    const file = (this.cur as Segment).file as WalFile;
    const buf = parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts);
    await file.write(buf, at);
    this.stats.writeCallBytes += buf.length;
    await file.datasync();
    this.stats.syncs++;
    this.stats.pagesWritten += Math.floor((at + buf.length - 1) / PAGE) - Math.floor(at / PAGE) + 1;
  }

  /** Makes a segment named for `lsn` with room for `need` bytes the current one: a spare renamed, or a new one. */
  private async switchSegment(lsn: number, need: number): Promise<void> {
    const name = segName(lsn);
    const size = Math.max(this.opts.segmentBytes, Math.ceil(need / PAGE) * PAGE);
    const idx = this.spare.findIndex((s) => (s.file !== undefined ? s.file.size >= size : true));
    let seg: Segment;
    if (idx >= 0) {
      const old = this.spare.splice(idx, 1)[0] as Segment;
      const file = old.file ?? this.fsys.open(old.name);
      if (file.size < size) {
        file.close();
        this.fsys.remove(old.name);
        seg = { name, start: lsn, file: await this.create(name, size) };
      } else {
        file.close();
        await this.fsys.rename(old.name, name);
        seg = { name, start: lsn, file: this.fsys.open(name) };
      }
    } else {
      seg = { name, start: lsn, file: await this.create(name, size) };
      this.prepareSpare();
    }
    this.segments.push(seg);
    this.cur = seg;
    this.pos = 0;
  }

  /**
   * Makes a spare in the background, after a switch found none: the next switch renames it instead of writing a
   * segment's zeros while a commit waits (1 MiB and an fsync; on a card, tens of ms). A fresh log's first
   * segment is still the current one when it fills, so no segment has been recycled yet: without this its end
   * (~15 minutes in at the reference load) made the second segment in the commit path. Where retired segments
   * supply the spares, as at steady state, no switch finds none and nothing is made ahead.
   */
  private prepareSpare(): void {
    if (this.preparing !== undefined || this.closed) return;
    const name = `wal-spare-${this.nextSpareId++}.seg`;
    this.preparing = this.create(name, this.opts.segmentBytes).then(
      (file) => {
        file.close();
        this.spare.push({ name, start: 0, file: undefined });
        this.preparing = undefined;
      },
      () => {
        // only ahead of need: the switch that needs it makes its segment itself, as it did before
        this.preparing = undefined;
      },
    );
  }

  private async create(name: string, size: number): Promise<WalFile> {
    const file = await this.fsys.create(name, size);
    this.stats.preallocatedBytes += size;
    this.stats.writeCallBytes += size;
    return file;
  }
}

/**
 * Reads segment `seg` from its start: its consecutive records, those from `expected` on going to `out`.
 * Returns the LSN after the last whole record.
 */
function scan(seg: Segment, expected: number, out: LoggedRecord[]): { next: number } {
  const file = seg.file as WalFile;
  let pos = 0;
  let lsn = seg.start;
  const at = (p: number): Buffer | undefined => {
    if (p + HEADER > file.size) return undefined;
    const head = file.read(p, HEADER);
    const len = head.readUInt32LE(0);
    if (len === 0 || p + HEADER + len > file.size) return undefined;
    if (Number(head.readBigUInt64LE(8)) !== lsn) return undefined;
    const buf = file.read(p, HEADER + len);
    return checksum(buf, 0, len) === buf.readUInt32LE(4) ? buf : undefined;
  };
  for (;;) {
    // the record with the next LSN is here, or at the next page (a group moved there to fit in one page);
    // anything else there (a stale record, a torn one, zeros) ends the segment
    let buf = at(pos);
    if (buf === undefined && pos % PAGE !== 0) {
      pos += PAGE - (pos % PAGE);
      buf = at(pos);
    }
    if (buf === undefined) break;
    if (lsn >= expected) out.push({ lsn, payload: Buffer.from(buf.subarray(HEADER)) });
    lsn++;
    pos += buf.length;
  }
  return { next: lsn };
}

/** The real files: segments in `dir` (created if missing). */
export function nodeWalFs(dir: string): WalFs {
  fs.mkdirSync(dir, { recursive: true });
  const syncDir = (): void => {
    const fd = fs.openSync(dir, 'r');
    try {
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  };
  const wrap = (fd: number): WalFile => ({
    size: fs.fstatSync(fd).size,
    read(pos, len) {
      const buf = Buffer.alloc(len);
      fs.readSync(fd, buf, 0, len, pos);
      return buf;
    },
    write: (buf, pos) =>
      new Promise((resolve, reject) => {
        fs.write(fd, buf, 0, buf.length, pos, (err, n) => {
          if (err) reject(err);
          else if (n !== buf.length) reject(new Error(`short write to the log: ${n} of ${buf.length} bytes`));
          else resolve();
        });
      }),
    datasync: () =>
      new Promise((resolve, reject) => {
        fs.fdatasync(fd, (err) => (err ? reject(err) : resolve()));
      }),
    close: () => fs.closeSync(fd),
  });
  return {
    list: () => fs.readdirSync(dir),
    open: (name) => wrap(fs.openSync(join(dir, name), 'r+')),
    async create(name, size) {
      const tmp = join(dir, `${name}.tmp`);
      const fd = fs.openSync(tmp, 'w+');
      try {
        // Zeros written, not fallocate'd: an unwritten extent would turn each first write into a journal commit.
        // One page per write: the page cache then holds the file in 4-KiB folios. Written in one go, a kernel with
        // large folios (ext4, Linux ≥ 6.16) caches it in folios of up to 2 MiB, and every append dirties (and
        // is charged, write_bytes) a whole folio: measured here, 2 MiB per 100-byte append and fdatasync.
        const zeros = Buffer.alloc(PAGE);
        for (let at = 0; at < size; at += PAGE) fs.writeSync(fd, zeros, 0, PAGE, at);
        await new Promise<void>((resolve, reject) => {
          fs.fsync(fd, (err) => (err ? reject(err) : resolve()));
        });
      } finally {
        fs.closeSync(fd);
      }
      fs.renameSync(tmp, join(dir, name));
      syncDir();
      return wrap(fs.openSync(join(dir, name), 'r+'));
    },
    async rename(from, to) {
      fs.renameSync(join(dir, from), join(dir, to));
      syncDir();
    },
    remove: (name) => fs.rmSync(join(dir, name), { force: true }),
  };
}

/** The points of one group commit as series/append.ts queues them: entity UUID → key → columns, in call order. */
export type PendingPoints = Map<string, Map<string, SeriesColumn[]>>;

type WireValue = readonly [string, unknown];
type WireColumn = readonly [ColumnKind, number[], readonly unknown[]];

/** A log record of a group commit's points (msgpack); LONGs beyond 2^53 travel as decimal strings. */
export function encodePoints(points: PendingPoints): Buffer {
  const out: Array<[string, Array<[string, WireColumn[]]>]> = [];
  for (const [entityId, bySeries] of points) {
    const series: Array<[string, WireColumn[]]> = [];
    for (const [key, cols] of bySeries) {
      series.push([
        key,
        cols.map((c): WireColumn => {
          if (c.kind !== 'BOXED') return [c.kind ?? 'LONG', c.ts, c.nums];
          return [
            'BOXED',
            c.ts,
            c.boxed.map((v): WireValue => (typeof v.v === 'bigint' ? ['BIGINT', v.v.toString()] : [v.type, v.v])),
          ];
        }),
      ]);
    }
    out.push([entityId, series]);
  }
  return pack(out);
}

/** A record saying which devices' points of which records went upstream (sync, store/outbox.ts). */
export function encodeSentMark(pairs: ReadonlyArray<readonly [lsn: number, entityId: string]>): Buffer {
  return pack({ sent: pairs });
}

/** A record of the log: a group commit's points, or a sent mark. */
export type LogRecordBody =
  | { readonly kind: 'points'; readonly points: PendingPoints }
  | { readonly kind: 'sent'; readonly pairs: ReadonlyArray<readonly [number, string]> };

export function decodeRecord(buf: Buffer): LogRecordBody {
  const v = unpack(buf) as Array<[string, Array<[string, WireColumn[]]>]> | { sent: Array<[number, string]> };
  return Array.isArray(v) ? { kind: 'points', points: pointsOf(v) } : { kind: 'sent', pairs: v.sent };
}

function pointsOf(records: Array<[string, Array<[string, WireColumn[]]>]>): PendingPoints {
  const points: PendingPoints = new Map();
  for (const [entityId, series] of records) {
    const bySeries = new Map<string, SeriesColumn[]>();
    for (const [key, cols] of series) {
      bySeries.set(
        key,
        cols.map(([kind, ts, vals]) => {
          const col = new SeriesColumn();
          for (let i = 0; i < ts.length; i++) {
            const t = ts[i] as number;
            if (kind === 'LONG') col.pushLong(t, vals[i] as number);
            else if (kind === 'DOUBLE') col.pushDouble(t, vals[i] as number);
            else {
              const [type, v] = vals[i] as WireValue;
              col.push(t, type === 'BIGINT' ? { type: 'LONG', v: BigInt(v as string) } : ({ type, v } as KvValue));
            }
          }
          return col;
        }),
      );
    }
    points.set(entityId, bySeries);
  }
  return points;
}
