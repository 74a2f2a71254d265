/** Shared by the sync tests: a gateway syncing to `upstream` with fast retries, and its sync status. */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Test } from 'tap';
import { type Gateway, http, startGateway, tempDir } from './server.js';
import { authHeaders } from './users.js';

/** A gateway whose config file sets `sync` (fast retries, 4-KiB batches unless overridden) and `extra`. */
export async function syncGateway(t: Test, upstream: string, sync: Record<string, unknown> = {}, extra: Record<string, unknown> = {}, dataDir?: string): Promise<Gateway> {
  const dir = tempDir(t, 'outpost-sync-cfg-');
  const file = join(dir, 'config.json');
  writeFileSync(file, JSON.stringify({ sync: { url: upstream, retryBaseMs: 50, retryMaxMs: 400, maxBatchBytes: 4096, ...sync }, ...extra }));
  return startGateway(t, { args: ['--config', file], ...(dataDir === undefined ? {} : { dataDir }) });
}

export async function syncStatusOf<S>(gw: Gateway, jwt: string): Promise<S> {
  const r = await http('GET', `${gw.url}/api/outpost/sync`, undefined, authHeaders(jwt));
  if (r.status !== 200) throw new Error(`sync status ${r.status}: ${r.text}`);
  return r.json<S>();
}

/** Polls the status endpoint until `pred` holds (the daemon's counters have no event to wait on from here). */
export async function syncStatusUntil<S>(gw: Gateway, jwt: string, pred: (s: S) => boolean, label: string, timeoutMs: number, pollMs: number): Promise<S> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const s = await syncStatusOf<S>(gw, jwt);
    if (pred(s)) return s;
    if (Date.now() > end) throw new Error(`status never reached: ${label}: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, pollMs));
  }
}
