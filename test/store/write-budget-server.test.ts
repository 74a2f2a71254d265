/**
 * The write budget end to end (store/write-budget.ts, docs/write-budget.md): on a quiet daemon a device posting one
 * request at a time is answered within one fsync; under load beyond a (tiny) budget its commits are grouped,
 * every post is still answered only once durable, and nothing is lost, not even to kill -9. The figures reach
 * `GET /api/outpost/status`, `/metrics` and `outpost status`.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { type Gateway, addDevice, http, startGateway, tempDir, waitStatus } from '../helpers/server.js';
import { addUser, authHeaders, login } from '../helpers/users.js';
import { statusLines } from '../../src/cli/status.js';
import type { StatusJson } from '../../src/status/index.js';
import type { WriteFigures } from '../../src/store/write-budget.js';

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

async function admin(gw: Gateway): Promise<Record<string, string>> {
  await addUser(gw.dataDir, 'admin@example.com', 'pw', 'TENANT_ADMIN');
  return authHeaders((await login(gw, 'admin@example.com', 'pw')).token);
}

/** Posts `n` readings of keys a and b one at a time (the next after the answer); returns each answer's ms. */
async function sequential(gw: Gateway, token: string, n: number, baseTs: number): Promise<number[]> {
  const lat: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const r = await http('POST', `${gw.url}/api/v1/${token}/telemetry`, {
      ts: baseTs + i * 1000,
      values: { a: i, b: i * 2 },
    });
    if (r.status !== 200) throw new Error(`post ${i}: ${r.status} ${r.text}`);
    lat.push(performance.now() - t0);
  }
  return lat;
}

