/**
 * Entity names are capped at 255 characters and hold no control character (docs/api.md): REST answers 400 with
 * TB's error JSON (errorCode 31) and changes nothing; a lookup by a long name finds nothing instead of failing;
 * provisioning answers FAILURE; the CLI refuses; the MQTT Gateway API refuses that message (MQTT 5: PUBACK 0x99;
 * 3.1.1: dropped) and keeps the session, and a multi-device publish with one bad name stores nothing.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { latest, mqttClient } from '../helpers/mqtt.js';
import { addDevice, cli, http, startGateway, tempDir } from '../helpers/server.js';
import { adminHeaders } from '../helpers/users.js';

const cfg = join(tempDir(t), 'config.json');
writeFileSync(cfg, JSON.stringify({ provision: { key: 'pk', secret: 'ps' } }));
const gw = await startGateway(t, { args: ['--config', cfg] });
const admin = await adminHeaders(gw);
const LONG = 'n'.repeat(2000);
const AT_CAP = 'm'.repeat(255);
const gateway = await addDevice(gw.dataDir, 'names-gw', ['--gateway']);

async function deviceId(name: string): Promise<string | undefined> {
  const r = await http('GET', `${gw.url}/api/tenant/devices?deviceName=${encodeURIComponent(name)}`, undefined, admin);
  return r.status === 200 ? r.json<{ id: { id: string } }>().id.id : undefined;
}

t.test('REST: a name over 255 characters or with a control character → 400 errorCode 31', async (t) => {
  for (const [path, body] of [
    ['/api/device', { name: LONG }],
    ['/api/device', { name: 'a\x00b' }],
    ['/api/device', { name: 'evil\x1b]0;PWNED\x07' }],
    ['/api/device', { name: 'ok', type: LONG }],
    ['/api/asset', { name: LONG }],
    ['/api/customer', { title: LONG }],
    ['/api/customer', { title: 'x\ny' }],
  ] as const) {
    const r = await http('POST', `${gw.url}${path}`, body, admin);
    t.equal(r.status, 400, `${path} ${JSON.stringify(body).slice(0, 40)}: 400 (${r.text.slice(0, 120)})`);
    const e = r.json<{ status: number; errorCode: number; message: string }>();
    t.equal(e.errorCode, 31);
    t.match(e.message, /^Validation error: (name|type|title) /);
  }
  const ok = await http('POST', `${gw.url}/api/device`, { name: AT_CAP }, admin);
  t.equal(ok.status, 200, '255 characters are fine');
  const renamed = await http('POST', `${gw.url}/api/device`, { id: ok.json<{ id: unknown }>().id, name: LONG }, admin);
  t.equal(renamed.status, 400, 'a rename to a long name too');
  t.equal(await deviceId(LONG), undefined, 'a lookup by a long name finds nothing (404, not 500)');
  const page = await http('GET', `${gw.url}/api/tenant/devices?pageSize=100&page=0`, undefined, admin);
  t.notOk(page.text.includes('nnnnnnnnnn'), 'nothing created');
});

t.test('provisioning and the CLI refuse too', async (t) => {
  for (const deviceName of [LONG, 'bad\x1bname']) {
    const p = await http('POST', `${gw.url}/api/v1/provision`, {
      deviceName,
      provisionDeviceKey: 'pk',
      provisionDeviceSecret: 'ps',
    });
    t.equal(p.status, 200);
    t.equal(p.json<{ status: string }>().status, 'FAILURE', 'provisioning answers FAILURE');
    t.match(p.json<{ errorMsg: string }>().errorMsg, /Validation error: name/);
  }
  const r = await cli(['device', 'add', '--data-dir', gw.dataDir, '--name', LONG]);
  t.equal(r.code, 1, 'CLI: exit 1');
  t.match(r.stderr, /length must be equal or less than 255/);
});

t.test('MQTT 5 gateway: PUBACK 0x99 for that message, the session kept', async (t) => {
  const c = await mqttClient(t, gw, gateway.token, { protocolVersion: 5 });
  for (const [topic, body] of [
    ['v1/gateway/connect', JSON.stringify({ device: LONG })],
    ['v1/gateway/telemetry', JSON.stringify({ 'Good 1': [{ v: 1 }], [LONG]: [{ v: 2 }] })],
    ['v1/gateway/attributes', JSON.stringify({ 'Good 1': { a: 1 }, 'bad\x07bell': { a: 2 } })],
  ] as const) {
    const err = await c.publishAsync(topic, body, { qos: 1 }).then(
      () => undefined,
      (e: { code?: number }) => e,
    );
    t.equal(err?.code, 0x99, `${topic}: 0x99`);
  }
  t.equal(await deviceId('Good 1'), undefined, 'a refused multi-device publish creates and stores nothing');
  await c.publishAsync('v1/gateway/telemetry', JSON.stringify({ 'Good 2': [{ v: 3 }] }), { qos: 1 });
  const id = (await deviceId('Good 2')) as string;
  t.ok(id, 'the same session goes on');
  t.equal((await latest(gw, admin, id))['v']?.[0]?.value, '3');
});

t.test('MQTT 3.1.1 gateway: the message dropped, the session kept', async (t) => {
  const c = await mqttClient(t, gw, gateway.token);
  await c.publishAsync('v1/gateway/connect', JSON.stringify({ device: LONG }), { qos: 1 });
  await c.publishAsync('v1/gateway/telemetry', JSON.stringify({ [LONG]: [{ v: 1 }], 'Good 3': [{ v: 1 }] }), {
    qos: 1,
  });
  t.equal(await deviceId('Good 3'), undefined, 'nothing of the refused publish stored');
  await c.publishAsync('v1/gateway/telemetry', JSON.stringify({ 'Good 4': [{ v: 4 }] }), { qos: 1 });
  t.ok(c.connected, 'still connected');
  t.ok(await deviceId('Good 4'), 'and still served');
});
