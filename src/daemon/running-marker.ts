/**
 * Whether the last daemon on a data dir stopped cleanly: `serve` creates the file RUNNING_MARKER once it holds
 * the data dir, and removes it as the last step of a graceful stop. Found at start, it says the previous daemon
 * was killed (kill -9, the OOM killer), crashed, or lost power: the start then says so, with what the
 * write-ahead log replayed (src/server.ts). Both changes are synced with their directory, so a power cut does not
 * undo them. One small file a start: nothing against the write budget.
 */
import { closeSync, existsSync, fsyncSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';

export const RUNNING_MARKER = 'outpost.running';

/** Creates the marker; true when it was there already (the previous daemon did not stop cleanly). */
export function markRunning(dataDir: string): boolean {
  const path = join(dataDir, RUNNING_MARKER);
  const unclean = existsSync(path);
  const fd = openSync(path, 'w', 0o600);
  try {
    writeSync(fd, `${process.pid}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  syncDir(dataDir);
  return unclean;
}

/** Removes the marker: the last step of a graceful stop. */
export function markStopped(dataDir: string): void {
  rmSync(join(dataDir, RUNNING_MARKER), { force: true });
  syncDir(dataDir);
}

function syncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