async function storedCount(gw: Gateway, H: Record<string, string>, id: string, baseTs: number): Promise<number> {
  const r = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${id}/values/timeseries?keys=a,b&startTs=${baseTs}&endTs=${baseTs + 3_600_000}&limit=10000`,
    undefined,
    H,
  );
  const body = r.json<Record<string, unknown[]>>();
  return (body['a']?.length ?? 0) + (body['b']?.length ?? 0);
}

t.test('a quiet daemon answers a device posting one at a time within one fsync, and shows what it wrote', async (t) => {
  const gw = await startGateway(t);
  const dev = await addDevice(gw.dataDir, 'seq', ['--token', 'SEQ']);
  const H = await admin(gw);
  const base = Date.now() - 3_600_000;
  // how fast an answer comes is bench:wear's figure; here: no delay imposed, and a commit for each post
  await sequential(gw, 'SEQ', 60, base);
  t.equal(await storedCount(gw, H, dev.id, base), 120, 'every point stored');
  const st = (await http('GET', `${gw.url}/api/outpost/status`, undefined, H)).json<StatusJson>();
  const w = st.writes as WriteFigures;
  t.ok(w !== undefined, 'the status has the write figures');
  t.equal(w.commitDelayMs, 0, 'no delay: the budget has room');
  t.equal(w.paced, true);
  t.equal(w.budgetBytesPerDay, 1.5e9);
  t.equal(w.cardEnduranceBytes, 16e12);
  t.equal(w.cardLifeYearsAtBudget, 29.2);
  t.ok(w.sinceStartBytes >= 60 * 4096, `${w.sinceStartBytes} bytes written since start: at least a page per commit`);
  t.ok(w.lastHourBytes > 0 && w.todayBytes > 0);
  t.equal(w.overBudget, false);
  const metrics = await http('GET', `${gw.url}/metrics`);
  const m = /^outpost_store_written_bytes_total (\d+)$/m.exec(metrics.text);
  t.ok(m !== null && Number(m[1]) >= w.sinceStartBytes, 'outpost_store_written_bytes_total counts them');
  t.match(metrics.text, /# TYPE outpost_store_written_bytes_total counter/);
});

/**
 * more than the batch written at once when not paced (timeseries.ts batchFull: as many writes as the last batch,
 * at least 8): paced, a batch waits its delay out unless it fills a page of log
 */
const DEVICES = 10;

t.test(
  'under load beyond a tiny budget commits are grouped, and every acknowledged point survives kill -9',
  async (t) => {
    const dataDir = tempDir(t);
    const config = join(dataDir, 'config.json');
    // 1 MB a day: the daemon's own start overspends its reserve (~5.6 KB), so every commit waits
    writeFileSync(config, JSON.stringify({ store: { writeBudgetBytesPerDay: 1e6 } }));
    const gw = await startGateway(t, { dataDir, args: ['--config', config] });
    const devices = await Promise.all(
      Array.from({ length: DEVICES }, (_, i) => addDevice(dataDir, `d${i}`, ['--token', `T${i}`])),
    );
    const base = Date.now() - 3_600_000;
    // the budget reads the byte counters at most once a second: the first post (which creates the log's first
    // segment, a megabyte of zeros) is seen from the next second on, and commits wait from then
    await sequential(gw, 'T0', 1, base - 1000);
    const H0 = await admin(gw);
    await waitStatus<StatusJson>(gw, H0, (s) => (s.writes as WriteFigures).commitDelayMs > 0);
    const t0 = performance.now();
    const lats = await Promise.all(devices.map((_, i) => sequential(gw, `T${i}`, 5, base)));
    const elapsed = performance.now() - t0;
    const all = lats.flat();
    t.ok(median(all) >= 300, `each post waits for others: median answer ${median(all).toFixed(0)} ms`);
    // 50 posts, one commit each with the delay, would take 50 delays; grouped they take about 5
    t.ok(
      elapsed < 10 * median(all),
      `${all.length} posts answered in ${(elapsed / 1000).toFixed(1)} s: ~${((all.length * median(all)) / elapsed).toFixed(1)} posts per commit`,
    );
    await gw.stop('SIGKILL');
    const again = await startGateway(t, { dataDir, args: ['--config', config] });
    const H = authHeaders((await login(again, 'admin@example.com', 'pw')).token);
    for (const d of devices)
      t.equal(await storedCount(again, H, d.id, base), 10, `${d.name}: every acknowledged point after kill -9`);
  },
);

t.test('an explicit store.commitDelayMs is a fixed delay, whatever the budget', async (t) => {
  const dataDir = tempDir(t);
  const config = join(dataDir, 'config.json');
  writeFileSync(config, JSON.stringify({ store: { commitDelayMs: 0, writeBudgetBytesPerDay: 1e6 } }));
  const gw = await startGateway(t, { dataDir, args: ['--config', config] });
  await addDevice(dataDir, 'fixed', ['--token', 'FIXED']);
  const H = await admin(gw);
  await sequential(gw, 'FIXED', 20, Date.now() - 60_000);
  const w = (await http('GET', `${gw.url}/api/outpost/status`, undefined, H)).json<StatusJson>().writes as WriteFigures;
  t.equal(w.paced, false);
  t.equal(w.commitDelayMs, 0);
});

t.test('outpost status says when the card is worn faster than planned', async (t) => {
  const writes: WriteFigures = {
    source: 'proc',
    budgetBytesPerDay: 1.5e9,
    reserveBytes: 8_333_333,
    reserveLeftBytes: 0,
    todayBytes: 3.1e9,
    lastHourBytes: 150e6,
    sinceStartBytes: 3.1e9,
    logSinceStartBytes: 2e9,
    journalSinceStartBytes: 0.3e9,
    bytesPerDay: 3.6e9,
    cardEnduranceBytes: 16e12,
    cardLifeYearsAtBudget: 29.2,
    cardLifeYears: 12.2,
    commitDelayMs: 0,
    paced: false,
    overBudget: true,
    heavyWriters: 0,
    pacedCommits: 0,
    lightCommits: 0,
  };
  const status = {
    version: '0',
    daemon: true,
    startedTs: 0,
    uptimeSec: 10,
    now: 0,
    clock: { synchronized: true },
    ingest: null,
    store: { fileBytes: 0, liveBytes: 0, maxDiskBytes: 0, headFragments: 0, chunks: 0, rollupBlocks: 0 },
    compaction: { backlogFragments: 0, compactedWindows: 0 },
    sync: { enabled: false },
    longPoll: null,
    websockets: null,
    process: null,
    eventLoop: null,
    writes,
  } as unknown as StatusJson;
  const text = statusLines(status).join('\n');
  t.match(
    text,
    /writes\s+3\.10 GB today, 143\.1 MiB last hour; budget 1\.50 GB\/day \(card of 16 TB written: 29\.2 years\), 3\.60 GB\/day so far: card life 12\.2 years/,
  );
  t.match(text, /fixed delay 0 ms \(store\.commitDelayMs\)/);
  const young = statusLines({ ...status, writes: { ...writes, cardLifeYears: null } }).join('\n');
  t.match(young, /29\.2 years\), card life at this rate: too early to tell \(under an hour\)\n/, 'a young daemon');
  t.notMatch(young, /so far/, 'no figure extrapolated from minutes');
  t.match(text, /the filesystem's journal 286\.1 MiB of the 2956\.4 MiB since start/);
  t.notMatch(
    statusLines({ ...status, writes: { ...writes, journalSinceStartBytes: null } }).join('\n'),
    /journal/,
    'no journal found: none is shown',
  );
  t.match(text, /WARNING .*wears faster than planned/);
  t.notMatch(
    statusLines({ ...status, writes: { ...writes, overBudget: false, paced: true } }).join('\n'),
    /WARNING/,
    'no warning within the budget',
  );
});
