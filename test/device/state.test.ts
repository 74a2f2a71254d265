/**
 * Device connectivity state against the real daemon (docs/api.md "Device state"): activity from HTTP, MQTT
 * (PINGREQ alone too), CoAP and a gateway's sub-devices; connect and disconnect times from sessions; inactivity
 * after a per-device timeout and back at the next post; a device never heard from reported a timeout after its
 * creation; the state across a restart; the count in the status and /metrics.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { CoapTestClient, coapPort } from '../helpers/coap.js';
import { adminHeaders, mqttClient } from '../helpers/mqtt.js';
import { type Gateway, addDevice, http, startGateway, tempDir, waitStatus } from '../helpers/server.js';
import { waitFor } from '../helpers/wait.js';

type Attrs = Record<string, { value: unknown; lastUpdateTs: number }>;

const cfgDir = tempDir(t, 'outpost-state-cfg-');
const cfg = join(cfgDir, 'config.json');
writeFileSync(cfg, JSON.stringify({ state: { checkIntervalMs: 100 } }));
let gw = await startGateway(t, { args: ['--config', cfg] });
const admin = await adminHeaders(gw);

async function serverAttrs(g: Gateway, id: string): Promise<Attrs> {
  const r = await http(
    'GET',
    `${g.url}/api/plugins/telemetry/DEVICE/${id}/values/attributes/SERVER_SCOPE`,
    undefined,
    admin,
  );
  if (r.status !== 200) throw new Error(`attributes answered ${r.status}: ${r.text}`);
  const out: Attrs = {};
  for (const a of r.json<Array<{ key: string; value: unknown; lastUpdateTs: number }>>()) out[a.key] = a;
  return out;
}

const num = (a: Attrs, k: string): number => (typeof a[k]?.value === 'number' ? (a[k]?.value as number) : 0);

/** Reads the device's SERVER_SCOPE attributes until `pred` holds (waitFor: 20 s, then the last read). */
async function waitAttrs(id: string, pred: (a: Attrs) => boolean, label: string, g: Gateway = gw): Promise<Attrs> {
  let last: Attrs = {};
  return waitFor(
    async () => {
      last = await serverAttrs(g, id);
      return pred(last) ? last : undefined;
    },
    { message: () => `${label}; last read ${JSON.stringify(last)}` },
  );
}

async function setTimeoutMs(id: string, ms: number): Promise<void> {
  const r = await http(
    'POST',
    `${gw.url}/api/plugins/telemetry/DEVICE/${id}/attributes/SERVER_SCOPE`,
    { inactivityTimeout: ms },
    admin,
  );
  if (r.status !== 200) throw new Error(`inactivityTimeout answered ${r.status}: ${r.text}`);
}

async function deviceByName(name: string): Promise<string> {
  const r = await http('GET', `${gw.url}/api/tenant/devices?deviceName=${name}`, undefined, admin);
  return r.json<{ id: { id: string } }>().id.id;
}

t.test('HTTP: any request of the device API is activity, and there is no session', async (t) => {
  const dev = await addDevice(gw.dataDir, 'state-http');
  const before = Date.now();
  // a read, not a write: still the device heard from
  const r = await http('GET', `${gw.url}/api/v1/${dev.token}/attributes`);
  t.equal(r.status, 200);
  const a = await serverAttrs(gw, dev.id);
  t.equal(a['active']?.value, true, 'active at once');
  t.ok(num(a, 'lastActivityTime') >= before, 'lastActivityTime is the request');
  t.notOk('lastConnectTime' in a, 'HTTP connects nothing (as ThingsBoard)');
  const first = num(a, 'lastActivityTime');
  await http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, { t: 1 });
  const b = await serverAttrs(gw, dev.id);
  t.ok(num(b, 'lastActivityTime') > first, 'the next post moves it, readable at once');
});

