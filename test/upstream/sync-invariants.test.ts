/**
 * The sync's invariants, each checked where it can fail: the back-off's jitter, a Retry-After capped by
 * sync.retryMaxMs, telemetry of an asset leaving no pending count behind, the clock state (src/upstream/uplink/link.ts,
 * counts.ts, clock.ts). Against a fake ThingsBoard (helpers/fake-tb.ts) and the real `outpost serve`.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { clockSynchronized } from '../../src/upstream/uplink/clock.js';
import { backoffDelayMs } from '../../src/upstream/uplink/link.js';
import { FakeTb } from '../helpers/fake-tb.js';
import { type Gateway, addDevice, http, tempDir, waitLogLines } from '../helpers/server.js';
import {
  syncGateway as gateway,
  postTelemetry as post,
  records,
  syncStatusOf,
  syncStatusUntil,
} from '../helpers/sync.js';
import { addUser, authHeaders, login } from '../helpers/users.js';

interface Status {
  backlogPoints: number;
  oldestPendingTs: number | null;
  lastError: string | null;
  notSyncedPoints: number;
}

const BASE = Date.UTC(2026, 0, 1);

const statusOf = (gw: Gateway, jwt: string): Promise<Status> => syncStatusOf<Status>(gw, jwt);
const statusUntil = (gw: Gateway, jwt: string, pred: (s: Status) => boolean, label: string): Promise<Status> =>
  syncStatusUntil(gw, jwt, pred, label, 20_000, 100);

t.test('a Retry-After longer than sync.retryMaxMs waits retryMaxMs, not what the upstream asked', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  let first = true;
  tb.answer = (r) => {
    if (r.kind !== 'telemetry' || !first) return undefined;
    first = false;
    // a day: honoured as is, it would stop the sync for a day
    return { status: 503, headers: { 'Retry-After': '86400' } };
  };
  const gw = await gateway(t, tb.url, { retryMaxMs: 400 });
  const dev = await addDevice(gw.dataDir, 'd', ['--upstream-token', 'T']);
  await post(gw, dev.token, records(BASE, 5, 1));
  await tb.waitFor(() => tb.distinct('T').size === 5, 'the points after the 503', 10_000);
  const tele = tb.requests.filter((r) => r.kind === 'telemetry');
  const gap = (tele[1] as { at: number }).at - (tele[0] as { at: number }).at;
  // how long it chose to wait is in its log; the gap only shows it waited (a loaded machine stretches it)
  const [chose] = await waitLogLines(gw, /sync: .*; backing off \(retry in \d+ ms/);
  t.match(chose, /\(retry in 400 ms,/, 'retryMaxMs, not the day asked for');
  t.ok(gap >= 350, `the retry came no sooner (${gap} ms)`);
});

t.test('the back-off is equal jitter: between half the doubled delay and all of it, capped', async (t) => {
  t.equal(
    backoffDelayMs(1, 1000, 60_000, () => 0),
    500,
    'first failure, lowest draw: half the base',
  );
  t.equal(
    backoffDelayMs(1, 1000, 60_000, () => 1),
    1000,
    'first failure, highest draw: the base',
  );
  t.equal(
    backoffDelayMs(3, 1000, 60_000, () => 0),
    2000,
    'third failure: half of 4 s at least',
  );
  t.equal(
    backoffDelayMs(40, 1000, 60_000, () => 0),
    30_000,
    'many failures: half the cap at least',
  );
  t.equal(
    backoffDelayMs(40, 1000, 60_000, () => 1),
    60_000,
    'and the cap at most',
  );
});

t.test('the clock state: synchronized, not synchronized, or unknown when timesyncd is not there', async (t) => {
  const dir = join(tempDir(t, 'outpost-timesync-'), 'timesync');
  t.equal(clockSynchronized(dir), null, 'no timesyncd directory: unknown');
  mkdirSync(dir);
  t.equal(clockSynchronized(dir), false, 'the directory without the flag: not synchronized');
  writeFileSync(join(dir, 'synchronized'), '');
  t.equal(clockSynchronized(dir), true, 'the flag: synchronized');
});

t.test('telemetry of an asset is counted as not synced and leaves no oldest pending point behind', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  // the log reaches LMDB (and the outbox, where the asset's points are found and discarded) every 200 ms
  const gw = await gateway(t, tb.url, {}, { store: { applyIntervalMs: 200 } });
  await addUser(gw.dataDir, 'admin@sync.test', 'secret', 'TENANT_ADMIN');
  const jwt = (await login(gw, 'admin@sync.test', 'secret')).token;
  const made = await http(
    'POST',
    `${gw.url}/api/asset`,
    JSON.stringify({ name: 'pump house', type: 'building' }),
    authHeaders(jwt),
  );
  t.equal(made.status, 200, 'the asset is made');
  const asset = made.json<{ id: { id: string } }>().id.id;
  const r = await http(
    'POST',
    `${gw.url}/api/plugins/telemetry/ASSET/${asset}/timeseries/ANY`,
    records(BASE, 3, 2),
    authHeaders(jwt),
  );
  t.equal(r.status, 200, 'its telemetry is stored');
  await statusUntil(gw, jwt, (st) => st.notSyncedPoints >= 6, "the asset's points not synced");
  // a few more scans of the pump (one a second at least): none counts them again
  await new Promise((r) => setTimeout(r, 2500));
  const s = await statusOf(gw, jwt);
  t.equal(s.notSyncedPoints, 6, 'each point counted once');
  t.equal(s.backlogPoints, 0, 'nothing pending');
  t.equal(s.oldestPendingTs, null, 'no oldest pending point');
  // a device's point after it: the oldest pending one is the device's, not the asset's
  await tb.down();
  const dev = await addDevice(gw.dataDir, 'd', ['--upstream-token', 'T']);
  await post(gw, dev.token, `{"ts":${BASE + 7_200_000},"values":{"a":1}}`);
  const down = await statusUntil(
    gw,
    jwt,
    (st) => st.backlogPoints === 1 && st.lastError !== null,
    "the device's point pending",
  );
  t.equal(down.oldestPendingTs, BASE + 7_200_000, "the oldest pending point is the device's");
});
