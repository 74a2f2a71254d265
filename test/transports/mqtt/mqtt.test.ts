/**
 * TB's MQTT device API against the real daemon (docs/mqtt.md), with MQTT.js speaking 3.1.1 and 5: CONNECT by
 * token, every publish and subscribe topic (v1 and v2 forms), typing, shared-attribute pushes and RPC through
 * the one broker, bad input as TB answers it, one session per token, keep-alive, HTTP and MQTT mixed.
 */
import type { IPublishPacket } from 'mqtt-packet';
import mqttPacket from 'mqtt-packet';
import t from 'tap';
import {
  Inbox,
  adminHeaders,
  closed,
  granted,
  latest,
  mqttClient,
  mqttPorts,
  rawSocket,
  sleep,
} from '../../helpers/mqtt.js';
import { addDevice, http, startGateway, waitLongPoll } from '../../helpers/server.js';
import { waitFor } from '../../helpers/wait.js';

const gw = await startGateway(t);
const dev = await addDevice(gw.dataDir, 'mq-dev');
const other = await addDevice(gw.dataDir, 'mq-other');
const admin = await adminHeaders(gw);
const { port } = mqttPorts(gw);

t.ok(port > 0, 'the listening line names the MQTT port');
t.match(gw.logs.join('\n'), /listening on http:\/\/127\.0\.0\.1:\d+, mqtt:\/\/127\.0\.0\.1:\d+/);

t.test('CONNECT: unknown or empty token → not authorized; sessionPresent always 0', async (t) => {
  for (const [protocolVersion, username, code] of [
    [4, 'nope', 5],
    [5, 'nope', 0x86],
    [4, '', 5],
    [5, '', 0x86],
  ] as const) {
    const err = await mqttClient(t, gw, username, { protocolVersion }).then(
      () => undefined,
      (e: { code?: number }) => e,
    );
    t.equal(err?.code, code, `v${protocolVersion} token "${username}" → ${code}`);
  }
  const c = await mqttClient(t, gw, dev.token, { clean: false, clientId: 'keep-me' });
  const c2 = await mqttClient(t, gw, other.token, { clean: false, clientId: 'keep-me-2', protocolVersion: 5 });
  // MQTT.js keeps the CONNACK it got
  t.equal(
    (c as unknown as { connackPacket?: { sessionPresent: boolean } }).connackPacket?.sessionPresent ?? false,
    false,
  );
  t.equal(
    (c2 as unknown as { connackPacket?: { sessionPresent: boolean } }).connackPacket?.sessionPresent ?? false,
    false,
  );
  c.end(true);
  c2.end(true);
});

t.test('telemetry: the three shapes on v1 and v2, TB typing, PUBACK once stored', async (t) => {
  const c = await mqttClient(t, gw, dev.token);
  await c.publishAsync('v1/devices/me/telemetry', '{"temperature":25,"dbl":42.0,"s":"42","b":true}', { qos: 1 });
  let l = await latest(gw, admin, dev.id, 'temperature,dbl,s,b');
  t.equal(l['temperature']?.[0]?.value, '25', 'stored before the PUBACK');
  t.equal(l['dbl']?.[0]?.value, '42.0', '42.0 stays a double');
  t.equal(l['s']?.[0]?.value, '42', 'numeric string cast');
  t.equal(l['b']?.[0]?.value, 'true');
  await c.publishAsync('v2/t', '{"ts":1700000000000,"values":{"v2key":1}}', { qos: 1 });
  await c.publishAsync('v1/devices/me/telemetry', '[{"ts":1700000001000,"values":{"arr":1}},{"arr2":2}]', { qos: 1 });
  l = await latest(gw, admin, dev.id, 'v2key,arr,arr2');
  t.same(l['v2key']?.[0], { ts: 1700000000000, value: '1' }, 'v2/t alias, own ts');
  t.same(l['arr']?.[0], { ts: 1700000001000, value: '1' }, 'array shape');
  t.equal(l['arr2']?.[0]?.value, '2');
  // QoS 0 is stored too (no ack to wait for)
  c.publish('v1/devices/me/telemetry', '{"q0":7}', { qos: 0 });
  await c.publishAsync('v1/devices/me/telemetry', '{"after":1}', { qos: 1 });
  t.equal((await latest(gw, admin, dev.id, 'q0'))['q0']?.[0]?.value, '7');
});

