/**
 * Websocket telemetry API, black-box (docs/api.md): the real daemon, real sockets (the `ws` client).
 * Ordering without sleeps: a device POST answers after its bus event was fanned out, so a frame for it is
 * already on the wire when the POST resolves; "nothing arrived" is proven with a barrier write to another
 * subscription whose frame must come first.
 */
import t, { type Test } from 'tap';
import { addDevice, cliJson, http, startGateway } from '../../helpers/server.js';
import { addUser, authHeaders, login } from '../../helpers/users.js';
import { WsClient, type WsReply, wsUrl } from '../../helpers/ws.js';
import { waitFor } from '../../helpers/wait.js';

const PARSE_ERROR =
  '{"subscriptionId":1,"errorCode":2,"errorMsg":"Failed to parse the payload","data":null,"latestValues":{}}';

const gw = await startGateway(t);
const customer = await cliJson<{ id: string; title: string }>([
  'customer',
  'add',
  '--data-dir',
  gw.dataDir,
  '--title',
  'C1',
]);
await addUser(gw.dataDir, 'admin@example.com', 'secret-1', 'TENANT_ADMIN');
await addUser(gw.dataDir, 'cu@example.com', 'secret-2', 'CUSTOMER_USER', customer.id);
const admin = (await login(gw, 'admin@example.com', 'secret-1')).token;
const cuser = (await login(gw, 'cu@example.com', 'secret-2')).token;

const LEGACY = '/api/ws/plugins/telemetry';
const open = (token: string, path = LEGACY): Promise<WsClient> => WsClient.connect(`${wsUrl(gw, path)}?token=${token}`);

let devCount = 0;
async function device(extra: string[] = []): Promise<{ id: string; token: string }> {
  return addDevice(gw.dataDir, `ws-dev-${++devCount}`, extra);
}

async function post(token: string, body: object | string, what = 'telemetry'): Promise<void> {
  const r = await http('POST', `${gw.url}/api/v1/${token}/${what}`, body);
  if (r.status !== 200) throw new Error(`POST ${what} → ${r.status} ${r.text}`);
}

/**
 * Waits until the daemon shows when `dev` was last heard from: its `lastActivityTime` (src/device/state.ts) is
 * in a subscription's first reply, which these tests read.
 */
async function heardFrom(dev: { id: string }): Promise<void> {
  const url = `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/values/attributes/SERVER_SCOPE?keys=lastActivityTime`;
  await waitFor(
    async () => {
      const r = await http('GET', url, undefined, authHeaders(admin));
      return r.status === 200 && r.text.includes('lastActivityTime');
    },
    { interval: 10, message: `${dev.id}: lastActivityTime stored` },
  );
}

/** the times the daemon reports up to a second after a device's activity (src/device/state.ts) */
const ACTIVITY_TIMES = new Set(['lastActivityTime', 'lastConnectTime', 'lastDisconnectTime']);

/** The next frame, past those that only report a device's activity times. */
async function nextFrame(c: WsClient): Promise<WsReply> {
  for (;;) {
    const r = await c.nextJson();
    const keys = Object.keys(r.data ?? {});
    if (keys.length === 0 || !keys.every((k) => ACTIVITY_TIMES.has(k))) return r;
  }
}

/** A frame, checked to be the reply to `cmdId`. */
async function replyTo(t: Test, c: WsClient, cmdId: number): Promise<WsReply> {
  const r = await nextFrame(c);
  t.equal(r.subscriptionId, cmdId, `frame is for cmd ${cmdId}`);
  return r;
}

t.test('invalid token: accepted, then closed 1011 with the reason', async (t) => {
  const c = await open('not-a-jwt');
  const closed = await c.waitClosed();
  t.equal(closed.code, 1011);
  t.match(closed.reason, /Invalid JWT token/);

  const parts = admin.split('.');
  const tampered = await open(`${parts[0]}.${parts[1]}.${'A'.repeat((parts[2] ?? '').length)}`);
  const c2 = await tampered.waitClosed();
  t.equal(c2.code, 1011);
  t.equal(c2.reason, 'Token has expired');
});

