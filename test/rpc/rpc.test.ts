import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { EventBus } from '../../src/bus/index.js';
import type { OutpostError } from '../../src/errors.js';
import { RpcBroker, type RpcOutcome } from '../../src/rpc/broker.js';
import type { PollOutcome } from '../../src/rpc/longpoll.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { addDevice, cliJson, http, startGateway, tempDir, waitLongPoll } from '../helpers/server.js';
import { addUser, adminHeaders, authHeaders, login } from '../helpers/users.js';

function makeBroker(clock: FakeClock, bus = new EventBus(), maxPendingPerDevice = 10): RpcBroker {
  return new RpcBroker(bus, {
    maxPendingPerDevice,
    maxOpenPolls: 100,
    clientSideTimeoutMs: 60_000,
    clock,
    tickMs: 10,
    now: () => clock.now(),
  });
}

/** Collects outcomes of submitted RPCs as they settle (promise callbacks run on the microtask queue). */
const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

t.test('broker: ids per device from 0, queued order, one per poll, open poll gets it at once', async (t) => {
  const clock = new FakeClock(0);
  const broker = makeBroker(clock);
  const outcomes: Array<[string, RpcOutcome]> = [];
  const submit = (dev: string, method: string, oneway = true, timeoutMs = 10_000): void => {
    void broker
      .submit(dev, { method, paramsJson: `{"m":"${method}"}`, oneway, timeoutMs })
      .then((o) => outcomes.push([method, o]));
  };
  submit('d1', 'first');
  submit('d1', 'second');
  submit('d2', 'other');
  submit('d1', 'third');
  t.same(broker.status().queuedRpcs, 4);
  const polled: PollOutcome[] = [];
  for (let i = 0; i < 3; i++)
    t.equal(
      broker.waitRpc('d1', 1_000, (o) => polled.push(o)),
      undefined,
      'queued RPC answers at once',
    );
  t.same(
    polled.map((o) => (o.kind === 'data' ? o.body : o.kind)),
    [
      '{"id":1,"method":"first","params":{"m":"first"}}',
      '{"id":2,"method":"second","params":{"m":"second"}}',
      '{"id":3,"method":"third","params":{"m":"third"}}',
    ],
    'FIFO, one per poll, ids count per device',
  );
  await flush();
  t.same(
    outcomes.map(([m, o]) => `${m}:${o.kind}`),
    ['first:delivered', 'second:delivered', 'third:delivered'],
    'one-way resolves on delivery',
  );
  broker.waitRpc('d2', 1_000, (o) => polled.push(o));
  t.same(
    polled.at(-1),
    { kind: 'data', body: '{"id":1,"method":"other","params":{"m":"other"}}' },
    "d2 counts from 1 too (TB's Python SDK reads id 0 as no id)",
  );

  const handle = broker.waitRpc('d1', 5_000, (o) => polled.push(o));
  t.ok(handle, 'nothing queued: the poll is held');
  submit('d1', 'live');
  t.same(
    polled.at(-1),
    { kind: 'data', body: '{"id":4,"method":"live","params":{"m":"live"}}' },
    'an open poll receives it at once',
  );
  t.equal(broker.status().queuedRpcs, 0);
  broker.close();
});

