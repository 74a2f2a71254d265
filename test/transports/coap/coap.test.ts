/**
 * TB's CoAP device API (docs/coap.md) against the real daemon: libcoap's coap-client in the forms of TB's docs,
 * and a programmatic client for message types, duplicates, Observe sequences, block-wise transfers and limits.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { CoapTestClient, coapPort, hasLibcoap, libcoap, opt, readUint, sleep, uint } from '../../helpers/coap.js';
import { adminHeaders, latest } from '../../helpers/mqtt.js';
import { addDevice, http, startGateway, tempDir, waitLongPoll, waitStatus } from '../../helpers/server.js';
import { waitFor } from '../../helpers/wait.js';

const gw = await startGateway(t);
const port = coapPort(gw);
const admin = await adminHeaders(gw);
const dev = await addDevice(gw.dataDir, 'coap-dev');
const other = await addDevice(gw.dataDir, 'coap-other');
const base = `coap://127.0.0.1:${port}/api/v1`;

t.ok(port > 0, 'the listening line names the CoAP port');

/** A one-way RPC to `deviceId` by REST, and whether its answer (the device got it) has come yet. */
function onewayRpc(deviceId: string, body: object): { answered: () => boolean; done: ReturnType<typeof http> } {
  let answered = false;
  const done = http('POST', `${gw.url}/api/plugins/rpc/oneway/${deviceId}`, body, admin).then((r) => {
    answered = true;
    return r;
  });
  return { answered: () => answered, done };
}

t.test(
  'libcoap coap-client in the forms of TB docs',
  { skip: hasLibcoap() ? false : 'coap-client-notls not installed' },
  async (t) => {
    let r = await libcoap([
      '-m',
      'post',
      '-t',
      'application/json',
      '-e',
      '{"temperature":25}',
      `${base}/${dev.token}/telemetry`,
    ]);
    t.equal(r.err.trim(), '', 'telemetry accepted');
    t.same((await latest(gw, admin, dev.id, 'temperature'))['temperature']?.[0]?.value, '25');
    r = await libcoap([
      '-m',
      'post',
      '-t',
      'application/json',
      '-e',
      '{"fw":"1.0","rate":2.0}',
      `${base}/${dev.token}/attributes`,
    ]);
    t.equal(r.err.trim(), '');
    r = await libcoap(['-m', 'get', `${base}/${dev.token}/attributes?clientKeys=fw,rate&sharedKeys=none`]);
    t.same(JSON.parse(r.out), { client: { fw: '1.0', rate: 2.0 } });
    r = await libcoap(['-m', 'get', `${base}/${dev.token}/attributes?clientKeys=missing`]);
    t.match(r.err, /4\.04/, 'nothing found: 4.04');
    r = await libcoap([
      '-m',
      'post',
      '-t',
      'application/json',
      '-e',
      '{"method":"getCurrentTime","params":{}}',
      `${base}/${dev.token}/rpc`,
    ]);
    t.ok(typeof JSON.parse(r.out).time === 'number', 'client-side RPC answered');
    t.match((await libcoap(['-m', 'post', '-e', '{"a":1}', `${base}/not-a-token/telemetry`])).err, /4\.01/);
    t.match((await libcoap(['-m', 'post', '-e', '{"a":', `${base}/${dev.token}/telemetry`])).err, /4\.00/);
    t.match((await libcoap(['-m', 'post', '-e', '"str"', `${base}/${dev.token}/telemetry`])).err, /4\.00/);
    t.match(
      (await libcoap(['-m', 'post', '-e', '{"a":1}', `${base}/${dev.token}/claim`])).err,
      /4\.00/,
      'unknown feature',
    );
    t.match((await libcoap(['-m', 'get', `${base}/${dev.token}/telemetry`])).err, /4\.00/);
    t.match((await libcoap(['-m', 'put', '-e', '{"a":1}', `${base}/${dev.token}/telemetry`])).err, /4\.05/);
    t.match((await libcoap(['-m', 'delete', `${base}/${dev.token}/telemetry`])).err, /4\.05/);
    t.match((await libcoap(['-m', 'get', `coap://127.0.0.1:${port}/api/v2/x`])).err, /4\.04/);
    const values: Record<string, number> = {};
    for (let i = 0; i < 300; i++) values[`blk${i}`] = i;
    const file = join(tempDir(t), 'big.json');
    writeFileSync(file, JSON.stringify(values));
    r = await libcoap([
      '-m',
      'post',
      '-b',
      '1024',
      '-t',
      'application/json',
      '-f',
      file,
      `${base}/${dev.token}/telemetry`,
    ]);
    t.equal(r.err.trim(), '', 'a 4 KB body block-wise (Block1, a new token per block)');
    const l = await latest(gw, admin, dev.id, 'blk0,blk299');
    t.same([l['blk0']?.[0]?.value, l['blk299']?.[0]?.value], ['0', '299']);
    // a large answer (Block2): 300 client attributes read back whole
    r = await libcoap([
      '-m',
      'post',
      '-b',
      '1024',
      '-t',
      'application/json',
      '-f',
      file,
      `${base}/${dev.token}/attributes`,
    ]);
    r = await libcoap(['-m', 'get', '-b', '1024', `${base}/${dev.token}/attributes`]);
    t.ok(Object.keys(JSON.parse(r.out).client).length >= 300, 'a 4 KB answer in Block2 pieces, reassembled by libcoap');
    // observe as TB's docs: -s seconds; a shared-attribute change arrives
    const d = await addDevice(gw.dataDir, 'coap-libobs');
    const obs = libcoap(['-m', 'get', '-s', '3', '-w', `${base}/${d.token}/attributes`]);
    await waitObservations(1);
    await http('POST', `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/attributes/SHARED_SCOPE`, { led: true }, admin);
    const o = await obs;
    t.same(
      o.out
        .trim()
        .split('\n')
        .map((x) => JSON.parse(x)),
      [{}, { led: true }],
    );
  },
);

