/**
 * Faults of the MQTT gateway session upstream (docs/sync.md "Downlink"): a device the upstream refuses is parked
 * alone, the others go on; an upstream that is down or restarting does not make the session speak MQTT 3.1.1.
 */
import t, { type Test } from 'tap';
import { syncLines } from '../../src/cli/sync.js';
import { UpstreamConnection } from '../../src/upstream/session/connection.js';
import type { SyncStatusFull } from '../../src/upstream/uplink/service.js';
import { type FakeTbMqtt, type FakeTbMqttOptions, startFakeTbMqtt, until } from '../helpers/fake-tb-mqtt.js';
import { type Gateway, addDevice, http } from '../helpers/server.js';
import { syncGateway, postTelemetry as post, records, syncStatusUntil } from '../helpers/sync.js';
import { addUser, login } from '../helpers/users.js';

const BASE = Date.UTC(2026, 0, 1);
const GW_TOKEN = 'GATEWAY-TOKEN';
const quiet = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

async function admin(gw: Gateway): Promise<string> {
  await addUser(gw.dataDir, 'admin@faults.test', 'secret', 'TENANT_ADMIN');
  return (await login(gw, 'admin@faults.test', 'secret')).token;
}

const fakeTb = (t: Test, opts: Partial<FakeTbMqttOptions> = {}): Promise<FakeTbMqtt> =>
  startFakeTbMqtt(t, GW_TOKEN, opts);

t.test('a device the upstream refuses (PUBACK 0x87) is parked alone, named, and the others go on', async (t) => {
  const tb = await fakeTb(t);
  // the upstream will not let the gateway act for it (an Outpost upstream: the name of a gateway there)
  tb.refuseDevice = 'thermo-1';
  tb.refuseCode = 0x87;
  const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN, retryBaseMs: 200, retryMaxMs: 2_000 });
  const jwt = await admin(gw);
  const thermo = await addDevice(gw.dataDir, 'thermo-1');
  const fresh = await addDevice(gw.dataDir, 'new-1');
  for (let i = 0; i < 5; i++) await post(gw, thermo.token, records(BASE + i * 10_000, 3, 1));
  for (let i = 0; i < 5; i++) await post(gw, fresh.token, records(BASE + i * 10_000, 3, 1));
  await until(() => tb.pointCount('new-1') === 15, 'new-1 went up');
  const s = await syncStatusUntil<SyncStatusFull>(
    gw,
    jwt,
    (x) => x.devices.some((d) => d.name === 'thermo-1' && d.state === 'parked'),
    'thermo-1 parked',
    10_000,
    100,
  );
  const parked = s.devices.find((d) => d.name === 'thermo-1');
  t.match(parked?.reason, /0x87/, 'the reason says what the upstream answered');
  t.match(parked?.reason, /rename it upstream or rename thermo-1 here/, 'and what to do');
  t.equal(parked?.backlogPoints, 15, 'its points wait in the store');
  t.equal(s.devices.find((d) => d.name === 'new-1')?.state, 'ok');
  t.not(s.state, 'backoff', 'the upstream is not backed off');
  t.equal(s.session?.state, 'up');
  // more posts of the refused device while the new one keeps going up
  for (let i = 5; i < 8; i++) await post(gw, thermo.token, records(BASE + i * 10_000, 3, 1));
  await post(gw, fresh.token, records(BASE + 100_000, 3, 1));
  await until(() => tb.pointCount('new-1') === 18, 'new-1 still goes up');
  const lines = gw.logs.filter((l) => /thermo-1/.test(l) && /parked/.test(l));
  t.equal(lines.length, 1, `one log line names the device (${lines.join(' | ')})`);
  t.notOk(
    gw.logs.some((l) => /backing off/.test(l)),
    'no back-off of the whole upstream',
  );
  const text = syncLines(
    await syncStatusUntil<SyncStatusFull>(gw, jwt, () => true, 'status', 1_000, 100),
    Date.now(),
  ).join('\n');
  t.match(text, /parked +1 device/, '`outpost sync` lists it');
  t.match(text, /thermo-1: the upstream refused it/, 'by name, with the reason');
});