t.test('tsSubCmds: latest first reply, then one frame per write with the subscribed keys', async (t) => {
  const dev = await device();
  await post(dev.token, { ts: 1000, values: { temp: 20.5, hum: 40 } });
  const c = await open(admin);
  t.teardown(() => c.close());
  const before = Date.now();
  c.send({
    tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, keys: 'temp,missing', cmdId: 7 }],
    historyCmds: [],
    attrSubCmds: [],
  });
  const first = await replyTo(t, c, 7);
  t.same(Object.keys(first.data ?? {}), ['missing', 'temp'], 'data keys sorted');
  t.same(first.data?.['temp'], [[1000, '20.5']]);
  const [missingTs, missingValue] = first.data?.['missing']?.[0] ?? [];
  t.equal(missingValue, null, 'a key without data is [now, null]');
  t.ok((missingTs as number) >= before && (missingTs as number) <= Date.now(), 'reported at now');
  t.same(first.latestValues, { missing: missingTs, temp: 1000 });

  await post(dev.token, { ts: 2000, values: { temp: 21, hum: 41, other: 'x' } });
  t.equal(
    await c.next(),
    '{"subscriptionId":7,"errorCode":0,"errorMsg":null,"data":{"temp":[[2000,"21"]]},"latestValues":{"temp":2000}}',
    'exact TB shape, only subscribed keys, values as strings',
  );

  // Several timestamps in one write: one frame, each key's points ascending, latestValues the newest.
  await post(dev.token, '[{"ts":4000,"values":{"temp":1.0}},{"ts":3000,"values":{"temp":2}}]');
  const multi = await replyTo(t, c, 7);
  t.same(multi.data, {
    temp: [
      [3000, '2'],
      [4000, '1.0'],
    ],
  });
  t.same(multi.latestValues, { temp: 4000 });
});

t.test('tsSubCmds without keys and LATEST_TELEMETRY: every key, older points suppressed', async (t) => {
  const dev = await device();
  const c = await open(admin);
  t.teardown(() => c.close());
  c.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, scope: 'LATEST_TELEMETRY', cmdId: 42 }] });
  const first = await replyTo(t, c, 42);
  t.same(first.data, {}, 'no telemetry yet');
  t.same(first.latestValues, {});

  // The TB black-box example (HttpClientTest#telemetryUpload).
  await post(dev.token, '{"ts":5000,"values":{"stringKey":"value1","booleanKey":true,"doubleKey":42.0,"longKey":73}}');
  t.equal(
    await c.next(),
    '{"subscriptionId":42,"errorCode":0,"errorMsg":null,"data":{"booleanKey":[[5000,"true"]],"doubleKey":[[5000,"42.0"]],' +
      '"longKey":[[5000,"73"]],"stringKey":[[5000,"value1"]]},"latestValues":{"booleanKey":5000,"doubleKey":5000,"longKey":5000,"stringKey":5000}}',
  );

  await post(dev.token, { ts: 4000, values: { longKey: 1 } });
  await post(dev.token, { ts: 5000, values: { longKey: 2 } });
  const same = await replyTo(t, c, 42);
  t.same(same.data, { longKey: [[5000, '2']] }, 'the older point was suppressed; an equal ts passes');

  // Without the scope every saved point is forwarded, older ones included.
  const c2 = await open(admin);
  t.teardown(() => c2.close());
  c2.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, keys: 'longKey', cmdId: 1 }] });
  t.same((await replyTo(t, c2, 1)).data, { longKey: [[5000, '2']] });
  await post(dev.token, { ts: 10, values: { longKey: 3 } });
  t.same((await replyTo(t, c2, 1)).data, { longKey: [[10, '3']] });
});