t.test('attributes: client attributes on v1 and v2, request/response in both families', async (t) => {
  const c = await mqttClient(t, gw, dev.token);
  const inbox = new Inbox(c);
  await c.publishAsync('v1/devices/me/attributes', '{"fw":"1.0","n":3}', { qos: 1 });
  await c.publishAsync('v2/a', '{"hw":"rev2"}', { qos: 1 });
  const r = await http('GET', `${gw.url}/api/v1/${dev.token}/attributes?clientKeys=fw,n,hw`);
  t.same(r.json(), { client: { fw: '1.0', n: 3, hw: 'rev2' } }, 'HTTP reads what MQTT wrote');
  await c.subscribeAsync(['v1/devices/me/attributes/response/+', 'v2/a/res/+'], { qos: 1 });
  // published without waiting: the request is answered after the write before it
  c.publish('v1/devices/me/attributes', '{"late":true}', { qos: 1 });
  c.publish('v1/devices/me/attributes/request/7', '{"clientKeys":"fw,late"}', { qos: 1 });
  const m = await inbox.next((x) => x.topic === 'v1/devices/me/attributes/response/7');
  t.same(JSON.parse(m.text), { client: { fw: '1.0', late: true } });
  await c.publishAsync('v2/a/req/8', '', { qos: 1 });
  const m2 = await inbox.next((x) => x.topic === 'v2/a/res/8');
  t.same(Object.keys(JSON.parse(m2.text) as object), ['client'], 'empty request: everything (no shared yet)');
});

t.test('shared attributes: changes pushed on subscription, deletions as {"deleted":[..]}', async (t) => {
  const c = await mqttClient(t, gw, dev.token, { protocolVersion: 5 });
  const inbox = new Inbox(c);
  const g = await c.subscribeAsync('v1/devices/me/attributes', { qos: 1 });
  t.equal(g[0]?.qos, 1);
  const url = `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/attributes/SHARED_SCOPE`;
  t.equal((await http('POST', url, { target: 21.5 }, admin)).status, 200);
  const m = await inbox.next((x) => x.topic === 'v1/devices/me/attributes');
  t.same(JSON.parse(m.text), { target: 21.5 });
  t.equal(m.qos, 1);
  t.equal(
    (
      await http(
        'DELETE',
        `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/SHARED_SCOPE?keys=target`,
        undefined,
        admin,
      )
    ).status,
    200,
  );
  const d = await inbox.next((x) => x.topic === 'v1/devices/me/attributes' && x.text.includes('deleted'));
  t.same(JSON.parse(d.text), { deleted: ['target'] });
  // the device that did not subscribe hears nothing, and a server-scope change goes nowhere
  const quiet = await mqttClient(t, gw, other.token);
  const qi = new Inbox(quiet);
  await http('POST', `${gw.url}/api/plugins/telemetry/DEVICE/${other.id}/attributes/SHARED_SCOPE`, { x: 1 }, admin);
  await http('POST', `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/attributes/SERVER_SCOPE`, { srv: 1 }, admin);
  await sleep(300);
  t.same(qi.all, [], 'no subscription, no push');
  t.equal(inbox.all.filter((x) => x.text.includes('srv')).length, 0, 'server scope is not pushed');
  t.same(
    inbox.all.filter((x) => x.topic !== 'v1/devices/me/attributes'),
    [],
    'a v1 subscriber hears only on the v1 topic',
  );
});

