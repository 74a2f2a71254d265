/**
 * The filesystem journal's count (store/write-budget.ts journalCounter): jbd2's info file parsed, and the real
 * thing: an ext4 with its journal on a loop device, a file written and fdatasync'ed every 200 ms as the log's
 * segments are, its journal's commits counted. The loop device needs root and mkfs.ext4/losetup; without them
 * that part is skipped and says so.
 */
import '../helpers/sandbox.js';
import { execFileSync } from 'node:child_process';
import { closeSync, fdatasyncSync, mkdirSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { journalCounter, parseJournalInfo } from '../../src/store/write-budget.js';

t.test("jbd2's info: transactions and logged blocks per transaction", async (t) => {
  // as Linux 6.18 prints it
  const info = [
    '122 transactions (120 requested), each up to 5461 blocks',
    'average: ',
    '  0ms waiting for transaction',
    '  0ms request delay',
    '  4208ms running transaction',
    '  0ms transaction was being locked',
    '  0ms flushing data (in ordered mode)',
    '  4ms logging transaction',
    '  1589us average transaction commit time',
    '  31 handles per transaction',
    '  1 blocks per transaction',
    '  3 logged blocks per transaction',
    '',
  ].join('\n');
  t.same(parseJournalInfo(info), { transactions: 122, loggedPerTransaction: 3 });
  t.same(
    parseJournalInfo('0 transactions (0 requested), each up to 8192 blocks\n'),
    { transactions: 0, loggedPerTransaction: 0 },
    'no averages before the first transaction',
  );
  t.equal(parseJournalInfo(''), undefined);
});

/** An ext4 image with its journal on a loop device, mounted; undefined (with why) where one cannot be made. */
function loopExt4(): { dir: string; device: string; remove: () => void } | string {
  if (process.getuid?.() !== 0) return 'needs root for a loop device';
  const base = mkdtempSync(join(tmpdir(), 'outpost-journal-'));
  const image = join(base, 'fs.img');
  const dir = join(base, 'mnt');
  mkdirSync(dir);
  let loop: string | undefined;
  try {
    execFileSync('truncate', ['-s', '64M', image]);
    execFileSync('mkfs.ext4', ['-q', '-F', '-b', '4096', '-E', 'lazy_itable_init=0,lazy_journal_init=0', image], {
      stdio: 'ignore',
    });
    loop = execFileSync('losetup', ['--find', '--show', image], { encoding: 'utf8' }).trim();
    execFileSync('mount', [loop, dir], { stdio: 'ignore' });
  } catch (err) {
    if (loop !== undefined) execFileSync('losetup', ['-d', loop]);
    rmSync(base, { recursive: true, force: true });
    return `no loop device here (${(err as Error).message.split('\n')[0]})`;
  }
  const device = loop.replace('/dev/', '');
  return {
    dir,
    device,
    remove: () => {
      execFileSync('umount', [dir]);
      execFileSync('losetup', ['-d', loop as string]);
      rmSync(base, { recursive: true, force: true });
    },
  };
}

t.test("a journaled ext4's commits are counted while a file is written and synced", async (t) => {
  const fs = loopExt4();
  if (typeof fs === 'string') {
    t.plan(0, fs);
    return;
  }
  t.teardown(fs.remove);
  // a file made and synced first: a journal commit the count must not include
  const fd = openSync(join(fs.dir, 'segment'), 'w+');
  writeSync(fd, Buffer.alloc(1 << 20));
  fdatasyncSync(fd);
  const counter = journalCounter(fs.dir);
  if (counter === undefined) {
    closeSync(fd);
    t.fail('no journal found on a fresh ext4');
    return;
  }
  t.equal(counter.device, fs.device, 'the device the data dir is on');
  t.equal(counter.written(), 0, 'nothing yet: the commits before it are not counted');
  // the file written a page at a time, as the log's segments are: its mtime rides in each periodic commit
  const end = Date.now() + 6500;
  for (let i = 0; Date.now() < end; i++) {
    writeSync(fd, Buffer.alloc(200, i), 0, 200, (i * 4096) % (1 << 20));
    fdatasyncSync(fd);
    await new Promise((r) => setTimeout(r, 200));
  }
  closeSync(fd);
  const written = counter.written();
  // at least the commit the 5-s timer made, of at least a descriptor, the inode's block and a commit block
  t.ok(written >= 3 * 4096, `${written} bytes of journal counted`);
  t.equal(written % 4096, 0, 'whole blocks');
  t.ok(counter.written() >= written, 'never decreasing');
});

t.test('no journal where the filesystem has none it can find', async (t) => {
  t.equal(journalCounter(join(tmpdir(), 'no-such-dir-for-outpost')), undefined, 'a path that is not there');
  t.equal(journalCounter('/proc'), undefined, 'procfs');
});