t.test('tsSubCmds with timeWindow: history over [startTs, startTs + timeWindow) first', async (t) => {
  const dev = await device();
  await post(
    dev.token,
    [1000, 2000, 3000, 4000, 5000].map((ts) => ({ ts, values: { v: ts / 1000 } })),
  );
  const c = await open(admin);
  t.teardown(() => c.close());
  c.send({
    tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, keys: 'v', cmdId: 3, startTs: 2000, timeWindow: 2000 }],
  });
  const first = await replyTo(t, c, 3);
  t.same(
    first.data,
    {
      v: [
        [3000, '3'],
        [2000, '2'],
      ],
    },
    'raw history newest first, end exclusive',
  );
  t.same(first.latestValues, { v: 2000 }, 'latestValues = ts of the last element (TB)');

  c.send({
    tsSubCmds: [
      { entityType: 'DEVICE', entityId: dev.id, keys: 'v', cmdId: 4, startTs: 0, timeWindow: 10_000, limit: 2 },
    ],
  });
  t.same((await replyTo(t, c, 4)).data, {}, 'startTs absent → [now - timeWindow, now): empty here');

  await post(dev.token, { ts: 6000, values: { v: 6 } });
  const frames = [await c.nextJson(), await c.nextJson()];
  t.same(frames.map((f) => f.subscriptionId).sort(), [3, 4], 'both subscriptions receive the write');
  t.same(frames[0]?.data, { v: [[6000, '6']] });
});

t.test('historyCmds: raw and aggregated, one reply; missing keys rejected', async (t) => {
  const dev = await device();
  // TB worked example: longs 100..600 at 5000..55000, [0, 60000) interval 20000 → AVG 150.0/350.0/550.0.
  await post(
    dev.token,
    [100, 200, 300, 400, 500, 600].map((v, i) => ({ ts: 5000 + i * 10_000, values: { x: v } })),
  );
  const c = await open(admin);
  t.teardown(() => c.close());
  c.send({
    historyCmds: [
      {
        entityType: 'DEVICE',
        entityId: dev.id,
        keys: 'x,nothing',
        startTs: 0,
        endTs: 60_000,
        interval: 20_000,
        agg: 'AVG',
        cmdId: 1,
      },
      { entityType: 'DEVICE', entityId: dev.id, keys: 'x', startTs: 15_000, endTs: 45_000, cmdId: 2 },
      { entityType: 'DEVICE', entityId: dev.id, startTs: 0, endTs: 60_000, cmdId: 3 },
      {
        entityType: 'DEVICE',
        entityId: dev.id,
        keys: 'x',
        startTs: 0,
        endTs: 60_000,
        agg: 'MEDIAN',
        interval: 1000,
        cmdId: 4,
      },
    ],
  });
  const agg = await replyTo(t, c, 1);
  t.same(
    agg.data,
    {
      x: [
        [10_000, '150.0'],
        [30_000, '350.0'],
        [50_000, '550.0'],
      ],
    },
    'keys without points absent',
  );
  const raw = await replyTo(t, c, 2);
  t.same(raw.data, {
    x: [
      [35_000, '400'],
      [25_000, '300'],
      [15_000, '200'],
    ],
  });
  t.equal(
    await c.next(),
    '{"subscriptionId":3,"errorCode":2,"errorMsg":"Keys are empty!","data":null,"latestValues":{}}',
  );
  const badAgg = await replyTo(t, c, 4);
  t.equal(badAgg.errorCode, 2);
  t.equal(badAgg.data, null);

  // History is one-shot: a later write produces nothing for it (barrier: a subscription on another device).
  const other = await device();
  c.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: other.id, keys: 'b', cmdId: 9 }] });
  await replyTo(t, c, 9);
  await post(dev.token, { ts: 70_000, values: { x: 1 } });
  await post(other.token, { b: 1 });
  t.equal((await c.nextJson()).subscriptionId, 9, 'no frame for the history command');
});

