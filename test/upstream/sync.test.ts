/**
 * Upstream sync (docs/sync.md) against a fake ThingsBoard (helpers/fake-tb.ts) and, end to end,
 * against a second Outpost daemon with provisioning. Each case starts the real `outpost serve` with a small
 * config (short back-off caps, small batches) and waits on events: the fake's requests, the status endpoint.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { hasOpenssl, selfSignedCert } from '../helpers/tls.js';
import { clockSynchronized } from '../../src/upstream/uplink/clock.js';
import { FakeTb, type Received } from '../helpers/fake-tb.js';
import { type Gateway, addDevice, cli, http, startGateway, tempDir } from '../helpers/server.js';
import {
  syncGateway as gateway,
  postTelemetry as post,
  records,
  syncStatusOf,
  syncStatusUntil,
} from '../helpers/sync.js';
import { addUser, authHeaders, login } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';

interface Status {
  enabled: boolean;
  state: string;
  url: string | null;
  backlogPoints: number;
  oldestPendingTs: number | null;
  sentPoints: number;
  droppedPoints: number;
  lastSuccessTs: number | null;
  lastError: string | null;
  devices: Array<{ id: string; name: string; state: string; reason: string | null; backlogPoints: number }>;
  heldPoints: number;
  setAsidePoints: number;
  droppedRange: [number, number] | null;
  clockSynchronized: boolean | null;
}

const statusOf = (gw: Gateway, jwt: string): Promise<Status> => syncStatusOf<Status>(gw, jwt);

async function admin(gw: Gateway): Promise<string> {
  await addUser(gw.dataDir, 'admin@sync.test', 'secret', 'TENANT_ADMIN');
  return (await login(gw, 'admin@sync.test', 'secret')).token;
}

function statusUntil(
  gw: Gateway,
  jwt: string,
  pred: (s: Status) => boolean,
  label: string,
  timeoutMs = 20_000,
): Promise<Status> {
  return syncStatusUntil(gw, jwt, pred, label, timeoutMs, 100);
}

const BASE = Date.UTC(2026, 0, 1);

t.test('an outage while devices post: every point arrives, exact in value and type', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  await tb.down();
  const gw = await gateway(t, tb.url);
  const jwt = await admin(gw);
  const dev = await addDevice(gw.dataDir, 'typed', ['--upstream-token', 'UP1']);
  const sent: Array<{ ts: number; key: string; type: Received['type']; value: string }> = [];
  const body: string[] = [];
  for (let i = 0; i < 50; i++) {
    const ts = BASE + i * 1000;
    const big = `${9_007_199_254_740_993n + BigInt(i)}`;
    body.push(
      `{"ts":${ts},"values":{"d":${i}.0,"l":${i},"s":"v${i}","b":${i % 2 === 0},"j":{"i":${i}},"big":${big},"tiny":1.5e-7,"e10":1e10}}`,
    );
    sent.push(
      { ts, key: 'd', type: 'DOUBLE', value: `${i}.0` },
      { ts, key: 'l', type: 'LONG', value: `${i}` },
      { ts, key: 's', type: 'STRING', value: `v${i}` },
      { ts, key: 'b', type: 'BOOLEAN', value: `${i % 2 === 0}` },
      { ts, key: 'j', type: 'JSON', value: `{"i":${i}}` },
      { ts, key: 'big', type: 'LONG', value: big },
      { ts, key: 'tiny', type: 'DOUBLE', value: '0.00000015' },
      { ts, key: 'e10', type: 'LONG', value: '10000000000' },
    );
  }
  // five requests of ten records, the link down
  for (let r = 0; r < 5; r++) await post(gw, dev.token, `[${body.slice(r * 10, r * 10 + 10).join(',')}]`);
  const down = await statusUntil(
    gw,
    jwt,
    (s) => s.state === 'backoff' && s.backlogPoints === sent.length,
    'backing off with the backlog',
  );
  t.equal(down.oldestPendingTs, BASE, 'the oldest pending point is reported');
  t.ok(down.lastError !== null, `the error is shown: ${down.lastError}`);
  await tb.up();
  await tb.waitFor(() => tb.distinct('UP1').size === sent.length, 'every point');
  const got = tb.distinct('UP1');
  for (const p of sent) {
    const r = got.get(`${p.key}@${p.ts}`);
    if (r === undefined || r.type !== p.type || r.value !== p.value) {
      t.fail(`point ${p.key}@${p.ts}: sent ${p.type} ${p.value}, received ${r?.type} ${r?.value}`);
      return;
    }
  }
  t.pass('every point arrived with its type and value');
  t.equal(tb.points.length, sent.length, 'no point was sent twice');
  const s = await statusUntil(gw, jwt, (st) => st.backlogPoints === 0 && st.sentPoints === sent.length, 'drained');
  t.equal(s.state === 'idle' || s.state === 'sending', true, 'idle after the drain');
  t.equal(s.lastError !== null, true, 'the last error stays shown');
  t.ok(s.lastSuccessTs !== null, 'lastSuccessTs set');
  // counters survive a restart
  await gw.stop('SIGTERM');
  const again = await gateway(t, tb.url, {}, {}, gw.dataDir);
  const s2 = await statusOf(again, await (await login(again, 'admin@sync.test', 'secret')).token);
  t.equal(s2.sentPoints, sent.length, 'sentPoints persisted across a restart');
  t.equal(s2.backlogPoints, 0, 'nothing pending after the restart');
});

t.test('a parked device does not block the others; a token set later resumes it', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  tb.answer = (r) => (r.token === 'REVOKED' ? { status: 401 } : undefined);
  const gw = await gateway(t, tb.url);
  const jwt = await admin(gw);
  const bad = await addDevice(gw.dataDir, 'bad', ['--upstream-token', 'REVOKED']);
  const none = await addDevice(gw.dataDir, 'tokenless');
  const good = await addDevice(gw.dataDir, 'good', ['--upstream-token', 'GOOD']);
  for (let r = 0; r < 3; r++) {
    await post(gw, bad.token, records(BASE + r * 100_000, 20, 2));
    await post(gw, none.token, records(BASE + r * 100_000, 20, 2));
    await post(gw, good.token, records(BASE + r * 100_000, 20, 2));
  }
  await tb.waitFor(() => tb.distinct('GOOD').size === 120, "the good device's points");
  // the fake upstream records a body before the gateway reads its answer: wait for that answer too
  const s = await statusUntil(
    gw,
    jwt,
    (st) =>
      st.devices.filter((d) => d.state === 'parked').length === 2 &&
      (st.devices.find((d) => d.name === 'good')?.backlogPoints ?? 0) === 0,
    'two parked, the good one sent',
  );
  const byName = new Map(s.devices.map((d) => [d.name, d]));
  t.match(byName.get('bad')?.reason, /refused its token \(HTTP 401\)/, 'the 401 is the reason');
  t.match(byName.get('tokenless')?.reason, /no upstream token/, 'no token is the reason');
  t.equal(byName.get('bad')?.backlogPoints, 120, 'nothing of the parked device is dropped');
  t.equal(s.backlogPoints, 240, "the parked devices' points are pending");
  const set = await cli(['device', 'upstream', 'tokenless', '--token', 'NEW', '--data-dir', gw.dataDir]);
  t.equal(set.code, 0, `device upstream works (${set.stderr})`);
  await tb.waitFor(() => tb.distinct('NEW').size === 120, "the resumed device's points");
  t.equal(tb.requests.filter((r) => r.token === 'REVOKED').length, 1, 'the parked device was not retried');
});

t.test('429 with Retry-After is honoured; a 400 batch is set aside and the rest goes on', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  let first = true;
  tb.answer = (r) => {
    if (r.kind !== 'telemetry') return undefined;
    if (first) {
      first = false;
      return { status: 429, headers: { 'Retry-After': '1' } };
    }
    return r.body.includes('"poison"') ? { status: 400, body: '{"message":"bad key"}' } : undefined;
  };
  // a Retry-After is honoured up to sync.retryMaxMs (sync-invariants.test.ts): 1 s is within it here
  const gw = await gateway(t, tb.url, { retryMaxMs: 2000 });
  const jwt = await admin(gw);
  const dev = await addDevice(gw.dataDir, 'd', ['--upstream-token', 'T']);
  await post(gw, dev.token, records(BASE, 5, 1));
  await tb.waitFor(() => tb.distinct('T').size === 5, 'the points after the 429');
  const tele = tb.requests.filter((r) => r.kind === 'telemetry');
  t.equal(tele.length, 2, 'one request refused with 429, one retry');
  const gap = (tele[1] as { at: number }).at - (tele[0] as { at: number }).at;
  t.ok(gap >= 950, `the retry waited Retry-After (${gap} ms)`);
  await post(gw, dev.token, `{"ts":${BASE + 10_000},"values":{"poison":1}}`);
  const s = await statusUntil(gw, jwt, (st) => st.setAsidePoints === 1, 'set aside');
  t.match(s.lastError, /400/, 'the 400 is shown');
  await post(gw, dev.token, records(BASE + 20_000, 3, 1));
  await tb.waitFor(() => tb.distinct('T').size === 8, 'points after the set-aside batch');
  const after = await statusUntil(gw, jwt, (st) => st.backlogPoints === 0, 'empty backlog');
  t.equal(after.sentPoints, 8, 'the set-aside point is not counted as sent');
  t.equal(tb.requests.filter((r) => r.body.includes('"poison"')).length, 1, 'the 400 batch is not retried');
});

t.test('after an outage live points go first (within 5 s) while the backlog drains at maxPointsPerSec', async (t) => {
  const RATE = 1000;
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  await tb.down();
  const gw = await gateway(t, tb.url, { maxPointsPerSec: RATE });
  const dev = await addDevice(gw.dataDir, 'd', ['--upstream-token', 'T']);
  // 4,000 points of backlog: 4 s of drain
  for (let r = 0; r < 4; r++) await post(gw, dev.token, records(BASE + r * 1_000_000, 250, 4));
  // an outage is what the gateway saw fail: points it never tried to send are simply new
  const jwt = await admin(gw);
  await statusUntil(
    gw,
    jwt,
    (st) => st.lastError !== null && st.backlogPoints === 4000,
    'the link seen down, 4,000 points pending',
  );
  await tb.up();
  await tb.waitFor(() => tb.points.length >= 500, 'the drain under way');
  const liveTs = BASE + 50_000_000;
  const postedAt = Date.now();
  await post(gw, dev.token, `{"ts":${liveTs},"values":{"live":1}}`);
  await tb.waitFor(() => tb.points.some((p) => p.key === 'live'), 'the live point', 5_000);
  const liveMs = Date.now() - postedAt;
  t.ok(liveMs < 5000, `the live point went up in ${liveMs} ms`);
  const backlogLeft = 4000 - tb.points.filter((p) => p.key !== 'live').length;
  t.ok(backlogLeft > 0, `the backlog was still draining (${backlogLeft} points left)`);
  await tb.waitFor(() => tb.distinct('T').size === 4001, 'the whole backlog', 20_000);
  const backlog = tb.requests.filter((r) => r.kind === 'telemetry' && !r.body.includes('"live"'));
  // rate over the drain: points after the first request / time from the first to the last request
  const firstAt = (backlog[0] as { at: number }).at;
  const lastAt = (backlog[backlog.length - 1] as { at: number }).at;
  const perReq = backlog.map((r) => (r.body.match(/"k\d":/g) ?? []).length);
  const afterFirst = perReq.slice(1).reduce((a, b) => a + b, 0);
  const rate = (afterFirst * 1000) / (lastAt - firstAt);
  t.ok(Math.abs(rate - RATE) <= RATE * 0.1, `paced at ${rate.toFixed(0)} points/s (target ${RATE})`);
});

t.test('a device posting as fast as it is answered does not starve the backlog, even with one slot', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  await tb.down();
  // posts answered as soon as their log record is on disk, not after a group-commit delay
  const gw = await gateway(t, tb.url, { concurrency: 1 }, { store: { commitDelayMs: 0 } });
  const jwt = await admin(gw);
  const old = await addDevice(gw.dataDir, 'old', ['--upstream-token', 'OLD']);
  const chatty = await addDevice(gw.dataDir, 'chatty', ['--upstream-token', 'CHAT']);
  // 2,000 points of backlog: about 20 bodies of 4 KB
  for (let r = 0; r < 4; r++) await post(gw, old.token, records(BASE + r * 1_000_000, 250, 2));
  await statusUntil(
    gw,
    jwt,
    (st) => st.lastError !== null && st.backlogPoints === 2000,
    'the link seen down, 2,000 points pending',
  );
  // every request takes 20 ms: the chatty device's next point is always waiting when the one slot frees
  tb.delayMs = 20;
  await tb.up();
  let posting = true;
  let n = 0;
  // three posts in flight at a time: ts strictly increasing, values numbered
  const chatter = Promise.all(
    [0, 1, 2].map(async () => {
      while (posting) {
        const i = n++;
        await post(gw, chatty.token, `{"ts":${BASE + 10_000_000 + i},"values":{"c":${i}}}`);
      }
    }),
  );
  try {
    await tb.waitFor(() => tb.distinct('OLD').size === 2000, 'the backlog, while the chatty device posts', 15_000);
    t.pass(`the backlog drained while ${n} live posts went on`);
    const posted = n;
    await tb.waitFor(() => tb.distinct('CHAT').size >= posted - 3, 'the live points posted so far', 5_000);
    t.pass('live points still go within 5 s');
  } finally {
    posting = false;
    await chatter;
  }
  const drain = tb.requests.filter((r) => r.token === 'OLD');
  const [from, to] = [(drain[0] as { at: number }).at, (drain[drain.length - 1] as { at: number }).at];
  const between = tb.requests.filter((r) => r.token === 'CHAT' && r.at > from && r.at < to).length;
  t.ok(
    between >= 2,
    `live requests went between the backlog's (${between} of ${tb.requests.filter((r) => r.token === 'CHAT').length})`,
  );
});

t.test('points the disk budget or retention drops while the link is down are counted, with their range', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  await tb.down();
  // Retention's horizon follows the newest ts in LMDB, which the log reaches every store.applyIntervalMs (5 min by
  // default): shortened here, so the second post moves the horizon within the test
  const gw = await gateway(
    t,
    tb.url,
    {},
    {
      store: { headWindowMs: 1000, applyIntervalMs: 200 },
      downsample: { rawRetentionMs: 3_600_000, sweepIntervalMs: 50 },
    },
  );
  const jwt = await admin(gw);
  const dev = await addDevice(gw.dataDir, 'd', ['--upstream-token', 'T']);
  const old = Date.now() - 3 * 86_400_000;
  await post(gw, dev.token, records(old, 30, 2));
  await post(gw, dev.token, records(old + 86_400_000, 10, 2));
  const s = await statusUntil(gw, jwt, (st) => st.droppedPoints === 60, 'the old points counted as dropped');
  t.same(s.droppedRange, [old, old + 29_000], 'their time range');
  t.equal(s.backlogPoints, 20, 'the rest is pending');
  t.ok(
    gw.logs.some((l) => /\d+ points removed by retention or the disk budget/.test(l)),
    'a log line says so (one a minute at most: compaction may settle the two windows in two passes)',
  );
  await tb.up();
  await tb.waitFor(() => tb.distinct('T').size === 20, 'the kept points');
});

t.test('a point stamped before 2000 or more than a day ahead is held and shown, not sent', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  const gw = await gateway(t, tb.url);
  const jwt = await admin(gw);
  const dev = await addDevice(gw.dataDir, 'd', ['--upstream-token', 'T']);
  await post(
    gw,
    dev.token,
    `[{"ts":1000,"values":{"a":1}},{"ts":${Date.now() + 3 * 86_400_000},"values":{"a":2}},{"ts":${BASE},"values":{"a":3}}]`,
  );
  await tb.waitFor(() => tb.points.length === 1, 'the good point');
  const s = await statusUntil(gw, jwt, (st) => st.heldPoints === 2 && st.backlogPoints === 0, 'two held');
  t.equal(s.sentPoints, 1, 'only the point with a sane timestamp went');
  t.equal(tb.points[0]?.ts, BASE, 'that one');
  t.equal(s.clockSynchronized, clockSynchronized(), "the clock state is the system's (clock.ts)");
  const d = await http(
    'POST',
    `${gw.url}/api/v1/${dev.token}/depth/telemetry`,
    '[{"ds":1.5,"values":{"rop":1,"lith":"x"}}]',
  );
  t.equal(d.status, 200);
  await statusUntil(
    gw,
    jwt,
    (st) => (st as Status & { depthNotSyncedPoints: number }).depthNotSyncedPoints === 2,
    'depth points counted as not synced',
  );
  t.pass('depth points are counted as not synced');
});

t.test('kill -9 of the gateway mid-drain: nothing lost, duplicates only from what was in flight', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  await tb.down();
  const gw = await gateway(t, tb.url);
  const devs = await Promise.all([0, 1, 2].map((i) => addDevice(gw.dataDir, `d${i}`, ['--upstream-token', `T${i}`])));
  for (const [i, d] of devs.entries())
    for (let r = 0; r < 4; r++)
      await post(
        gw,
        d.token,
        records(BASE + r * 1_000_000, 500, 2, (n, k) => `${i * 1e6 + n * 10 + k}`),
      );
  const total = 3 * 4 * 500 * 2;
  tb.delayMs = 5;
  await tb.up();
  await tb.waitFor(() => tb.points.length >= total / 3, 'a third drained');
  const killAt = Date.now();
  gw.proc.kill('SIGKILL');
  await gw.stop('SIGKILL');
  const receivedAtKill = tb.points.length;
  await gateway(t, tb.url, {}, {}, gw.dataDir);
  await tb.waitFor(
    () => devs.every((_, i) => tb.distinct(`T${i}`).size === 4000),
    'every point after the restart',
    30_000,
  );
  for (let i = 0; i < 3; i++) {
    const got = tb.distinct(`T${i}`);
    const wrong = [...got.values()].filter(
      (p) =>
        p.type !== 'LONG' ||
        Number(p.value) !== i * 1e6 + (((p.ts - BASE) % 1_000_000) / 1000) * 10 + Number(p.key.slice(1)),
    );
    t.equal(wrong.length, 0, `device ${i}: every value exact`);
  }
  const maxPerRequest = Math.max(
    ...tb.requests.filter((r) => r.kind === 'telemetry').map((r) => (r.body.match(/"k\d":/g) ?? []).length),
  );
  const dups = tb.points.length - total;
  // in flight at the kill: per device and lane one request, plus what was acknowledged in the last 250 ms
  // (acknowledgements wait that long to share a transaction, src/upstream/uplink/acks.ts); 1 s of margin
  const recent = tb.requests
    .filter((r) => r.kind === 'telemetry' && r.at >= killAt - 1000 && r.at <= killAt)
    .reduce((n, r) => n + (r.body.match(/"k\d":/g) ?? []).length, 0);
  const bound = 3 * 2 * maxPerRequest + recent;
  t.ok(
    dups <= bound,
    `${dups} duplicates (in flight or acknowledged but not committed at the kill: at most ${bound}; ${receivedAtKill} received before it)`,
  );
});

t.test(
  'with the link up, points go straight from the write-ahead log; a kill -9 re-sends none that went before the last post',
  async (t) => {
    const tb = await FakeTb.start();
    t.teardown(() => tb.close());
    // the log is applied only every 10 minutes: whatever reaches the upstream here went from the log
    const gw = await gateway(t, tb.url, {}, { store: { applyIntervalMs: 600_000 } });
    const jwt = await admin(gw);
    const dev = await addDevice(gw.dataDir, 'd', ['--upstream-token', 'T']);
    for (let r = 0; r < 10; r++) {
      const postedAt = Date.now();
      await post(gw, dev.token, records(BASE + r * 10_000, 5, 2));
      await tb.waitFor(() => tb.distinct('T').size === (r + 1) * 10, `post ${r} upstream`);
      t.ok(Date.now() - postedAt < 2000, `post ${r} upstream in ${Date.now() - postedAt} ms`);
    }
    const s = await statusUntil(gw, jwt, (st) => st.sentPoints === 100, 'counted as sent');
    t.equal(s.backlogPoints, 0, 'nothing pending');
    t.equal(tb.points.length, 100, 'each point once');
    await gw.stop('SIGKILL');
    // at the restart the log is replayed into LMDB: its sent marks leave out what went, so nothing is sent again,
    // except the last post's points, whose mark waited for a next group commit that never came
    const again = await gateway(t, tb.url, {}, { store: { applyIntervalMs: 600_000 } }, gw.dataDir);
    const jwt2 = (await login(again, 'admin@sync.test', 'secret')).token;
    await statusUntil(again, jwt2, (st) => st.backlogPoints === 0, 'nothing pending after the restart');
    await post(again, dev.token, records(BASE + 200_000, 1, 1));
    await tb.waitFor(() => tb.distinct('T').size === 101, 'a new point after the restart');
    const resent = tb.points.length - 101;
    t.ok(resent <= 10, `${resent} points sent again (at most the last post's 10)`);
  },
);

t.test('points still in the log at a kill -9 during an outage are sent after the restart', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  await tb.down();
  const gw = await gateway(t, tb.url, {}, { store: { applyIntervalMs: 600_000 } });
  const jwt = await admin(gw);
  const dev = await addDevice(gw.dataDir, 'd', ['--upstream-token', 'T']);
  await post(gw, dev.token, records(BASE, 5, 2));
  await statusUntil(gw, jwt, (st) => st.state === 'backoff', 'backing off');
  // posted while backing off: kept in the log only (no LMDB commit for it during the outage)
  await post(gw, dev.token, records(BASE + 100_000, 5, 2));
  await statusUntil(gw, jwt, (st) => st.backlogPoints === 20, 'both posts pending');
  await gw.stop('SIGKILL');
  await tb.up();
  await gateway(t, tb.url, {}, { store: { applyIntervalMs: 600_000 } }, gw.dataDir);
  await tb.waitFor(() => tb.distinct('T').size === 20, 'every point after the restart, the logged ones too');
  t.pass('the replay of the log recorded what was left to send');
});

t.test('a device several lanes ask for at once is provisioned once, not parked', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  // a slow upstream: the first provisioning is still under way when the device's other lanes ask for its token
  tb.delayMs = 300;
  const gw = await gateway(t, tb.url, { provisionKey: 'pk', provisionSecret: 'ps' });
  const jwt = await admin(gw);
  const dev = await addDevice(gw.dataDir, 'eager');
  const [tel, attr] = await Promise.all([
    http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, '{"v":1}'),
    http('POST', `${gw.url}/api/v1/${dev.token}/attributes`, '{"fw":"v1"}'),
  ]);
  t.same([tel.status, attr.status], [200, 200]);
  await tb.waitFor(
    () => tb.distinct('up-eager').size === 1 && tb.attributes.has('up-eager'),
    'the point and the attribute upstream',
  );
  t.equal(tb.requests.filter((r) => r.kind === 'provision').length, 1, 'one provisioning request');
  const s = await statusOf(gw, jwt);
  t.match(
    s.devices.find((d) => d.name === 'eager'),
    { state: 'ok', reason: null },
  );
  t.notOk(
    gw.logs.some((l) => /parked/.test(l)),
    'never parked',
  );
});

t.test('end to end: an Outpost syncs into another Outpost, provisioning its devices', async (t) => {
  const upDir = tempDir(t, 'outpost-upstream-');
  const upCfg = join(upDir, 'up.json');
  writeFileSync(upCfg, JSON.stringify({ provision: { key: 'pk', secret: 'ps' } }));
  const up = await startGateway(t, { args: ['--config', upCfg] });
  // TB's provisioning answers, all with HTTP 200
  const prov = async (b: object): Promise<{ status: number; body: Record<string, string> }> => {
    const r = await http('POST', `${up.url}/api/v1/provision`, b);
    return { status: r.status, body: r.json() };
  };
  const wrong = await prov({ deviceName: 'x', provisionDeviceKey: 'pk', provisionDeviceSecret: 'nope' });
  t.same([wrong.status, wrong.body.status], [200, 'NOT_FOUND'], 'a wrong secret: NOT_FOUND');
  const gw = await gateway(t, up.url, { provisionKey: 'pk', provisionSecret: 'ps' });
  const dev = await addDevice(gw.dataDir, 'edge-1');
  await post(
    gw,
    dev.token,
    `[{"ts":${BASE},"values":{"d":42.0,"l":42,"s":"x","b":true,"j":{"a":[1,2]}}},{"ts":${BASE + 1},"values":{"d":1.5e-7,"l":9007199254740993}}]`,
  );
  await addUser(up.dataDir, 'up@sync.test', 'secret', 'TENANT_ADMIN');
  const ujwt = (await login(up, 'up@sync.test', 'secret')).token;
  // the upstream's device appears once provisioned; its points once sent
  let upId = '';
  let values: Record<string, Array<{ ts: number; value: unknown }>> = {};
  await waitFor(
    async () => {
      const d = await http('GET', `${up.url}/api/tenant/devices?deviceName=edge-1`, undefined, authHeaders(ujwt));
      if (d.status !== 200) return false;
      upId = d.json<{ id: { id: string } }>().id.id;
      const r = await http(
        'GET',
        `${up.url}/api/plugins/telemetry/DEVICE/${upId}/values/timeseries?keys=d,l,s,b,j&startTs=0&endTs=${BASE + 10}&useStrictDataTypes=true`,
        undefined,
        authHeaders(ujwt),
      );
      values = r.json();
      return Object.values(values).reduce((s, v) => s + v.length, 0) === 7;
    },
    { interval: 100, message: 'every point upstream' },
  ).catch(() => undefined);
  t.equal(
    Object.values(values).reduce((n, v) => n + v.length, 0),
    7,
    'every point arrived upstream',
  );
  const raw = await http(
    'GET',
    `${up.url}/api/plugins/telemetry/DEVICE/${upId}/values/timeseries?keys=d,l&startTs=0&endTs=${BASE + 10}&useStrictDataTypes=true`,
    undefined,
    authHeaders(ujwt),
  );
  t.equal(
    raw.text,
    `{"d":[{"ts":${BASE + 1},"value":1.5E-7},{"ts":${BASE},"value":42.0}],"l":[{"ts":${BASE + 1},"value":9007199254740993},{"ts":${BASE},"value":42}]}`,
    'doubles stay doubles and a long beyond 2^53 stays exact upstream',
  );
  const again = await prov({ deviceName: 'edge-1', provisionDeviceKey: 'pk', provisionDeviceSecret: 'ps' });
  t.same([again.status, again.body.status], [200, 'FAILURE'], 'a name that exists: FAILURE');
  // client attributes go up too
  const a = await http('POST', `${gw.url}/api/v1/${dev.token}/attributes`, '{"fw":"v1.2","n":3.0}');
  t.equal(a.status, 200);
  const devToken = await http('GET', `${up.url}/api/device/${upId}/credentials`, undefined, authHeaders(ujwt));
  const upToken = devToken.json<{ credentialsId: string }>().credentialsId;
  let attrs = '';
  await waitFor(
    async () =>
      (attrs = (await http('GET', `${up.url}/api/v1/${upToken}/attributes?clientKeys=fw,n`)).text).includes('fw'),
    { interval: 100, message: 'the client attributes upstream' },
  ).catch(() => undefined);
  t.equal(attrs, '{"client":{"fw":"v1.2","n":3.0}}', 'client attributes arrive with their types');
});

t.test(
  'an HTTPS upstream: keep-alive TLS to another Outpost, its certificate trusted through NODE_EXTRA_CA_CERTS',
  { skip: hasOpenssl ? false : 'openssl is not available' },
  async (t) => {
    const dir = tempDir(t, 'outpost-sync-tls-');
    const { cert, key } = selfSignedCert(dir);
    const upCfg = join(dir, 'up.json');
    writeFileSync(upCfg, JSON.stringify({ provision: { key: 'pk', secret: 'ps' } }));
    const up = await startGateway(t, { args: ['--config', upCfg, '--tls-cert', cert, '--tls-key', key] });
    t.match(up.url, /^https:/);
    const gwCfg = join(dir, 'gw.json');
    writeFileSync(
      gwCfg,
      JSON.stringify({
        sync: { url: up.url, provisionKey: 'pk', provisionSecret: 'ps', retryBaseMs: 50, retryMaxMs: 400 },
      }),
    );
    const gw = await startGateway(t, { args: ['--config', gwCfg], env: { NODE_EXTRA_CA_CERTS: cert } });
    const jwt = await admin(gw);
    const dev = await addDevice(gw.dataDir, 'tls-dev');
    for (let r = 0; r < 3; r++) await post(gw, dev.token, records(BASE + r * 100_000, 20, 2));
    const s = await statusUntil(gw, jwt, (st) => st.sentPoints === 120 && st.backlogPoints === 0, 'sent over TLS');
    t.equal(s.lastError, null, 'no error on the way');
    t.ok(
      gw.logs.some((l) => /sync: connected to https:/.test(l)),
      'connected over https',
    );
  },
);
