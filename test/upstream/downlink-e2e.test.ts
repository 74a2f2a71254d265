/**
 * Outpost → Outpost both ways over MQTT (docs/sync.md "Downlink"): the lower gateway's sync.url is the upper
 * one's MQTT listener with a gateway device's token of the upper one. Shared attributes and RPC issued through
 * the upper one's REST API reach devices on the lower one's LAN (an HTTP long-poll, an MQTT device, a device
 * behind a LAN gateway), and the replies come back to the REST caller; a change made while the lower one is
 * stopped arrives after it starts. A device the lower one synced over HTTP before it moved to the gateway
 * session is the same device upstream afterwards.
 */
import t from 'tap';
import { Inbox, latest, mqttClient, mqttPorts } from '../helpers/mqtt.js';
import { type Gateway, addDevice, http, startGateway, waitLongPoll } from '../helpers/server.js';
import { postTelemetry, syncGateway, syncStatusOf } from '../helpers/sync.js';
import { addUser, authHeaders, login } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';

async function admin(gw: Gateway, email: string): Promise<string> {
  await addUser(gw.dataDir, email, 'secret', 'TENANT_ADMIN');
  return (await login(gw, email, 'secret')).token;
}

/** The upper one's id of a device the lower one announced (created by its gateway session). */
async function upperId(upper: Gateway, jwt: string, name: string): Promise<string> {
  let last = '';
  return waitFor(
    async () => {
      const r = await http(
        'GET',
        `${upper.url}/api/tenant/devices?deviceName=${encodeURIComponent(name)}`,
        undefined,
        authHeaders(jwt),
      );
      last = `${r.status} ${r.text}`;
      return r.status === 200 && r.json<{ id: { id: string } }>().id.id;
    },
    { interval: 100, message: () => `${name} upstream; the last answer: ${last}` },
  );
}

async function sharedOf(gw: Gateway, token: string): Promise<Record<string, unknown>> {
  return (
    (await http('GET', `${gw.url}/api/v1/${token}/attributes`)).json<{ shared?: Record<string, unknown> }>().shared ??
    {}
  );
}

/** The upper one's latest telemetry of a device, once its newest point is at `ts`. */
async function latestUntil(
  upper: Gateway,
  jwt: string,
  id: string,
  ts: number,
): Promise<Record<string, Array<{ ts: number; value: unknown }>>> {
  let l: Record<string, Array<{ ts: number; value: unknown }>> = {};
  return waitFor(
    async () => {
      l = await latest(upper, authHeaders(jwt), id);
      return Object.values(l).some((pts) => pts[0]?.ts === ts) && l;
    },
    { interval: 100, message: () => `a point at ${ts} upstream: ${JSON.stringify(l)}` },
  );
}

const rpc = (
  upper: Gateway,
  jwt: string,
  id: string,
  method: string,
  params: unknown,
): Promise<{ status: number; text: string }> =>
  http('POST', `${upper.url}/api/plugins/rpc/twoway/${id}`, { method, params, timeout: 10_000 }, authHeaders(jwt));

