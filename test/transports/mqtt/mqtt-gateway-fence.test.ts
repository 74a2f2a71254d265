/**
 * A LAN gateway stays inside its owner (docs/mqtt.md "A gateway stays inside its customer"), with real MQTT
 * clients side by side: a gateway of customer A against customer B's device that has its own live session, a
 * gateway with no customer against customer B's MQTT Basic and X.509 devices and a customer's gateway against a
 * tenant device. Every Gateway API topic naming another owner's device is refused (MQTT 5: PUBACK 0x87; 3.1.1:
 * the session closed), stores nothing, answers nothing of it and is logged once with both names. A device's own
 * session keeps its RPCs while a gateway of its owner also serves it; a device moved to another customer leaves
 * the gateway that served it, and a gateway moved lets go of its old customer's devices.
 */
import { readFileSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { type IClientOptions, type MqttClient, connectAsync } from 'mqtt';
import t, { type Test } from 'tap';
import { Inbox, closed, mqttClient, mqttPorts } from '../../helpers/mqtt.js';
import {
  type HttpResult,
  addDevice,
  http as fetchHttp,
  startGateway,
  tempDir,
  waitLogLines,
} from '../../helpers/server.js';
import { hasOpenssl, selfSignedCert } from '../../helpers/tls.js';
import { addUser, authHeaders } from '../../helpers/users.js';

interface DeviceJson {
  id: { id: string };
  customerId: { id: string };
  additionalInfo: { lastConnectedGateway?: string } | null;
}

const dir = tempDir(t);
const server = hasOpenssl ? selfSignedCert(dir) : undefined;
const gw = await startGateway(
  t,
  server === undefined ? {} : { args: ['--tls-cert', server.cert, '--tls-key', server.key] },
);
const serverCa = server === undefined ? undefined : readFileSync(server.cert);

/**
 * REST to the daemon, over HTTPS when its certificate (which X.509 devices need) makes it serve HTTPS: the test's
 * certificate trusted, which fetch cannot be told.
 */
function http(method: string, url: string, body?: object, headers: Record<string, string> = {}): Promise<HttpResult> {
  if (!url.startsWith('https:')) return fetchHttp(method, url, body, headers);
  const data = body === undefined ? undefined : JSON.stringify(body);
  const h: Record<string, string> = {
    ...headers,
    ...(data === undefined ? {} : { 'content-type': 'application/json' }),
  };
  return new Promise((resolve, reject) => {
    const req = httpsRequest(url, { method, ca: serverCa, headers: h }, (r) => {
      const chunks: Buffer[] = [];
      r.on('data', (c: Buffer) => chunks.push(c));
      r.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        resolve({ status: r.statusCode ?? 0, text, headers: new Headers(), json: <T>() => JSON.parse(text) as T });
      });
      r.on('error', reject);
    });
    req.on('error', reject);
    req.end(data);
  });
}
async function loginAs(email: string, password: string): Promise<Record<string, string>> {
  const r = await http('POST', `${gw.url}/api/auth/login`, { username: email, password });
  if (r.status !== 200) throw new Error(`login ${email}: ${r.status} ${r.text}`);
  return authHeaders(r.json<{ token: string }>().token);
}
/** A device's latest telemetry over REST: key → [{ts, value}]. */
async function latest(
  headers: Record<string, string>,
  id: string,
): Promise<Record<string, Array<{ ts: number; value: unknown }>>> {
  const r = await http('GET', `${gw.url}/api/plugins/telemetry/DEVICE/${id}/values/timeseries`, undefined, headers);
  if (r.status !== 200) throw new Error(`latest ${id}: ${r.status} ${r.text}`);
  return r.json();
}
async function queuedRpcs(): Promise<number> {
  return (await http('GET', `${gw.url}/api/outpost/status`, undefined, admin)).json<{
    longPoll: { queuedRpcs: number };
  }>().longPoll.queuedRpcs;
}

/** Waits until more RPCs than `before` are queued undelivered (none of the device's listeners took them). */
async function waitQueued(before: number): Promise<void> {
  for (const deadline = Date.now() + 10_000; (await queuedRpcs()) <= before; ) {
    if (Date.now() > deadline) throw new Error('the RPC was never queued: something took it');
    await new Promise((r) => setTimeout(r, 20));
  }
}

