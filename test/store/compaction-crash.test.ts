/**
 * kill -9 in the middle of compaction (durability first): the daemon is folding two weeks of head
 * fragments, with same-ts overwrites and a type change among them, into chunks and rollups when it is
 * killed. Every acknowledged point must still be there with its last posted value, aggregated answers must
 * equal the raw computation on the half-compacted store right after the restart and again once compaction
 * has finished, and nothing must be left in the head.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { AGG_FNS, addPoint, emptyAgg } from '../../src/store/rollups/aggregate.js';
import { finalizeAgg } from '../../src/query/aggregate.js';
import { bucketsOf, planBuckets } from '../../src/store/planner/buckets.js';
import { type KvValue, kvDouble, kvLong, kvToString } from '../../src/model/kv.js';
import { rng } from '../helpers/prng.js';
import { readEntity, storeEntries } from '../helpers/readback.js';
import { addDevice, http, startGateway, tempDir } from '../helpers/server.js';
import { addUser, authHeaders, login } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';

const MIN = 60_000;
const HOUR = 60 * MIN;
const DAY = 24 * HOUR;
const T0 = Date.UTC(2026, 0, 1);
const STEP = 10_000;
const POINTS = (14 * DAY) / STEP;

/** key → ts → the value last posted */
type Model = Map<string, Map<number, KvValue>>;

const body = (recs: Array<[number, Record<string, string>]>): string =>
  `[${recs
    .map(
      ([ts, v]) =>
        `{"ts":${ts},"values":{${Object.entries(v)
          .map(([k, x]) => `"${k}":${x}`)
          .join(',')}}}`,
    )
    .join(',')}]`;

/** Two weeks of a 2-decimal temperature and a counter, then overwrites of day 5 and a type change in day 6. */
function workload(): { bodies: string[]; model: Model } {
  const rand = rng(11);
  const model: Model = new Map([
    ['temperature', new Map()],
    ['counter', new Map()],
  ]);
  const set = (key: string, ts: number, literal: string, v: KvValue): Record<string, string> => {
    (model.get(key) as Map<number, KvValue>).set(ts, v);
    return { [key]: literal };
  };
  const bodies: string[] = [];
  let temp = 2150;
  let counter = 1_000_000;
  for (let from = 0; from < POINTS; from += 1000) {
    const recs: Array<[number, Record<string, string>]> = [];
    for (let i = from; i < Math.min(POINTS, from + 1000); i++) {
      temp += Math.round((rand() - 0.5) * 20);
      counter += Math.floor(rand() * 4);
      const ts = T0 + i * STEP;
      const t = (temp / 100).toFixed(2);
      recs.push([
        ts,
        { ...set('temperature', ts, t, kvDouble(Number(t))), ...set('counter', ts, String(counter), kvLong(counter)) },
      ]);
    }
    bodies.push(body(recs));
  }
  // same-ts overwrites: every 3rd point of day 5, both keys, posted after the originals (the later one wins)
  const over: Array<[number, Record<string, string>]> = [];
  for (let ts = T0 + 5 * DAY; ts < T0 + 6 * DAY; ts += 3 * STEP) {
    const t = ((Math.round(rand() * 4000) + 1000) / 100).toFixed(2);
    const c = Math.floor(rand() * 1e6);
    over.push([ts, { ...set('temperature', ts, t, kvDouble(Number(t))), ...set('counter', ts, String(c), kvLong(c)) }]);
  }
  bodies.push(body(over));
  // a counter that turns into a double at every 50th point of day 6 (its chunks then hold mixed types)
  const mixed: Array<[number, Record<string, string>]> = [];
  for (let ts = T0 + 6 * DAY; ts < T0 + 7 * DAY; ts += 50 * STEP)
    mixed.push([ts, set('counter', ts, `${ts % 997}.25`, kvDouble((ts % 997) + 0.25))]);
  bodies.push(body(mixed));
  return { bodies, model };
}

/** TB's answer for `key` as the raw computation gives it: [bucket ts, value] per non-empty bucket. */
function expected(
  series: Map<number, KvValue>,
  q: { startTs: number; endTs: number; interval: number },
  fn: (typeof AGG_FNS)[number],
): Array<[number, string]> {
  const points = [...series].sort((a, b) => a[0] - b[0]);
  const out: Array<[number, string]> = [];
  let i = 0;
  for (const b of bucketsOf(planBuckets(q.startTs, q.endTs, q.interval, { maxIntervals: 700 }))) {
    while (i < points.length && (points[i] as [number, KvValue])[0] < b.start) i++;
    const agg = emptyAgg();
    for (let j = i; j < points.length && (points[j] as [number, KvValue])[0] < b.end; j++)
      addPoint(agg, ...(points[j] as [number, KvValue]));
    const value = finalizeAgg(agg, fn);
    if (value !== undefined) out.push([b.ts, kvToString(value)]);
  }
  return out;
}

