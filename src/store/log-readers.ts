/**
 * Other processes that read the store (the CLI's local mode, docs/cli.md) see LMDB only, not the daemon's
 * write-ahead log, whose points wait up to store.applyIntervalMs to be put into LMDB. Such a reader needs no
 * channel of its own to ask for them: opening the env registers it in LMDB's reader table (outpost.mdb-lock), which
 * the daemon can list. While another process holds the store open, the daemon puts its log into LMDB every
 * READER_POLL_MS, so that reader (`outpost tail` above all) sees what devices post within a fraction of a
 * second; the SD card pays those commits only while a technician is looking. A reader waits at open for the
 * daemon to say (meta `logReaders`, written after the apply) that it has seen it.
 */
import type { StoreEnv } from './env.js';

/** how often the daemon looks for other readers (a look costs ~2 µs: LMDB's reader table, in shared memory) */
const READER_POLL_MS = 100;
/** how long a reader waits at open for the daemon's apply before it reads what LMDB has */
const READER_WAIT_MS = 1000;
const META_KEY = 'logReaders';

/** The pids of the other processes with this store open (LMDB's reader table; every slot of a process). */
function otherReaders(env: StoreEnv): number[] {
  const pids = new Set<number>();
  for (const m of env.root.readerList().matchAll(/^\s*(\d+)\s+[0-9a-f]+\s+\S+\s*$/gm)) {
    const pid = Number(m[1]);
    if (pid !== process.pid) pids.add(pid);
  }
  return [...pids].sort((a, b) => a - b);
}

/**
 * The daemon's side: calls `apply` every READER_POLL_MS while another process has the store open, and, when
 * the set of such processes changed, records it (after the apply, so in a later commit) for them to see.
 * Slots of processes that died without closing (kill -9) are cleared every few seconds (readerCheck), or one
 * crashed CLI would keep the daemon applying for good.
 */
export function serveLogReaders(env: StoreEnv, apply: () => void): () => void {
  let known = '';
  let polls = 0;
  const timer = setInterval(() => {
    if (++polls % 50 === 0) env.root.readerCheck();
    const pids = otherReaders(env);
    const key = pids.join(',');
    if (pids.length > 0) apply();
    if (key !== known) {
      known = key;
      void env.meta.put(META_KEY, pids);
    }
  }, READER_POLL_MS);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * The reader's side: when another process has the store open (the daemon, with a log), waits until it has
 * applied its log for this process, READER_WAIT_MS at most (a daemon without a log never answers; what LMDB
 * holds is then all there is).
 */
export async function awaitLogApplied(env: StoreEnv): Promise<boolean> {
  const mine = (): boolean => ((env.meta.get(META_KEY) as number[] | undefined) ?? []).includes(process.pid);
  if (otherReaders(env).length === 0) return false;
  const deadline = Date.now() + READER_WAIT_MS;
  while (!mine()) {
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, 10));
  }
  return true;
}
