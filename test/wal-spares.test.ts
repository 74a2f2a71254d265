/**
 * The log's segments are reused, not made anew (store/wal.ts): once an apply has put their records into LMDB, the
 * segments an apply interval filled are kept as spares (up to MAX_SPARE_SEGMENTS), so the next interval's appends
 * rename them instead of writing new segments' zeros, which would cost the card as much again.
 */
import t from 'tap';
import { Wal, nodeWalFs } from '../src/store/wal.js';
import { tempDir } from './helpers/server.js';

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
