/**
 * "A PUBACK means on disk" (docs/mqtt.md): 200 QoS 1 messages from several clients, kill -9 right after the
 * last PUBACK, restart, every point there. MQTT over TLS on mqtt.tlsPort with the daemon's certificate. The
 * MQTT port set explicitly, taken by another process, stops the start.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { type Server, createServer } from 'node:net';
import { join } from 'node:path';
import { connectAsync } from 'mqtt';
import mqttPacket from 'mqtt-packet';
import t from 'tap';
import { hasOpenssl, selfSignedCert } from '../../helpers/tls.js';
import { adminHeaders, mqttClient, mqttPorts, rawSocket } from '../../helpers/mqtt.js';
import { readEntity } from '../../helpers/readback.js';
import { addDevice, cli, http, startGateway, tempDir, waitLogLines } from '../../helpers/server.js';
import { waitFor } from '../../helpers/wait.js';

t.test('kill -9 after 200 PUBACKs: all 200 there after the restart', async (t) => {
  const gw = await startGateway(t);
  const devices = await Promise.all([0, 1, 2, 3].map((i) => addDevice(gw.dataDir, `dur-${i}`)));
  const clients = await Promise.all(
    devices.map((d, i) => mqttClient(t, gw, d.token, { protocolVersion: i % 2 === 0 ? 4 : 5 })),
  );
  const acks: Array<Promise<unknown>> = [];
  for (let n = 0; n < 200; n++) {
    const c = clients[n % 4];
    // pipelined: every message in flight at once, the PUBACKs come as the group commits land
    acks.push(
      c?.publishAsync('v1/devices/me/telemetry', `{"ts":${1700000000000 + n},"values":{"n":${n},"d":${n}.0}}`, {
        qos: 1,
      }) ?? Promise.reject(new Error('no client')),
    );
  }
  await Promise.all(acks);
  gw.proc.kill('SIGKILL');
  await new Promise((r) => gw.proc.once('exit', r));
  let total = 0;
  for (const [i, d] of devices.entries()) {
    const dump = await readEntity(gw.dataDir, d.id);
    const ns = (dump.points['n'] ?? []).map((p) => Number(p.value));
    t.equal(ns.length, 50, `device ${i}: its 50 points`);
    t.same(
      ns,
      Array.from({ length: 50 }, (_, k) => 4 * k + i),
      'each with its own value and ts',
    );
    t.equal(dump.points['d']?.[1]?.type, 'DOUBLE', '42.0 stays a double, as over HTTP');
    total += ns.length;
  }
  t.equal(total, 200);
  // and the restarted daemon serves them
  const again = await startGateway(t, { dataDir: gw.dataDir });
  const admin = await adminHeaders(again);
  const r = await http(
    'GET',
    `${again.url}/api/plugins/telemetry/DEVICE/${devices[0]?.id ?? ''}/values/timeseries?keys=n&startTs=0&endTs=1800000000000&limit=1000`,
    undefined,
    admin,
  );
  t.equal(r.json<{ n: unknown[] }>().n.length, 50);
});

t.test(
  "MQTT over TLS with the daemon's certificate",
  { skip: hasOpenssl ? false : 'openssl is not available' },
  async (t) => {
    const dir = tempDir(t);
    const { cert, key } = selfSignedCert(dir);
    const gw = await startGateway(t, { args: ['--tls-cert', cert, '--tls-key', key] });
    const { port, tlsPort } = mqttPorts(gw);
    t.ok(port > 0 && tlsPort > 0, 'both listeners named in the listening line');
    t.match(gw.logs.join('\n'), /mqtts:\/\/127\.0\.0\.1:\d+/);
    const dev = await addDevice(gw.dataDir, 'tls-dev');
    for (const protocolVersion of [4, 5] as const) {
      const c = await connectAsync(`mqtts://127.0.0.1:${tlsPort}`, {
        username: dev.token,
        ca: readFileSync(cert),
        reconnectPeriod: 0,
        protocolVersion,
      });
      await c.publishAsync('v1/devices/me/telemetry', `{"secure${protocolVersion}":true}`, { qos: 1 });
      await c.endAsync();
    }
    // a client that does not trust the certificate gets nowhere, and the daemon goes on
    const err = await connectAsync(`mqtts://127.0.0.1:${tlsPort}`, {
      username: dev.token,
      reconnectPeriod: 0,
      connectTimeout: 3_000,
    }).then(
      () => undefined,
      (e: Error) => e,
    );
    t.ok(err, 'an untrusted certificate is refused by the client');
    t.equal(gw.proc.exitCode, null, 'the daemon is still running');
    await gw.stop();
    t.same(Object.keys((await readEntity(gw.dataDir, dev.id)).latest).sort(), ['secure4', 'secure5'], 'both stored');
  },
);

t.test('an explicit MQTT port that is taken stops the start (exclusive, as HTTP)', async (t) => {
  const dir = tempDir(t);
  const blocker: Server = createServer();
  await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', () => r()));
  t.teardown(() => {
    blocker.close();
  });
  const taken = (blocker.address() as { port: number }).port;
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify({ mqtt: { port: taken } }));
  const r = await cli([
    'serve',
    '--data-dir',
    join(dir, 'data'),
    '--host',
    '127.0.0.1',
    '--port',
    '0',
    '--config',
    cfg,
  ]);
  t.not(r.code, 0);
  t.match(r.stderr, new RegExp(`cannot listen for MQTT on 127\\.0\\.0\\.1:${taken}`));
  // mqtt.port 0: off, no MQTT in the listening line
  writeFileSync(cfg, JSON.stringify({ mqtt: { port: 0 } }));
  const gw = await startGateway(t, { args: ['--config', cfg] });
  t.same(mqttPorts(gw), { port: 0, tlsPort: 0 });
  t.notMatch(gw.logs.join('\n'), /mqtt:\/\//);
});

t.test('mqtt.maxConnections bounds a connection flood; one log line per burst; MQTT 3.1 connects', async (t) => {
  const dir = tempDir(t);
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify({ mqtt: { maxConnections: 3 } }));
  const gw = await startGateway(t, { args: ['--config', cfg] });
  const dev = await addDevice(gw.dataDir, 'flood');
  const { port } = mqttPorts(gw);
  const held = await Promise.all([0, 1, 2].map(() => rawSocket(t, port)));
  const refused = await Promise.all(Array.from({ length: 20 }, () => rawSocket(t, port)));
  await Promise.all(refused.map((s) => s.ended));
  t.pass('connections beyond the limit are closed at once');
  for (const s of held) t.equal(s.destroyed, false, 'the first three stay');
  await waitLogLines(gw, /mqtt: refused a connection/);
  t.equal(gw.logs.filter((l) => /mqtt: refused a connection/.test(l)).length, 1, 'one log line for the burst');
  for (const s of held) s.destroy();
  await new Promise((r) => setTimeout(r, 200));
  // MQTT 3.1 (MQIsdp)
  const c = await connectAsync(`mqtt://127.0.0.1:${port}`, {
    username: dev.token,
    protocolVersion: 3,
    protocolId: 'MQIsdp',
    reconnectPeriod: 0,
  });
  await c.publishAsync('v1/devices/me/telemetry', '{"v31":1}', { qos: 1 });
  await c.endAsync();
  await gw.stop();
  t.same(Object.keys((await readEntity(gw.dataDir, dev.id)).latest), ['v31'], 'MQTT 3.1 telemetry stored');
});

t.test('a client that does not read is closed once mqtt.maxOutboundBytes wait for it', async (t) => {
  const dir = tempDir(t);
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify({ mqtt: { maxOutboundBytes: 65_536 } }));
  const gw = await startGateway(t, { args: ['--config', cfg] });
  const dev = await addDevice(gw.dataDir, 'slow');
  const admin = await adminHeaders(gw);
  const s = await rawSocket(t, mqttPorts(gw).port);
  s.write(
    mqttPacket.generate({
      cmd: 'connect',
      clientId: 'slow',
      username: dev.token,
      keepalive: 0,
      protocolVersion: 4,
      clean: true,
    }),
  );
  s.write(
    mqttPacket.generate({
      cmd: 'subscribe',
      messageId: 1,
      subscriptions: [{ topic: 'v1/devices/me/attributes', qos: 1 }],
    }),
  );
  // the SUBACK (first byte 0x90; the CONNACK before it holds no such byte)
  await waitFor(() => Buffer.concat(s.received).includes(0x90), { message: 'the SUBACK' });
  s.pause(); // reads nothing from now on: the kernel's buffers fill, then the daemon's
  const big = 'x'.repeat(60_000);
  let closedAt = -1;
  for (let i = 0; i < 400 && closedAt < 0; i++) {
    await http(
      'POST',
      `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/attributes/SHARED_SCOPE`,
      { big: `${i}${big}` },
      admin,
    );
    if (i % 20 === 19) {
      const m = await http('GET', `${gw.url}/metrics`, undefined, admin);
      if (/outpost_mqtt_connections_closed_total\{reason="slowReader"\} 1/.test(m.text)) closedAt = i;
    }
  }
  t.ok(closedAt >= 0, `closed as a slow reader after ${closedAt + 1} updates of 60 KB`);
  t.equal(gw.proc.exitCode, null, 'the daemon goes on');
});
