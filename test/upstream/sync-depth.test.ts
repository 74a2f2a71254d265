/**
 * Depth series upstream (docs/sync.md): recorded in the write's transaction, sent to an upstream that
 * answers `/api/v1/{T}/depth/telemetry` (a second Outpost daemon, or the fake TB with `acceptsDepth`), counted
 * as not synced where the upstream answers that path 404 (plain TB). Real daemons on ephemeral ports.
 */
import net from 'node:net';
import t, { type Test } from 'tap';
import { FakeTb } from '../helpers/fake-tb.js';
import { type Gateway, addDevice, cli, http, startGateway, tempDir } from '../helpers/server.js';
import { syncGateway, syncStatusOf, syncStatusUntil } from '../helpers/sync.js';
import { addUser, authHeaders, login } from '../helpers/users.js';

interface Status {
  state: string;
  lastError: string | null;
  sentPoints: number;
  backlogPoints: number;
  devices: Array<{
    id: string;
    name: string;
    state: string;
    reason: string | null;
    backlogPoints: number;
    depthBacklogPoints: number;
  }>;
  depthBacklogPoints: number;
  depthSentPoints: number;
  depthSetAsidePoints: number;
  depthDroppedPoints: number;
  depthNotSyncedPoints: number;
  depthEndpoint: 'unknown' | 'present' | 'absent';
}

function gateway(t: Test, upstream: string, sync: Record<string, unknown> = {}, dataDir?: string): Promise<Gateway> {
  return syncGateway(t, upstream, sync, {}, dataDir);
}

async function admin(gw: Gateway, fresh = true): Promise<string> {
  if (fresh) await addUser(gw.dataDir, 'admin@depth.test', 'secret', 'TENANT_ADMIN');
  return (await login(gw, 'admin@depth.test', 'secret')).token;
}

const statusOf = (gw: Gateway, jwt: string): Promise<Status> => syncStatusOf<Status>(gw, jwt);

function statusUntil(
  gw: Gateway,
  jwt: string,
  pred: (s: Status) => boolean,
  label: string,
  timeoutMs = 15_000,
): Promise<Status> {
  return syncStatusUntil(gw, jwt, pred, label, timeoutMs, 50);
}

async function postDepth(gw: Gateway, token: string, body: string): Promise<void> {
  const r = await http('POST', `${gw.url}/api/v1/${token}/depth/telemetry`, body);
  if (r.status !== 200) throw new Error(`depth post ${r.status}: ${r.text}`);
}

async function postTelemetry(gw: Gateway, token: string, body: string): Promise<void> {
  const r = await http('POST', `${gw.url}/api/v1/${token}/telemetry`, body);
  if (r.status !== 200) throw new Error(`telemetry post ${r.status}: ${r.text}`);
}

/** A port nothing listens on (yet): the upstream's, before it starts. */
async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** `n` depths from `from`, every `step`, each with the keys of `values(i)`. */
function depthRecords(from: number, step: number, n: number, values: (i: number) => string): string {
  const parts: string[] = [];
  for (let i = 0; i < n; i++) parts.push(`{"ds":${from + i * step},"values":{${values(i)}}}`);
  return `[${parts.join(',')}]`;
}

const depthPoints = (body: string): number => (body.match(/"k\d":/g) ?? []).length;

