/**
 * RPC down the MQTT gateway session and back (docs/sync.md "Downlink"), against the fake TB endpoint: a device
 * on an HTTP long-poll and one on MQTT; a re-sent RPC delivered once; an RPC acknowledged upstream survives
 * kill -9; a reply made while the upstream is away arrives when it returns; expiry.
 */
import t, { type Test } from 'tap';
import { FakeTbMqtt, until } from '../helpers/fake-tb-mqtt.js';
import { Inbox, mqttClient } from '../helpers/mqtt.js';
import { type Gateway, addDevice, http } from '../helpers/server.js';
import { syncGateway, syncStatusUntil } from '../helpers/sync.js';
import { addUser, login } from '../helpers/users.js';

const GW_TOKEN = 'GATEWAY-TOKEN';

interface Status {
  downlink: { rpcReceived: number; rpcDelivered: number; rpcReplied: number; rpcExpired: number; rpcPending: number };
}

async function admin(gw: Gateway): Promise<string> {
  await addUser(gw.dataDir, 'admin@rpc.test', 'secret', 'TENANT_ADMIN');
  return (await login(gw, 'admin@rpc.test', 'secret')).token;
}

async function fakeTb(t: Test): Promise<FakeTbMqtt> {
  const tb = new FakeTbMqtt({ tokens: [GW_TOKEN] });
  await tb.start();
  t.teardown(() => tb.stop());
  return tb;
}

const pollRpc = (gw: Gateway, token: string, ms = 20_000): Promise<{ status: number; text: string }> =>
  http('GET', `${gw.url}/api/v1/${token}/rpc?timeout=${ms}`);

t.test('round trips: a device on an HTTP long-poll, a device on MQTT', async (t) => {
  const tb = await fakeTb(t);
  const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN });
  const jwt = await admin(gw);
  const hd = await addDevice(gw.dataDir, 'http-dev');
  const md = await addDevice(gw.dataDir, 'mqtt-dev');
  const poll = pollRpc(gw, hd.token);
  await until(() => tb.isConnected('http-dev'), 'the polling device announced');
  const call = tb.rpc('http-dev', 'setGpio', { pin: 7, on: true, big: 9007199254740991 });
  const got = await poll;
  const req = JSON.parse(got.text) as { id: number; method: string; params: unknown };
  t.equal(req.method, 'setGpio');
  t.match(got.text, /"pin":7,"on":true/, 'params as sent');
  const rep = await http('POST', `${gw.url}/api/v1/${hd.token}/rpc/${req.id}`, { ok: true, v: 1.5 });
  t.equal(rep.status, 200);
  t.same(
    JSON.parse(await call.reply),
    { ok: true, v: 1.5 },
    'the reply reached the upstream as v1/gateway/rpc {device,id,data}',
  );

  const c = await mqttClient(t, gw, md.token);
  const inbox = new Inbox(c);
  await c.subscribeAsync('v1/devices/me/rpc/request/+', { qos: 1 });
  await until(() => tb.isConnected('mqtt-dev'), 'the MQTT device announced');
  const call2 = tb.rpc('mqtt-dev', 'getTemp', null);
  const m = await inbox.next((x) => x.topic.startsWith('v1/devices/me/rpc/request/'));
  t.same(JSON.parse(m.text), { method: 'getTemp', params: null });
  await c.publishAsync(m.topic.replace('request', 'response'), '{"t":20.5}', { qos: 1 });
  t.same(JSON.parse(await call2.reply), { t: 20.5 });
  const s = await syncStatusUntil<Status>(gw, jwt, (x) => x.downlink.rpcReplied === 2, 'counted', 10_000, 100);
  t.same(s.downlink, { ...s.downlink, rpcReceived: 2, rpcDelivered: 2, rpcReplied: 2, rpcExpired: 0, rpcPending: 0 });
});