t.test('MQTT: connect and disconnect times; a client that only pings stays active', async (t) => {
  const dev = await addDevice(gw.dataDir, 'state-mqtt');
  await setTimeoutMs(dev.id, 1500);
  const before = Date.now();
  const c = await mqttClient(t, gw, dev.token, { keepalive: 1 });
  const connected = await waitAttrs(
    dev.id,
    (a) => num(a, 'lastConnectTime') >= before && a['active']?.value === true,
    'lastConnectTime, and active from the connect',
  );
  const at = num(connected, 'lastConnectTime');
  // only PINGREQs go out: the activity keeps moving past two timeouts and the device stays active
  const pinged = await waitAttrs(dev.id, (a) => num(a, 'lastActivityTime') >= at + 3_200, 'pings are activity');
  t.equal(pinged['active']?.value, true, 'still active after twice its timeout');
  t.notOk('inactivityAlarmTime' in pinged, 'never reported inactive');
  c.end(true);
  const closed = await waitAttrs(dev.id, (a) => num(a, 'lastDisconnectTime') >= at, 'lastDisconnectTime');
  t.equal(num(closed, 'lastConnectTime'), at, 'the connect time stays');
  // a disconnect does not make it inactive; its timeout does
  const gone = await waitAttrs(dev.id, (a) => a['active']?.value === false, 'inactive after its timeout');
  t.ok(num(gone, 'inactivityAlarmTime') >= num(gone, 'lastActivityTime') + 1500, 'reported at a check after it');
  const post = Date.now();
  await http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, { t: 1 });
  const back = await waitAttrs(dev.id, (a) => a['active']?.value === true, 'active at the next post', gw);
  t.ok(num(back, 'lastActivityTime') >= post, 'its activity is the post');
  t.ok((back['active']?.lastUpdateTs ?? 0) >= post, 'active written at the post');
});

t.test('CoAP: a post is activity; an observation opens and closes a session', async (t) => {
  const dev = await addDevice(gw.dataDir, 'state-coap');
  const c = await CoapTestClient.open(t, coapPort(gw));
  const before = Date.now();
  const posted = await c.request({ method: 'POST', path: `/api/v1/${dev.token}/telemetry`, payload: '{"t":1}' });
  t.equal(posted.code, '2.01');
  const a = await serverAttrs(gw, dev.id);
  t.equal(a['active']?.value, true, 'active at once');
  t.ok(num(a, 'lastActivityTime') >= before);
  t.notOk('lastConnectTime' in a, 'a request alone is no session');
  const token = c.nextToken();
  const obs = await c.request({ path: `/api/v1/${dev.token}/attributes`, observe: 0, token });
  t.equal(obs.code, '2.05');
  const opened = await waitAttrs(dev.id, (x) => num(x, 'lastConnectTime') >= before, 'observe connects');
  await c.request({ path: `/api/v1/${dev.token}/attributes`, observe: 1, token });
  await waitAttrs(
    dev.id,
    (x) => num(x, 'lastDisconnectTime') >= num(opened, 'lastConnectTime'),
    'the cancel disconnects',
  );
});

t.test("gateway: a sub-device's connect, data, disconnect, and the gateway's connection ending", async (t) => {
  const gwDev = await addDevice(gw.dataDir, 'state-gw', ['--gateway']);
  const c = await mqttClient(t, gw, gwDev.token);
  const before = Date.now();
  await c.publishAsync('v1/gateway/connect', '{"device":"state-sub-1"}', { qos: 1 });
  const sub1 = await deviceByName('state-sub-1');
  const connected = await waitAttrs(
    sub1,
    (a) => num(a, 'lastConnectTime') >= before && a['active']?.value === true,
    'sub-device connected and active',
  );
  const first = num(connected, 'lastActivityTime');
  await c.publishAsync('v1/gateway/telemetry', '{"state-sub-1":[{"t":1}]}', { qos: 1 });
  t.ok(num(await serverAttrs(gw, sub1), 'lastActivityTime') > first, "the gateway's data is the sub-device's activity");
  await c.publishAsync('v1/gateway/disconnect', '{"device":"state-sub-1"}', { qos: 1 });
  await waitAttrs(sub1, (a) => num(a, 'lastDisconnectTime') >= num(connected, 'lastConnectTime'), 'disconnected');
  await c.publishAsync('v1/gateway/attributes', '{"state-sub-2":{"fw":"1"}}', { qos: 1 });
  const sub2 = await deviceByName('state-sub-2');
  const on2 = await waitAttrs(sub2, (a) => num(a, 'lastConnectTime') >= before, 'data connects a new name');
  t.notOk('lastDisconnectTime' in on2);
  c.end(true);
  await waitAttrs(sub2, (a) => num(a, 'lastDisconnectTime') >= num(on2, 'lastConnectTime'), 'gateway gone');
});