t.test('deleted latest values: [0,""], or the rewritten latest value', async (t) => {
  const dev = await device();
  await post(dev.token, [
    { ts: 100, values: { a: 1, b: 1 } },
    { ts: 200, values: { a: 2, b: 2 } },
  ]);
  const c = await open(admin);
  t.teardown(() => c.close());
  c.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, keys: 'a,b', scope: 'LATEST_TELEMETRY', cmdId: 1 }] });
  t.same((await replyTo(t, c, 1)).latestValues, { a: 200, b: 200 });
  const base = `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/timeseries/delete`;
  const del = await http('DELETE', `${base}?keys=a&deleteAllDataForKeys=true`, undefined, authHeaders(admin));
  t.equal(del.status, 200, del.text);
  t.equal(
    await c.next(),
    '{"subscriptionId":1,"errorCode":0,"errorMsg":null,"data":{"a":[[0,""]]},"latestValues":{"a":0}}',
  );
  const rew = await http(
    'DELETE',
    `${base}?keys=b&startTs=150&endTs=250&rewriteLatestIfDeleted=true`,
    undefined,
    authHeaders(admin),
  );
  t.equal(rew.status, 200, rew.text);
  t.same((await replyTo(t, c, 1)).data, { b: [[100, '1']] }, 'the promoted older point');
  await post(dev.token, { ts: 120, values: { b: 3 } });
  t.same((await replyTo(t, c, 1)).data, { b: [[120, '3']] }, 'LATEST state follows the rewritten value');
});

t.test('attrSubCmds: current values, changes, scope filter, deletions as [0,""]', async (t) => {
  const dev = await device();
  await post(dev.token, { fw: '1.0', mode: 2 }, 'attributes');
  await heardFrom(dev);
  const c = await open(admin);
  t.teardown(() => c.close());
  c.send({
    attrSubCmds: [
      { entityType: 'DEVICE', entityId: dev.id, cmdId: 1 },
      { entityType: 'DEVICE', entityId: dev.id, keys: 'target', scope: 'SHARED_SCOPE', cmdId: 2 },
    ],
  });
  const all = await replyTo(t, c, 1);
  // active, lastActivityTime: the device's connectivity state, kept by the daemon (src/device/state.ts)
  t.same(Object.keys(all.data ?? {}), ['active', 'fw', 'lastActivityTime', 'mode']);
  t.equal(all.data?.['fw']?.[0]?.[1], '1.0');
  t.equal(all.data?.['mode']?.[0]?.[1], '2');
  t.same((await replyTo(t, c, 2)).data, {}, 'no shared attribute yet');

  await post(dev.token, { fw: '1.1' }, 'attributes');
  const change = await replyTo(t, c, 1);
  t.same(Object.keys(change.data ?? {}), ['fw'], 'only the changed key; cmd 2 (SHARED_SCOPE) got nothing');
  t.equal(change.data?.['fw']?.[0]?.[1], '1.1');

  const base = `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}`;
  const shared = await http(
    'POST',
    `${base}/attributes/SHARED_SCOPE`,
    { target: 21.5, unrelated: true },
    authHeaders(admin),
  );
  t.equal(shared.status, 200, shared.text);
  const frames = [await nextFrame(c), await nextFrame(c)].sort((a, b) => a.subscriptionId - b.subscriptionId);
  t.same(Object.keys(frames[0]?.data ?? {}), ['target', 'unrelated'], 'all-scope subscription sees shared changes');
  t.same(Object.keys(frames[1]?.data ?? {}), ['target'], 'keys filter');
  t.equal(frames[1]?.data?.['target']?.[0]?.[1], '21.5');

  const del = await http('DELETE', `${base}/SHARED_SCOPE?keys=target`, undefined, authHeaders(admin));
  t.equal(del.status, 200, del.text);
  const dels = [await nextFrame(c), await nextFrame(c)].sort((a, b) => a.subscriptionId - b.subscriptionId);
  for (const d of dels) {
    t.same(d.data, { target: [[0, '']] }, 'deletion as [0,""]');
    t.same(d.latestValues, { target: 0 });
  }
});