t.test(
  'shared attributes: a v2/a subscriber gets changes and deletions on v2/a, the last form subscribed wins',
  async (t) => {
    const d = await addDevice(gw.dataDir, 'mq-v2-attrs');
    const c = await mqttClient(t, gw, d.token);
    const inbox = new Inbox(c);
    t.same(await granted(c, { 'v2/a': { qos: 1 } }), [1]);
    const shared = `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/attributes/SHARED_SCOPE`;
    t.equal((await http('POST', shared, { mode: 'eco' }, admin)).status, 200);
    const m = await inbox.next((x) => x.text.includes('mode'));
    t.same(m, { topic: 'v2/a', text: '{"mode":"eco"}', qos: 1 });
    const del = `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/SHARED_SCOPE?keys=mode`;
    t.equal((await http('DELETE', del, undefined, admin)).status, 200);
    const gone = await inbox.next((x) => x.text.includes('deleted'));
    t.equal(gone.topic, 'v2/a');
    t.same(JSON.parse(gone.text), { deleted: ['mode'] });
    // an attribute request in the v2 form is answered in the v2 form
    await c.publishAsync('v2/a/req/5', '{"sharedKeys":"mode"}', { qos: 1 });
    t.same(JSON.parse((await inbox.next((x) => x.topic === 'v2/a/res/5')).text), {});

    // subscribed to both forms: one copy of each change, on the form subscribed last (ThingsBoard's one topic type)
    await c.subscribeAsync('v1/devices/me/attributes', { qos: 0 });
    await http('POST', shared, { step: 1 }, admin);
    const s1 = await inbox.next((x) => x.text.includes('step'));
    t.same(s1, { topic: 'v1/devices/me/attributes', text: '{"step":1}', qos: 0 });
    await c.subscribeAsync('v2/a', { qos: 1 });
    await http('POST', shared, { step: 2 }, admin);
    const s2 = await inbox.next((x) => x.text.includes('"step":2'));
    t.same(s2, { topic: 'v2/a', text: '{"step":2}', qos: 1 });
    await sleep(200);
    t.same(
      inbox.all.filter((x) => x.text.includes('step')).map((x) => x.topic),
      ['v1/devices/me/attributes', 'v2/a'],
      'each change sent once',
    );
    t.same(
      inbox.all.filter((x) => x.topic === 'v1/devices/me/attributes').map((x) => x.text),
      ['{"step":1}'],
      'nothing else on the v1 topic',
    );
  },
);

t.test(
  'server-side RPC at QoS 1: delivered at the PUBACK; one never acknowledged goes to the next session',
  async (t) => {
    const d = await addDevice(gw.dataDir, 'mq-rpc-ack');
    // a device that takes the publish but dies before its PUBACK
    const mute = await mqttClient(t, gw, d.token);
    const muteInbox = new Inbox(mute);
    mute.handleMessage = (_packet, _done) => {}; // the PUBACK is sent only when done() is called
    await mute.subscribeAsync('v1/devices/me/rpc/request/+', { qos: 1 });
    let answered: number | undefined;
    const call = http(
      'POST',
      `${gw.url}/api/plugins/rpc/oneway/${d.id}`,
      { method: 'open', params: { v: 1 }, timeout: 10_000 },
      admin,
    ).then((r) => {
      answered = Date.now();
      return r;
    });
    await muteInbox.next((x) => x.topic === 'v1/devices/me/rpc/request/1');
    await sleep(300);
    t.equal(answered, undefined, 'no PUBACK yet: the REST caller still waits');
    mute.end(true);
    // the device comes back: it gets the same RPC again, acknowledges it, and only then is it delivered
    const c = await mqttClient(t, gw, d.token);
    const inbox = new Inbox(c);
    await c.subscribeAsync('v1/devices/me/rpc/request/+', { qos: 1 });
    const again = await inbox.next((x) => x.topic.startsWith('v1/devices/me/rpc/request/'));
    t.equal(again.topic, 'v1/devices/me/rpc/request/1', 'the same RPC, the same id');
    t.same(JSON.parse(again.text), { method: 'open', params: { v: 1 } });
    t.equal((await call).status, 200, 'delivered once acknowledged');
  },
);

