/** Shared by the sync tests: a gateway syncing to `upstream` with fast retries, its sync status, device posts. */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Test } from 'tap';
import { type Gateway, http, startGateway, tempDir } from './server.js';
import { authHeaders } from './users.js';
import { waitFor } from './wait.js';

/** A gateway whose config file sets `sync` (fast retries, 4-KiB batches unless overridden) and `extra`. */
export async function syncGateway(
  t: Test,
  upstream: string,
  sync: Record<string, unknown> = {},
  extra: Record<string, unknown> = {},
  dataDir?: string,
): Promise<Gateway> {
  const dir = tempDir(t, 'outpost-sync-cfg-');
  const file = join(dir, 'config.json');
  writeFileSync(
    file,
    JSON.stringify({
      sync: { url: upstream, retryBaseMs: 50, retryMaxMs: 400, maxBatchBytes: 4096, ...sync },
      ...extra,
    }),
  );
  return startGateway(t, { args: ['--config', file], ...(dataDir === undefined ? {} : { dataDir }) });
}

export async function syncStatusOf<S>(gw: Gateway, jwt: string): Promise<S> {
  const r = await http('GET', `${gw.url}/api/outpost/sync`, undefined, authHeaders(jwt));
  if (r.status !== 200) throw new Error(`sync status ${r.status}: ${r.text}`);
  return r.json<S>();
}

/** Polls the status endpoint until `pred` holds (the daemon's counters have no event to wait on from here). */
export async function syncStatusUntil<S>(
  gw: Gateway,
  jwt: string,
  pred: (s: S) => boolean,
  label: string,
  timeoutMs: number,
  pollMs: number,
): Promise<S> {
  let last: S | undefined;
  return waitFor(
    async () => {
      last = await syncStatusOf<S>(gw, jwt);
      return pred(last) ? last : undefined;
    },
    { timeout: timeoutMs, interval: pollMs, message: () => `sync status: ${label}; the last: ${JSON.stringify(last)}` },
  );
}

export async function postTelemetry(gw: Gateway, token: string, body: unknown): Promise<void> {
  const r = await http(
    'POST',
    `${gw.url}/api/v1/${token}/telemetry`,
    typeof body === 'string' ? body : JSON.stringify(body),
  );
  if (r.status !== 200) throw new Error(`post ${r.status}: ${r.text}`);
}

/** One request's body with `n` records of `keys` numeric keys from ts `from`, every 1000 ms. */
export function records(
  from: number,
  n: number,
  keys: number,
  value = (i: number, k: number): string => `${i * 10 + k}`,
): string {
  const parts: string[] = [];
  for (let i = 0; i < n; i++) {
    const vals: string[] = [];
    for (let k = 0; k < keys; k++) vals.push(`"k${k}":${value(i, k)}`);
    parts.push(`{"ts":${from + i * 1000},"values":{${vals.join(',')}}}`);
  }
  return `[${parts.join(',')}]`;
}