const QUERIES = [
  // unaligned 2-h buckets over everything: rollups inside, raw stretches at every boundary
  { startTs: T0 + 7 * MIN + 130, endTs: T0 + 14 * DAY, interval: 2 * HOUR },
  // the overwritten and the mixed-type days, 10-min buckets on the tier grid
  { startTs: T0 + 5 * DAY, endTs: T0 + 7 * DAY, interval: 10 * MIN },
  // finer than the finest tier: a raw scan
  { startTs: T0 + 6 * DAY - 3 * HOUR, endTs: T0 + 6 * DAY + 3 * HOUR, interval: 7 * MIN },
];

t.test('kill -9 during compaction loses nothing and leaves rollups consistent with the raw points', async (t) => {
  const cfg = join(tempDir(t), 'config.json');
  // the smallest step keeps compaction running long enough to be caught in the middle of it
  writeFileSync(cfg, JSON.stringify({ downsample: { stepBudgetMs: 1 } }));
  const gw = await startGateway(t, { args: ['--config', cfg] });
  const dev = await addDevice(gw.dataDir, 'crash');
  await addUser(gw.dataDir, 'crash@example.com', 'secret-pw', 'TENANT_ADMIN');

  const { bodies, model } = workload();
  for (const b of bodies) t.equal((await http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, b)).status, 200);

  // Kill on the event: compaction has folded about half of the head (so chunks, rollups and fragments all
  // hold part of the data), and not all of it.
  const posted = await storeEntries(gw.dataDir);
  const atKill = await waitFor(
    async () => {
      const now = await storeEntries(gw.dataDir);
      return now.head <= posted.head / 2 && now;
    },
    { timeout: 120_000, interval: 0, message: 'compaction past half of the head' },
  );
  gw.proc.kill('SIGKILL');
  t.equal(await gw.stop('SIGKILL'), null, 'the daemon died by the signal');
  t.ok(
    atKill.head > 0 && atKill.head <= posted.head / 2 && atKill.chunks > 0,
    `killed mid-compaction (head fragments: ${posted.head} after the posts, ${atKill.head} at the kill; ${atKill.chunks} chunks)`,
  );

  const checkRaw = async (label: string): Promise<void> => {
    const dump = await readEntity(gw.dataDir, dev.id);
    for (const [key, series] of model) {
      const want = [...series].sort((a, b) => a[0] - b[0]).map(([ts, v]) => `${ts} ${v.type} ${kvToString(v)}`);
      const got = (dump.points[key] ?? []).map((p) => `${p.ts} ${p.type} ${p.value}`);
      t.equal(got.length, want.length, `${label}: ${key} has every point (${want.length})`);
      t.ok(
        got.every((g, i) => g === want[i]),
        `${label}: ${key} holds the last posted value of every point`,
      );
      const newest = want[want.length - 1] as string;
      const latest = dump.latest[key];
      t.equal(
        latest && `${latest.ts} ${latest.type} ${latest.value}`,
        newest,
        `${label}: latest ${key} is its newest point`,
      );
    }
  };
  await checkRaw('after kill -9');

  const gw2 = await startGateway(t, { dataDir: gw.dataDir, args: ['--config', cfg] });
  const { token } = await login(gw2, 'crash@example.com', 'secret-pw');
  const checkAggregates = async (label: string): Promise<void> => {
    let mismatches = 0;
    for (const q of QUERIES) {
      for (const fn of AGG_FNS) {
        const r = await http(
          'GET',
          `${gw2.url}/api/plugins/telemetry/DEVICE/${dev.id}/values/timeseries?keys=temperature,counter&startTs=${q.startTs}&endTs=${q.endTs}&interval=${q.interval}&agg=${fn}`,
          undefined,
          authHeaders(token),
        );
        const answer = r.json<Record<string, Array<{ ts: number; value: string }> | undefined>>();
        for (const [key, series] of model) {
          const got = (answer[key] ?? []).map((p) => [p.ts, p.value]);
          if (
            !t.same(
              got,
              expected(series, q, fn),
              `${label}: ${key} ${fn} over [${q.startTs - T0}, ${q.endTs - T0}) by ${q.interval}`,
            )
          )
            mismatches++;
        }
      }
    }
    t.equal(mismatches, 0, `${label}: every aggregated answer equals the raw computation`);
  };
  await checkAggregates('right after the restart (half compacted)');

  await waitFor(async () => (await storeEntries(gw2.dataDir)).head === 0, {
    timeout: 120_000,
    interval: 50,
    message: 'the restarted daemon done compacting',
  });
  await checkAggregates('once compaction has finished');
  t.equal(await gw2.stop('SIGTERM'), 0, 'SIGTERM stops the restarted daemon cleanly');
  await checkRaw('after the restart and compaction');
});