t.test(
  'an RPC re-sent by the upstream (a new sub-session) is delivered once; the reply still reaches it',
  async (t) => {
    const tb = await fakeTb(t);
    const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN });
    const d = await addDevice(gw.dataDir, 'once');
    const first = pollRpc(gw, d.token);
    await until(() => tb.isConnected('once'), 'announced');
    const call = tb.rpc('once', 'toggle', {});
    const req = JSON.parse((await first).text) as { id: number };
    const second = pollRpc(gw, d.token, 4_000);
    // the session drops; on the next one the device is announced again and TB re-sends its pending RPC
    const sends = tb.rpcSends('once', 1);
    tb.dropSession();
    await until(() => tb.rpcSends('once', 1) > sends, 'the upstream re-sent it');
    const again = await second;
    t.not(again.text.includes('toggle'), true, `the device did not get it twice (poll answered ${again.status})`);
    await http('POST', `${gw.url}/api/v1/${d.token}/rpc/${req.id}`, { done: 1 });
    t.same(JSON.parse(await call.reply), { done: 1 });
  },
);

t.test(
  'an RPC acknowledged upstream survives kill -9; a reply made while the upstream is away arrives when it returns',
  async (t) => {
    const tb = await fakeTb(t);
    tb.resendPending = false;
    const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN });
    const d = await addDevice(gw.dataDir, 'sleepy');
    // make it a listener once, so it is announced, then let it sleep
    const p = pollRpc(gw, d.token, 3_000);
    await until(() => tb.isConnected('sleepy'), 'announced');
    await p;
    const acked = tb.acked.length;
    const call = tb.rpc('sleepy', 'reboot', { delay: 5 });
    await until(() => tb.acked.slice(acked).includes('v1/gateway/rpc'), 'PUBACK of the RPC');
    await gw.stop('SIGKILL');
    const gw2 = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN }, {}, gw.dataDir);
    const got = await pollRpc(gw2, d.token);
    const req = JSON.parse(got.text) as { id: number; method: string };
    t.equal(
      req.method,
      'reboot',
      'the stored RPC reached the device after the restart (the upstream did not re-send it)',
    );
    const port = tb.port;
    await tb.stop();
    await http('POST', `${gw2.url}/api/v1/${d.token}/rpc/${req.id}`, { rebooting: true });
    await new Promise((r) => setTimeout(r, 500));
    tb.port = port;
    await tb.start();
    let waited: NodeJS.Timeout | undefined;
    const reply = await Promise.race([
      call.reply,
      new Promise<never>((_, reject) => {
        waited = setTimeout(
          () => reject(new Error(`no reply upstream within 15 s; the LAN daemon's log:\n${gw2.logs.join('\n')}`)),
          15_000,
        );
      }),
    ]).finally(() => clearTimeout(waited));
    t.same(JSON.parse(reply), { rebooting: true }, 'the reply went once the upstream was back');
  },
);

t.test('an RPC not delivered within sync.rpcTtlMs expires and is counted', async (t) => {
  const tb = await fakeTb(t);
  const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN, rpcTtlMs: 1_500 });
  const jwt = await admin(gw);
  const d = await addDevice(gw.dataDir, 'absent');
  const p = pollRpc(gw, d.token, 3_000);
  await until(() => tb.isConnected('absent'), 'announced');
  await p;
  tb.rpc('absent', 'ping', null);
  await syncStatusUntil<Status>(
    gw,
    jwt,
    (x) => x.downlink.rpcReceived === 1 && x.downlink.rpcPending === 1,
    'pending',
    5_000,
    50,
  );
  const s = await syncStatusUntil<Status>(gw, jwt, (x) => x.downlink.rpcExpired === 1, 'expired', 10_000, 100);
  t.equal(s.downlink.rpcPending, 0);
  const late = await pollRpc(gw, d.token, 1_000);
  t.not(late.text.includes('ping'), true, 'an expired RPC is not delivered');
});