t.test(
  'broker: a sink that confirms receipt: delivered on confirmation, back to the queue head when refused',
  async (t) => {
    const clock = new FakeClock(0);
    const broker = makeBroker(clock, new EventBus(), 3);
    const outcomes: Array<[string, RpcOutcome]> = [];
    const submit = (method: string, oneway: boolean, timeoutMs = 10_000): void => {
      void broker.submit('d1', { method, paramsJson: '{}', oneway, timeoutMs }).then((o) => outcomes.push([method, o]));
    };
    const handed: Array<{ method: string; confirm: (ok: boolean) => void }> = [];
    const detach = broker.attachSink('d1', {
      deliver: (rpc) => new Promise<boolean>((confirm) => handed.push({ method: rpc.method, confirm })),
    });
    submit('one', true);
    submit('two', false);
    submit('three', true, 1_000);
    t.same(
      handed.map((h) => h.method),
      ['one', 'two', 'three'],
      'handed over at once',
    );
    t.equal(broker.status().queuedRpcs, 3, 'unconfirmed RPCs count as pending');
    t.throws(
      () => broker.submit('d1', { method: 'four', paramsJson: '{}', oneway: true, timeoutMs: 1_000 }),
      'and fill the queue bound',
    );
    await flush();
    t.same(outcomes, [], 'a one-way RPC is not delivered before the device confirms it');
    handed[0]?.confirm(true);
    handed[1]?.confirm(true);
    await flush();
    t.same(outcomes, [['one', { kind: 'delivered' }]], 'confirmed: delivered');
    t.equal(broker.status().awaitingReplies, 1, 'the two-way one now awaits its reply');
    t.equal(broker.reply('d1', 2, '{"ok":1}'), true);

    // the device never confirms the third: its sink goes (an observation ended) and it is refused
    detach();
    handed[2]?.confirm(false);
    await flush();
    t.equal(broker.status().queuedRpcs, 1, 'refused: queued again');
    const polled: PollOutcome[] = [];
    broker.waitRpc('d1', 1_000, (o) => polled.push(o));
    t.same(polled, [{ kind: 'data', body: '{"id":3,"method":"three","params":{}}' }], "the device's next poll gets it");
    await flush();
    t.same(outcomes.at(-1), ['three', { kind: 'delivered' }]);

    // one never confirmed expires undelivered, and its late confirmation changes nothing
    broker.attachSink('d1', {
      deliver: (rpc) => new Promise<boolean>((confirm) => handed.push({ method: rpc.method, confirm })),
    });
    submit('five', true, 1_000);
    clock.advance(1_010);
    await flush();
    t.same(outcomes.at(-1), ['five', { kind: 'undelivered' }], 'unconfirmed by its expiry: undelivered');
    handed.at(-1)?.confirm(true);
    await flush();
    t.same(outcomes.at(-1), ['five', { kind: 'undelivered' }], 'a late confirmation changes nothing');
    t.equal(broker.status().queuedRpcs, 0);
    broker.close();
  },
);

t.test('broker: a reply before the confirmation of receipt completes the call', async (t) => {
  const clock = new FakeClock(0);
  const broker = makeBroker(clock);
  let confirm: (ok: boolean) => void = () => {};
  broker.attachSink('d1', { deliver: () => new Promise<boolean>((c) => (confirm = c)) });
  let delivered = 0;
  const outcome = broker.submit('d1', {
    method: 'ask',
    paramsJson: '{}',
    oneway: false,
    timeoutMs: 10_000,
    onDelivered: () => delivered++,
  });
  t.equal(broker.reply('d1', 1, '{"v":1}'), true, 'the reply is taken');
  t.same(await outcome, { kind: 'reply', body: '{"v":1}' });
  t.equal(delivered, 1, 'and counts the delivery');
  confirm(true);
  await flush();
  t.equal(delivered, 1, 'the late confirmation changes nothing');
  t.equal(broker.status().queuedRpcs, 0);
  broker.close();
});