await addUser(gw.dataDir, 'admin@fence.test', 'pw-admin-1', 'TENANT_ADMIN');
const admin = await loginAs('admin@fence.test', 'pw-admin-1');
const customers: Record<string, string> = {};
for (const title of ['Acme', 'Bolt']) {
  customers[title] = (await http('POST', `${gw.url}/api/customer`, { title }, admin)).json<{
    id: { id: string };
  }>().id.id;
}
await addUser(gw.dataDir, 'a@fence.test', 'pw-a-123', 'CUSTOMER_USER', 'Acme');
await addUser(gw.dataDir, 'b@fence.test', 'pw-b-123', 'CUSTOMER_USER', 'Bolt');
const userA = await loginAs('a@fence.test', 'pw-a-123');
const userB = await loginAs('b@fence.test', 'pw-b-123');
const gwA = await addDevice(gw.dataDir, 'gw-a', ['--gateway', '--customer', 'Acme']);
const gwT = await addDevice(gw.dataDir, 'gw-t', ['--gateway']);
const devB = await addDevice(gw.dataDir, 'devB', ['--customer', 'Bolt']);

const refusal = (p: Promise<unknown>): Promise<number | undefined> =>
  p.then(
    () => undefined,
    (e: { code?: number }) => e.code,
  );
const deviceById = async (id: string): Promise<DeviceJson> =>
  (await http('GET', `${gw.url}/api/device/${id}`, undefined, admin)).json<DeviceJson>();
const deviceExists = async (name: string): Promise<boolean> =>
  (await http('GET', `${gw.url}/api/tenant/devices?deviceName=${encodeURIComponent(name)}`, undefined, admin))
    .status === 200;
const attributes = async (id: string, scope: string): Promise<Record<string, unknown>> =>
  Object.fromEntries(
    (await http('GET', `${gw.url}/api/plugins/telemetry/DEVICE/${id}/values/attributes/${scope}`, undefined, admin))
      .json<Array<{ key: string; value: unknown }>>()
      .map((a) => [a.key, a.value]),
  );
const setShared = async (id: string, body: object): Promise<void> => {
  const r = await http('POST', `${gw.url}/api/plugins/telemetry/DEVICE/${id}/attributes/SHARED_SCOPE`, body, admin);
  if (r.status !== 200) throw new Error(`shared attributes → ${r.status} ${r.text}`);
};

async function idOf(name: string): Promise<string> {
  const r = await http('GET', `${gw.url}/api/tenant/devices?deviceName=${encodeURIComponent(name)}`, undefined, admin);
  return r.json<DeviceJson>().id.id;
}

/** A device's own live session, subscribed to its RPCs and shared-attribute changes. */
async function ownSession(client: MqttClient): Promise<Inbox> {
  const inbox = new Inbox(client);
  await client.subscribeAsync({ 'v1/devices/me/rpc/request/+': { qos: 1 }, 'v1/devices/me/attributes': { qos: 1 } });
  return inbox;
}

/** The gateway's every way of naming `name`, each refused with 0x87 (MQTT 5). */
async function everyTopicRefused(t: Test, c: MqttClient, name: string): Promise<void> {
  const n = JSON.stringify(name);
  const topics: Array<[string, string]> = [
    ['v1/gateway/connect', `{"device":${n},"type":"evil"}`],
    ['v1/gateway/telemetry', `{${n}:[{"ts":1700000009000,"values":{"temp":99}}]}`],
    ['v1/gateway/telemetry', `{"fresh-${name}":[{"temp":1}],${n}:[{"temp":99}]}`],
    ['v1/gateway/attributes', `{${n}:{"fw":"evil"}}`],
    ['v1/gateway/attributes/request', `{"id":1,"device":${n},"client":true,"key":"fw"}`],
    ['v1/gateway/attributes/request', `{"id":2,"device":${n},"client":false,"keys":["mode"]}`],
    ['v1/gateway/depth/telemetry', `{${n}:[{"ds":1.5,"values":{"temp":99}}]}`],
    ['v1/gateway/rpc', `{"device":${n},"id":1,"data":{"stolen":true}}`],
  ];
  for (const [topic, body] of topics) t.equal(await refusal(c.publishAsync(topic, body, { qos: 1 })), 0x87, topic);
  // TB's device claiming is not served: an unknown topic, acknowledged as one (0x90) and ignored
  t.equal(await refusal(c.publishAsync('v1/gateway/claim', `{${n}:{"secretKey":"k"}}`, { qos: 1 })), 0x90, 'claim');
  // disconnect names nothing it holds: acknowledged, nothing happens (TB's answer to an unknown name)
  await c.publishAsync('v1/gateway/disconnect', `{"device":${n}}`, { qos: 1 });
  t.notOk(await deviceExists(`fresh-${name}`), 'a refused publish creates none of the devices it names');
}

