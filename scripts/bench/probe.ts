/**
 * The ingest probe of bench:sync and bench:downlink (lib.ts `probe`), in a process of its own: one device posting
 * one point at a time, sequentially, until the parent says stop and at least `minCount` were posted; the latencies
 * (ms) go back to the parent. A process of its own because the bench's own work (polling the sync status,
 * parsing it) would otherwise delay the probe's clock readings, and only while draining.
 *
 *   forked by lib.ts: probe.js <port> <device token> <minCount>
 */
import { performance } from 'node:perf_hooks';
import { RawHttpConnection, encodeRequest } from './lib.js';

async function probeChild(port: number, token: string, minCount: number): Promise<void> {
  let stopped = false;
  process.once('message', () => {
    stopped = true;
  });
  const c = await RawHttpConnection.open(port);
  const lat: number[] = [];
  for (let i = 0; !stopped || lat.length < minCount; i++) {
    const t0 = performance.now();
    const r = await c.request(
      encodeRequest('POST', `/api/v1/${token}/telemetry`, `{"p":${i}}`, { 'Content-Type': 'application/json' }),
    );
    if (r.status !== 200) throw new Error(`probe ${r.status}`);
    lat.push(performance.now() - t0);
    if (lat.length >= 200_000) break;
  }
  c.close();
  process.send?.(lat, () => process.exit(0));
}

await probeChild(Number(process.argv[2]), process.argv[3] as string, Number(process.argv[4]));
