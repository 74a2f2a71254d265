/**
 * The device layer's actions (src/device/actions.ts) are one path whatever the transport: a device's RPC reply
 * reaches the REST caller as the device sent it over HTTP, MQTT and CoAP (CoAP taking only JSON), and the
 * client-side RPC request is checked the same way on all three. Against the real daemon.
 */
import t from 'tap';
import { CoapTestClient, coapPort, opt, readUint } from '../helpers/coap.js';
import { Inbox, adminHeaders, mqttClient } from '../helpers/mqtt.js';
import { addDevice, http, startGateway, waitLongPoll } from '../helpers/server.js';

const gw = await startGateway(t);
const admin = await adminHeaders(gw);
/** a reply as a device may write it: spaces, key order and a number's text are the device's */
const REPLY = '{"t": 20.50, "unit":"C"}';

/**
 * A two-way RPC to `deviceId` by REST: `done` is the REST answer. A device with no listener gets it queued (for
 * its next long-poll), waited for here; a listening device is sent it at once.
 */
async function twoway(deviceId: string, listening: boolean): Promise<{ readonly done: ReturnType<typeof http> }> {
  const before = await waitLongPoll(gw, admin, () => true);
  const done = http(
    'POST',
    `${gw.url}/api/plugins/rpc/twoway/${deviceId}`,
    { method: 'getTemp', params: {}, timeout: 10_000 },
    admin,
  );
  if (!listening) await waitLongPoll(gw, admin, (s) => s.queuedRpcs > before.queuedRpcs);
  return { done };
}

t.test('an RPC reply reaches the REST caller as the device sent it, over HTTP, MQTT and CoAP', async (t) => {
  const h = await addDevice(gw.dataDir, 'one-path-http');
  let call = await twoway(h.id, false);
  const got = await http('GET', `${gw.url}/api/v1/${h.token}/rpc?timeout=5000`);
  t.equal(got.status, 200, got.text);
  t.same(got.json(), { id: 1, method: 'getTemp', params: {} });
  t.equal((await http('POST', `${gw.url}/api/v1/${h.token}/rpc/1`, REPLY)).status, 200);
  t.equal((await call.done).text, REPLY, 'HTTP');

  const m = await addDevice(gw.dataDir, 'one-path-mqtt');
  const client = await mqttClient(t, gw, m.token);
  const inbox = new Inbox(client);
  await client.subscribeAsync('v1/devices/me/rpc/request/+', { qos: 1 });
  call = await twoway(m.id, true);
  await inbox.next((x) => x.topic === 'v1/devices/me/rpc/request/1');
  await client.publishAsync('v1/devices/me/rpc/response/1', REPLY, { qos: 1 });
  t.equal((await call.done).text, REPLY, 'MQTT');

  const c = await addDevice(gw.dataDir, 'one-path-coap');
  const coap = await CoapTestClient.open(t, coapPort(gw));
  const token = coap.nextToken();
  t.equal((await coap.request({ path: `api/v1/${c.token}/rpc`, observe: 0, token })).code, '2.03');
  call = await twoway(c.id, true);
  await coap.waitFor((p) => p.token.equals(token) && readUint(opt(p, 'Observe')) === 1);
  const notJson = await coap.request({ method: 'POST', path: `api/v1/${c.token}/rpc/1`, payload: 'warm' });
  t.equal(notJson.code, '4.00', 'CoAP takes only JSON replies');
  const rep = await coap.request({ method: 'POST', path: `api/v1/${c.token}/rpc/1`, payload: REPLY });
  t.equal(rep.code, '2.01');
  t.equal((await call.done).text, REPLY, 'CoAP: the same text, not a re-serialized copy');
});

t.test('a client-side RPC request without a method is refused the same way on every transport', async (t) => {
  const d = await addDevice(gw.dataDir, 'client-rpc-check');
  for (const body of ['{"params":{}}', '{"method":""}', '[1]']) {
    const r = await http('POST', `${gw.url}/api/v1/${d.token}/rpc`, body);
    t.equal(r.status, 400, `HTTP ${body}`);
    t.match(r.json(), { message: /RPC request must/ });

    const coap = await CoapTestClient.open(t, coapPort(gw));
    const a = await coap.request({ method: 'POST', path: `api/v1/${d.token}/rpc`, payload: body });
    t.equal(a.code, '4.00', `CoAP ${body}`);
    t.match(a.payload.toString(), /RPC request must/);

    const client = await mqttClient(t, gw, d.token, { protocolVersion: 5 });
    // MQTT.js rejects a publish its PUBACK refuses, with the reason code
    const refused = await client.publishAsync('v1/devices/me/rpc/request/7', body, { qos: 1 }).then(
      () => 0,
      (err: { code?: number }) => err.code,
    );
    t.equal(refused, 0x99, `MQTT 5 ${body}: payload format invalid`);
    client.end(true);
  }
  const r = await http('POST', `${gw.url}/api/v1/${d.token}/rpc`, { method: 'getCurrentTime' });
  t.equal(r.status, 200);
  t.type(r.json<{ time: number }>().time, 'number', 'a request with a method goes on');
});
