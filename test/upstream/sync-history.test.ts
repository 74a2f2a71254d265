/**
 * History from before sync (docs/sync.md): a gateway that stored points before `sync.url` was set sends them
 * when sync is configured, oldest first behind live data, and counts them as behind until they are up; an
 * upstream it already synced to gets nothing twice after a restart; another upstream gets the history again;
 * `sync.backfill: false` keeps the old behaviour (only what is written from then on).
 */
import t, { type Test } from 'tap';
import { FakeTb } from '../helpers/fake-tb.js';
import { type Gateway, addDevice, cli, startGateway } from '../helpers/server.js';
import { postTelemetry, records, syncGateway, syncStatusOf, syncStatusUntil } from '../helpers/sync.js';
import { adminToken } from '../helpers/users.js';

interface Status {
  state: string;
  backlogPoints: number;
  sentPoints: number;
  oldestPendingTs: number | null;
}

const HOUR = 3_600_000;
/** three days back: whole windows old enough to be compacted into chunks, and a recent one still in the head */
const BASE = Date.now() - 3 * 24 * HOUR;

/** 444 points: 200 records × 2 keys of device A over two days, 44 × 1 key of device B in the last hour. */
async function storeWithoutSync(t: Test): Promise<{ dataDir: string; a: string; b: string }> {
  const gw = await startGateway(t);
  const a = await addDevice(gw.dataDir, 'pump-a', ['--upstream-token', 'UPA']);
  const b = await addDevice(gw.dataDir, 'pump-b', ['--upstream-token', 'UPB']);
  // one record every 15 minutes: the history spans many chunk windows and two days
  for (let i = 0; i < 200; i += 50) {
    const parts: string[] = [];
    for (let j = i; j < i + 50; j++) parts.push(`{"ts":${BASE + j * 900_000},"values":{"k0":${j},"k1":${j + 0.5}}}`);
    await postTelemetry(gw, a.token, `[${parts.join(',')}]`);
  }
  await postTelemetry(gw, b.token, records(Date.now() - HOUR, 44, 1));
  t.equal(await gw.stop(), 0, 'the gateway without sync stops cleanly');
  return { dataDir: gw.dataDir, a: a.token, b: b.token };
}

const waitSync = (gw: Gateway, jwt: string, pred: (s: Status) => boolean, label: string): Promise<Status> =>
  syncStatusUntil<Status>(gw, jwt, pred, label, 60_000, 50);

t.test('points stored before sync was set go up, counted as behind until they are', async (t) => {
  const store = await storeWithoutSync(t);
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  // the upstream refuses at first, so the count before anything went up can be read
  tb.answer = () => ({ status: 503 });
  const gw = await syncGateway(t, tb.url, { maxPointsPerSec: 100 }, {}, store.dataDir);
  const jwt = await adminToken(gw);
  const before = await waitSync(gw, jwt, (s) => s.backlogPoints === 444, '444 points behind');
  t.equal(before.oldestPendingTs !== null && before.oldestPendingTs <= BASE, true, 'the oldest is the first point');
  const shown = await cli(['sync', '--data-dir', gw.dataDir]);
  t.match(shown.stdout, /backlog +444 points behind/, 'outpost sync counts them as behind');

  tb.answer = undefined;
  // live data keeps priority: a point posted now goes up before the paced history has all gone
  await postTelemetry(gw, store.b, '{"live":1}');
  await tb.waitFor(() => tb.points.some((p) => p.key === 'live'), 'the live point');
  t.ok(tb.points.length < 444, `the live point went up before the history (${tb.points.length} of 444 so far)`);

  await tb.waitFor(() => tb.distinct('UPA').size === 400 && tb.distinct('UPB').size === 45, 'every old point');
  const firstA = tb.points.find((p) => p.token === 'UPA');
  t.equal(firstA?.ts, BASE, 'oldest first');
  const after = await waitSync(gw, jwt, (s) => s.backlogPoints === 0 && s.sentPoints >= 445, 'nothing behind');
  t.equal(after.backlogPoints, 0);
  t.match((await cli(['sync', '--data-dir', gw.dataDir])).stdout, /backlog +0 points behind/);
  t.equal(await gw.stop(), 0);

  // a restart towards the same upstream sends no history again
  const sentBefore = tb.points.length;
  const again = await syncGateway(t, tb.url, {}, {}, store.dataDir);
  const jwt2 = await adminToken(again, 'admin2@outpost.test');
  await postTelemetry(again, store.b, '{"live":2}');
  await tb.waitFor(() => tb.points.some((p) => p.key === 'live' && p.value === '2'), 'the second live point');
  t.equal(tb.points.length, sentBefore + 1, 'only the new point went up');
  t.equal((await syncStatusOf<Status>(again, jwt2)).backlogPoints, 0);
  t.notOk(
    again.logs.some((l) => /a new upstream/.test(l)),
    'no history queued for an upstream that has it',
  );
  t.equal(await again.stop(), 0);

  // another upstream gets the history again
  const other = await FakeTb.start();
  t.teardown(() => other.close());
  const moved = await syncGateway(t, other.url, {}, {}, store.dataDir);
  await other.waitFor(
    () => other.distinct('UPA').size === 400 && other.distinct('UPB').size === 46,
    'everything at the new upstream',
  );
  t.pass('a new upstream gets every point the store holds');
  const jwt3 = await adminToken(moved, 'admin3@outpost.test');
  await waitSync(moved, jwt3, (s) => s.backlogPoints === 0, 'nothing behind at the new upstream');
});

t.test('sync.backfill false: only what is written from then on', async (t) => {
  const store = await storeWithoutSync(t);
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  const gw = await syncGateway(t, tb.url, { backfill: false }, {}, store.dataDir);
  const jwt = await adminToken(gw);
  await postTelemetry(gw, store.b, '{"live":1}');
  await tb.waitFor(() => tb.points.some((p) => p.key === 'live'), 'the live point');
  const s = await waitSync(gw, jwt, (x) => x.sentPoints === 1, 'the live point counted');
  t.equal(s.backlogPoints, 0, 'nothing behind');
  t.equal(tb.points.length, 1, 'no history went up');
  t.equal(await gw.stop(), 0);

  // the upstream counts as synced to: switching backfill on later sends it no history
  const again = await syncGateway(t, tb.url, { backfill: true }, {}, store.dataDir);
  await postTelemetry(again, store.b, '{"live":2}');
  await tb.waitFor(() => tb.points.some((p) => p.key === 'live' && p.value === '2'), 'the second live point');
  t.equal(tb.points.length, 2, 'still no history');
  t.notOk(again.logs.some((l) => /a new upstream/.test(l)));
});