t.test(
  'server-side RPC: ids from 1, queued RPCs on subscribe, reply over MQTT, exactly once with HTTP polls',
  async (t) => {
    const d = await addDevice(gw.dataDir, 'mq-rpc');
    // queued before anyone listens
    const lp0 = await waitLongPoll(gw, admin, () => true);
    const first = http(
      'POST',
      `${gw.url}/api/plugins/rpc/twoway/${d.id}`,
      { method: 'getTemp', params: { unit: 'C' }, timeout: 10_000 },
      admin,
    );
    await waitLongPoll(gw, admin, (s) => s.queuedRpcs > lp0.queuedRpcs);
    const c = await mqttClient(t, gw, d.token);
    const inbox = new Inbox(c);
    await c.subscribeAsync('v1/devices/me/rpc/request/+', { qos: 1 });
    const m = await inbox.next((x) => x.topic.startsWith('v1/devices/me/rpc/request/'));
    t.equal(m.topic, 'v1/devices/me/rpc/request/1', 'the first RPC id is 1');
    t.same(JSON.parse(m.text), { method: 'getTemp', params: { unit: 'C' } });
    await c.publishAsync('v1/devices/me/rpc/response/1', '{"t":20.5}', { qos: 1 });
    const r = await first;
    t.equal(r.status, 200);
    t.same(r.json(), { t: 20.5 }, 'the REST caller gets the MQTT reply');

    // an HTTP long-poll open at the same time: the RPC goes one way only
    const lp1 = await waitLongPoll(gw, admin, () => true);
    const poll = http('GET', `${gw.url}/api/v1/${d.token}/rpc?timeout=1500`);
    await waitLongPoll(gw, admin, (s) => s.rpcPolls > lp1.rpcPolls);
    const oneway = await http(
      'POST',
      `${gw.url}/api/plugins/rpc/oneway/${d.id}`,
      { method: 'blink', params: {} },
      admin,
    );
    t.equal(oneway.status, 200);
    const p = await poll;
    await sleep(200);
    const viaMqtt = inbox.all.filter((x) => x.text.includes('blink')).length;
    t.equal((p.status === 200 ? 1 : 0) + viaMqtt, 1, 'delivered exactly once');
    t.equal(p.status, 200, 'the open poll took it first');
    t.same(p.json(), { id: 2, method: 'blink', params: {} });

    // v2 form
    const c2 = await mqttClient(t, gw, d.token, { protocolVersion: 5 });
    const in2 = new Inbox(c2);
    await c2.subscribeAsync('v2/r/req/+', { qos: 0 });
    const call = http(
      'POST',
      `${gw.url}/api/plugins/rpc/twoway/${d.id}`,
      { method: 'v2call', params: 1, timeout: 10_000 },
      admin,
    );
    const m2 = await in2.next((x) => x.topic.startsWith('v2/r/req/'));
    t.equal(m2.qos, 0, 'QoS of the subscription');
    await c2.publishAsync(`v2/r/res/${m2.topic.split('/').pop() ?? ''}`, '"ok"', { qos: 1 });
    t.equal((await call).text, '"ok"');
  },
);

t.test('client-side RPC: getCurrentTime answered on the response topic', async (t) => {
  const c = await mqttClient(t, gw, dev.token);
  const inbox = new Inbox(c);
  await c.subscribeAsync('v1/devices/me/rpc/response/+', { qos: 1 });
  const before = Date.now();
  await c.publishAsync('v1/devices/me/rpc/request/42', '{"method":"getCurrentTime","params":{}}', { qos: 1 });
  const m = await inbox.next((x) => x.topic === 'v1/devices/me/rpc/response/42');
  const time = (JSON.parse(m.text) as { time: number }).time;
  t.ok(time >= before - 5 && time <= Date.now() + 5, 'the daemon clock');
  await c.publishAsync('v2/r/req/43', '{"method":"getCurrentTime"}', { qos: 1 });
  t.ok(await inbox.next((x) => x.topic === 'v2/r/res/43'), 'v2 family answered on v2');
  // TB's Python SDK and IoT Gateway wait for this after connecting
  await c.publishAsync('v1/devices/me/rpc/request/44', '{"method":"getSessionLimits","params":{"timeout":5000}}', {
    qos: 1,
  });
  const limits = JSON.parse((await inbox.next((x) => x.topic === 'v1/devices/me/rpc/response/44')).text) as Record<
    string,
    unknown
  >;
  t.same(
    limits,
    {
      maxPayloadSize: 65_536,
      maxInflightMessages: 64,
      rateLimits: { messages: '', telemetryMessages: '', telemetryDataPoints: '' },
      gatewayRateLimits: { messages: '', telemetryMessages: '', telemetryDataPoints: '' },
    },
    'answered at once, no rate limits',
  );
});