t.test('an upstream down or restarting does not make the session fall back to MQTT 3.1.1', async (t) => {
  const tb = await fakeTb(t);
  let ups = 0;
  let downs = 0;
  const session = new UpstreamConnection({
    url: tb.url,
    token: () => Promise.resolve(GW_TOKEN),
    inflight: 4,
    timeoutMs: 2_000,
    retryBaseMs: 50,
    retryMaxMs: 200,
    log: quiet,
    now: Date.now,
    onUp: () => {
      ups++;
    },
    onDown: () => {
      downs++;
    },
    onMessage: () => Promise.resolve(),
  });
  t.teardown(() => session.stop());
  session.start();
  await until(() => ups === 1, 'up');
  // down for one failed attempt, then for several
  for (const attempts of [2, 5]) {
    const before = downs;
    await tb.stop();
    await until(() => downs >= before + attempts, `${attempts} closes without a CONNACK`);
    await tb.start();
    const upsBefore = ups;
    await until(() => ups === upsBefore + 1, 'up again');
    t.equal(session.protocolVersion, 5, `back as MQTT 5 after ${attempts - 1} failed attempts`);
    t.equal(session.protocolReason, null);
  }
  t.same([...new Set(tb.connects)], ['v5'], 'every session was MQTT 5');
});

t.test('an upstream that refuses MQTT 5 gets 3.1.1, and the status says why', async (t) => {
  const tb = await fakeTb(t, { only311: true });
  const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN });
  const jwt = await admin(gw);
  const s = await syncStatusUntil<SyncStatusFull>(gw, jwt, (x) => x.session?.state === 'up', 'up', 10_000, 100);
  t.equal(s.session?.protocol, '3.1.1');
  t.match(s.session?.protocolReason, /refused MQTT 5 \(CONNACK 1/);
  t.match(syncLines(s, Date.now()).join('\n'), /up \(MQTT 3\.1\.1\).*because the upstream refused MQTT 5/);
});

const pollRpc = (gw: Gateway, token: string, ms = 20_000): Promise<{ status: number; text: string }> =>
  http('GET', `${gw.url}/api/v1/${token}/rpc?timeout=${ms}`);

t.test('an RPC reply survives a session that reconnects several times before it is acknowledged', async (t) => {
  const tb = await fakeTb(t);
  const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN, retryBaseMs: 100, retryMaxMs: 400 });
  const d = await addDevice(gw.dataDir, 'valve-1');
  const poll = pollRpc(gw, d.token);
  await until(() => tb.isConnected('valve-1'), 'announced');
  const call = tb.rpc('valve-1', 'open', { valve: 2 });
  const req = JSON.parse((await poll).text) as { id: number };
  // the upstream goes away and comes back, then loses the session on each of the next three replies
  const port = tb.port;
  await tb.stop();
  tb.dropRpcReplies = 3;
  const rep = await http('POST', `${gw.url}/api/v1/${d.token}/rpc/${req.id}`, { opened: true });
  t.equal(rep.status, 200);
  await new Promise((r) => setTimeout(r, 500));
  tb.port = port;
  await tb.start();
  const answer = await Promise.race([
    call.reply,
    new Promise<string>((r) => setTimeout(() => r('no reply within 15 s'), 15_000)),
  ]);
  t.same(answer, '{"opened":true}', 'the reply reached the upstream');
  t.equal(tb.closes.filter((c) => c === 'dropped on an RPC reply').length, 3, 'after three sessions lost mid-reply');
});

interface Counted {
  sentPoints: number;
  lastError: string | null;
  downlink: { rpcReceived: number; rpcDelivered: number; rpcReplied: number };
}

t.test("the downlink's RPC counters survive a graceful restart", async (t) => {
  const tb = await fakeTb(t);
  const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN });
  const jwt = await admin(gw);
  const d = await addDevice(gw.dataDir, 'counted');
  for (let i = 0; i < 2; i++) {
    const poll = pollRpc(gw, d.token);
    await until(() => tb.isConnected('counted'), 'announced');
    const call = tb.rpc('counted', 'ping', { i });
    const req = JSON.parse((await poll).text) as { id: number };
    await http('POST', `${gw.url}/api/v1/${d.token}/rpc/${req.id}`, { pong: i });
    await call.reply;
  }
  const before = await syncStatusUntil<Counted>(gw, jwt, (x) => x.downlink.rpcReplied === 2, 'replied', 10_000, 50);
  await gw.stop('SIGTERM');
  const gw2 = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN }, {}, gw.dataDir);
  const jwt2 = (await login(gw2, 'admin@faults.test', 'secret')).token;
  const after = await syncStatusUntil<Counted>(gw2, jwt2, () => true, 'status', 5_000, 50);
  t.same(
    [after.downlink.rpcReceived, after.downlink.rpcDelivered, after.downlink.rpcReplied],
    [before.downlink.rpcReceived, before.downlink.rpcDelivered, before.downlink.rpcReplied],
    'received, delivered, replied as before the restart',
  );
  t.same([after.downlink.rpcReceived, after.downlink.rpcDelivered, after.downlink.rpcReplied], [2, 2, 2]);
});