t.test('unsubscribe: by cmdId, and everything with an empty entityId', async (t) => {
  const dev = await device();
  const barrier = await device();
  const c = await open(admin);
  t.teardown(() => c.close());
  c.send({
    tsSubCmds: [
      { entityType: 'DEVICE', entityId: dev.id, cmdId: 1 },
      { entityType: 'DEVICE', entityId: dev.id, cmdId: 2 },
    ],
    // keyed: the daemon's own lastActivityTime (a server attribute written after a device's first post) is no
    // frame this test counts
    attrSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, cmdId: 3, keys: 'attr' }],
  });
  await replyTo(t, c, 3);
  await replyTo(t, c, 1);
  await replyTo(t, c, 2);

  c.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, cmdId: 1, unsubscribe: true }] });
  await post(dev.token, { a: 1 });
  t.equal((await c.nextJson()).subscriptionId, 2, 'cmd 1 is gone, cmd 2 still live');

  c.send({ tsSubCmds: [{ entityId: '', cmdId: 2, unsubscribe: true }] });
  c.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: barrier.id, cmdId: 9 }] });
  await replyTo(t, c, 9);
  await post(dev.token, { a: 2 });
  await post(dev.token, { attr: 1 }, 'attributes');
  await post(barrier.token, { b: 1 });
  t.equal((await c.nextJson()).subscriptionId, 9, 'no frame for any cancelled subscription (ts and attributes)');
  t.equal(c.pending(), 0);
});

t.test('access rules on every command, attributes included', async (t) => {
  const mine = await device(['--customer', customer.id]);
  const notMine = await device();
  const c = await open(cuser);
  t.teardown(() => c.close());
  c.send({
    tsSubCmds: [
      { entityType: 'DEVICE', entityId: notMine.id, cmdId: 1 },
      { entityType: 'DEVICE', entityId: mine.id, cmdId: 2 },
    ],
    historyCmds: [{ entityType: 'DEVICE', entityId: notMine.id, keys: 'a', startTs: 0, endTs: 10, cmdId: 3 }],
    attrSubCmds: [{ entityType: 'DEVICE', entityId: notMine.id, cmdId: 4 }],
  });
  t.equal(
    await c.next(),
    '{"subscriptionId":4,"errorCode":1,"errorMsg":"Failed to fetch attributes!","data":null,"latestValues":{}}',
  );
  t.equal(
    await c.next(),
    '{"subscriptionId":1,"errorCode":1,"errorMsg":"Failed to fetch data!","data":null,"latestValues":{}}',
  );
  t.equal((await replyTo(t, c, 2)).errorCode, 0, 'the assigned device is allowed');
  t.equal(
    await c.next(),
    '{"subscriptionId":3,"errorCode":1,"errorMsg":"Failed to fetch data!","data":null,"latestValues":{}}',
  );

  // A denied subscription receives nothing later.
  await post(notMine.token, { a: 1 });
  await post(mine.token, { a: 1 });
  t.equal((await c.nextJson()).subscriptionId, 2);

  const a = await open(admin);
  t.teardown(() => a.close());
  a.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: '00000000-0000-0000-0000-000000000001', cmdId: 5 }] });
  t.equal((await replyTo(t, a, 5)).errorMsg, 'Failed to fetch data!', 'unknown entity');
  a.send({ tsSubCmds: [{ entityType: 'ASSET', entityId: mine.id, cmdId: 6 }] });
  t.equal((await replyTo(t, a, 6)).errorCode, 1, 'wrong entity type for the id');
});

