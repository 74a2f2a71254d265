import { connect, type Socket } from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { pollTimeout } from '../../src/transports/http/rpc.js';
import { EventBus } from '../../src/bus/index.js';
import { loadConfig } from '../../src/config/index.js';
import type { OutpostError } from '../../src/errors.js';
import type { HttpContext } from '../../src/uws/adapter.js';
import { kvDouble, kvString } from '../../src/model/kv.js';
import { RpcBroker } from '../../src/rpc/broker.js';
import { LongPollRegistry, type PollOutcome } from '../../src/rpc/longpoll.js';
import { TimerWheel } from '../../src/rpc/timer-wheel.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { addDevice, http, startGateway, tempDir, waitLongPoll } from '../helpers/server.js';
import { adminHeaders } from '../helpers/users.js';

t.test('registry: bound, timeouts on the fake clock, answers, abort cleanup', (t) => {
  const clock = new FakeClock(0);
  const wheel = new TimerWheel(10, clock);
  const reg = new LongPollRegistry(wheel, 1_000);
  const got: Array<[string, PollOutcome]> = [];

  const handles = [];
  for (let i = 0; i < 1_000; i++)
    handles.push(reg.open(`dev-${i % 10}`, i % 2 === 0 ? 'attributes' : 'rpc', 60_000, (o) => got.push([`p${i}`, o])));
  t.equal(reg.openCount, 1_000);
  t.equal(reg.deviceCount, 10);
  t.equal(clock.pending, 1, 'one timer for 1,000 polls');
  const err = t.throws(() => reg.open('dev-x', 'rpc', 1_000, () => undefined)) as OutpostError;
  t.equal(err.status, 429, 'one more than maxOpen → 429');
  t.equal(reg.openCount, 1_000, 'the refused poll was not registered');
  for (const h of handles) h.close();
  for (const h of handles) h.close();
  t.equal(reg.openCount, 0, 'all aborted polls removed');
  t.equal(reg.deviceCount, 0);
  t.equal(reg.countKind('attributes') + reg.countKind('rpc'), 0);
  t.equal(wheel.size, 0, 'their deadlines are gone too');
  t.equal(clock.pending, 0);
  clock.advance(120_000);
  t.same(got, [], 'closed polls are never answered');

  reg.open('d1', 'attributes', 1_000, (o) => got.push(['a1', o]));
  reg.open('d1', 'attributes', 5_000, (o) => got.push(['a2', o]));
  reg.open('d1', 'rpc', 5_000, (o) => got.push(['r1', o]));
  reg.open('d1', 'rpc', 5_000, (o) => got.push(['r2', o]));
  reg.open('d2', 'attributes', 5_000, (o) => got.push(['b1', o]));
  clock.advance(999);
  t.same(got, [], 'not before the deadline');
  clock.advance(1);
  t.same(got, [['a1', { kind: 'timeout' }]], 'at the deadline');
  t.equal(reg.answerAll('d1', 'attributes', '{"x":1}'), 1);
  t.equal(reg.answerOldest('d1', 'rpc', 'R'), true);
  t.same(
    got.slice(1),
    [
      ['a2', { kind: 'data', body: '{"x":1}' }],
      ['r1', { kind: 'data', body: 'R' }],
    ],
    'all attribute polls of d1; the oldest rpc poll',
  );
  t.equal(reg.endDevice('d1'), 1);
  t.same(got.at(-1), ['r2', { kind: 'deviceDeleted' }]);
  t.equal(reg.answerOldest('d1', 'rpc', 'R'), false);
  t.equal(reg.openCount, 1, 'only d2 left');
  clock.advance(10_000);
  t.same(got.at(-1), ['b1', { kind: 'timeout' }]);
  t.equal(reg.openCount, 0);
  t.end();
});

