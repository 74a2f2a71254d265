/**
 * Provisioning's rate limits (docs/api.md "Device provisioning", docs/configuration.md `provision.*`) against the
 * real daemon over HTTP, MQTT and CoAP, from several loopback addresses: requests per address and per key a
 * minute, devices per key an hour. A refusal answers TB's FAILURE body (HTTP 200, MQTT `/provision/response`,
 * CoAP 4.00), creates nothing, is counted in `outpost_failures_total{kind="provision"}` and logged with the
 * address and the key's owner, never the secret.
 */
import { request } from 'node:http';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { CoapTestClient, coapPort } from '../helpers/coap.js';
import { Inbox, adminHeaders, granted, mqttClient } from '../helpers/mqtt.js';
import { type Gateway, type Teardown, http, startGateway, tempDir, waitLogLines } from '../helpers/server.js';

interface Answer {
  status: string;
  errorMsg?: string;
  credentialsValue?: string;
}

async function gateway(t: Teardown, provision: object): Promise<Gateway> {
  const dir = tempDir(t);
  writeFileSync(join(dir, 'c.json'), JSON.stringify({ provision: { key: 'pk', secret: 'ps', ...provision } }));
  return startGateway(t, { args: ['--config', join(dir, 'c.json')] });
}

/** POST /api/v1/provision from a loopback address of our choosing (127.0.0.0/8 is all loopback on Linux). */
function provisionFrom(gw: Gateway, from: string, body: object): Promise<{ status: number; body: Answer }> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${gw.url}/api/v1/provision`,
      { method: 'POST', localAddress: from, headers: { 'content-type': 'application/json' } },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => {
          text += c.toString();
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as Answer }));
      },
    );
    req.once('error', reject);
    req.end(JSON.stringify(body));
  });
}

const ask = (name: string, secret = 'ps'): object => ({
  deviceName: name,
  provisionDeviceKey: 'pk',
  provisionDeviceSecret: secret,
});

async function deviceExists(gw: Gateway, admin: Record<string, string>, name: string): Promise<boolean> {
  const r = await http('GET', `${gw.url}/api/tenant/devices?deviceName=${name}`, undefined, admin);
  return r.status === 200;
}

async function failuresCounted(gw: Gateway): Promise<number> {
  const m = await http('GET', `${gw.url}/metrics`);
  return Number(/outpost_failures_total\{kind="provision"\} (\d+)/.exec(m.text)?.[1] ?? 'NaN');
}

t.test('requests per address a minute: one address refused on every transport, others go on', async (t) => {
  const gw = await gateway(t, { maxPerAddressPerMinute: 4 });
  const admin = await adminHeaders(gw);
  for (let i = 0; i < 4; i++) {
    const r = await provisionFrom(gw, '127.0.0.1', ask(`guess-${i}`, `wrong-${i}`));
    t.equal(r.body.status, 'NOT_FOUND', `guess ${i}: answered`);
  }
  const from = gw.logs.length;
  const refused = await provisionFrom(gw, '127.0.0.1', ask('right-secret'));
  t.equal(refused.status, 200, 'HTTP 200, as every provisioning answer');
  t.same(refused.body, { status: 'FAILURE', errorMsg: 'Too many provisioning requests, try again later!' });
  t.notOk(await deviceExists(gw, admin, 'right-secret'), 'nothing created, even with the right secret');
  const [line] = await waitLogLines(gw, /provision: refused/, 1, { from });
  t.match(line, /from 127\.0\.0\.1: too many from this address/);
  t.notMatch(line, /ps/, 'the secret is not logged');

  // the same address over MQTT and CoAP: the limit is the daemon's, not a transport's
  const c = await mqttClient(t, gw, 'provision');
  const inbox = new Inbox(c);
  await granted(c, { '/provision/response': { qos: 1 } });
  await c.publishAsync('/provision/request', JSON.stringify(ask('via-mqtt')), { qos: 1 });
  const m = await inbox.next((x) => x.topic === '/provision/response');
  t.equal((JSON.parse(m.text) as Answer).status, 'FAILURE', 'MQTT refused');
  const coap = await CoapTestClient.open(t, coapPort(gw));
  const a = await coap.request({ method: 'POST', path: 'api/v1/provision', payload: JSON.stringify(ask('via-coap')) });
  t.equal(a.code, '4.00', 'CoAP refused');
  t.equal((JSON.parse(a.payload.toString()) as Answer).status, 'FAILURE');
  t.notOk(await deviceExists(gw, admin, 'via-mqtt'));
  t.notOk(await deviceExists(gw, admin, 'via-coap'));

  const other = await provisionFrom(gw, '127.0.0.2', ask('elsewhere'));
  t.equal(other.body.status, 'SUCCESS', 'another address is not held back');
  t.ok(await deviceExists(gw, admin, 'elsewhere'));
  t.equal(await failuresCounted(gw), 3, 'each refusal counted in outpost_failures_total{kind="provision"}');
});

t.test('devices per key an hour, then requests per key a minute, whatever the address', async (t) => {
  const gw = await gateway(t, { maxDevicesPerKeyPerHour: 2, maxPerKeyPerMinute: 4 });
  const admin = await adminHeaders(gw);
  t.equal((await provisionFrom(gw, '127.0.0.2', ask('d1'))).body.status, 'SUCCESS');
  t.equal((await provisionFrom(gw, '127.0.0.3', ask('d2'))).body.status, 'SUCCESS');
  const from = gw.logs.length;
  const third = await provisionFrom(gw, '127.0.0.4', ask('d3'));
  t.same(third.body, {
    status: 'FAILURE',
    errorMsg: 'Too many devices provisioned with this key, try again later!',
  });
  t.notOk(await deviceExists(gw, admin, 'd3'), 'the third device is not created');
  const [line] = await waitLogLines(gw, /provision: refused/, 1, { from });
  t.match(line, /from 127\.0\.0\.4: the key of provision\.key created its hourly share of devices/);
  // a known name still answers as before (no device to create): the cap is on creation
  const known = await provisionFrom(gw, '127.0.0.5', ask('d1'));
  t.match(known.body.errorMsg, /already exists/);
  // the fourth request naming the key this minute was that one; the fifth is refused before the secret is read
  const fifth = await provisionFrom(gw, '127.0.0.6', ask('d5', 'wrong'));
  t.same(fifth.body, { status: 'FAILURE', errorMsg: 'Too many provisioning requests, try again later!' });
  // a key nothing owns is limited per address only: NOT_FOUND as before
  const stranger = await provisionFrom(gw, '127.0.0.7', {
    deviceName: 'x',
    provisionDeviceKey: 'other',
    provisionDeviceSecret: 'ps',
  });
  t.equal(stranger.body.status, 'NOT_FOUND');
  t.equal(await failuresCounted(gw), 2);
});