t.test('depth telemetry as Tempus', async (t) => {
  const c = await mqttClient(t, gw, dev.token);
  await c.publishAsync(
    'v1/devices/me/depth/telemetry',
    '[{"ds":10.5,"values":{"gr":120}},{"ds":11,"values":{"gr":121}}]',
    { qos: 1 },
  );
  const r = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/values/depthseries?keys=gr&startDs=0&endDs=100`,
    undefined,
    admin,
  );
  t.equal(r.status, 200);
  t.equal(r.json<{ gr: unknown[] }>().gr.length, 2);
});

t.test('subscriptions: exact topics only, everything else refused with 0x80', async (t) => {
  for (const protocolVersion of [4, 5] as const) {
    const c = await mqttClient(t, gw, dev.token, { protocolVersion });
    const codes = await granted(c, {
      '#': { qos: 1 },
      'v1/devices/me/#': { qos: 1 },
      'v1/devices/+/telemetry': { qos: 0 },
      'v1/gateway/rpc': { qos: 1 },
      'v1/devices/me/telemetry': { qos: 1 },
      'v1/devices/me/rpc/request/+': { qos: 2 },
    });
    t.same(codes, [128, 128, 128, 128, 128, 1], `v${protocolVersion}: refused, and QoS 2 granted as 1`);
    t.ok(c.connected, 'a refused filter does not close the session');
    c.end(true);
  }
});

t.test('nothing retained, devices never see each other', async (t) => {
  const a = await mqttClient(t, gw, dev.token);
  await a.publishAsync('v1/devices/me/attributes', '{"ret":1}', { qos: 1, retain: true });
  const b = await mqttClient(t, gw, other.token);
  const inbox = new Inbox(b);
  await b.subscribeAsync(['v1/devices/me/attributes', 'v1/devices/me/attributes/response/+'], { qos: 1 });
  await a.publishAsync('v1/devices/me/attributes/request/1', '{}', { qos: 1 });
  await sleep(300);
  t.same(inbox.all, [], "B gets neither A's retained publish nor A's response");
  const r = await http('GET', `${gw.url}/api/v1/${other.token}/attributes?clientKeys=ret`);
  t.same(r.json(), {}, "A's attribute did not land on B");
});

t.test('unknown topic: acknowledged and ignored; v5 says 0x90', async (t) => {
  const c = await mqttClient(t, gw, dev.token);
  await c.publishAsync('v1/devices/me/nothing', '{"x":1}', { qos: 1 });
  await c.publishAsync('some/other/topic', 'x', { qos: 1 });
  t.ok(c.connected, 'still connected');
  const c5 = await mqttClient(t, gw, dev.token, { protocolVersion: 5 });
  const err = await c5.publishAsync('v1/devices/me/nothing', '{"x":1}', { qos: 1 }).then(
    () => undefined,
    (e: { code?: number }) => e,
  );
  t.equal(err?.code, 0x90);
  t.ok(c5.connected);
});

t.test('malformed payload: nothing stored; v5 PUBACK 0x99 and the session stays; 3.1.1 closed', async (t) => {
  const d = await addDevice(gw.dataDir, 'mq-bad');
  const c5 = await mqttClient(t, gw, d.token, { protocolVersion: 5 });
  for (const [topic, body] of [
    ['v1/devices/me/telemetry', '{"a":1,'],
    ['v1/devices/me/telemetry', '[1,2]'],
    ['v1/devices/me/telemetry', '{"ts":"x","values":{"a":1}}'],
    ['v1/devices/me/attributes', '[{"a":1}]'],
    ['v1/devices/me/depth/telemetry', '{"values":{"a":1}}'],
    ['v1/devices/me/rpc/request/1', '{"params":1}'],
    ['v1/devices/me/attributes/request/x', '{}'],
  ] as const) {
    const err = await c5.publishAsync(topic, body, { qos: 1 }).then(
      () => undefined,
      (e: { code?: number }) => e,
    );
    t.equal(err?.code, 0x99, `${topic} ${body} → 0x99`);
  }
  t.ok(c5.connected, 'v5 session kept');
  await c5.publishAsync('v1/devices/me/telemetry', '{"good":1}', { qos: 1 });
  const c4 = await mqttClient(t, gw, d.token);
  const gone = closed(c4);
  c4.publish('v1/devices/me/telemetry', '{"half":1,"bad":', { qos: 1 });
  await gone;
  t.pass('3.1.1: the connection is closed');
  const l = await latest(gw, admin, d.id);
  t.same(Object.keys(l), ['good'], 'only the good message stored');
});

t.test('payload over mqtt.maxPayloadBytes closes the connection; nothing stored', async (t) => {
  const d = await addDevice(gw.dataDir, 'mq-big');
  const c = await mqttClient(t, gw, d.token);
  const gone = closed(c);
  c.publish('v1/devices/me/telemetry', `{"big":"${'x'.repeat(70_000)}"}`, { qos: 1 });
  await gone;
  t.same(await latest(gw, admin, d.id), {}, 'nothing stored');
  // just under the limit is fine
  const c2 = await mqttClient(t, gw, d.token);
  await c2.publishAsync('v1/devices/me/telemetry', `{"big":"${'x'.repeat(65_000)}"}`, { qos: 1 });
  t.ok((await latest(gw, admin, d.id))['big']);
});

t.test('one session per token: a new connection closes the old one', async (t) => {
  const a = await mqttClient(t, gw, dev.token, { protocolVersion: 5 });
  let reason: number | undefined;
  a.on('disconnect', (p) => {
    reason = p.reasonCode;
  });
  const gone = closed(a);
  const b = await mqttClient(t, gw, dev.token);
  await gone;
  t.equal(reason, 0x8e, 'MQTT 5: session taken over');
  t.ok(b.connected, 'the new one stays');
});

t.test('keep-alive: silent for 1.5 × keep-alive → closed; PINGREQ keeps it open', async (t) => {
  const s = await rawSocket(t, port);
  s.write(
    mqttPacket.generate({
      cmd: 'connect',
      clientId: 'ka',
      username: dev.token,
      keepalive: 1,
      protocolVersion: 4,
      clean: true,
    }),
  );
  const pinger = await rawSocket(t, port);
  pinger.write(
    mqttPacket.generate({
      cmd: 'connect',
      clientId: 'ka2',
      username: other.token,
      keepalive: 1,
      protocolVersion: 4,
      clean: true,
    }),
  );
  const timer = setInterval(() => pinger.write(mqttPacket.generate({ cmd: 'pingreq' })), 500);
  const t0 = Date.now();
  await s.ended;
  clearInterval(timer);
  const ms = Date.now() - t0;
  t.ok(ms >= 1400 && ms < 4000, `closed after ${ms} ms`);
  t.notOk(pinger.destroyed || pinger.readyState !== 'open', 'the pinging client is still connected');
  t.ok(Buffer.concat(pinger.received).includes(Buffer.from([0xd0, 0x00])), 'PINGRESP received');
});

t.test('a connection that never sends CONNECT, or sends something else first, is closed', async (t) => {
  const s = await rawSocket(t, port);
  s.write(mqttPacket.generate({ cmd: 'pingreq' }));
  await s.ended;
  t.pass('PINGREQ before CONNECT closes');
});

t.test('QoS 2: PUBREC once stored, PUBCOMP on PUBREL, a resent message stored once', async (t) => {
  const d = await addDevice(gw.dataDir, 'mq-q2');
  const c = await mqttClient(t, gw, d.token);
  await c.publishAsync('v1/devices/me/telemetry', '{"ts":1700000000000,"values":{"q2":1}}', { qos: 2 });
  t.equal((await latest(gw, admin, d.id, 'q2'))['q2']?.[0]?.value, '1');
  // raw: the same packet id twice (DUP) before PUBREL → one PUBREC each, one point
  const s = await rawSocket(t, port);
  s.write(
    mqttPacket.generate({
      cmd: 'connect',
      clientId: 'q2raw',
      username: d.token,
      keepalive: 0,
      protocolVersion: 4,
      clean: true,
    }),
  );
  const pub = (dup: boolean, v: number): Buffer =>
    mqttPacket.generate({
      cmd: 'publish',
      topic: 'v1/devices/me/telemetry',
      qos: 2,
      messageId: 9,
      dup,
      retain: false,
      payload: Buffer.from(`{"ts":${1700000000000 + v},"values":{"dupk":${v}}}`),
    } as IPublishPacket);
  const PUBREC = Buffer.from([0x50, 0x02, 0x00, 0x09]);
  const PUBCOMP = Buffer.from([0x70, 0x02, 0x00, 0x09]);
  s.write(pub(false, 1));
  await waitFor(() => Buffer.concat(s.received).includes(PUBREC), { message: 'the PUBREC of the first' });
  s.write(pub(true, 2));
  s.write(mqttPacket.generate({ cmd: 'pubrel', messageId: 9 }));
  // one connection's packets are handled in order: the PUBCOMP comes after the resent message was
  await waitFor(() => Buffer.concat(s.received).includes(PUBCOMP), { message: 'the PUBCOMP' });
  const got = Buffer.concat(s.received);
  const pubrecs = [...got].filter((b, i) => b === 0x50 && got[i + 1] === 2).length;
  t.ok(pubrecs >= 1, 'PUBREC sent');
  t.ok(got.includes(Buffer.from([0x70, 0x02, 0x00, 0x09])), 'PUBCOMP for id 9');
  const r = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/values/timeseries?keys=dupk&startTs=0&endTs=1800000000000`,
    undefined,
    admin,
  );
  t.same(r.json<{ dupk: unknown[] }>().dupk.length, 1, 'the resent message was not stored again');
});