t.test('REST on the upper Outpost reaches devices on the lower one, and back', async (t) => {
  const upper = await startGateway(t);
  const upJwt = await admin(upper, 'up@e2e.test');
  const gwDev = await addDevice(upper.dataDir, 'site-gw', ['--gateway']);
  const { port } = mqttPorts(upper);
  const lower = await syncGateway(t, `mqtt://127.0.0.1:${port}`, { gatewayToken: gwDev.token, announceMs: 5_000 });
  const hd = await addDevice(lower.dataDir, 'lp-dev');
  const md = await addDevice(lower.dataDir, 'mq-dev');
  const lan = await addDevice(lower.dataDir, 'lan-gw', ['--gateway']);

  // a device long-polling for RPC over HTTP
  const poll = http('GET', `${lower.url}/api/v1/${hd.token}/rpc?timeout=20000`);
  const hdUp = await upperId(upper, upJwt, 'lp-dev');
  const call = rpc(upper, upJwt, hdUp, 'setGpio', { pin: 3 });
  const req = JSON.parse((await poll).text) as { id: number; method: string; params: unknown };
  t.same(
    { method: req.method, params: req.params },
    { method: 'setGpio', params: { pin: 3 } },
    "the long-poll got the upper one's RPC",
  );
  await http('POST', `${lower.url}/api/v1/${hd.token}/rpc/${req.id}`, { pin: 3, on: true });
  const answer = await call;
  t.equal(answer.status, 200);
  t.same(JSON.parse(answer.text), { pin: 3, on: true }, 'the reply came back to the REST caller');

  // a shared attribute set on the upper one reaches the long-poll on the lower one
  const lowHeaders = authHeaders(await admin(lower, 'low@e2e.test'));
  const polls = await waitLongPoll(lower, lowHeaders, () => true);
  const attrPoll = http('GET', `${lower.url}/api/v1/${hd.token}/attributes/updates?timeout=20000`);
  await waitLongPoll(lower, lowHeaders, (s) => s.attributePolls > polls.attributePolls);
  const set = await http(
    'POST',
    `${upper.url}/api/plugins/telemetry/DEVICE/${hdUp}/attributes/SHARED_SCOPE`,
    { mode: 'eco' },
    authHeaders(upJwt),
  );
  t.equal(set.status, 200);
  t.same((await attrPoll).json(), { mode: 'eco' });

  // an MQTT device
  const c = await mqttClient(t, lower, md.token);
  const inbox = new Inbox(c);
  await c.subscribeAsync('v1/devices/me/rpc/request/+', { qos: 1 });
  const mdUp = await upperId(upper, upJwt, 'mq-dev');
  const call2 = rpc(upper, upJwt, mdUp, 'getTemp', {});
  const m = await inbox.next((x) => x.topic.startsWith('v1/devices/me/rpc/request/'), 10_000);
  await c.publishAsync(m.topic.replace('request', 'response'), '{"t":21}', { qos: 1 });
  t.same(JSON.parse((await call2).text), { t: 21 }, 'an MQTT device answered the upper one');

  // a device behind a LAN gateway of the lower one
  const g = await mqttClient(t, lower, lan.token);
  const gInbox = new Inbox(g);
  await g.publishAsync('v1/gateway/connect', JSON.stringify({ device: 'lan-sub' }), { qos: 1 });
  const subUp = await upperId(upper, upJwt, 'lan-sub');
  const call3 = rpc(upper, upJwt, subUp, 'open', { valve: 2 });
  const gm = await gInbox.next((x) => x.topic === 'v1/gateway/rpc', 10_000);
  const gReq = JSON.parse(gm.text) as { device: string; data: { id: number; method: string } };
  t.same([gReq.device, gReq.data.method], ['lan-sub', 'open']);
  await g.publishAsync(
    'v1/gateway/rpc',
    JSON.stringify({ device: 'lan-sub', id: gReq.data.id, data: { opened: true } }),
    { qos: 1 },
  );
  t.same(JSON.parse((await call3).text), { opened: true }, 'a device behind a LAN gateway answered the upper one');

  // changed on the upper one while the lower one is stopped: arrives after it starts
  await lower.stop('SIGTERM');
  const set2 = await http(
    'POST',
    `${upper.url}/api/plugins/telemetry/DEVICE/${hdUp}/attributes/SHARED_SCOPE`,
    { mode: 'boost', level: 3 },
    authHeaders(upJwt),
  );
  t.equal(set2.status, 200);
  await http(
    'DELETE',
    `${upper.url}/api/plugins/telemetry/DEVICE/${hdUp}/SHARED_SCOPE?keys=level`,
    undefined,
    authHeaders(upJwt),
  );
  const lower2 = await syncGateway(
    t,
    `mqtt://127.0.0.1:${port}`,
    { gatewayToken: gwDev.token, announceMs: 5_000 },
    {},
    lower.dataDir,
  );
  // the device listens again: announced, reconciled
  void http('GET', `${lower2.url}/api/v1/${hd.token}/rpc?timeout=10000`).catch(() => undefined);
  let sh: Record<string, unknown> = {};
  await waitFor(async () => (sh = await sharedOf(lower2, hd.token))['mode'] === 'boost', {
    interval: 200,
    message: 'the change made while it was stopped',
  }).catch(() => undefined);
  t.same(sh, { mode: 'boost' }, 'the change made while it was stopped arrived');
});

t.test('a device synced over HTTP first, then over the gateway session: the upper one reuses it', async (t) => {
  const upper = await startGateway(t);
  const upJwt = await admin(upper, 'up2@e2e.test');
  const gwDev = await addDevice(upper.dataDir, 'site-gw', ['--gateway']);
  const upDev = await addDevice(upper.dataDir, 'field-1');
  const lower = await syncGateway(t, upper.url);
  const dev = await addDevice(lower.dataDir, 'field-1', ['--upstream-token', upDev.token]);
  await postTelemetry(lower, dev.token, { ts: 1700000000000, values: { level: 1 } });
  await latestUntil(upper, upJwt, upDev.id, 1700000000000);
  await lower.stop('SIGTERM');

  const { port } = mqttPorts(upper);
  const lower2 = await syncGateway(t, `mqtt://127.0.0.1:${port}`, { gatewayToken: gwDev.token }, {}, lower.dataDir);
  await postTelemetry(lower2, dev.token, { ts: 1700000060000, values: { level: 2 } });
  t.same(
    (await latestUntil(upper, upJwt, upDev.id, 1700000060000))['level']?.[0],
    { ts: 1700000060000, value: '2' },
    'stored upstream under the device made there for the HTTP sync',
  );
  const up = await http('GET', `${upper.url}/api/device/${upDev.id}`, undefined, authHeaders(upJwt));
  t.same(up.json<{ additionalInfo: unknown }>().additionalInfo, { lastConnectedGateway: gwDev.id });
  const parked = (
    await syncStatusOf<{ devices: Array<{ name: string; state: string }> }>(lower2, await admin(lower2, 'low@e2e.test'))
  ).devices.find((d) => d.name === 'field-1');
  t.equal(parked?.state, 'ok', 'not parked on the lower one');
});