t.test("customer A's gateway against customer B's device with its own live session", async (t) => {
  const own = await mqttClient(t, gw, devB.token, { protocolVersion: 5 });
  const ownInbox = await ownSession(own);
  await own.publishAsync('v1/devices/me/telemetry', '{"ts":1700000001000,"values":{"temp":20}}', { qos: 1 });
  await own.publishAsync('v1/devices/me/attributes', '{"fw":"b1"}', { qos: 1 });
  await setShared(devB.id, { mode: 'b' });
  await ownInbox.next((m) => m.topic === 'v1/devices/me/attributes');

  const logFrom = gw.logs.length;
  const c = await mqttClient(t, gw, gwA.token, { protocolVersion: 5 });
  const gwInbox = new Inbox(c);
  await everyTopicRefused(t, c, 'devB');

  t.same(await latest(admin, devB.id), { temp: [{ ts: 1700000001000, value: '20' }] }, 'its telemetry untouched');
  t.same(await attributes(devB.id, 'CLIENT_SCOPE'), { fw: 'b1' }, 'its client attributes untouched');
  const d = await deviceById(devB.id);
  t.equal(d.customerId.id, customers['Bolt'], 'still customer B');
  t.notOk(d.additionalInfo?.lastConnectedGateway, 'never connected to the foreign gateway');
  const depth = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${devB.id}/keys/depthseries`,
    undefined,
    admin,
  );
  t.same(depth.json(), [], 'no depth series');
  t.same(
    gwInbox.all.map((m) => m.topic),
    [],
    'the gateway was answered nothing of the device (no attribute response, no push)',
  );

  // B's user's RPC and B's shared attributes reach the device's own session, not the gateway
  const call = http(
    'POST',
    `${gw.url}/api/plugins/rpc/twoway/${devB.id}`,
    { method: 'ping', params: { n: 1 }, timeout: 10_000 },
    userB,
  );
  const req = await ownInbox.next((m) => m.topic.startsWith('v1/devices/me/rpc/request/'));
  t.same(JSON.parse(req.text), { method: 'ping', params: { n: 1 } });
  await own.publishAsync(req.topic.replace('request', 'response'), '{"pong":1}', { qos: 1 });
  const res = await call;
  t.equal(res.status, 200);
  t.same(res.json(), { pong: 1 }, "answered by the device's own session");
  await setShared(devB.id, { mode: 'b2' });
  t.same(JSON.parse((await ownInbox.next((m) => m.text.includes('b2'))).text), { mode: 'b2' });
  // an RPC of the gateway's own customer to one of its sub-devices comes after: nothing of devB before it
  await c.publishAsync('v1/gateway/connect', '{"device":"a-sub"}', { qos: 1 });
  const aSub = await deviceById(await idOf('a-sub'));
  t.equal(aSub.customerId.id, customers['Acme'], "a new sub-device gets the gateway's customer");
  const mine = http('POST', `${gw.url}/api/plugins/rpc/oneway/${aSub.id.id}`, { method: 'mine', params: {} }, userA);
  await gwInbox.next((m) => m.topic === 'v1/gateway/rpc');
  t.equal((await mine).status, 200);
  t.same(
    gwInbox.all.map((m) => JSON.parse(m.text).device),
    ['a-sub'],
    'the gateway received its own sub-device RPC, and nothing of devB',
  );

  const lines = await waitLogLines(gw, /gateway "gw-a" named device "devB"/, 1, { from: logFrom });
  t.match(lines[0], /another owner/);
  t.equal(
    gw.logs.slice(logFrom).filter((l) => l.includes('named device "devB"')).length,
    1,
    'logged once for the session, not once per refusal',
  );

  const v3 = await mqttClient(t, gw, gwA.token, { protocolVersion: 4 });
  v3.publish('v1/gateway/telemetry', '{"devB":[{"temp":98}]}', { qos: 1 });
  await closed(v3);
  t.pass('MQTT 3.1.1: the session is closed (its PUBACK cannot refuse)');
  t.same(await latest(admin, devB.id), { temp: [{ ts: 1700000001000, value: '20' }] }, 'still nothing stored');
});

t.test("a gateway of the device's own customer serves it, but its own live session keeps its RPCs", async (t) => {
  const devA = await addDevice(gw.dataDir, 'devA', ['--customer', 'Acme']);
  const own = await mqttClient(t, gw, devA.token, { protocolVersion: 5 });
  const ownInbox = await ownSession(own);
  const c = await mqttClient(t, gw, gwA.token, { protocolVersion: 5 });
  const gwInbox = new Inbox(c);
  await c.publishAsync('v1/gateway/connect', '{"device":"devA"}', { qos: 1 });
  await c.publishAsync('v1/gateway/telemetry', '{"devA":[{"ts":1700000002000,"values":{"via":1}}]}', { qos: 1 });
  t.equal((await latest(admin, devA.id))['via']?.[0]?.value, '1', 'the gateway writes for its own customer');

  const call = http('POST', `${gw.url}/api/plugins/rpc/oneway/${devA.id}`, { method: 'own', params: {} }, userA);
  const got = await ownInbox.next((m) => m.topic.startsWith('v1/devices/me/rpc/request/'));
  t.same(JSON.parse(got.text), { method: 'own', params: {} }, "the device's own session receives it");
  t.equal((await call).status, 200);
  await setShared(devA.id, { led: 'on' });
  t.same(JSON.parse((await ownInbox.next((m) => m.text.includes('led'))).text), { led: 'on' });
  t.same(JSON.parse((await gwInbox.next((m) => m.topic === 'v1/gateway/attributes')).text), {
    device: 'devA',
    data: { led: 'on' },
  });
  t.notOk(
    gwInbox.all.some((m) => m.topic === 'v1/gateway/rpc'),
    'the gateway got no RPC of a device served by its own session',
  );

  // once the device's own session ends, its gateway gets its RPCs (one handed to the closing session comes back)
  await own.endAsync();
  const later = http('POST', `${gw.url}/api/plugins/rpc/oneway/${devA.id}`, { method: 'later', params: {} }, userA);
  const viaGw = await gwInbox.next((m) => m.topic === 'v1/gateway/rpc');
  t.match(JSON.parse(viaGw.text), { device: 'devA', data: { method: 'later' } });
  t.equal((await later).status, 200);
});

t.test('a device moved to another customer leaves the gateway that served it', async (t) => {
  const moved = await addDevice(gw.dataDir, 'moved', ['--customer', 'Acme']);
  const stays = await addDevice(gw.dataDir, 'stays', ['--customer', 'Acme']);
  const c = await mqttClient(t, gw, gwA.token, { protocolVersion: 5 });
  const gwInbox = new Inbox(c);
  await c.publishAsync('v1/gateway/telemetry', '{"moved":[{"a":1}],"stays":[{"a":1}]}', { qos: 1 });
  const assigned = await http(
    'POST',
    `${gw.url}/api/customer/${customers['Bolt']}/device/${moved.id}`,
    undefined,
    admin,
  );
  t.equal(assigned.status, 200);

  const before = await queuedRpcs();
  const held = http(
    'POST',
    `${gw.url}/api/plugins/rpc/oneway/${moved.id}`,
    { method: 'm', params: {}, timeout: 5_000 },
    admin,
  );
  await waitQueued(before);
  await setShared(moved.id, { k: 'moved' });
  await setShared(stays.id, { k: 'stays' });
  await gwInbox.next((m) => m.topic === 'v1/gateway/attributes');
  t.same(
    gwInbox.all.map((m) => JSON.parse(m.text).device),
    ['stays'],
    'no RPC and no attribute change of the moved device reach the gateway',
  );
  t.equal(await refusal(c.publishAsync('v1/gateway/telemetry', '{"moved":[{"a":2}]}', { qos: 1 })), 0x87);
  t.equal((await latest(admin, moved.id))['a']?.[0]?.value, '1', 'nothing stored after the move');
  t.equal(await refusal(c.publishAsync('v1/gateway/connect', '{"device":"moved"}', { qos: 1 })), 0x87);
  t.equal((await held).status, 409, 'the RPC expired undelivered: no session of the device, the gateway let it go');
});

t.test('a gateway moved to another customer lets go of its sub-devices of the old one', async (t) => {
  const gwM = await addDevice(gw.dataDir, 'gw-m', ['--gateway', '--customer', 'Acme']);
  const sub = await addDevice(gw.dataDir, 'sub-m', ['--customer', 'Acme']);
  const c = await mqttClient(t, gw, gwM.token, { protocolVersion: 5 });
  const gwInbox = new Inbox(c);
  await c.publishAsync('v1/gateway/connect', '{"device":"sub-m"}', { qos: 1 });
  const moved = await http('POST', `${gw.url}/api/customer/${customers['Bolt']}/device/${gwM.id}`, undefined, admin);
  t.equal(moved.status, 200);
  const before = await queuedRpcs();
  const held = http(
    'POST',
    `${gw.url}/api/plugins/rpc/oneway/${sub.id}`,
    { method: 'm', params: {}, timeout: 5_000 },
    admin,
  );
  await waitQueued(before);
  t.same(gwInbox.all, [], "the RPC of its old customer's device waits; the gateway gets nothing");
  t.equal(await refusal(c.publishAsync('v1/gateway/telemetry', '{"sub-m":[{"a":2}]}', { qos: 1 })), 0x87);
  t.same(await latest(admin, sub.id), {}, 'nothing stored');
  t.equal((await held).status, 409);
});

t.test(
  'a gateway with no customer against MQTT Basic and X.509 devices',
  {
    skip: server === undefined ? 'openssl is not available (X.509 needs certificates)' : false,
  },
  async (t) => {
    const { tlsPort } = mqttPorts(gw);
    const tlsOpts = (cert: { cert: string; key: string }): IClientOptions => ({
      ca: serverCa,
      cert: readFileSync(cert.cert),
      key: readFileSync(cert.key),
      reconnectPeriod: 0,
      connectTimeout: 5_000,
      protocolVersion: 5,
    });
    const certB = selfSignedCert(tempDir(t));
    const certT = selfSignedCert(tempDir(t));
    const basicB = await addDevice(gw.dataDir, 'basicB', ['--mqtt-basic', 'cid-b:user-b:pw-b', '--customer', 'Bolt']);
    const basicT = await addDevice(gw.dataDir, 'basicT', ['--mqtt-basic', 'cid-t:user-t:pw-t']);
    const x509B = await addDevice(gw.dataDir, 'x509B', ['--cert', certB.cert, '--customer', 'Bolt']);
    const x509T = await addDevice(gw.dataDir, 'x509T', ['--cert', certT.cert]);

    // each with its own live session
    const { port } = mqttPorts(gw);
    const basicSession = await connectAsync(`mqtt://127.0.0.1:${port}`, {
      clientId: 'cid-b',
      username: 'user-b',
      password: 'pw-b',
      reconnectPeriod: 0,
      protocolVersion: 5,
    });
    t.teardown(() => basicSession.end(true));
    const basicInbox = await ownSession(basicSession);
    const x509BSession = await connectAsync(`mqtts://127.0.0.1:${tlsPort}`, tlsOpts(certB));
    t.teardown(() => x509BSession.end(true));
    const x509TSession = await connectAsync(`mqtts://127.0.0.1:${tlsPort}`, tlsOpts(certT));
    t.teardown(() => x509TSession.end(true));
    const x509TInbox = await ownSession(x509TSession);

    const c = await mqttClient(t, gw, gwT.token, { protocolVersion: 5 });
    const gwInbox = new Inbox(c);
    await everyTopicRefused(t, c, 'basicB');
    await everyTopicRefused(t, c, 'x509B');
    for (const d of [basicB, x509B]) {
      t.same(await latest(admin, d.id), {}, `${d.name}: nothing stored`);
      t.same(await attributes(d.id, 'CLIENT_SCOPE'), {}, `${d.name}: no attribute`);
      t.notOk((await deviceById(d.id)).additionalInfo?.lastConnectedGateway, `${d.name}: not connected`);
    }
    const rpc = http('POST', `${gw.url}/api/plugins/rpc/oneway/${basicB.id}`, { method: 'b', params: {} }, userB);
    t.same(JSON.parse((await basicInbox.next((m) => m.topic.includes('/rpc/request/'))).text), {
      method: 'b',
      params: {},
    });
    t.equal((await rpc).status, 200, "customer B's RPC reaches its MQTT Basic device's own session");

    // the reverse: a customer's gateway and a tenant device
    const a = await mqttClient(t, gw, gwA.token, { protocolVersion: 5 });
    await everyTopicRefused(t, a, 'basicT');
    t.same(await latest(admin, basicT.id), {}, 'basicT: nothing stored');

    // the tenant's gateway serves the tenant's X.509 device; its own session keeps its RPCs
    await c.publishAsync('v1/gateway/telemetry', '{"x509T":[{"ts":1700000003000,"values":{"t":5}}]}', { qos: 1 });
    t.equal((await latest(admin, x509T.id))['t']?.[0]?.value, '5', 'same owner: stored');
    const x = http('POST', `${gw.url}/api/plugins/rpc/oneway/${x509T.id}`, { method: 'x', params: {} }, admin);
    t.same(JSON.parse((await x509TInbox.next((m) => m.topic.includes('/rpc/request/'))).text), {
      method: 'x',
      params: {},
    });
    t.equal((await x).status, 200);
    t.notOk(
      gwInbox.all.some((m) => m.topic === 'v1/gateway/rpc'),
      'the gateway got none of the RPCs of devices with their own session',
    );
  },
);