t.test('HTTP and MQTT clients of one device, mixed', async (t) => {
  const d = await addDevice(gw.dataDir, 'mq-mixed');
  const c = await mqttClient(t, gw, d.token);
  const inbox = new Inbox(c);
  await c.subscribeAsync('v1/devices/me/attributes', { qos: 1 });
  const posts: Array<Promise<unknown>> = [];
  for (let i = 0; i < 20; i++) {
    posts.push(
      c.publishAsync('v1/devices/me/telemetry', `{"ts":${1700000000000 + 2 * i},"values":{"mix":${2 * i}}}`, {
        qos: 1,
      }),
    );
    posts.push(
      http(
        'POST',
        `${gw.url}/api/v1/${d.token}/telemetry`,
        `{"ts":${1700000000000 + 2 * i + 1},"values":{"mix":${2 * i + 1}}}`,
      ),
    );
  }
  await Promise.all(posts);
  const r = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/values/timeseries?keys=mix&startTs=0&endTs=1800000000000&limit=100`,
    undefined,
    admin,
  );
  t.equal(r.json<{ mix: unknown[] }>().mix.length, 40, "both transports' points");
  // the HTTP attribute long-poll and the MQTT subscription both hear a shared change
  const lp0 = await waitLongPoll(gw, admin, () => true);
  const poll = http('GET', `${gw.url}/api/v1/${d.token}/attributes/updates?timeout=3000`);
  await waitLongPoll(gw, admin, (s) => s.attributePolls > lp0.attributePolls);
  await http('POST', `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/attributes/SHARED_SCOPE`, { both: 1 }, admin);
  t.same((await poll).json(), { both: 1 });
  t.same(JSON.parse((await inbox.next()).text), { both: 1 });
});

t.test('provisioning over MQTT: answers as HTTP /api/v1/provision', async (t) => {
  // no provision key configured on this daemon: NOT_FOUND, as HTTP says
  const c = await mqttClient(t, gw, 'provision');
  const inbox = new Inbox(c);
  t.same(await granted(c, { '/provision/response': { qos: 1 }, 'v1/devices/me/telemetry': { qos: 1 } }), [1, 128]);
  await c.publishAsync(
    '/provision/request',
    '{"deviceName":"p1","provisionDeviceKey":"k","provisionDeviceSecret":"s"}',
    { qos: 1 },
  );
  const m = await inbox.next((x) => x.topic === '/provision/response');
  const viaHttp = await http(
    'POST',
    `${gw.url}/api/v1/provision`,
    '{"deviceName":"p1","provisionDeviceKey":"k","provisionDeviceSecret":"s"}',
  );
  t.same(JSON.parse(m.text), viaHttp.json());
  t.equal((JSON.parse(m.text) as { status: string }).status, 'NOT_FOUND');
  await c.publishAsync('v1/devices/me/telemetry', '{"x":1}', { qos: 1 });
  t.ok(c.connected, 'other topics: acknowledged and ignored');
});

t.test('status and /metrics count MQTT', async (t) => {
  const m = await http('GET', `${gw.url}/metrics`, undefined, admin);
  t.match(m.text, /outpost_mqtt_messages_in_total [1-9]/);
  t.match(m.text, /outpost_mqtt_connections_closed_total\{reason="auth"\} [1-9]/);
  t.match(m.text, /outpost_mqtt_puback_seconds_count [1-9]/);
  const s = await http('GET', `${gw.url}/api/outpost/status`, undefined, admin);
  const mq = s.json<{ mqtt: { port: number; messagesIn: number; refusedConnections: number } }>().mqtt;
  t.equal(mq.port, port);
  t.ok(mq.messagesIn > 0 && mq.refusedConnections > 0);
});