t.test('broker: two-way replies, expiry of queued and unanswered RPCs, queue bound', async (t) => {
  const clock = new FakeClock(0);
  const broker = makeBroker(clock, new EventBus(), 2);
  const outcomes: RpcOutcome[] = [];
  void broker
    .submit('d1', { method: 'ask', paramsJson: '{}', oneway: false, timeoutMs: 10_000 })
    .then((o) => outcomes.push(o));
  void broker
    .submit('d1', { method: 'late', paramsJson: '{}', oneway: false, timeoutMs: 5_000 })
    .then((o) => outcomes.push(o));
  const err = t.throws(() =>
    broker.submit('d1', { method: 'x', paramsJson: '{}', oneway: true, timeoutMs: 5_000 }),
  ) as OutpostError;
  t.equal(err.status, 429, 'a full queue refuses');

  clock.advance(4_999);
  await flush();
  t.same(outcomes, [], 'not expired before the deadline');
  clock.advance(10);
  await flush();
  t.same(outcomes, [{ kind: 'undelivered' }], 'queued and expired → undelivered');

  const polled: PollOutcome[] = [];
  broker.waitRpc('d1', 1_000, (o) => polled.push(o));
  t.same(polled, [{ kind: 'data', body: '{"id":1,"method":"ask","params":{}}' }], 'the expired one is never delivered');
  t.equal(broker.reply('d1', 7, '{}'), false, 'unknown id is ignored');
  t.equal(broker.reply('d1', 1, '{"value":1}'), true);
  await flush();
  t.same(outcomes.at(-1), { kind: 'reply', body: '{"value":1}' });
  t.equal(broker.reply('d1', 1, '{"again":1}'), false, 'a second reply finds nothing');

  void broker
    .submit('d1', { method: 'silent', paramsJson: 'null', oneway: false, timeoutMs: 5_000 })
    .then((o) => outcomes.push(o));
  broker.waitRpc('d1', 1_000, (o) => polled.push(o));
  t.same(
    polled.at(-1),
    { kind: 'data', body: '{"id":3,"method":"silent","params":null}' },
    'the refused submission consumed no id',
  );
  clock.advance(5_010);
  await flush();
  t.same(outcomes.at(-1), { kind: 'unanswered' }, 'delivered, no reply → unanswered');
  t.same(broker.status(), {
    openPolls: 0,
    attributePolls: 0,
    rpcPolls: 0,
    clientRpcs: 0,
    queuedRpcs: 0,
    awaitingReplies: 0,
  });
  t.equal(clock.pending, 0, 'no timer left behind');
  broker.close();
});

t.test('broker: device deletion ends polls and pending RPCs; client-side RPC', async (t) => {
  const clock = new FakeClock(5_000);
  const bus = new EventBus();
  const broker = makeBroker(clock, bus);
  const outcomes: RpcOutcome[] = [];
  void broker
    .submit('d1', { method: 'a', paramsJson: '{}', oneway: true, timeoutMs: 10_000 })
    .then((o) => outcomes.push(o));
  const polled: PollOutcome[] = [];
  broker.waitAttributes('d1', 10_000, (o) => polled.push(o));
  bus.publish('entityDeleted', { entityType: 'DEVICE', entityId: 'd1' });
  await flush();
  t.same(outcomes, [{ kind: 'deviceDeleted' }]);
  t.same(polled, [{ kind: 'deviceDeleted' }]);

  const answers: PollOutcome[] = [];
  t.equal(
    broker.clientRpc({ deviceId: 'd1', method: 'getCurrentTime', paramsJson: '{}' }, (o) => answers.push(o)),
    undefined,
  );
  t.same(answers, [{ kind: 'data', body: '{"time":5000}' }]);
  const held = broker.clientRpc({ deviceId: 'd1', method: 'unknown', paramsJson: '{}' }, (o) => answers.push(o));
  t.ok(held);
  t.equal(broker.status().clientRpcs, 1);
  clock.advance(59_999);
  t.equal(answers.length, 1);
  clock.advance(10);
  t.same(
    answers.at(-1),
    { kind: 'data', body: '{"error":"timeout"}' },
    'unhandled → {"error":"timeout"} after the client-side timeout',
  );

  broker.registerClientRpc('echo', async (call) => `{"echo":${call.paramsJson}}`);
  broker.clientRpc({ deviceId: 'd1', method: 'echo', paramsJson: '[1,2]' }, (o) => answers.push(o));
  await flush();
  t.same(answers.at(-1), { kind: 'data', body: '{"echo":[1,2]}' }, 'async handler');
  broker.setClientRpcFallback(() => '{"upstream":true}');
  broker.clientRpc({ deviceId: 'd1', method: 'anything', paramsJson: '{}' }, (o) => answers.push(o));
  t.same(answers.at(-1), { kind: 'data', body: '{"upstream":true}' }, 'fallback for unregistered methods');
  t.equal(broker.status().openPolls, 0);
  broker.close();
});

