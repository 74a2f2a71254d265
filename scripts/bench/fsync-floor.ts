/**
 * The disk's own answer time: a 4-KiB write and an fdatasync into a preallocated file, on a schedule, in a process
 * of its own, one fdatasync for every slot that fell due while the last ran. bench:wear's fresh row runs it beside the daemon over the same window and on the same schedule as
 * its posts, so a slow answer can be told apart from a slow disk: the daemon's log commit is one such page and
 * one fdatasync (store/wal.ts), so its answers cannot beat this floor, and on a shared virtual disk its tail is
 * the host's, not the daemon's.
 *
 *   node dist/scripts/bench/fsync-floor.js <file> <count>x<everyMs>[,<count>x<everyMs>...]
 * prints one JSON line: { p50, p99, max } in ms.
 */
import { closeSync, fdatasync, fsyncSync, openSync, unlinkSync, write, writeSync } from 'node:fs';

const SEGMENT = 1 << 20;
const PAGE = 4096;

function writeAndSync(fd: number, page: Buffer, offset: number): Promise<void> {
  return new Promise((resolve, reject) =>
    write(fd, page, 0, PAGE, offset, (err) =>
      err ? reject(err) : fdatasync(fd, (err2) => (err2 ? reject(err2) : resolve())),
    ),
  );
}

async function main(): Promise<void> {
  const [file, schedule] = process.argv.slice(2);
  if (file === undefined || schedule === undefined) throw new Error('usage: fsync-floor <file> <count>x<everyMs>,...');
  const phases = schedule.split(',').map((p) => p.split('x').map(Number) as [number, number]);
  // preallocated and synced, as the log's segments are: each fdatasync then writes one data page, no metadata
  const fd = openSync(file, 'w+');
  writeSync(fd, Buffer.alloc(SEGMENT));
  fsyncSync(fd);
  const page = Buffer.alloc(PAGE, 1);
  const latencies: number[] = [];
  let offset = 0;
  // Every slot is timed from when it was due, and one fdatasync covers every slot that fell due while the last
  // ran: a group commit, as the daemon's log does, so a stalled fdatasync delays the slots behind it as it
  // delays the posts queued behind a commit.
  const slots: number[] = [];
  let due = performance.now();
  for (const [count, everyMs] of phases)
    for (let n = 0; n < count; n++) {
      slots.push(due);
      due += everyMs;
    }
  for (let next = 0; next < slots.length; ) {
    const wait = (slots[next] as number) - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const now = performance.now();
    let last = next;
    while (last + 1 < slots.length && (slots[last + 1] as number) <= now) last++;
    await writeAndSync(fd, page, offset);
    offset = (offset + PAGE) % SEGMENT;
    const done = performance.now();
    for (let i = next; i <= last; i++) latencies.push(done - (slots[i] as number));
    next = last + 1;
  }
  closeSync(fd);
  unlinkSync(file);
  latencies.sort((a, b) => a - b);
  const q = (x: number): number =>
    latencies[Math.min(latencies.length - 1, Math.floor(x * latencies.length))] as number;
  console.log(JSON.stringify({ p50: q(0.5), p99: q(0.99), max: latencies[latencies.length - 1] }));
}

await main();
