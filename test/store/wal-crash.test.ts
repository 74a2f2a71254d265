/**
 * Power loss, simulated (docs/design/write-path.md): the write-ahead log runs on a file layer that keeps every write apart until
 * it is fdatasync'ed. At a seeded crash point every operation stops for good; of the writes not yet synced, a
 * random subset of their 512-byte sectors reaches the "disk" (writeback may have flushed some, in any order),
 * the rest is lost. The log is then opened from what is on disk, as at the next boot, and must give back exactly
 * a prefix of what was appended after the applied LSN, containing every record whose append was acknowledged,
 * each byte for byte: never a torn record, never a gap, never a stale one from a recycled segment. Each seed
 * crashes and recovers several times over, so recovery's own choices (new segment, removals) are crashed too.
 */
import '../helpers/sandbox.js';
import t from 'tap';
import { type LoggedRecord, Wal, type WalFile, type WalFs } from '../../src/store/wal.js';
import { rng as mulberry } from '../helpers/prng.js';

class Prng {
  private readonly r: () => number;
  constructor(seed: number) {
    this.r = mulberry(seed);
  }
  next(): number {
    return this.r();
  }
  /** an integer in [0, n) */
  int(n: number): number {
    return Math.floor(this.r() * n);
  }
}

const SEEDS = 300;
const CRASHES_PER_SEED = 3;
const SECTOR = 512;

/** Thrown into nothing: the crash has happened, operations never complete. */
const never = (): Promise<never> => new Promise<never>(() => undefined);

/** The disk: durable file contents by name. Directory operations are durable when they complete (nodeWalFs syncs the directory). */
type Disk = Map<string, Buffer>;

class CrashFs implements WalFs {
  /** what reads see (the page cache) */
  private readonly cache = new Map<string, Buffer>();
  /** writes since the last datasync of each file, in order */
  private readonly unsynced = new Map<string, Array<{ pos: number; data: Buffer }>>();
  private ops = 0;
  crashed = false;

  constructor(
    private readonly disk: Disk,
    private readonly crashAt: number,
    private readonly rng: Prng,
  ) {
    for (const [name, data] of disk) this.cache.set(name, Buffer.from(data));
  }

  /** Counts an operation; false once the crash point is reached (the operation then never completes). */
  private tick(): boolean {
    if (this.crashed) return false;
    if (++this.ops >= this.crashAt) {
      this.crashed = true;
      return false;
    }
    return true;
  }

  /** What survives the crash: the disk plus a random subset of the sectors of unsynced writes. */
  afterCrash(): Disk {
    const out: Disk = new Map();
    for (const [name, data] of this.disk) out.set(name, Buffer.from(data));
    for (const [name, writes] of this.unsynced) {
      const file = out.get(name);
      if (file === undefined) continue;
      for (const w of writes) {
        for (let at = w.pos - (w.pos % SECTOR); at < w.pos + w.data.length; at += SECTOR) {
          if (this.rng.next() < 0.5) continue;
          const from = Math.max(at, w.pos);
          const to = Math.min(at + SECTOR, w.pos + w.data.length);
          w.data.copy(file, from, from - w.pos, to - w.pos);
        }
      }
    }
    return out;
  }

  private file(name: string): WalFile {
    const fs = this;
    return {
      get size() {
        return (fs.cache.get(name) as Buffer).length;
      },
      read(pos, len) {
        const data = fs.cache.get(name) as Buffer;
        const out = Buffer.alloc(len);
        data.copy(out, 0, pos, Math.min(data.length, pos + len));
        return out;
      },
      async write(buf, pos) {
        await Promise.resolve();
        if (!fs.tick()) return never();
        const data = fs.cache.get(name);
        if (data === undefined) throw new Error(`write to a removed file ${name}`);
        if (pos + buf.length > data.length) throw new Error('the log grew a file');
        buf.copy(data, pos);
        let list = fs.unsynced.get(name);
        if (list === undefined) fs.unsynced.set(name, (list = []));
        list.push({ pos, data: Buffer.from(buf) });
      },
      async datasync() {
        await Promise.resolve();
        if (!fs.tick()) return never();
        const disk = fs.disk.get(name);
        if (disk === undefined) throw new Error(`sync of a removed file ${name}`);
        (fs.cache.get(name) as Buffer).copy(disk);
        fs.unsynced.delete(name);
      },
      close: () => undefined,
    };
  }

  list(): string[] {
    return [...this.cache.keys()];
  }

  open(name: string): WalFile {
    if (!this.cache.has(name)) throw new Error(`no file ${name}`);
    return this.file(name);
  }

  async create(name: string, size: number): Promise<WalFile> {
    await Promise.resolve();
    if (!this.tick()) return never();
    this.disk.set(name, Buffer.alloc(size));
    this.cache.set(name, Buffer.alloc(size));
    this.unsynced.delete(name);
    return this.file(name);
  }

