/**
 * The log's segments are reused, not made anew (store/wal.ts): once an apply has put their records into LMDB, the
 * segments an apply interval filled are kept as spares (up to MAX_SPARE_SEGMENTS), so the next interval's appends
 * rename them instead of writing new segments' zeros, which would cost the card as much again. A switch that finds
 * no spare (a fresh log's first segments) makes one ahead, in the background.
 */
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { Wal, nodeWalFs } from '../../src/store/wal.js';
import { tempDir } from '../helpers/server.js';

const SEGMENT = 8192;

t.test('segments filled between two applies are reused by the next interval, not zero-filled anew', async (t) => {
  const dir = tempDir(t);
  const { wal } = Wal.open(nodeWalFs(dir), { segmentBytes: SEGMENT, appliedLsn: 0 });
  try {
    // one page per append, as commits one post at a time: 6 appends of ~4 KiB fill 3 segments and start a 4th
    const interval = async (): Promise<number> => {
      let last = 0;
      for (let i = 0; i < 6; i++) {
        const { lsn, durable } = wal.append(Buffer.alloc(4000, i));
        await durable;
        last = lsn;
      }
      return last;
    };
    const first = await interval();
    const madeFirst = wal.stats.preallocatedBytes;
    t.ok(madeFirst >= 3 * SEGMENT, `the first interval made its segments (${madeFirst} B of zeros)`);
    wal.markApplied(first);
    const second = await interval();
    // the segment appends were going to stays in use until the next apply: one new segment this time
    t.ok(wal.stats.preallocatedBytes <= madeFirst + SEGMENT, 'the second interval reused the spares');
    const madeSecond = wal.stats.preallocatedBytes;
    wal.markApplied(second);
    await interval();
    t.equal(wal.stats.preallocatedBytes, madeSecond, 'the third, at steady state, writes no zeros at all');
  } finally {
    await wal.close();
  }
});

t.test("a fresh log's second segment is made ahead, not in the commit that needs it; a restart keeps it", async (t) => {
  const dir = tempDir(t);
  const fsys = nodeWalFs(dir);
  const spares = (): string[] => readdirSync(dir).filter((n) => /^wal-spare-\d+\.seg$/.test(n));
  const spareMade = async (): Promise<boolean> => {
    for (const end = Date.now() + 5000; spares().length === 0 && Date.now() < end; )
      await new Promise((r) => setTimeout(r, 5));
    return spares().length > 0;
  };
  let { wal } = Wal.open(fsys, { segmentBytes: SEGMENT, appliedLsn: 0 });
  let last = 0;
  try {
    last = await appendAwaited(wal);
    // the spare is made in the background, once the first segment is there
    t.ok(await spareMade(), 'a spare is made ahead');
    t.equal(wal.stats.preallocatedBytes, 2 * SEGMENT, 'the first segment and one spare');
    // records of 4,016 B, two to a segment: the third goes into the spare, renamed
    last = await appendAwaited(wal);
    last = await appendAwaited(wal);
    t.equal(wal.stats.preallocatedBytes, 2 * SEGMENT, 'the first segment ended without zeros written for the next');
    t.same(spares(), [], 'the spare is now a segment named for its first record');
    // the second segment ends with no spare left: the third is made for it, and another spare ahead
    last = await appendAwaited(wal);
    last = await appendAwaited(wal);
    t.ok(await spareMade(), 'and another ahead of it');
  } finally {
    await wal.close();
  }
  // a spare made ahead survives a restart and is the first used; a stray half-made segment is removed
  writeFileSync(join(dir, 'wal-00000000000000ff.seg.tmp'), Buffer.alloc(100));
  ({ wal } = Wal.open(fsys, { segmentBytes: SEGMENT, appliedLsn: last }));
  try {
    t.notOk(
      readdirSync(dir).some((n) => n.endsWith('.tmp')),
      'the half-made segment is removed',
    );
    await appendAwaited(wal);
    t.equal(wal.stats.preallocatedBytes, 0, 'after a restart, appends start in a spare: no zeros');
    t.same(spares(), [], 'the one made ahead');
  } finally {
    await wal.close();
  }
});

/** one record of 4,000 B (4,016 framed), once durable; its LSN */
async function appendAwaited(wal: Wal): Promise<number> {
  const { lsn, durable } = wal.append(Buffer.alloc(4000, 1));
  await durable;
  return lsn;
}