t.test("gateway: a sub-device's attribute request and RPC reply are its activity too", async (t) => {
  const gwDev = await addDevice(gw.dataDir, 'state-gw-req', ['--gateway']);
  const c = await mqttClient(t, gw, gwDev.token);
  await c.publishAsync('v1/gateway/connect', '{"device":"state-sub-req"}', { qos: 1 });
  const sub = await deviceByName('state-sub-req');
  const on = num(await waitAttrs(sub, (a) => num(a, 'lastActivityTime') > 0, 'connected'), 'lastActivityTime');
  // a later millisecond than the connect's, so a new activity shows
  await waitFor(() => Date.now() > on, { message: 'the clock moved' });
  await c.publishAsync('v1/gateway/attributes/request', '{"id":1,"device":"state-sub-req","client":true,"key":"x"}', {
    qos: 1,
  });
  const asked = num(
    await waitAttrs(sub, (a) => num(a, 'lastActivityTime') > on, 'the attribute request'),
    'lastActivityTime',
  );
  await waitFor(() => Date.now() > asked, { message: 'the clock moved' });
  await c.publishAsync('v1/gateway/rpc', '{"device":"state-sub-req","id":7,"data":{"ok":true}}', { qos: 1 });
  await waitAttrs(sub, (a) => num(a, 'lastActivityTime') > asked, 'the RPC reply');
});

t.test(
  'gateway: with overwriteActivityTime its pings keep its sub-devices active; without, they go inactive',
  async (t) => {
    /** A gateway made over REST (where TB sets the flag), one sub-device connected, then only PINGREQs. */
    async function pingingGateway(name: string, info: Record<string, unknown>): Promise<string> {
      const r = await http(
        'POST',
        `${gw.url}/api/device?accessToken=${name}-token`,
        { name, additionalInfo: info },
        admin,
      );
      if (r.status !== 200) throw new Error(`device answered ${r.status}: ${r.text}`);
      const c = await mqttClient(t, gw, `${name}-token`, { keepalive: 1 });
      await c.publishAsync('v1/gateway/connect', `{"device":"${name}-sub"}`, { qos: 1 });
      const sub = await deviceByName(`${name}-sub`);
      await setTimeoutMs(sub, 1500);
      return sub;
    }
    const kept = await pingingGateway('state-gw-ow', { gateway: true, overwriteActivityTime: true });
    const plain = await pingingGateway('state-gw-plain', { gateway: true });
    const on = num(await waitAttrs(kept, (a) => a['active']?.value === true, 'connected'), 'lastConnectTime');
    const gone = await waitAttrs(plain, (a) => a['active']?.value === false, 'without the flag: inactive');
    t.ok(num(gone, 'inactivityAlarmTime') > 0, 'reported inactive');
    const pinged = await waitAttrs(kept, (a) => num(a, 'lastActivityTime') >= on + 3_200, "the gateway's pings");
    t.equal(pinged['active']?.value, true, 'with the flag: still active after twice its timeout');
    t.notOk('inactivityAlarmTime' in pinged, 'never reported inactive');
  },
);

t.test('a device never heard from is reported inactive a timeout after its creation', async (t) => {
  const dev = await addDevice(gw.dataDir, 'state-silent');
  const created = (await http('GET', `${gw.url}/api/device/${dev.id}`, undefined, admin)).json<{
    createdTime: number;
  }>().createdTime;
  const fresh = await waitAttrs(dev.id, (a) => 'active' in a, 'active recorded for a new device');
  t.equal(fresh['active']?.value, false, 'a new device is inactive');
  await setTimeoutMs(dev.id, 1000);
  const a = await waitAttrs(dev.id, (x) => num(x, 'inactivityAlarmTime') > 0, 'inactivity reported');
  t.ok(num(a, 'inactivityAlarmTime') >= created + 1000, 'not before its creation + timeout');
  t.notOk('lastActivityTime' in a);
});

t.test('status and /metrics count active devices', async (t) => {
  const st = await waitStatus<{ devices?: { total: number; active: number } }>(
    gw,
    admin,
    (s) => (s.devices?.active ?? 0) > 0,
  );
  t.ok((st.devices?.total ?? 0) >= (st.devices?.active ?? 0));
  const m = await http('GET', `${gw.url}/metrics`, undefined, admin);
  t.match(m.text, /\noutpost_devices_active \d+\n/);
});

t.test('the state after a restart: every time kept in memory is written at the stop', async (t) => {
  const dev = await addDevice(gw.dataDir, 'state-restart');
  await http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, { t: 1 });
  const c = await mqttClient(t, gw, dev.token);
  await c.publishAsync('v1/devices/me/telemetry', '{"t":2}', { qos: 1 });
  c.end(true);
  const before = await waitAttrs(dev.id, (a) => num(a, 'lastDisconnectTime') > 0, 'disconnected');
  t.equal(await gw.stop(), 0);
  gw = await startGateway(t, { dataDir: gw.dataDir, args: ['--config', cfg] });
  const after = await serverAttrs(gw, dev.id);
  for (const k of ['active', 'lastActivityTime', 'lastConnectTime', 'lastDisconnectTime'])
    t.same(after[k]?.value, before[k]?.value, `${k} kept`);
});