t.test('depth points posted while the link is down arrive at a second Outpost, exact in value and type', async (t) => {
  const port = await freePort();
  const upDir = tempDir(t, 'outpost-depth-upstream-');
  await addDevice(upDir, 'rig-1', ['--token', 'UPTOK']);
  await addUser(upDir, 'up@depth.test', 'secret', 'TENANT_ADMIN');
  const gw = await gateway(t, `http://127.0.0.1:${port}`);
  const jwt = await admin(gw);
  const dev = await addDevice(gw.dataDir, 'rig-1', ['--upstream-token', 'UPTOK']);
  const keys = ['d', 'l', 's', 'b', 'j', 'tiny', 'big', 'e10'];
  // ten writes of 20 depths, the depths fractional, negative and integral; then one overwrite
  for (let w = 0; w < 10; w++) {
    await postDepth(
      gw,
      dev.token,
      depthRecords(
        -10 + w * 5,
        0.25,
        20,
        (i) =>
          `"d":${w * 100 + i}.0,"l":${w * 100 + i},"s":"v${i}","b":${i % 2 === 0},"j":{"i":[${i},2.0]},"tiny":1.5e-7,"big":9007199254740993,"e10":1e10`,
      ),
    );
  }
  await postDepth(gw, dev.token, '{"ds":-10,"values":{"d":7.5,"s":"newest"}}');
  const total = 10 * 20 * keys.length + 2;
  const down = await statusUntil(
    gw,
    jwt,
    (s) => s.state === 'backoff' && s.depthBacklogPoints === total,
    'backing off with the depth backlog',
  );
  t.equal(
    down.devices.find((d) => d.name === 'rig-1')?.depthBacklogPoints,
    total,
    'the device shows its depth backlog',
  );
  t.equal(down.backlogPoints, 0, 'the telemetry backlog is apart');

  // a given serve port keeps MQTT and CoAP on their defaults, which a daemon beside the tests may hold
  const up = await startGateway(t, {
    dataDir: upDir,
    args: ['--port', String(port)],
    env: { OUTPOST_MQTT_PORT: 'ephemeral', OUTPOST_COAP_PORT: 'ephemeral' },
  });
  const drained = await statusUntil(gw, jwt, (s) => s.depthBacklogPoints === 0, 'the depth backlog drained');
  // the overwrite's two points may go twice (its own entry and the first write's): TB upserts
  t.ok(
    drained.depthSentPoints >= 10 * 20 * keys.length && drained.depthSentPoints <= total,
    `${drained.depthSentPoints} points counted as sent`,
  );
  t.equal(drained.depthNotSyncedPoints, 0, 'nothing counted as not synced');
  t.equal(drained.depthEndpoint, 'present');

  const query = `values/depthseries?keys=${keys.join(',')}&startDs=-100&endDs=100&limit=1000&useStrictDataTypes=true`;
  const local = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/${query}`,
    undefined,
    authHeaders(jwt),
  );
  const upJwt = (await login(up, 'up@depth.test', 'secret')).token;
  const upDev = await http('GET', `${up.url}/api/tenant/devices?deviceName=rig-1`, undefined, authHeaders(upJwt));
  const upId = upDev.json<{ id: { id: string } }>().id.id;
  const remote = await http(
    'GET',
    `${up.url}/api/plugins/telemetry/DEVICE/${upId}/${query}`,
    undefined,
    authHeaders(upJwt),
  );
  t.equal(remote.status, 200);
  t.equal(remote.text, local.text, 'the upstream answers the same depth series as the gateway, byte for byte');
  const got = remote.json<Record<string, Array<{ ds: number; value: unknown }>>>();
  t.equal(
    Object.values(got).reduce((n, v) => n + v.length, 0),
    10 * 20 * keys.length,
    'every point is there',
  );
  t.match(remote.text, /"d":\[\{"ds":-10,"value":7\.5\}/, 'the overwritten point went up as its newest value');
  t.match(remote.text, /\{"ds":-9\.75,"value":1\.0\}/, 'a double stays a double (1.0, not 1)');
  t.match(remote.text, /"l":\[\{"ds":-10,"value":0\}/, 'a long stays a long');
  t.match(remote.text, /"big":\[\{"ds":-10,"value":9007199254740993\}/, 'a long beyond 2^53 stays exact');
  t.match(remote.text, /"tiny":\[\{"ds":-10,"value":1\.5E-7\}/, 'a tiny double stays a double');
  t.match(remote.text, /"j":\[\{"ds":-10,"value":\{"i":\[0,2(\.0)?\]\}\}/, 'JSON stays JSON');
});

t.test(
  'kill -9 of the gateway mid-drain, restart: every depth point arrives, duplicates only from the body in flight',
  async (t) => {
    const tb = await FakeTb.start();
    t.teardown(() => tb.close());
    tb.acceptsDepth = true;
    await tb.down();
    const gw = await gateway(t, tb.url);
    const jwt = await admin(gw);
    const devs = [
      await addDevice(gw.dataDir, 'a', ['--upstream-token', 'TA']),
      await addDevice(gw.dataDir, 'b', ['--upstream-token', 'TB']),
    ];
    const perDevice = 4 * 150 * 4;
    for (const [d, dev] of devs.entries()) {
      for (let w = 0; w < 4; w++) {
        await postDepth(
          gw,
          dev.token,
          depthRecords(w * 1000, 0.5, 150, (i) =>
            [0, 1, 2, 3].map((k) => `"k${k}":${d * 1e6 + w * 1000 + i * 10 + k}`).join(','),
          ),
        );
      }
    }
    await statusUntil(gw, jwt, (s) => s.depthBacklogPoints === 2 * perDevice, 'all pending');
    tb.delayMs = 20;
    await tb.up();
    await tb.waitFor(() => tb.depthPoints.length >= perDevice / 2, 'a quarter drained');
    await gw.stop('SIGKILL');
    const atKill = tb.depthPoints.length;
    tb.delayMs = 0;
    const again = await gateway(t, tb.url, {}, gw.dataDir);
    const jwt2 = await admin(again, false);
    const s = await statusUntil(again, jwt2, (st) => st.depthBacklogPoints === 0, 'drained after the restart');
    for (const [d] of devs.entries()) {
      const distinct = new Map<string, string>();
      for (const p of tb.depthPoints)
        if (p.token === (d === 0 ? 'TA' : 'TB')) distinct.set(`${p.key}@${p.ds}`, `${p.type}:${p.value}`);
      t.equal(distinct.size, perDevice, `device ${d}: every point arrived`);
      const wrong = [...distinct].filter(([k, v]) => {
        const [key, ds] = k.split('@') as [string, string];
        const w = Math.floor(Number(ds) / 1000);
        const i = (Number(ds) - w * 1000) / 0.5;
        return v !== `LONG:${d * 1e6 + w * 1000 + i * 10 + Number(key.slice(1))}`;
      });
      t.equal(wrong.length, 0, `device ${d}: every value exact, a long`);
    }
    const maxPerRequest = Math.max(...tb.requests.filter((r) => r.kind === 'depth').map((r) => depthPoints(r.body)));
    const dups = tb.depthPoints.length - 2 * perDevice;
    // one depth request is in flight at a time; its acknowledgement is committed before the next one goes
    t.ok(
      dups <= maxPerRequest,
      `${dups} duplicates, at most the one body in flight (${maxPerRequest} points; ${atKill} received before the kill)`,
    );
    t.equal(
      s.depthSentPoints,
      2 * perDevice,
      'each point counted as sent once: the counters are written with the acknowledgements',
    );
  },
);

t.test(
  'an upstream answering 404 on the depth path (plain TB): counted as not synced, telemetry goes on, the device is not parked',
  async (t) => {
    const tb = await FakeTb.start();
    t.teardown(() => tb.close());
    const gw = await gateway(t, tb.url);
    const jwt = await admin(gw);
    const dev = await addDevice(gw.dataDir, 'd', ['--upstream-token', 'T']);
    await postDepth(gw, dev.token, '[{"ds":1.5,"values":{"rop":1,"lith":"x"}},{"ds":2.5,"values":{"rop":2.0}}]');
    await postDepth(gw, dev.token, '{"ds":3,"values":{"rop":3}}');
    const s = await statusUntil(
      gw,
      jwt,
      (st) => st.depthNotSyncedPoints === 4 && st.depthBacklogPoints === 0,
      'the depth points counted as not synced',
    );
    t.equal(s.depthEndpoint, 'absent', 'the upstream is known to have no depth endpoint');
    t.equal(s.devices.find((d) => d.name === 'd')?.state, 'ok', 'the device is not parked');
    t.match(s.lastError, /no depth-series endpoint/, 'the reason is shown');
    const depthRequests = tb.requests.filter((r) => r.kind === 'depth').length;
    t.ok(depthRequests >= 1 && depthRequests <= 2, `${depthRequests} depth request(s) found the path missing`);
    // from now on depth writes are counted at once, no request, no outbox entry to grow
    await postDepth(gw, dev.token, '{"ds":4,"values":{"rop":4,"wob":5}}');
    const s2 = await statusUntil(gw, jwt, (st) => st.depthNotSyncedPoints === 6, 'a new depth write counted');
    t.equal(s2.depthBacklogPoints, 0, 'nothing pending');
    await postTelemetry(gw, dev.token, '{"ts":1767225600000,"values":{"t":21.5}}');
    await tb.waitFor(() => tb.distinct('T').size === 1, 'the telemetry point');
    t.equal(tb.points[0]?.type, 'DOUBLE', 'telemetry still syncs');
    t.equal(
      tb.requests.filter((r) => r.kind === 'depth').length,
      depthRequests,
      'no depth request while the endpoint is known missing',
    );
    t.equal(gw.logs.filter((l) => /no depth-series endpoint/.test(l)).length, 1, 'one log line');
    // counters survive a restart; the restart asks again
    await gw.stop('SIGTERM');
    const again = await gateway(t, tb.url, {}, gw.dataDir);
    const s3 = await statusOf(again, await admin(again, false));
    t.equal(s3.depthNotSyncedPoints, 6, 'depthNotSyncedPoints persisted');
    t.equal(s3.depthEndpoint, 'unknown', 'asked again after a restart');
  },
);

t.test('an upstream that gains the depth endpoint gets depth points after sync.depthProbeMs', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  const gw = await gateway(t, tb.url, { depthProbeMs: 1000 });
  const jwt = await admin(gw);
  const dev = await addDevice(gw.dataDir, 'd', ['--upstream-token', 'T']);
  await postDepth(gw, dev.token, '{"ds":1.5,"values":{"rop":1}}');
  await statusUntil(gw, jwt, (st) => st.depthNotSyncedPoints === 1, 'counted as not synced');
  tb.acceptsDepth = true;
  await new Promise((r) => setTimeout(r, 1100));
  await postDepth(gw, dev.token, '{"ds":2.5,"values":{"rop":2.0}}');
  const s = await statusUntil(gw, jwt, (st) => st.depthSentPoints === 1, 'sent once the endpoint is asked again');
  t.same(
    tb.depthPoints.map((p) => [p.ds, p.key, p.type, p.value]),
    [['2.5', 'rop', 'DOUBLE', '2.0']],
    'the new point arrived, typed',
  );
  t.equal(s.depthEndpoint, 'present');
  t.equal(s.depthNotSyncedPoints, 1, 'the point written meanwhile stays counted');
});

t.test(
  "a 400 on a depth batch sets it aside and counts it; a parked device's depth waits, the others go on",
  async (t) => {
    const tb = await FakeTb.start();
    t.teardown(() => tb.close());
    tb.acceptsDepth = true;
    tb.answer = (r) => {
      if (r.token === 'REVOKED') return { status: 401 };
      return r.kind === 'depth' && r.body.includes('"poison"')
        ? { status: 400, body: '{"message":"bad key"}' }
        : undefined;
    };
    const gw = await gateway(t, tb.url);
    const jwt = await admin(gw);
    const dev = await addDevice(gw.dataDir, 'd', ['--upstream-token', 'T']);
    const bad = await addDevice(gw.dataDir, 'bad', ['--upstream-token', 'REVOKED']);
    await postDepth(gw, dev.token, '[{"ds":1,"values":{"poison":1,"ok":2}}]');
    const s = await statusUntil(gw, jwt, (st) => st.depthSetAsidePoints === 2, 'the refused batch set aside');
    t.match(s.lastError, /HTTP 400 .* depth batch of d/, 'the 400 is shown');
    t.equal(s.depthBacklogPoints, 0, 'nothing of it pending');
    await postDepth(gw, bad.token, '[{"ds":1,"values":{"a":1,"b":2}},{"ds":2,"values":{"a":3}}]');
    await postDepth(gw, dev.token, '[{"ds":5,"values":{"ok":3}}]');
    await tb.waitFor(() => tb.depthPoints.some((p) => p.ds === '5.0'), 'the next batch');
    const after = await statusUntil(
      gw,
      jwt,
      (st) => st.devices.find((d) => d.name === 'bad')?.state === 'parked' && st.depthSentPoints === 1,
      'the bad device parked, the good one sent',
    );
    t.equal(tb.requests.filter((r) => r.body.includes('"poison"')).length, 1, 'the 400 batch is not retried');
    t.equal(after.depthSetAsidePoints, 2, 'set-aside points are not counted as sent');
    const badStatus = after.devices.find((d) => d.name === 'bad');
    t.match(badStatus?.reason, /HTTP 401/, 'parked for the refused token');
    t.equal(badStatus?.depthBacklogPoints, 3, "the parked device's depth points wait, none dropped");
    t.equal(after.depthBacklogPoints, 3, "pending: the parked device's");
    await new Promise((r) => setTimeout(r, 300));
    t.equal(tb.requests.filter((r) => r.token === 'REVOKED').length, 1, 'the parked device is not retried');
    const set = await cli(['device', 'upstream', 'bad', '--token', 'NEW', '--data-dir', gw.dataDir]);
    t.equal(set.code, 0, `device upstream works (${set.stderr})`);
    await tb.waitFor(
      () => tb.depthPoints.filter((p) => p.token === 'NEW').length === 3,
      "the resumed device's depth points",
    );
    t.same(
      tb.depthPoints
        .filter((p) => p.token === 'NEW')
        .map((p) => `${p.key}@${p.ds}=${p.type}:${p.value}`)
        .sort(),
      ['a@1.0=LONG:1', 'a@2.0=LONG:3', 'b@1.0=LONG:2'],
      'they arrive, typed',
    );
  },
);

t.test(
  'depth batches set aside are listed, retried and cleared as telemetry ones (GET/POST/DELETE setAside)',
  async (t) => {
    const tb = await FakeTb.start();
    t.teardown(() => tb.close());
    tb.acceptsDepth = true;
    let refuse = true;
    tb.answer = (r) =>
      refuse && r.kind === 'depth' && r.body.includes('"poison"')
        ? { status: 400, body: '{"message":"bad key"}' }
        : undefined;
    const gw = await gateway(t, tb.url);
    const jwt = await admin(gw);
    const dev = await addDevice(gw.dataDir, 'd', ['--upstream-token', 'T']);
    await postDepth(gw, dev.token, '[{"ds":1,"values":{"poison":1,"ok":2}},{"ds":3,"values":{"poison":4}}]');
    await statusUntil(gw, jwt, (st) => st.depthSetAsidePoints === 3, 'the refused batch set aside');
    // the counters move as the set-aside record is queued; the list reads it once its transaction is committed
    type SetAsideList = { total: number; batches: Array<Record<string, unknown>> };
    const listOnceCommitted = async (): Promise<SetAsideList> => {
      let list: SetAsideList = { total: 0, batches: [] };
      for (const end = Date.now() + 5_000; list.total === 0 && Date.now() < end; ) {
        const listed = await http('GET', `${gw.url}/api/outpost/sync/setAside`, undefined, authHeaders(jwt));
        list = listed.json<SetAsideList>();
        if (list.total === 0) await new Promise((r) => setTimeout(r, 50));
      }
      return list;
    };
    const list = await listOnceCommitted();
    t.equal(list.total, 1, 'listed');
    t.match(
      list.batches[0],
      { kind: 'depth', deviceName: 'd', points: 3, firstDs: 1, lastDs: 3, firstTs: null, status: 400 },
      'as a depth batch: its device, points, depths and the answer',
    );
    refuse = false;
    const retried = await http('POST', `${gw.url}/api/outpost/sync/setAside/retry`, undefined, authHeaders(jwt));
    t.same(retried.json(), { points: 3 }, 'put back in the queue');
    await tb.waitFor(() => tb.depthPoints.length === 3, 'sent once retried');
    t.same(
      tb.depthPoints.map((p) => `${p.key}@${p.ds}=${p.value}`).sort(),
      ['ok@1.0=2', 'poison@1.0=1', 'poison@3.0=4'],
      'every point of it arrives',
    );
    await statusUntil(
      gw,
      jwt,
      (st) => st.depthSetAsidePoints === 0 && st.depthBacklogPoints === 0 && st.depthSentPoints === 3,
      'counted as sent, nothing set aside or pending',
    );
    refuse = true;
    await postDepth(gw, dev.token, '[{"ds":7,"values":{"poison":5}}]');
    await statusUntil(gw, jwt, (st) => st.depthSetAsidePoints === 1, 'set aside again');
    t.equal((await listOnceCommitted()).total, 1, 'listed again');
    const cleared = await http('DELETE', `${gw.url}/api/outpost/sync/setAside`, undefined, authHeaders(jwt));
    t.same(cleared.json(), { points: 1 }, 'cleared');
    t.equal((await statusOf(gw, jwt)).depthSetAsidePoints, 0, 'no longer counted');
    const none = await http('GET', `${gw.url}/api/outpost/sync/setAside`, undefined, authHeaders(jwt));
    t.equal(none.json<{ total: number }>().total, 0, 'no longer listed');
  },
);
