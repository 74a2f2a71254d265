/**
 * Downsampling inside the real daemon (black box): a TB array batch of old points is
 * compacted into chunks and rollups by the daemon's background engine; aggregated history over HTTP equals the
 * raw computation before compaction, after it, and after a restart; SIGTERM stops the engine cleanly (exit 0).
 */
import t from 'tap';
import { AGG_FNS, addPoint, emptyAgg } from '../../src/store/rollups/aggregate.js';
import { finalizeAgg } from '../../src/query/aggregate.js';
import { bucketsOf, planBuckets } from '../../src/store/planner/buckets.js';
import { type KvValue, kvDouble, kvLong, kvToString } from '../../src/model/kv.js';
import { storeEntries } from '../helpers/readback.js';
import { addDevice, http, startGateway } from '../helpers/server.js';
import { adminToken, authHeaders } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const T0 = Date.UTC(2026, 0, 1);
const STEP = 20_000;
const POINTS = (2 * DAY) / STEP;

t.test('the daemon compacts, and aggregated answers stay equal to the raw computation', async (t) => {
  const gw = await startGateway(t);
  const dev = await addDevice(gw.dataDir, 'ds-1');
  const token = await adminToken(gw, 'ds@example.com', 'secret-pw');

  // Two days of 20-s points, posted newest batch first; a double every 5th point, and "20" typed as a long.
  const model = new Map<number, KvValue>();
  const batches: string[] = [];
  for (let from = 0; from < POINTS; from += 1000) {
    const recs: string[] = [];
    for (let i = from; i < Math.min(POINTS, from + 1000); i++) {
      const ts = T0 + i * STEP;
      const v = i % 5 === 0 ? kvDouble(i / 4 + 0.25) : kvLong((i * 7) % 1000);
      model.set(ts, v);
      recs.push(`{"ts":${ts},"values":{"v":${v.type === 'DOUBLE' ? v.v.toFixed(2) : String(v.v)}}}`);
    }
    batches.push(`[${recs.join(',')}]`);
  }
  for (const body of batches.reverse()) {
    const r = await http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, body);
    t.equal(r.status, 200);
  }

  const queries = [
    { startTs: T0 + 7 * 60_000 + 123, endTs: T0 + 2 * DAY - 1, interval: 2 * HOUR },
    { startTs: T0 - DAY, endTs: T0 + 3 * DAY, interval: DAY },
    { startTs: T0 + 5 * HOUR, endTs: T0 + 6 * HOUR, interval: 600_000 },
  ];
  const expected = (q: (typeof queries)[number], fn: (typeof AGG_FNS)[number]): Array<[number, string]> => {
    const plan = planBuckets(q.startTs, q.endTs, q.interval, { maxIntervals: 700 });
    const out: Array<[number, string]> = [];
    for (const b of bucketsOf(plan)) {
      const agg = emptyAgg();
      for (const [ts, v] of model) if (ts >= b.start && ts < b.end) addPoint(agg, ts, v);
      const value = finalizeAgg(agg, fn);
      if (value !== undefined) out.push([b.ts, kvToString(value)]);
    }
    return out;
  };
  const check = async (base: string, label: string): Promise<void> => {
    for (const q of queries) {
      for (const fn of AGG_FNS) {
        const r = await http(
          'GET',
          `${base}/api/plugins/telemetry/DEVICE/${dev.id}/values/timeseries?keys=v&startTs=${q.startTs}&endTs=${q.endTs}&interval=${q.interval}&agg=${fn}`,
          undefined,
          authHeaders(token),
        );
        const got = (r.json<{ v?: Array<{ ts: number; value: string }> }>().v ?? []).map((p) => [p.ts, p.value]);
        t.same(got, expected(q, fn), `${label}: ${fn} over [${q.startTs - T0}, ${q.endTs - T0}) by ${q.interval}`);
      }
    }
  };
  await check(gw.url, 'as posted');

  // Wait for the event: the engine has folded every head fragment (all windows are older than the head window).
  await waitFor(async () => (await storeEntries(gw.dataDir)).head === 0, {
    timeout: 60_000,
    interval: 50,
    message: 'the daemon done compacting',
  });
  const after = await storeEntries(gw.dataDir);
  t.ok(
    after.chunks >= 144 && after.rollups > 0,
    `compacted into ${after.chunks} chunks and ${after.rollups} rollup blocks`,
  );
  await check(gw.url, 'after compaction');

  t.equal(await gw.stop('SIGTERM'), 0, 'SIGTERM stops the engine and exits 0');
  const gw2 = await startGateway(t, { dataDir: gw.dataDir });
  await check(gw2.url, 'after a restart');
});