t.test('sentPoints does not go back after kill -9 (points sent live from the log)', async (t) => {
  const tb = await fakeTb(t);
  let gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN });
  const jwt = await admin(gw);
  const d = await addDevice(gw.dataDir, 'live-1');
  let total = 0;
  for (const round of [0, 1]) {
    for (let i = 0; i < 10; i++) await post(gw, d.token, records(BASE + (round * 10 + i) * 20_000, 20, 1));
    total += 200;
    await until(() => tb.pointCount('live-1') === total, `${total} points upstream`);
    const s = await syncStatusUntil<Counted>(gw, jwt, (x) => x.sentPoints >= total, `${total} counted`, 10_000, 50);
    t.equal(s.sentPoints, total, `${total} sent before the kill`);
    await gw.stop('SIGKILL');
    gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN }, {}, gw.dataDir);
    const jwt2 = (await login(gw, 'admin@faults.test', 'secret')).token;
    const first = await syncStatusUntil<Counted>(gw, jwt2, () => true, 'status', 5_000, 50);
    t.ok(first.sentPoints <= total, `never more than was sent (${first.sentPoints})`);
    // what the log had not marked as sent yet goes again, and is counted then
    const after = await syncStatusUntil<Counted & { backlogPoints: number }>(
      gw,
      jwt2,
      (x) => x.backlogPoints === 0 && x.sentPoints >= total,
      'counted again',
      15_000,
      100,
    );
    t.equal(after.sentPoints, total, `${total} after the restart`);
  }
});

t.test('lastError of a previous sync.url is not shown once sync.url changed', async (t) => {
  const tb = await fakeTb(t);
  const gw = await syncGateway(t, 'mqtt://127.0.0.1:1', { gatewayToken: GW_TOKEN });
  const jwt = await admin(gw);
  const s = await syncStatusUntil<Counted>(gw, jwt, (x) => x.lastError !== null, 'an error', 10_000, 100);
  t.match(s.lastError, /127\.0\.0\.1:1/);
  await gw.stop('SIGTERM');
  const gw2 = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN }, {}, gw.dataDir);
  const jwt2 = (await login(gw2, 'admin@faults.test', 'secret')).token;
  const after = await syncStatusUntil<Counted>(gw2, jwt2, () => true, 'status', 5_000, 50);
  t.equal(after.lastError, null, 'no error of the old upstream');
});

t.test('over MQTT 3.1.1, where a refused device ends the session each time, an RPC reply still goes up', async (t) => {
  const tb = await fakeTb(t, { only311: true });
  tb.refuseDevice = 'thermo-1';
  // a window of one: what goes first in a new session is all that goes before the upstream ends it
  const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN, retryBaseMs: 100, retryMaxMs: 400, inflight: 1 });
  const valve = await addDevice(gw.dataDir, 'valve-1');
  const poll = pollRpc(gw, valve.token);
  await until(() => tb.isConnected('valve-1'), 'announced');
  const call = tb.rpc('valve-1', 'open', { valve: 2 });
  const req = JSON.parse((await poll).text) as { id: number };
  // a device the upstream refuses posts: each of its messages ends the session, which reconnects
  const thermo = await addDevice(gw.dataDir, 'thermo-1');
  for (let i = 0; i < 20; i++) await post(gw, thermo.token, records(BASE + i * 10_000, 5, 1));
  await until(() => tb.closes.length >= 3, 'the session ended three times');
  await http('POST', `${gw.url}/api/v1/${valve.token}/rpc/${req.id}`, { opened: true });
  const answer = await Promise.race([
    call.reply,
    new Promise<string>((r) => setTimeout(() => r('no reply within 10 s'), 10_000)),
  ]);
  t.same(answer, '{"opened":true}', 'the reply reached the upstream');
  t.comment(`sessions the upstream closed: ${tb.closes.length}`);
});
