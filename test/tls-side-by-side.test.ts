/**
 * Plain and TLS listeners side by side (docs/configuration.md "TLS"): a certificate adds HTTPS/WSS and MQTT over
 * TLS on ports of their own and leaves plain HTTP and MQTT where they were, so devices that speak plain HTTP keep
 * working on a gateway whose X.509 devices need TLS.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { connectAsync } from 'mqtt';
import t from 'tap';
import { adminHeaders, mqttPorts } from './helpers/mqtt.js';
import { addDevice, cli, cliJson, http, startGateway, tempDir } from './helpers/server.js';
import { hasOpenssl, selfSignedCert } from './helpers/tls.js';

function postHttps(url: string, ca: Buffer, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(url, { method: 'POST', ca, headers: { 'content-type': 'application/json' } }, (r) => {
      r.resume();
      r.on('end', () => resolve(r.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const skip = hasOpenssl ? false : 'openssl is not available';

t.test('plain HTTP, HTTPS, MQTT and MQTT over TLS at once', { skip }, async (t) => {
  const dir = tempDir(t);
  const server = selfSignedCert(dir);
  const deviceDir = join(dir, 'device');
  mkdirSync(deviceDir);
  const deviceCert = selfSignedCert(deviceDir);
  const gw = await startGateway(t, { args: ['--tls-cert', server.cert, '--tls-key', server.key] });

  const line = gw.logs.find((l) => l.includes('listening on')) ?? '';
  t.match(
    line,
    /listening on https:\/\/127\.0\.0\.1:\d+, http:\/\/127\.0\.0\.1:\d+, mqtt:\/\/127\.0\.0\.1:\d+, mqtts:\/\/127\.0\.0\.1:\d+, coap:\/\//,
    'the listening line names every port, HTTPS first',
  );
  t.not(gw.httpUrl, '', 'plain HTTP listens');
  t.not(gw.httpsUrl, '', 'HTTPS listens');
  t.not(gw.httpUrl.split(':')[2], gw.httpsUrl.split(':')[2], 'on ports of their own');
  const { port: mqttPort, tlsPort } = mqttPorts(gw);
  t.ok(mqttPort > 0 && tlsPort > 0, 'MQTT and MQTT over TLS listen');

  const plain = await addDevice(gw.dataDir, 'plain-http');
  const x509 = await cliJson<{ id: string }>([
    'device',
    'add',
    '--data-dir',
    gw.dataDir,
    '--name',
    'x509-dev',
    '--cert',
    deviceCert.cert,
  ]);
  const ca = readFileSync(server.cert);
  // the X.509 device connects over TLS while the plain-HTTP device posts
  const connecting = connectAsync(`mqtts://127.0.0.1:${tlsPort}`, {
    ca,
    cert: readFileSync(deviceCert.cert),
    key: readFileSync(deviceCert.key),
    reconnectPeriod: 0,
    connectTimeout: 5_000,
  });
  const posted = await http('POST', `${gw.httpUrl}/api/v1/${plain.token}/telemetry`, { ts: 1000, values: { t: 1 } });
  t.equal(posted.status, 200, 'a plain-HTTP device posts to a gateway with a certificate');
  const c = await connecting;
  await c.publishAsync('v1/devices/me/telemetry', '{"ts":2000,"values":{"x":2}}', { qos: 1 });
  await c.endAsync();
  t.equal(
    await postHttps(`${gw.httpsUrl}/api/v1/${plain.token}/telemetry`, ca, '{"ts":3000,"values":{"t":3}}'),
    200,
    'the same API over HTTPS',
  );

  // adminHeaders logs in through gw.url (HTTPS, whose certificate fetch does not trust): reads go over plain HTTP
  const headers = await adminHeaders({ ...gw, url: gw.httpUrl });
  const read = async (id: string, key: string): Promise<unknown> =>
    (
      await http(
        'GET',
        `${gw.httpUrl}/api/plugins/telemetry/DEVICE/${id}/values/timeseries?keys=${key}`,
        undefined,
        headers,
      )
    ).json();
  t.same(await read(x509.id, 'x'), { x: [{ ts: 2000, value: '2' }] }, 'the X.509 device’s point');
  t.same(await read(plain.id, 't'), { t: [{ ts: 3000, value: '3' }] }, 'the HTTPS post, read over plain HTTP');

  const status = await cli(['status', '--data-dir', gw.dataDir]);
  t.equal(status.code, 0, status.stderr);
  t.match(
    status.stdout,
    new RegExp(`http +port ${gw.httpUrl.split(':')[2]}, TLS ${gw.httpsUrl.split(':')[2]}\\n`),
    'outpost status names both HTTP ports',
  );
  t.match(status.stdout, new RegExp(`mqtt +port ${mqttPort}, TLS ${tlsPort}:`), 'and both MQTT ports');
});

t.test('http.plain false: HTTPS only', { skip }, async (t) => {
  const dir = tempDir(t);
  const server = selfSignedCert(dir);
  const config = join(dir, 'outpost.json');
  writeFileSync(config, JSON.stringify({ http: { plain: false } }));
  const gw = await startGateway(t, { args: ['--tls-cert', server.cert, '--tls-key', server.key, '--config', config] });
  t.equal(gw.httpUrl, '', 'no plain HTTP listener');
  t.not(gw.httpsUrl, '', 'HTTPS listens');
  const dev = await addDevice(gw.dataDir, 'tls-only');
  t.equal(await postHttps(`${gw.httpsUrl}/api/v1/${dev.token}/telemetry`, readFileSync(server.cert), '{"v":1}'), 200);

  const bad = await cli(['serve', '--data-dir', join(dir, 'other'), '--port', '0', '--config', config]);
  t.not(bad.code, 0, 'http.plain false without a certificate is refused');
  t.match(bad.stderr, /"http\.plain": false leaves no HTTP listener/);
});