t.test('bad frames', async (t) => {
  const c = await open(admin);
  t.teardown(() => c.close());
  for (const frame of [
    '{not json',
    '[]',
    '{"tsSubCmds":{}}',
    '{"tsSubCmds":[{"cmdId":1,"bogus":1}]}',
    '{"foo":[]}',
    '{"tsSubCmds":[{"cmdId":"x"}]}',
    '{"cmds":[]}',
  ]) {
    c.send(frame);
    t.equal(await c.next(), PARSE_ERROR, `rejected: ${frame}`);
  }
  const dev = await device();
  c.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, cmdId: -1 }] });
  t.equal(
    await c.next(),
    '{"subscriptionId":-1,"errorCode":2,"errorMsg":"Cmd id is negative value!","data":null,"latestValues":{}}',
  );
  c.send({ attrSubCmds: [{ entityType: 'DEVICE', cmdId: 2 }] });
  t.equal(
    await c.next(),
    '{"subscriptionId":2,"errorCode":2,"errorMsg":"Device id is empty!","data":null,"latestValues":{}}',
  );
  c.send({ tsSubCmds: [{ entityType: 'GADGET', entityId: dev.id, cmdId: 3 }] });
  const badType = await replyTo(t, c, 3);
  t.equal(badType.errorCode, 1);
  t.match(badType.errorMsg, /GADGET/);
  c.send({ attrSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, scope: 'NOPE', cmdId: 4 }] });
  t.equal((await replyTo(t, c, 4)).errorCode, 2, 'unknown attribute scope');
  // The session survives all of that.
  c.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, keys: 'k', cmdId: 5 }] });
  t.equal((await replyTo(t, c, 5)).errorCode, 0);

  // A frame above maxPayloadLength (32 KiB) closes the socket.
  const big = await open(admin);
  big.send(JSON.stringify({ tsSubCmds: [{ cmdId: 1, entityType: 'DEVICE', entityId: 'x'.repeat(40_000) }] }));
  const closed = await big.waitClosed();
  t.not(closed.code, 1000, `closed abnormally (${closed.code})`);

  const unknown = await WsClient.connect(`${wsUrl(gw, '/api/ws/plugins/foo')}?token=${admin}`);
  t.same(await unknown.waitClosed(), { code: 1007, reason: 'Unknown session type' });
});

t.test('/api/ws: authCmd + cmds, same replies', async (t) => {
  const dev = await device();
  await post(dev.token, { ts: 100, values: { t: 1 } });
  await heardFrom(dev);
  const c = await WsClient.connect(wsUrl(gw, '/api/ws'));
  t.teardown(() => c.close());
  c.send({
    authCmd: { cmdId: 0, token: admin },
    cmds: [
      { type: 'TIMESERIES', cmdId: 1, entityType: 'DEVICE', entityId: dev.id, keys: 't', scope: 'LATEST_TELEMETRY' },
      {
        type: 'TIMESERIES_HISTORY',
        cmdId: 2,
        entityType: 'DEVICE',
        entityId: dev.id,
        keys: 't',
        startTs: 0,
        endTs: 1000,
      },
      { type: 'ATTRIBUTES', cmdId: 3, entityType: 'DEVICE', entityId: dev.id },
      { type: 'ENTITY_DATA', cmdId: 4 },
    ],
  });
  t.equal(
    await c.next(),
    '{"subscriptionId":1,"errorCode":0,"errorMsg":null,"data":{"t":[[100,"1"]]},"latestValues":{"t":100}}',
  );
  t.same((await replyTo(t, c, 2)).data, { t: [[100, '1']] });
  t.same(Object.keys((await replyTo(t, c, 3)).data ?? {}), ['active', 'lastActivityTime'], 'only its state');
  t.equal((await replyTo(t, c, 4)).errorCode, 2, 'a TB command type Outpost does not serve');
  await post(dev.token, { ts: 200, values: { t: 2 } });
  t.equal(
    await c.next(),
    '{"subscriptionId":1,"errorCode":0,"errorMsg":null,"data":{"t":[[200,"2"]]},"latestValues":{"t":200}}',
  );

  c.send({ tsSubCmds: [] });
  t.equal(await c.next(), PARSE_ERROR, 'legacy keys are rejected on /api/ws');
  c.send({ cmds: [{ type: 'TIMESERIES', cmdId: 1, entityId: dev.id, unsubscribe: true }] });
  c.send({ cmds: [{ type: 'TIMESERIES', cmdId: 5, entityType: 'DEVICE', entityId: dev.id, keys: 't' }] });
  await replyTo(t, c, 5);
  await post(dev.token, { ts: 300, values: { t: 3 } });
  t.equal((await c.nextJson()).subscriptionId, 5, 'cmd 1 unsubscribed');

  const viaQuery = await open(admin, '/api/ws');
  t.teardown(() => viaQuery.close());
  viaQuery.send({ cmds: [{ type: 'TIMESERIES', cmdId: 8, entityType: 'DEVICE', entityId: dev.id, keys: 't' }] });
  t.same((await replyTo(t, viaQuery, 8)).data, { t: [[300, '3']] }, '?token= works on /api/ws too');

  const noAuth = await WsClient.connect(wsUrl(gw, '/api/ws'));
  noAuth.send({ cmds: [] });
  t.same(await noAuth.waitClosed(), { code: 1008, reason: 'Auth cmd is missing' });
  const badAuth = await WsClient.connect(wsUrl(gw, '/api/ws'));
  badAuth.send({ authCmd: { cmdId: 0, token: 'garbage' }, cmds: [] });
  const bad = await badAuth.waitClosed();
  t.equal(bad.code, 1007);
  t.match(bad.reason, /Invalid JWT token/);
});