async function waitObservations(n: number): Promise<void> {
  await waitStatus<{ coap: { observations: number } }>(gw, admin, (s) => s.coap.observations >= n);
}

t.test('message types: piggybacked ACK for CON, NON for NON, ping → RST, garbage → RST', async (t) => {
  const c = await CoapTestClient.open(t, port);
  const con = await c.request({ method: 'POST', path: `api/v1/${dev.token}/telemetry`, payload: '{"mt":1}' });
  t.ok(con.ack, 'answered in the ACK');
  t.equal(con.code, '2.01');
  const non = await c.request({
    method: 'POST',
    path: `api/v1/${dev.token}/telemetry`,
    payload: '{"mt":2}',
    confirmable: false,
  });
  t.ok(!non.ack && !non.confirmable, 'NON request, NON answer');
  t.equal(non.code, '2.01');
  const get = await c.request({ path: `api/v1/${dev.token}/attributes`, query: ['clientKeys=fw'] });
  t.equal(get.code, '2.05');
  t.equal(readUint(opt(get, 'Content-Format')), 50);
  const from = c.received.length;
  c.sendRaw(Buffer.from([0x40, 0, 0x12, 0x34]));
  const rst = await c.waitFor((p) => p.reset && p.messageId === 0x1234, 5000, from);
  t.ok(rst.reset, 'ping → RST');
  c.sendRaw(Buffer.from([0x4f, 0x01, 0x22, 0x22, 1, 2, 3]));
  const rst2 = await c.waitFor((p) => p.reset && p.messageId === 0x2222, 5000, from);
  t.ok(rst2.reset, 'a CON whose token cannot be read → RST');
  c.sendRaw(Buffer.from('garbage that is not coap at all'));
  t.equal(gw.proc.exitCode, null);
});