t.test('broker: only SHARED_SCOPE changes of a DEVICE wake attribute polls', (t) => {
  const clock = new FakeClock(0);
  const bus = new EventBus();
  const broker = new RpcBroker(bus, {
    maxPendingPerDevice: 10,
    maxOpenPolls: 100,
    clientSideTimeoutMs: 1_000,
    clock,
    tickMs: 10,
  });
  const got: PollOutcome[] = [];
  broker.waitAttributes('d1', 60_000, (o) => got.push(o));
  broker.waitAttributes('d1', 60_000, (o) => got.push(o));
  const base = { entityType: 'DEVICE' as const, entityId: 'd1', ts: 1, deleted: [] as string[] };
  bus.publish('attributes', { ...base, scope: 'SERVER_SCOPE', updated: [['k', kvString('v')]] });
  bus.publish('attributes', { ...base, scope: 'CLIENT_SCOPE', updated: [['k', kvString('v')]] });
  bus.publish('attributes', { ...base, entityType: 'ASSET', scope: 'SHARED_SCOPE', updated: [['k', kvString('v')]] });
  bus.publish('attributes', { ...base, entityId: 'd2', scope: 'SHARED_SCOPE', updated: [['k', kvString('v')]] });
  t.same(got, [], 'server, client, asset and other-device changes do not wake it');
  bus.publish('attributes', {
    ...base,
    scope: 'SHARED_SCOPE',
    updated: [
      ['fw', kvString('1.2')],
      ['n', kvDouble(42)],
    ],
  });
  t.same(
    got,
    [
      { kind: 'data', body: '{"fw":"1.2","n":42.0}' },
      { kind: 'data', body: '{"fw":"1.2","n":42.0}' },
    ],
    'every open poll, flat typed body',
  );
  broker.waitAttributes('d1', 60_000, (o) => got.push(o));
  bus.publish('attributes', { ...base, scope: 'SHARED_SCOPE', updated: [], deleted: ['fw'] });
  t.same(got.at(-1), { kind: 'data', body: '{"deleted":["fw"]}' });
  t.equal(broker.status().openPolls, 0);
  broker.close();
  t.end();
});

t.test('timeout parameter: default, zero, cap, junk', (t) => {
  const config = loadConfig({ dataDir: '/tmp/unused' }, {});
  const ctx = (q: string): HttpContext => ({ query: new URLSearchParams(q) }) as unknown as HttpContext;
  t.equal(pollTimeout(ctx(''), config), 60_000);
  t.equal(pollTimeout(ctx('timeout=0'), config), 60_000, '0 means the default (TB)');
  t.equal(pollTimeout(ctx('timeout=1500'), config), 1_500);
  t.equal(pollTimeout(ctx('timeout=999999999'), config), 300_000, 'capped');
  for (const bad of ['timeout=-5', 'timeout=abc', 'timeout=1.5']) {
    const err = t.throws(() => pollTimeout(ctx(bad), config), bad) as OutpostError;
    t.equal(err.status, 400, bad);
  }
  t.end();
});

