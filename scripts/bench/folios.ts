/**
 * What LMDB's commits cost the disk against what the kernel charges the process for them (docs/write-budget.md,
 * "What is counted"). An LMDB environment like the store's head (250 series, a few hours of fragments each) takes
 * transactions like the log's applies (one fragment per series, and its latest value); per transaction it prints
 * what LMDB passed to its write calls (`wchar` of /proc/self/io: nothing else writes meanwhile), what the kernel
 * charged (`write_bytes`) and, over the last half of them, what the block device wrote (all processes: run it on
 * a quiet machine; the device's writes over as long again, idle, are printed beside).
 *
 * On kernels whose ext4 caches files in large folios (Linux >= 6.16), LMDB's first writes of new pages (a run
 * of pages in one writev) land in large folios; once it reuses freed pages inside them, each 4-KiB page write is
 * charged the whole folio, while the device still gets the page alone.
 *
 *   node dist/scripts/bench/folios.js [--txns 80] [--no-read-ahead]
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { open } from 'lmdb';
import { argValue } from './lib.js';

const SERIES = 250;
const TXNS = argValue('--txns', 80);

function io(): { charged: number; calls: number } {
  const s = readFileSync('/proc/self/io', 'utf8');
  const num = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+)$`, 'm').exec(s)?.[1] ?? NaN);
  return { charged: num('write_bytes'), calls: num('wchar') };
}

/** bytes written to the block device holding `path`'s filesystem (the root's, here), by every process */
function deviceBytes(): number {
  const dev = /^\/dev\/(\S+) \/ /m.exec(readFileSync('/proc/mounts', 'utf8'))?.[1];
  if (dev === undefined) return NaN;
  return Number(readFileSync(`/sys/block/${dev}/stat`, 'utf8').trim().split(/\s+/)[6]) * 512;
}

const dir = mkdtempSync(join(tmpdir(), 'outpost-folios-'));
const lmdbOptions = { noReadAhead: process.argv.includes('--no-read-ahead') };
const root = open({ path: join(dir, 'x.mdb'), mapSize: 2 ** 30, overlappingSync: true, maxDbs: 4, ...lmdbOptions });
try {
  const head = root.openDB<Buffer, Buffer>({ name: 'head', encoding: 'binary', keyEncoding: 'binary' });
  const latest = root.openDB<Buffer, Buffer>({ name: 'latest', encoding: 'binary', keyEncoding: 'binary' });
  const value = Buffer.alloc(120, 7);
  const key = (series: number, n: number): Buffer => {
    const b = Buffer.alloc(16);
    b.writeUInt32BE(series, 0);
    b.writeBigUInt64BE(BigInt(n), 8);
    return b;
  };
  root.transactionSync(() => {
    for (let n = 0; n < 60; n++) for (let s = 0; s < SERIES; s++) void head.put(key(s, n), value);
  });
  await root.flushed;
  const rows: Array<{ charged: number; calls: number }> = [];
  let lateFrom = { charged: 0, calls: 0, device: 0, at: 0 };
  for (let i = 0; i < TXNS; i++) {
    if (i === Math.floor(TXNS / 2)) lateFrom = { ...io(), device: deviceBytes(), at: performance.now() };
    const before = io();
    root.transactionSync(() => {
      for (let s = 0; s < SERIES; s++) {
        void head.put(key(s, 60 + i), value);
        void latest.put(key(s, 0), value);
      }
    });
    await root.flushed;
    const after = io();
    rows.push({ charged: after.charged - before.charged, calls: after.calls - before.calls });
  }
  const end = { ...io(), device: deviceBytes(), at: performance.now() };
  const idleFrom = deviceBytes();
  await new Promise((r) => setTimeout(r, end.at - lateFrom.at));
  const idle = deviceBytes() - idleFrom;
  const mb = (b: number): string => (b / 1e6).toFixed(2);
  const half = (from: number, to: number, k: 'charged' | 'calls'): number =>
    rows.slice(from, to).reduce((n, r) => n + r[k], 0);
  const h = Math.floor(TXNS / 2);
  console.log(`${TXNS} transactions of ${SERIES} series (noReadAhead: ${lmdbOptions.noReadAhead}), MB:`);
  console.log(`  first half: LMDB's write calls ${mb(half(0, h, 'calls'))}, charged ${mb(half(0, h, 'charged'))}`);
  console.log(
    `  second half: LMDB's write calls ${mb(end.calls - lateFrom.calls)}, charged ${mb(end.charged - lateFrom.charged)}; ` +
      `the device wrote ${mb(end.device - lateFrom.device)} (all processes; ${mb(idle)} over as long idle after)`,
  );
} finally {
  await root.close();
  rmSync(dir, { recursive: true, force: true });
}