t.test('a retransmitted CON is answered from the cache and stored once', async (t) => {
  const c = await CoapTestClient.open(t, port);
  const d = await addDevice(gw.dataDir, 'coap-dup');
  const { buf, token } = c.build({
    method: 'POST',
    path: `api/v1/${d.token}/telemetry`,
    payload: '{"ts":1700000000000,"values":{"n":1}}',
  });
  // sent three times back to back: the second and third arrive while the first waits for its commit
  c.sendRaw(buf);
  c.sendRaw(buf);
  c.sendRaw(buf);
  await c.waitFor((p) => p.token.equals(token) && p.code === '2.01');
  const resentAt = c.received.length;
  c.sendRaw(buf);
  await c.waitFor((p) => p.token.equals(token), 10_000, resentAt);
  const answers = c.received.filter((p) => p.token.equals(token));
  t.ok(answers.length >= 2, 'the duplicate after the answer gets it again');
  t.ok(answers.every((p) => p.code === '2.01'));
  const r = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/values/timeseries?keys=n&startTs=0&endTs=1800000000000&limit=100`,
    undefined,
    admin,
  );
  t.equal(r.json<{ n: unknown[] }>().n.length, 1, 'one point');
  const st = (await http('GET', `${gw.url}/api/outpost/status`, undefined, admin)).json<{
    coap: { duplicates: number };
  }>();
  t.ok(st.coap.duplicates >= 3);
});

t.test('coap.maxExchanges bounds the answers remembered: the oldest forgotten first', async (t) => {
  const dir = tempDir(t);
  writeFileSync(join(dir, 'c.json'), JSON.stringify({ coap: { maxExchanges: 3 } }));
  const small = await startGateway(t, { args: ['--config', join(dir, 'c.json')] });
  const smallAdmin = await adminHeaders(small);
  const d = await addDevice(small.dataDir, 'coap-bound');
  const c = await CoapTestClient.open(t, coapPort(small));
  const posts = [1, 2, 3, 4].map((n) =>
    c.build({
      method: 'POST',
      path: `api/v1/${d.token}/telemetry`,
      payload: `{"ts":${1700000000000 + n},"values":{"n":${n}}}`,
    }),
  );
  for (const p of posts) {
    c.sendRaw(p.buf);
    await c.waitFor((r) => r.token.equals(p.token) && r.code === '2.01');
  }
  const counts = async (): Promise<{ requests: number; duplicates: number }> =>
    (await http('GET', `${small.url}/api/outpost/status`, undefined, smallAdmin)).json<{
      coap: { requests: number; duplicates: number };
    }>().coap;
  const before = await counts();
  const [first, last] = [posts[0], posts[3]] as [(typeof posts)[number], (typeof posts)[number]];
  const from = c.received.length;
  c.sendRaw(last.buf);
  const again = await c.waitFor((r) => r.token.equals(last.token), 5000, from);
  t.equal(again.code, '2.01');
  const afterLast = await counts();
  t.equal(afterLast.duplicates, before.duplicates + 1, 'the newest is answered from the cache');
  t.equal(afterLast.requests, before.requests, 'and not handed on again');
  c.sendRaw(first.buf);
  await c.waitFor((r) => r.token.equals(first.token), 5000, c.received.length);
  const afterFirst = await counts();
  t.equal(afterFirst.requests, afterLast.requests + 1, 'the oldest of four, past a bound of three, is a new request');
  t.equal(afterFirst.duplicates, afterLast.duplicates);
});

t.test('Observe attributes: 0 then 1, 2 …, CON when registered CON, cancel by GET Observe 1', async (t) => {
  const c = await CoapTestClient.open(t, port);
  const d = await addDevice(gw.dataDir, 'coap-obs');
  await http('POST', `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/attributes/SHARED_SCOPE`, { a: 1 }, admin);
  const token = c.nextToken();
  const reg = await c.request({ path: `api/v1/${d.token}/attributes`, observe: 0, token });
  t.equal(reg.code, '2.05');
  t.equal(readUint(opt(reg, 'Observe')), 0);
  t.same(JSON.parse(reg.payload.toString()), { a: 1 }, 'the current shared attributes, flat as a notification');
  const url = `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/attributes/SHARED_SCOPE`;
  await http('POST', url, { target: 21.5 }, admin);
  const n1 = await c.waitFor((p) => p.token.equals(token) && readUint(opt(p, 'Observe')) === 1);
  t.ok(n1.confirmable, 'CON notification for a CON registration');
  t.same(JSON.parse(n1.payload.toString()), { target: 21.5 });
  await http('DELETE', `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/SHARED_SCOPE?keys=target`, undefined, admin);
  const n2 = await c.waitFor((p) => p.token.equals(token) && readUint(opt(p, 'Observe')) === 2);
  t.same(JSON.parse(n2.payload.toString()), { deleted: ['target'] });
  // another device's change, and a server-scope change, reach nobody here
  await http('POST', `${gw.url}/api/plugins/telemetry/DEVICE/${other.id}/attributes/SHARED_SCOPE`, { x: 1 }, admin);
  await http('POST', `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/attributes/SERVER_SCOPE`, { srv: 1 }, admin);
  const cancel = await c.request({ path: `api/v1/${d.token}/attributes`, observe: 1, token });
  t.equal(cancel.code, '2.05', 'cancel answered as a plain GET');
  await http('POST', url, { after: 1 }, admin);
  await sleep(300);
  t.equal(
    c.received.filter((p) => p.token.equals(token) && readUint(opt(p, 'Observe')) !== undefined).length,
    3,
    'nothing after the cancel',
  );
  // a newer registration (another client) replaces the older, which is told 2.02 Deleted and gets nothing more
  const first = await CoapTestClient.open(t, port);
  const ft = first.nextToken();
  await first.request({ path: `api/v1/${d.token}/attributes`, observe: 0, token: ft });
  const second = await CoapTestClient.open(t, port);
  const st = second.nextToken();
  await second.request({ path: `api/v1/${d.token}/attributes`, observe: 0, token: st });
  const gone = await first.waitFor((p) => p.token.equals(ft) && p.code === '2.02');
  t.equal(readUint(opt(gone, 'Observe')), undefined, 'the replaced observer gets 2.02 Deleted without Observe');
  await http('POST', url, { replaced: 1 }, admin);
  const toSecond = await second.waitFor((p) => p.token.equals(st) && readUint(opt(p, 'Observe')) === 1);
  t.same(JSON.parse(toSecond.payload.toString()), { replaced: 1 }, 'the newer observer gets the change');
  await sleep(200);
  t.equal(
    first.received.filter((p) => p.token.equals(ft) && readUint(opt(p, 'Observe')) === 1).length,
    0,
    'the replaced one does not',
  );
  await second.request({ path: `api/v1/${d.token}/attributes`, observe: 1, token: st });
  // NON registration → NON notifications; an RST to one ends the observation
  const c2 = await CoapTestClient.open(t, port);
  c2.autoAck = false;
  const tk = c2.nextToken();
  await c2.request({ path: `api/v1/${d.token}/attributes/updates`, observe: 0, token: tk, confirmable: false });
  await http('POST', url, { b: 2 }, admin);
  const nn = await c2.waitFor((p) => p.token.equals(tk) && readUint(opt(p, 'Observe')) === 1);
  t.ok(!nn.confirmable, 'NON notification for a NON registration');
  c2.sendRaw(Buffer.from([0x70, 0, (nn.messageId >> 8) & 255, nn.messageId & 255]));
  await c2.ping();
  await http('POST', url, { b: 3 }, admin);
  await sleep(300);
  t.equal(
    c2.received.filter((p) => p.token.equals(tk) && readUint(opt(p, 'Observe')) === 2).length,
    0,
    'RST cancelled it',
  );
});

t.test('Observe rpc: 2.03 first, pending RPCs delivered, the reply completes the REST call', async (t) => {
  const c = await CoapTestClient.open(t, port);
  const d = await addDevice(gw.dataDir, 'coap-rpc');
  const lp0 = await waitLongPoll(gw, admin, () => true);
  const first = http(
    'POST',
    `${gw.url}/api/plugins/rpc/twoway/${d.id}`,
    { method: 'getTemp', params: { u: 'C' }, timeout: 10_000 },
    admin,
  );
  await waitLongPoll(gw, admin, (s) => s.queuedRpcs > lp0.queuedRpcs);
  const token = c.nextToken();
  const reg = await c.request({ path: `api/v1/${d.token}/rpc`, observe: 0, token });
  t.equal(reg.code, '2.03');
  t.equal(readUint(opt(reg, 'Observe')), 0);
  const n1 = await c.waitFor((p) => p.token.equals(token) && readUint(opt(p, 'Observe')) === 1);
  t.same(JSON.parse(n1.payload.toString()), { id: 1, method: 'getTemp', params: { u: 'C' } });
  const rep = await c.request({ method: 'POST', path: `api/v1/${d.token}/rpc/1`, payload: '{"t":20.5}' });
  t.equal(rep.code, '2.01');
  const r = await first;
  t.equal(r.status, 200);
  t.same(r.json(), { t: 20.5 });
  const second = http('POST', `${gw.url}/api/plugins/rpc/oneway/${d.id}`, { method: 'blink', params: {} }, admin);
  const n2 = await c.waitFor((p) => p.token.equals(token) && readUint(opt(p, 'Observe')) === 2);
  t.same(JSON.parse(n2.payload.toString()), { id: 2, method: 'blink', params: {} });
  t.equal((await second).status, 200);
  const rpcGet = await c.request({ path: `api/v1/${d.token}/rpc` });
  t.equal(rpcGet.code, '4.00', 'GET rpc without Observe');
});

t.test('RPC to a CON observer: delivered at its ACK; one the device rejects goes back to the queue', async (t) => {
  const c = await CoapTestClient.open(t, port);
  c.autoAck = false;
  const d = await addDevice(gw.dataDir, 'coap-rpc-ack');
  const token = c.nextToken();
  await c.request({ path: `api/v1/${d.token}/rpc`, observe: 0, token });
  const call = onewayRpc(d.id, { method: 'open', params: {} });
  const n1 = await c.waitFor((p) => p.token.equals(token) && readUint(opt(p, 'Observe')) === 1);
  t.ok(n1.confirmable, 'a CON notification');
  await sleep(300);
  t.notOk(call.answered(), 'not delivered before the device acknowledged it');
  c.sendRaw(Buffer.from([0x60, 0, (n1.messageId >> 8) & 255, n1.messageId & 255]));
  t.equal((await call.done).status, 200, 'delivered at the ACK');

  // an RST ends the observation and puts the RPC back: the device's next poll gets it, the same id
  const second = http('POST', `${gw.url}/api/plugins/rpc/oneway/${d.id}`, { method: 'close', params: {} }, admin);
  const n2 = await c.waitFor((p) => p.token.equals(token) && readUint(opt(p, 'Observe')) === 2);
  c.sendRaw(Buffer.from([0x70, 0, (n2.messageId >> 8) & 255, n2.messageId & 255]));
  await c.ping();
  const poll = await http('GET', `${gw.url}/api/v1/${d.token}/rpc?timeout=2000`);
  t.equal(poll.status, 200);
  t.same(poll.json(), { id: 2, method: 'close', params: {} }, 'the rejected RPC reaches the device by its poll');
  t.equal((await second).status, 200);
});

t.test('Block1 out of order 4.08, over coap.maxBodyBytes 4.13, unknown token before any block 4.01', async (t) => {
  const c = await CoapTestClient.open(t, port);
  const block = (num: number, more: boolean): Buffer => uint(num * 16 + (more ? 8 : 0) + 2); // 64-byte blocks
  const oo = await c.request({
    method: 'POST',
    path: `api/v1/${dev.token}/telemetry`,
    payload: Buffer.alloc(64, 32),
    extra: [{ name: 'Block1', value: block(3, true) }],
  });
  t.equal(oo.code, '4.08');
  const unk = await c.request({
    method: 'POST',
    path: 'api/v1/nobody/telemetry',
    payload: Buffer.alloc(64, 32),
    extra: [{ name: 'Block1', value: block(0, true) }],
  });
  t.equal(unk.code, '4.01');
  const big = await c.request({
    method: 'POST',
    path: `api/v1/${dev.token}/telemetry`,
    payload: Buffer.alloc(1500, 32),
  });
  t.ok(big.code === '4.13' || big.code === '4.00', `a body in one datagram is bounded too (${big.code})`);
});

t.test('provisioning over CoAP', async (t) => {
  const dir = tempDir(t);
  writeFileSync(
    join(dir, 'c.json'),
    JSON.stringify({
      provision: { key: 'pk', secret: 'ps' },
      coap: { maxObservations: 1, maxBodyBytes: 100, maxPending: 4 },
      store: { commitDelayMs: 50 },
    }),
  );
  const g = await startGateway(t, { args: ['--config', join(dir, 'c.json')] });
  const c = await CoapTestClient.open(t, coapPort(g));
  const ok = await c.request({
    method: 'POST',
    path: 'api/v1/provision',
    payload: JSON.stringify({ deviceName: 'prov-1', provisionDeviceKey: 'pk', provisionDeviceSecret: 'ps' }),
  });
  t.equal(ok.code, '2.01');
  const body = JSON.parse(ok.payload.toString());
  t.equal(body.status, 'SUCCESS');
  const bad = await c.request({
    method: 'POST',
    path: 'api/v1/provision',
    payload: JSON.stringify({ deviceName: 'prov-2', provisionDeviceKey: 'pk', provisionDeviceSecret: 'no' }),
  });
  t.equal(bad.code, '4.00');
  t.same(JSON.parse(bad.payload.toString()), { status: 'NOT_FOUND', errorMsg: 'Provision data was not found!' });
  // coap.maxObservations 1: the second device's observe is answered as a plain GET
  const d2 = await addDevice(g.dataDir, 'lim-2');
  const o1 = await c.request({ path: `api/v1/${body.credentialsValue}/attributes`, observe: 0 });
  t.equal(readUint(opt(o1, 'Observe')), 0);
  const o2 = await c.request({ path: `api/v1/${d2.token}/attributes`, observe: 0 });
  t.equal(o2.code, '2.05');
  t.equal(opt(o2, 'Observe'), undefined, 'no room: no Observe');
  // coap.maxBodyBytes 100: one datagram, or blocks adding up to more, get 4.13 with Size1
  const one = await c.request({
    method: 'POST',
    path: `api/v1/${d2.token}/telemetry`,
    payload: `{"a":"${'x'.repeat(120)}"}`,
  });
  t.equal(one.code, '4.13');
  t.equal(readUint(opt(one, 'Size1')), 100);
  const b0 = await c.request({
    method: 'POST',
    path: `api/v1/${d2.token}/telemetry`,
    payload: Buffer.alloc(64, 32),
    extra: [{ name: 'Block1', value: uint(0 * 16 + 8 + 2) }],
  });
  t.equal(b0.code, '2.31', 'first block: Continue');
  const b1 = await c.request({
    method: 'POST',
    path: `api/v1/${d2.token}/telemetry`,
    payload: Buffer.alloc(64, 32),
    extra: [{ name: 'Block1', value: uint(1 * 16 + 8 + 2) }],
  });
  t.equal(b1.code, '4.13');
  // coap.maxPending 4: of 40 uploads sent at once, those beyond the limit are answered 5.03 and not stored
  const burst = await Promise.all(
    Array.from({ length: 40 }, (_, i) =>
      c.request({
        method: 'POST',
        path: `api/v1/${d2.token}/telemetry`,
        payload: `{"ts":${1700000000000 + i},"values":{"burst":${i}}}`,
      }),
    ),
  );
  const busy = burst.filter((p) => p.code === '5.03').length;
  t.ok(busy > 0 && burst.every((p) => p.code === '5.03' || p.code === '2.01'), `${busy} of 40 refused 5.03`);
  const ga = await adminHeaders(g);
  const stored = await http(
    'GET',
    `${g.url}/api/plugins/telemetry/DEVICE/${d2.id}/values/timeseries?keys=burst&startTs=0&endTs=9999999999999&limit=100`,
    undefined,
    ga,
  );
  t.equal(stored.json<{ burst?: unknown[] }>().burst?.length ?? 0, 40 - busy, 'only the 2.01s stored');
  const refusal = burst.find((p) => p.code === '5.03');
  t.equal(refusal === undefined ? undefined : readUint(opt(refusal, 'Max-Age')), 1);
});

t.test('a token reaches only its device', async (t) => {
  const c = await CoapTestClient.open(t, port);
  await c.request({ method: 'POST', path: `api/v1/${other.token}/attributes`, payload: '{"mine":1}' });
  const r = await c.request({ path: `api/v1/${dev.token}/attributes`, query: ['clientKeys=mine'] });
  t.equal(r.code, '4.04', "another device's attribute is not readable");
  const l = await latest(gw, admin, dev.id);
  t.notOk('mine' in l);
});

/** The device's access token changed through TB's REST, as its UI does it (GET, change, POST back). */
async function changeToken(id: string, token: string): Promise<void> {
  const creds = (await http('GET', `${gw.url}/api/device/${id}/credentials`, undefined, admin)).json<object>();
  const r = await http('POST', `${gw.url}/api/device/credentials`, { ...creds, credentialsId: token }, admin);
  if (r.status !== 200) throw new Error(`credentials of ${id}: ${r.status} ${r.text}`);
}

const observeNo = (p: { options: Array<{ name: string | number; value: Buffer }> }): number | undefined =>
  readUint(p.options.find((o) => o.name === 'Observe')?.value);

t.test('a change of credentials ends the observations of the old token with 4.01', async (t) => {
  const d = await addDevice(gw.dataDir, 'coap-cred');
  const newToken = `${d.token}NEW`;
  const c = await CoapTestClient.open(t, port);
  const ta = c.nextToken();
  const tr = c.nextToken();
  await c.request({ path: `api/v1/${d.token}/attributes`, observe: 0, token: ta });
  t.equal((await c.request({ path: `api/v1/${d.token}/rpc`, observe: 0, token: tr })).code, '2.03');
  // a client-side RPC no handler answers, held until the change
  const lp0 = await waitLongPoll(gw, admin, () => true);
  const heldRpc = c.request({ method: 'POST', path: `api/v1/${d.token}/rpc`, payload: '{"method":"noOneAnswers"}' });
  await waitLongPoll(gw, admin, (s) => s.clientRpcs > lp0.clientRpcs);
  const from = c.received.length;
  await changeToken(d.id, newToken);
  for (const [name, tk] of [
    ['attributes', ta],
    ['rpc', tr],
  ] as const) {
    const last = await c.waitFor((p) => p.token.equals(tk) && p.code !== '2.05' && !p.ack, 5000, from);
    t.equal(last.code, '4.01', `the ${name} observer is sent 4.01 Unauthorized`);
    t.ok(last.confirmable, 'CON, as it registered');
    t.equal(observeNo(last), undefined, 'without Observe: it ends the observation');
  }
  t.equal((await heldRpc).code, '4.01', 'a held client-side RPC of the old token gets 4.01');

  const url = `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/attributes/SHARED_SCOPE`;
  await http('POST', url, { afterChange: 1 }, admin);
  const oneway = onewayRpc(d.id, { method: 'afterChange', params: {}, timeout: 15_000 });
  await sleep(500);
  t.same(
    c.received.slice(from).filter((p) => p.code === '2.05' && !p.ack),
    [],
    'no notification reaches the old observers',
  );
  t.notOk(oneway.answered(), 'the one-way RPC is not delivered to a revoked observer');
  t.equal((await c.request({ path: `api/v1/${d.token}/rpc`, observe: 0 })).code, '4.01', 'the old token: 4.01');
  // the device's next legitimate session gets the RPC, and only then is it delivered
  const nt = c.nextToken();
  t.equal((await c.request({ path: `api/v1/${newToken}/rpc`, observe: 0, token: nt })).code, '2.03');
  const rpc = await c.waitFor((p) => p.token.equals(nt) && observeNo(p) === 1);
  t.same(JSON.parse(rpc.payload.toString()), { id: 1, method: 'afterChange', params: {} });
  t.equal((await oneway.done).status, 200, 'delivered to the new token');
  await c.request({ path: `api/v1/${newToken}/rpc`, observe: 1, token: nt });
});

t.test('an RPC awaiting the ACK of a revoked observer is not delivered at a late ACK', async (t) => {
  const d = await addDevice(gw.dataDir, 'coap-cred-ack');
  const newToken = `${d.token}NEW`;
  const c = await CoapTestClient.open(t, port);
  c.autoAck = false;
  const tr = c.nextToken();
  await c.request({ path: `api/v1/${d.token}/rpc`, observe: 0, token: tr });
  const oneway = onewayRpc(d.id, { method: 'inFlight', params: {}, timeout: 15_000 });
  const n1 = await c.waitFor((p) => p.token.equals(tr) && observeNo(p) === 1);
  t.ok(n1.confirmable);
  await changeToken(d.id, newToken);
  const last = await c.waitFor((p) => p.token.equals(tr) && p.code === '4.01');
  t.ok(last.confirmable);
  // the ACK of the RPC's notification comes after the change: too late
  c.sendRaw(Buffer.from([0x60, 0, (n1.messageId >> 8) & 255, n1.messageId & 255]));
  c.sendRaw(Buffer.from([0x60, 0, (last.messageId >> 8) & 255, last.messageId & 255]));
  await sleep(500);
  t.notOk(oneway.answered(), 'not counted as delivered');
  const poll = await http('GET', `${gw.url}/api/v1/${newToken}/rpc?timeout=3000`);
  t.equal(poll.status, 200);
  t.same(poll.json(), { id: 1, method: 'inFlight', params: {} }, "the device's next session gets it, the same id");
  t.equal((await oneway.done).status, 200);
});

t.test('deleting the device ends its observations with 4.04', async (t) => {
  const d = await addDevice(gw.dataDir, 'coap-del');
  const c = await CoapTestClient.open(t, port);
  const ta = c.nextToken();
  const tr = c.nextToken();
  await c.request({ path: `api/v1/${d.token}/attributes`, observe: 0, token: ta, confirmable: false });
  await c.request({ path: `api/v1/${d.token}/rpc`, observe: 0, token: tr });
  const from = c.received.length;
  t.equal((await http('DELETE', `${gw.url}/api/device/${d.id}`, undefined, admin)).status, 200);
  const a = await c.waitFor((p) => p.token.equals(ta) && p.code === '4.04', 5000, from);
  t.ok(!a.confirmable && observeNo(a) === undefined, 'NON, as it registered, without Observe');
  const r = await c.waitFor((p) => p.token.equals(tr) && p.code === '4.04', 5000, from);
  t.ok(r.confirmable && observeNo(r) === undefined, 'CON, as it registered, without Observe');
});

const malformedCount = async (): Promise<number> => {
  const text = (await http('GET', `${gw.url}/metrics`)).text;
  return Number(/outpost_coap_refused_total\{reason="malformed"\} (\d+)/.exec(text)?.[1] ?? Number.NaN);
};

t.test('message format errors: an RST for a CON, nothing for a NON, nothing stored, counted', async (t) => {
  const c = await CoapTestClient.open(t, port);
  const d = await addDevice(gw.dataDir, 'coap-malformed');
  const upload = (tokenLength: number, confirmable: boolean, key: string): Buffer =>
    c.build({
      method: 'POST',
      path: `api/v1/${d.token}/telemetry`,
      payload: `{"${key}":1}`,
      token: Buffer.alloc(tokenLength, 7),
      confirmable,
      messageId: 0x3000 + tokenLength + (confirmable ? 0 : 0x100),
    }).buf;
  const before = await malformedCount();
  const from = c.received.length;
  const cases: Array<[string, Buffer, number | undefined]> = [
    // CON GET, Uri-Path option claiming 5 bytes of which 1 is there
    ['a truncated option', Buffer.from('40011237b561', 'hex'), 0x1237],
    ['a payload marker with no payload', Buffer.from('40021238ff', 'hex'), 0x1238],
    ['a NON with a truncated option', Buffer.from('50011239b561', 'hex'), undefined],
  ];
  for (const n of [9, 10, 11, 12]) cases.push([`token length ${n}, CON`, upload(n, true, `tkl${n}`), 0x3000 + n]);
  for (const n of [9, 12]) cases.push([`token length ${n}, NON`, upload(n, false, `ntkl${n}`), undefined]);
  for (const [, buf] of cases) c.sendRaw(buf);
  const cons = cases.filter(([, , rstFor]) => rstFor !== undefined).length;
  await waitFor(async () => (await malformedCount()) === before + cases.length, { message: 'every case counted' });
  await c.ping();
  for (const [name, buf, rstFor] of cases) {
    const mid = buf.readUInt16BE(2);
    const back = c.received.slice(from).filter((p) => p.messageId === mid);
    if (rstFor === undefined) t.same(back, [], `${name}: nothing`);
    else {
      t.equal(back.length, 1, `${name}: one answer`);
      t.ok(back[0]?.reset && back[0].code === '0.00', `${name}: an RST with its message id`);
    }
  }
  // a NON's answer would have the server's own message id: counted, not matched (the ping's RST aside)
  t.equal(c.received.length - from - 1, cons, 'nothing back but the RSTs of the CONs');
  t.equal(await malformedCount(), before + cases.length, 'each counted as malformed');
  const stored = await latest(gw, admin, d.id);
  t.same(Object.keys(stored), [], 'nothing stored');
  // the same uploads, well-formed, are stored
  const ok = await c.request({
    method: 'POST',
    path: `api/v1/${d.token}/telemetry`,
    payload: '{"tkl8":1}',
    token: Buffer.alloc(8, 7),
  });
  t.equal(ok.code, '2.01');
});

t.test('a late RST to a replaced observation does not end the registration that followed it', async (t) => {
  const d = await addDevice(gw.dataDir, 'coap-late-rst');
  const url = `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/attributes/SHARED_SCOPE`;
  const c = await CoapTestClient.open(t, port);
  c.autoAck = false;
  const t1 = c.nextToken();
  await c.request({ path: `api/v1/${d.token}/attributes`, observe: 0, token: t1, confirmable: false });
  await http('POST', url, { v: 1 }, admin);
  const n1 = await c.waitFor((p) => p.token.equals(t1) && observeNo(p) === 1);
  const t2 = c.nextToken();
  await c.request({ path: `api/v1/${d.token}/attributes`, observe: 0, token: t2, confirmable: false });
  c.sendRaw(Buffer.from([0x70, 0, (n1.messageId >> 8) & 255, n1.messageId & 255]));
  await c.ping();
  await http('POST', url, { v: 2 }, admin);
  const n = await c.waitFor((p) => p.token.equals(t2) && observeNo(p) === 1);
  t.same(JSON.parse(n.payload.toString()), { v: 2 }, 'the newer registration still gets the change');
});