/** A raw keep-alive GET on its own socket; resolves with the raw response head+body once something arrives. */
function rawGet(port: number, path: string): { socket: Socket; response: Promise<string> } {
  const socket = connect(port, '127.0.0.1');
  socket.setNoDelay(true);
  const response = new Promise<string>((resolve) => {
    let buf = '';
    socket.on('data', (d) => {
      buf += d.toString();
      resolve(buf);
    });
    socket.on('close', () => resolve(buf));
    socket.on('error', () => resolve(buf));
  });
  socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n`);
  return { socket, response };
}

t.test('GET /attributes/updates end to end', async (t) => {
  const gw = await startGateway(t);
  const dev = await addDevice(gw.dataDir, 'lp-dev');
  const admin = await adminHeaders(gw, 'admin@lp.test');
  const upd = `${gw.url}/api/v1/${dev.token}/attributes/updates`;
  const rest = `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}`;

  t.test('timeout → 408 with an empty body', async (t) => {
    const started = Date.now();
    const r = await http('GET', `${upd}?timeout=300`);
    t.equal(r.status, 408);
    t.equal(r.text, '');
    t.ok(Date.now() - started >= 290, 'not before the timeout');
    t.equal((await http('GET', `${upd}?timeout=abc`)).status, 400);
    t.equal((await http('GET', `${gw.url}/api/v1/nope/attributes/updates?timeout=100`)).status, 401);
  });

  t.test('a shared change wakes every open poll with a flat typed body', async (t) => {
    const p1 = http('GET', `${upd}?timeout=20000`);
    const p2 = http('GET', `${upd}?timeout=20000`);
    await waitLongPoll(gw, admin, (s) => s.attributePolls === 2);
    t.equal(
      (await http('POST', `${rest}/attributes/SHARED_SCOPE`, '{"fw":"v1.2","rate":30,"ratio":2.0}', admin)).status,
      200,
    );
    for (const r of await Promise.all([p1, p2])) {
      t.equal(r.status, 200);
      t.equal(r.text, '{"fw":"v1.2","rate":30,"ratio":2.0}');
    }
    await waitLongPoll(gw, admin, (s) => s.openPolls === 0);
  });

  t.test('server-scope and device-posted changes do not wake it', async (t) => {
    const p = http('GET', `${upd}?timeout=1000`);
    await waitLongPoll(gw, admin, (s) => s.attributePolls === 1);
    t.equal((await http('POST', `${rest}/attributes/SERVER_SCOPE`, { srv: 1 }, admin)).status, 200);
    t.equal((await http('POST', `${gw.url}/api/v1/${dev.token}/attributes`, { mine: 1 })).status, 200);
    const r = await p;
    t.equal(r.status, 408);
    t.equal(r.text, '');
  });

  t.test('deletion notification', async (t) => {
    const p = http('GET', `${upd}?timeout=20000`);
    await waitLongPoll(gw, admin, (s) => s.attributePolls === 1);
    t.equal((await http('DELETE', `${rest}/SHARED_SCOPE?keys=fw,rate`, undefined, admin)).status, 200);
    const r = await p;
    t.equal(r.status, 200);
    t.same(r.json(), { deleted: ['fw', 'rate'] });
  });

  t.test('1,000 polls opened and dropped: the registry goes back to zero', async (t) => {
    const polls = [];
    let answered = 0;
    for (let i = 0; i < 1_000; i++) {
      const p = rawGet(gw.port, `/api/v1/${dev.token}/attributes/updates?timeout=60000`);
      let head = '';
      p.socket.on('data', (d) => {
        const before = head.includes(' 408 ');
        head += d.toString();
        if (!before && head.includes(' 408 ')) answered++;
      });
      polls.push(p);
    }
    // one device holds at most longPoll.maxPerDevice (4): each newer poll answers its oldest as timed out
    await waitLongPoll(gw, admin, (s) => s.openPolls === 4 && answered === 996);
    for (const p of polls) p.socket.destroy();
    await waitLongPoll(gw, admin, (s) => s.openPolls === 0);
    t.pass('996 answered 408 at once, the 4 held removed on abort');
    // the server is still fine: a fresh poll is answered
    const p = http('GET', `${upd}?timeout=20000`);
    await waitLongPoll(gw, admin, (s) => s.attributePolls === 1);
    await http('POST', `${rest}/attributes/SHARED_SCOPE`, { after: true }, admin);
    t.equal((await p).text, '{"after":true}');
  });

  t.test('deleting the device ends its polls', async (t) => {
    const p = http('GET', `${upd}?timeout=20000`);
    await waitLongPoll(gw, admin, (s) => s.attributePolls === 1);
    t.equal((await http('DELETE', `${gw.url}/api/device/${dev.id}`, undefined, admin)).status, 200);
    const r = await p;
    t.equal(r.status, 403);
    t.match(r.json<{ message: string }>().message, /Device was deleted/);
    await waitLongPoll(gw, admin, (s) => s.openPolls === 0);
  });
});

t.test('longPoll.maxOpen: one more → 429', async (t) => {
  const dir = tempDir(t);
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify({ longPoll: { maxOpen: 2 } }));
  const gw = await startGateway(t, { args: ['--config', cfg] });
  const dev = await addDevice(gw.dataDir, 'cap-dev');
  const admin = await adminHeaders(gw, 'admin@cap.test');
  const a = rawGet(gw.port, `/api/v1/${dev.token}/attributes/updates?timeout=20000`);
  const b = rawGet(gw.port, `/api/v1/${dev.token}/rpc?timeout=20000`);
  await waitLongPoll(gw, admin, (s) => s.openPolls === 2);
  const refused = await http('GET', `${gw.url}/api/v1/${dev.token}/attributes/updates?timeout=20000`);
  t.equal(refused.status, 429);
  t.equal(refused.json<{ errorCode: number }>().errorCode, 33);
  a.socket.destroy();
  b.socket.destroy();
  await waitLongPoll(gw, admin, (s) => s.openPolls === 0);
  const r = await http('GET', `${gw.url}/api/v1/${dev.token}/attributes/updates?timeout=100`);
  t.equal(r.status, 408, 'room again after the aborts');

  // Held polls never keep the daemon alive: SIGTERM exits 0 promptly with one still open.
  const held = rawGet(gw.port, `/api/v1/${dev.token}/attributes/updates?timeout=300000`);
  await waitLongPoll(gw, admin, (s) => s.openPolls === 1);
  const started = Date.now();
  t.equal(await gw.stop('SIGTERM'), 0);
  t.ok(Date.now() - started < 10_000, 'exited without waiting for the poll');
  held.socket.destroy();
});

t.test('one device cannot take the long-polls of all; one address holds at most longPoll.maxPerAddress', async (t) => {
  const dir = tempDir(t);
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify({ longPoll: { maxOpen: 20, maxPerDevice: 3, maxPerAddress: 10 } }));
  const gw = await startGateway(t, { args: ['--config', cfg] });
  const admin = await adminHeaders(gw, 'admin@fair.test');
  const [hog, other, third, fourth] = await Promise.all(
    ['hog', 'other', 'third', 'fourth'].map((n) => addDevice(gw.dataDir, `fair-${n}`)),
  );
  if (!hog || !other || !third || !fourth) throw new Error('devices not created');
  const polls: Array<ReturnType<typeof rawGet>> = [];
  let answered = 0;
  for (let i = 0; i < 20; i++) {
    const p = rawGet(gw.port, `/api/v1/${hog.token}/rpc?timeout=30000`);
    let head = '';
    p.socket.on('data', (d) => {
      const before = head.includes(' 408 ');
      head += d.toString();
      if (!before && head.includes(' 408 ')) answered++;
    });
    polls.push(p);
  }
  t.teardown(() => {
    for (const p of polls) p.socket.destroy();
  });
  await waitLongPoll(gw, admin, (s) => s.openPolls === 3 && answered === 17);
  t.pass('the hog keeps 3 held; its 17 older polls are answered 408 at once');

  // another device is still served: its poll is held and an admin's RPC reaches it
  const poll = http('GET', `${gw.url}/api/v1/${other.token}/rpc?timeout=20000`);
  await waitLongPoll(gw, admin, (s) => s.openPolls === 4);
  const rpc = await http('POST', `${gw.url}/api/rpc/oneway/${other.id}`, { method: 'ping', params: {} }, admin);
  t.equal(rpc.status, 200, "the admin's RPC is delivered");
  t.equal((await poll).status, 200, "the other device's poll gets it");

  // 3 + 3 + 3 held from 127.0.0.1, then a 10th; the 11th from the same address → 429
  for (const d of [other, third])
    for (let i = 0; i < 3; i++) polls.push(rawGet(gw.port, `/api/v1/${d.token}/rpc?timeout=30000`));
  polls.push(rawGet(gw.port, `/api/v1/${fourth.token}/rpc?timeout=30000`));
  await waitLongPoll(gw, admin, (s) => s.openPolls === 10);
  const refused = await http('GET', `${gw.url}/api/v1/${fourth.token}/attributes/updates?timeout=20000`);
  t.equal(refused.status, 429, 'one more from the same address → 429');
  t.equal(refused.json<{ errorCode: number }>().errorCode, 33);
  t.match(refused.json<{ message: string }>().message, /from this address/);
});