t.test('server-side and client-side RPC end to end', async (t) => {
  const dir = tempDir(t);
  const cfg = join(dir, 'config.json');
  // Short minimum and client-side timeouts keep the expiry cases fast; the semantics are the same.
  writeFileSync(cfg, JSON.stringify({ rpc: { minTimeoutMs: 150, clientSideTimeoutMs: 300 } }));
  const gw = await startGateway(t, { args: ['--config', cfg] });
  const dev = await addDevice(gw.dataDir, 'rpc-dev');
  const admin = await adminHeaders(gw, 'admin@rpc.test');
  const customer = await cliJson<{ id: string }>([
    'customer',
    'add',
    '--data-dir',
    gw.dataDir,
    '--title',
    'Rpc customer',
  ]);
  await addUser(gw.dataDir, 'cust@rpc.test', 'secret-2', 'CUSTOMER_USER', customer.id);
  const cust = authHeaders((await login(gw, 'cust@rpc.test', 'secret-2')).token);
  const dv = `${gw.url}/api/v1/${dev.token}`;
  const v1 = (kind: string): string => `${gw.url}/api/plugins/rpc/${kind}/${dev.id}`;
  const v2 = (kind: string): string => `${gw.url}/api/rpc/${kind}/${dev.id}`;

  t.test('one-way to an open poll', async (t) => {
    const poll = http('GET', `${dv}/rpc?timeout=20000`);
    await waitLongPoll(gw, admin, (s) => s.rpcPolls === 1);
    const r = await http('POST', v1('oneway'), '{"method":"setGpio","params":{"pin":7,"value":1.0}}', admin);
    t.equal(r.status, 200);
    t.equal(r.text, '');
    const got = await poll;
    t.equal(got.status, 200);
    t.equal(got.text, '{"id":1,"method":"setGpio","params":{"pin":7,"value":1.0}}', 'params forwarded verbatim');
  });

  t.test('two-way: JSON reply, non-JSON reply → 406, reply to unknown id → 200', async (t) => {
    const call = http('POST', v1('twoway'), { method: 'getTemp', params: {} }, admin);
    await waitLongPoll(gw, admin, (s) => s.queuedRpcs === 1);
    const got = await http('GET', `${dv}/rpc?timeout=20000`);
    t.same(got.json(), { id: 2, method: 'getTemp', params: {} }, 'queued RPC delivered on the next poll');
    const rep = await http('POST', `${dv}/rpc/2`, '{"value":21.5}');
    t.equal(rep.status, 200);
    t.equal(rep.text, '');
    const res = await call;
    t.equal(res.status, 200);
    t.equal(res.text, '{"value":21.5}');

    const call2 = http('POST', v2('twoway'), { method: 'getText' }, admin);
    const got2 = await http('GET', `${dv}/rpc?timeout=20000`);
    t.same(got2.json(), { id: 3, method: 'getText', params: {} });
    await http('POST', `${dv}/rpc/3`, 'not json');
    t.equal((await call2).status, 406);

    t.equal((await http('POST', `${dv}/rpc/5000`, '{"late":1}')).status, 200, 'unknown id → 200');
    t.equal((await http('POST', `${dv}/rpc/abc`, '{}')).status, 400);
    t.equal((await http('POST', `${gw.url}/api/v1/nope/rpc/1`, '{}')).status, 401);
  });

  t.test('queued RPCs are delivered in order, one per poll', async (t) => {
    const calls = ['a', 'b', 'c'].map((m) =>
      http('POST', v1('oneway'), { method: m, params: { m }, timeout: 20_000 }, admin),
    );
    await waitLongPoll(gw, admin, (s) => s.queuedRpcs === 3);
    const seen = [];
    for (let i = 0; i < 3; i++) seen.push((await http('GET', `${dv}/rpc`)).json<{ id: number; method: string }>());
    t.same(
      seen.map((x) => x.method),
      ['a', 'b', 'c'],
    );
    t.same(
      seen.map((x) => x.id),
      [4, 5, 6],
    );
    t.same(
      (await Promise.all(calls)).map((r) => r.status),
      [200, 200, 200],
    );
  });

  t.test('expiry: undelivered → 409 / 504, unanswered → 408 / 504, min timeout applies', async (t) => {
    const started = Date.now();
    const [u1, u2] = await Promise.all([
      http('POST', v1('oneway'), { method: 'x', timeout: 1 }, admin),
      http('POST', v2('twoway'), { method: 'x', timeout: 1 }, admin),
    ]);
    t.equal(u1.status, 409);
    t.equal(u1.text, '');
    t.equal(u2.status, 504);
    t.ok(Date.now() - started >= 140, 'timeout raised to the minimum');
    // drain the two expired ones: nothing is delivered any more
    const empty = await http('GET', `${dv}/rpc?timeout=100`);
    t.equal(empty.status, 408, 'expired RPCs are not delivered');
    t.equal(empty.text, '');

    const a1 = http('POST', v1('twoway'), { method: 'noreply', timeout: 400 }, admin);
    await waitLongPoll(gw, admin, (s) => s.queuedRpcs === 1);
    t.equal((await http('GET', `${dv}/rpc`)).json<{ method: string }>().method, 'noreply');
    t.equal((await a1).status, 408, 'plugins: delivered but unanswered → 408');
    const a2 = http('POST', v2('twoway'), { method: 'noreply2', timeout: 400 }, admin);
    await waitLongPoll(gw, admin, (s) => s.queuedRpcs === 1);
    await http('GET', `${dv}/rpc`);
    t.equal((await a2).status, 504, 'api/rpc: unanswered → 504');
  });

  t.test('bad REST requests and access', async (t) => {
    const bad: Array<[string, string | object, number]> = [
      ['not JSON', '{"method":', 400],
      ['array', '[1]', 400],
      ['no method', { params: {} }, 400],
    ];
    for (const [what, body, status] of bad) {
      const r = await http('POST', v1('oneway'), body, admin);
      t.equal(r.status, status, what);
      t.equal(r.json<{ errorCode: number }>().errorCode, 31, what);
    }
    t.equal((await http('POST', v1('sideways'), { method: 'x' }, admin)).status, 404);
    t.equal(
      (
        await http(
          'POST',
          `${gw.url}/api/plugins/rpc/oneway/00000000-0000-4000-8000-000000000000`,
          { method: 'x' },
          admin,
        )
      ).status,
      404,
    );
    t.equal((await http('POST', v1('oneway'), { method: 'x' }, cust)).status, 403, 'customer user, unassigned device');
    t.equal((await http('POST', v1('oneway'), { method: 'x' })).status, 401);
    await waitLongPoll(gw, admin, (s) => s.queuedRpcs === 0);
  });

  t.test('client-side RPC', async (t) => {
    const before = Date.now();
    const now = await http('POST', `${dv}/rpc`, { method: 'getCurrentTime', params: {} });
    t.equal(now.status, 200);
    const time = now.json<{ time: number }>().time;
    t.ok(time >= before && time <= Date.now(), 'the gateway clock in ms');
    const started = Date.now();
    const other = await http('POST', `${dv}/rpc`, { method: 'reboot', params: { now: true } });
    t.equal(other.status, 200);
    t.same(other.json(), { error: 'timeout' });
    t.ok(Date.now() - started >= 290, 'after the client-side timeout');
    t.equal((await http('POST', `${dv}/rpc`, { params: {} })).status, 400, 'missing method');
    t.equal((await http('POST', `${dv}/rpc`, '[]')).status, 400);
    const big = await http('POST', `${dv}/rpc`, { method: 'x', params: 'y'.repeat(70_000) });
    t.equal(big.status, 413, 'rpc bodies are capped at 64 KiB');
  });

  t.test('status needs a tenant admin', async (t) => {
    t.equal((await http('GET', `${gw.url}/api/outpost/status`, undefined, cust)).status, 403);
    t.equal((await http('GET', `${gw.url}/api/outpost/status`)).status, 401);
  });
});

t.test('default config: timeouts below rpc.minTimeoutMs (5000) are raised, default applies', async (t) => {
  const gw = await startGateway(t);
  const dev = await addDevice(gw.dataDir, 'rpc-min-dev');
  const admin = await adminHeaders(gw, 'admin@rpcmin.test');
  const call = http('POST', `${gw.url}/api/plugins/rpc/oneway/${dev.id}`, { method: 'late', timeout: 1 }, admin);
  await waitLongPoll(gw, admin, (s) => s.queuedRpcs === 1);
  // A 1 ms timeout would have expired long before this; raised to 5000 ms it is still pending.
  await new Promise((resolve) => setTimeout(resolve, 300));
  const got = await http('GET', `${gw.url}/api/v1/${dev.token}/rpc?timeout=1000`);
  t.equal(got.status, 200);
  t.same(got.json(), { id: 1, method: 'late', params: {} });
  t.equal((await call).status, 200);
});