t.test('closed sockets: subscriptions end with them, nothing is sent after close', async (t) => {
  const dev = await device();
  const clients = await Promise.all([open(admin), open(admin), open(admin)]);
  for (const [i, c] of clients.entries()) {
    c.send({
      tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, cmdId: i }],
      attrSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, cmdId: 10 + i }],
    });
    await c.nextJson();
    await c.nextJson();
  }
  // Graceful closes complete only once the server has run its close handler.
  for (const c of clients) c.close();
  for (const c of clients) t.equal((await c.waitClosed()).code, 1005);
  const logsBefore = gw.logs.length;
  await post(dev.token, { a: 1 });
  await post(dev.token, { b: 1 }, 'attributes');
  const live = await open(admin);
  t.teardown(() => live.close());
  live.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, keys: 'a', cmdId: 1 }] });
  t.equal((await replyTo(t, live, 1)).data?.['a']?.[0]?.[1], '1', 'the daemon took the writes and serves on');
  t.same(
    gw.logs.slice(logsBefore).filter((l) => /error/.test(l)),
    [],
    'no send on a closed socket (uWS would throw, the bus logs it)',
  );
});

t.test('a history reply is bounded: more than 100,000 points is refused, not truncated', async (t) => {
  const dev = await device();
  const records = Array.from({ length: 100_001 }, (_, i) => `{"ts":${i + 1},"values":{"v":1}}`);
  await post(dev.token, `[${records.join(',')}]`);
  const c = await open(admin);
  t.teardown(() => c.close());
  c.send({
    historyCmds: [
      { entityType: 'DEVICE', entityId: dev.id, keys: 'v', startTs: 0, endTs: 200_000, limit: 200_000, cmdId: 1 },
    ],
  });
  const refused = await replyTo(t, c, 1);
  t.equal(refused.errorCode, 2);
  t.match(refused.errorMsg, /more than 100000/);
  c.send({
    historyCmds: [
      { entityType: 'DEVICE', entityId: dev.id, keys: 'v', startTs: 0, endTs: 200_000, limit: 100_000, cmdId: 2 },
    ],
  });
  const ok = await replyTo(t, c, 2);
  t.equal(ok.data?.['v']?.length, 100_000, 'exactly the cap is served');
  t.equal(ok.latestValues['v'], 2, 'newest first: the last of the 100,000 newest is ts 2');
});
