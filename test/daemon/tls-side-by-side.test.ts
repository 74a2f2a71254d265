/**
 * Plain HTTP beside HTTPS (docs/configuration.md "TLS"): with a certificate the serve port answers HTTPS and WSS,
 * as `serve --port P --tls-cert` always did; `http.plainPort` adds plain HTTP on a port of its own, so devices that
 * speak plain HTTP keep working on a gateway whose X.509 devices need MQTT over TLS.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { type AddressInfo, createServer } from 'node:net';
import { join } from 'node:path';
import { connectAsync } from 'mqtt';
import t from 'tap';
import { adminHeaders, mqttPorts } from '../helpers/mqtt.js';
import { addDevice, cli, cliJson, http, startGateway, tempDir } from '../helpers/server.js';
import { hasOpenssl, selfSignedCert } from '../helpers/tls.js';

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

/** A port nothing listens on (yet): the one given to `serve --port`. */
async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

const portOf = (url: string): string => url.split(':')[2] ?? '';

const skip = hasOpenssl ? false : 'openssl is not available';

t.test('HTTPS on the serve port, plain HTTP on http.plainPort, MQTT and MQTT over TLS at once', { skip }, async (t) => {
  const dir = tempDir(t);
  const server = selfSignedCert(dir);
  const deviceDir = join(dir, 'device');
  mkdirSync(deviceDir);
  const deviceCert = selfSignedCert(deviceDir);
  const config = join(dir, 'outpost.json');
  writeFileSync(config, JSON.stringify({ http: { plainPort: -1 } }));
  const gw = await startGateway(t, { args: ['--tls-cert', server.cert, '--tls-key', server.key, '--config', config] });

  const line = gw.logs.find((l) => l.includes('listening on')) ?? '';
  t.match(
    line,
    /listening on https:\/\/127\.0\.0\.1:\d+, http:\/\/127\.0\.0\.1:\d+, mqtt:\/\/127\.0\.0\.1:\d+, mqtts:\/\/127\.0\.0\.1:\d+, coap:\/\//,
    'the listening line names every port, the serve port (HTTPS) first',
  );
  t.equal(gw.url, gw.httpsUrl, 'the serve port is the HTTPS one');
  t.not(gw.httpUrl, '', 'plain HTTP listens beside it');
  t.not(portOf(gw.httpUrl), portOf(gw.httpsUrl), 'on a port of its own');
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
    await postHttps(`${gw.url}/api/v1/${plain.token}/telemetry`, ca, '{"ts":3000,"values":{"t":3}}'),
    200,
    'the same API over HTTPS on the serve port',
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
    new RegExp(`http +port ${gw.port} \\(HTTPS\\), plain HTTP ${portOf(gw.httpUrl)}\\n`),
    'outpost status names both HTTP ports',
  );
  t.match(status.stdout, new RegExp(`mqtt +port ${mqttPort}, TLS ${tlsPort}:`), 'and both MQTT ports');
});

t.test('a certificate without http.plainPort: HTTPS alone, on the port given', { skip }, async (t) => {
  const dir = tempDir(t);
  const server = selfSignedCert(dir);
  const port = await freePort();
  // a given serve port keeps MQTT and CoAP on their defaults (1883, 5683), which a daemon beside the tests may hold
  const gw = await startGateway(t, {
    args: ['--port', String(port), '--tls-cert', server.cert, '--tls-key', server.key],
    env: { OUTPOST_MQTT_PORT: 'ephemeral', OUTPOST_COAP_PORT: 'ephemeral' },
  });
  const line = gw.logs.find((l) => l.includes('listening on')) ?? '';
  t.match(line, `listening on https://127.0.0.1:${port}, mqtt://`, 'the serve port is HTTPS; no plain HTTP port');
  t.equal(gw.httpUrl, '', 'no plain HTTP listener');
  t.equal(gw.url, `https://127.0.0.1:${port}`);
  const dev = await addDevice(gw.dataDir, 'tls-only');
  t.equal(
    await postHttps(`https://127.0.0.1:${port}/api/v1/${dev.token}/telemetry`, readFileSync(server.cert), '{"v":1}'),
    200,
  );
  await t.rejects(
    http('POST', `http://127.0.0.1:${port}/api/v1/${dev.token}/telemetry`, { v: 2 }),
    'no plain HTTP there',
  );

  const status = await cli(['status', '--data-dir', gw.dataDir]);
  t.equal(status.code, 0, status.stderr);
  t.match(status.stdout, new RegExp(`http +port ${port} \\(HTTPS\\)\\n`));
});

t.test('http.plainPort without a certificate: serve refuses it, the admin CLI reads the file', async (t) => {
  const dir = tempDir(t);
  const config = join(dir, 'outpost.json');
  writeFileSync(config, JSON.stringify({ http: { plainPort: 8081 } }));
  const data = join(dir, 'data');
  for (const extra of [[], ['--check-config']]) {
    const bad = await cli(['serve', '--data-dir', data, '--port', '0', '--config', config, ...extra]);
    t.not(bad.code, 0, `serve ${extra.join(' ')} refuses it`);
    t.match(bad.stderr, /"http\.plainPort" \(8081\) needs --tls-cert\/--tls-key/);
  }
  const added = await cli(['device', 'add', '--data-dir', data, '--config', config, '--name', 'd']);
  t.equal(added.code, 0, `the daemon's certificate may come from its flags: ${added.stderr}`);
});