  async rename(from: string, to: string): Promise<void> {
    await Promise.resolve();
    if (!this.tick()) return never();
    for (const m of [this.disk, this.cache] as Array<Map<string, Buffer>>) {
      const data = m.get(from);
      if (data === undefined) throw new Error(`rename of a missing file ${from}`);
      m.delete(from);
      m.set(to, data);
    }
    const pending = this.unsynced.get(from);
    this.unsynced.delete(from);
    if (pending !== undefined) this.unsynced.set(to, pending);
  }

  remove(name: string): void {
    // unlink is synchronous in nodeWalFs and not synced: it may or may not survive; either must be fine
    this.cache.delete(name);
    this.unsynced.delete(name);
    if (this.rng.next() < 0.5) this.disk.delete(name);
  }
}

function payload(rng: Prng, lsn: number): Buffer {
  const len = rng.next() < 0.05 ? 2500 + rng.int(3000) : 1 + rng.int(1500);
  const buf = Buffer.alloc(len);
  for (let i = 0; i < len; i++) buf[i] = (lsn * 31 + i * 7 + len) & 0xff;
  return buf;
}

t.test(
  `the log gives back exactly the acknowledged prefix after ${SEEDS} seeds × ${CRASHES_PER_SEED} simulated power cuts`,
  async (t) => {
    let recoveredTotal = 0;
    let unackedKept = 0;
    let failures = 0;
    for (let seed = 1; seed <= SEEDS && failures < 5; seed++) {
      const rng = new Prng(seed);
      // small segments: switches and recycling often; a few pages: groups moved to the next page too
      const segmentBytes = [2048, 8192, 12288][seed % 3] as number;
      let disk: Disk = new Map();
      /** every payload ever appended, by LSN (a crash's lost LSNs are appended again with new payloads) */
      const appended = new Map<number, Buffer>();
      /** LMDB's durable walApplied, as recovery reads it */
      let appliedDb = 0;
      let maxAcked = 0;
      for (let crash = 0; crash < CRASHES_PER_SEED; crash++) {
        const fs = new CrashFs(disk, 5 + rng.int(400), rng);
        const { wal, records } = Wal.open(fs, { segmentBytes: segmentBytes, appliedLsn: appliedDb });
        // ---- check what recovery gave back
        const problems: string[] = [];
        let expect = appliedDb + 1;
        for (const r of records as LoggedRecord[]) {
          if (r.lsn !== expect) problems.push(`lsn ${r.lsn} where ${expect} was expected`);
          const sent = appended.get(r.lsn);
          if (sent === undefined || !sent.equals(r.payload)) problems.push(`record ${r.lsn} is not what was appended`);
          expect = r.lsn + 1;
        }
        if (expect - 1 < maxAcked) problems.push(`acknowledged up to ${maxAcked}, recovered up to ${expect - 1}`);
        if (problems.length > 0) {
          failures++;
          t.fail(`seed ${seed}, crash ${crash}: ${problems.slice(0, 3).join('; ')}`);
          break;
        }
        recoveredTotal += records.length;
        unackedKept += Math.max(0, expect - 1 - maxAcked);
        // what recovery returned is now the log's truth: later LSNs restart after it
        for (const lsn of [...appended.keys()]) if (lsn >= expect) appended.delete(lsn);
        maxAcked = Math.max(maxAcked, expect - 1);
        // the store puts the replayed records into LMDB at once and syncs it
        if (records.length > 0 && rng.next() < 0.7) {
          appliedDb = expect - 1;
          wal.markApplied(appliedDb);
        }
        // ---- run until the crash: appends, some concurrent, and LMDB applying what was acknowledged
        for (let step = 0; !fs.crashed && step < 400; step++) {
          const batch = 1 + rng.int(3);
          const acks: Array<Promise<void>> = [];
          for (let i = 0; i < batch; i++) {
            const p = payload(rng, wal.lsn);
            const { lsn, durable } = wal.append(p);
            appended.set(lsn, p);
            acks.push(
              durable.then(() => {
                maxAcked = Math.max(maxAcked, lsn);
              }),
            );
          }
          // wait for the group or the crash, whichever comes first
          await Promise.race([
            Promise.all(acks),
            new Promise<void>((r) => {
              setImmediate(r);
            }).then(async () => {
              while (!fs.crashed)
                await new Promise<void>((r) => {
                  setImmediate(r);
                });
            }),
          ]);
          if (!fs.crashed && rng.next() < 0.3 && maxAcked > appliedDb) {
            appliedDb = appliedDb + 1 + rng.int(maxAcked - appliedDb);
            // LMDB is durable before the log hears of it, and may crash before the log does
            if (rng.next() < 0.8) wal.markApplied(appliedDb);
          }
        }
        disk = fs.afterCrash();
      }
    }
    t.equal(failures, 0, 'every recovery returned exactly a whole prefix holding every acknowledged record');
    t.ok(
      recoveredTotal > SEEDS,
      `records were replayed (${recoveredTotal}), some of them never acknowledged (${unackedKept})`,
    );
  },
);
