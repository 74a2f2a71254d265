/**
 * MQTT connections per remote address (docs/mqtt.md "Listener"): one address holding silent sockets (no CONNECT)
 * is capped at mqtt.maxConnectionsPerAddress (default 32), so a device from another address still connects
 * while that one holds them, where the global mqtt.maxConnections alone let it keep everyone out. Linux's loopback
 * answers from any 127/8 address: the flood comes from 127.0.0.1, the device from 127.0.0.2.
 */
import { writeFileSync } from 'node:fs';
import { type Socket, connect as netConnect } from 'node:net';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import mqttPacket from 'mqtt-packet';
import t from 'tap';
import { adminHeaders, hasBinary, latest, mqttPorts, run } from '../../helpers/mqtt.js';
import { addDevice, http, startGateway, tempDir } from '../../helpers/server.js';
import { hasOpenssl, selfSignedCert } from '../../helpers/tls.js';

const HELD = 40;
const dir = tempDir(t);
const cfg = join(dir, 'config.json');
writeFileSync(cfg, JSON.stringify({ mqtt: { maxConnections: HELD, connectTimeoutMs: 120_000 } }));
const gw = await startGateway(t, { args: ['--config', cfg] });
const { port } = mqttPorts(gw);
const dev = await addDevice(gw.dataDir, 'other-address');
const admin = await adminHeaders(gw);

interface Held extends Socket {
  gone: boolean;
  received: Buffer[];
}

/** A TCP connection to the MQTT port (or `to`) from `localAddress`, destroyed at teardown. */
function socketFrom(localAddress: string, to = port): Promise<Held> {
  return new Promise((resolve, reject) => {
    const s = netConnect({ port: to, host: '127.0.0.1', localAddress }) as Held;
    s.gone = false;
    s.received = [];
    s.on('data', (b: Buffer) => s.received.push(b));
    s.once('close', () => {
      s.gone = true;
    });
    s.on('error', () => undefined);
    s.once('connect', () => resolve(s));
    s.once('error', reject);
    t.teardown(() => {
      s.destroy();
    });
  });
}

async function until(what: string, cond: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setTimeout(r, 20));
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
}

/** CONNECT with the device's token over `s`: the CONNACK's return code, or undefined when closed without one. */
async function connack(s: Held): Promise<number | undefined> {
  s.write(
    mqttPacket.generate({ cmd: 'connect', clientId: 'dev', username: dev.token, keepalive: 0, protocolVersion: 4 }),
  );
  await until('a CONNACK or the close', () => s.received.length > 0 || s.gone);
  if (s.received.length === 0) return undefined;
  const parser = mqttPacket.parser({ protocolVersion: 4 });
  let code: number | undefined;
  parser.on('packet', (p) => {
    if (p.cmd === 'connack') code = p.returnCode;
  });
  parser.parse(Buffer.concat(s.received));
  return code;
}

t.test('silent sockets from one address leave room for a device from another', async (t) => {
  const held = await Promise.all(Array.from({ length: HELD }, () => socketFrom('127.0.0.1')));
  await until('the sockets over the cap to close', () => held.filter((s) => s.gone).length >= HELD - 32);
  t.equal(held.filter((s) => !s.gone).length, 32, 'mqtt.maxConnectionsPerAddress (32) of them stay open');
  const device = await socketFrom('127.0.0.2');
  t.equal(await connack(device), 0, 'a device from 127.0.0.2 connects');
  const more = await socketFrom('127.0.0.1');
  await until('one more from 127.0.0.1 to close', () => more.gone);
  t.pass('one more from the capped address is closed on accept');
  const open = held.find((s) => !s.gone) as Held;
  open.destroy();
  await until('its close', () => open.gone);
  // the daemon learns of the close from the kernel: the next socket may race it, so a few tries
  let again: Held | undefined;
  for (let i = 0; i < 50 && again === undefined; i++) {
    const s = await socketFrom('127.0.0.1');
    if ((await connack(s)) === 0) again = s;
  }
  t.ok(again, 'a closed socket gives its address its place back');
  const m = await http('GET', `${gw.url}/metrics`, undefined, admin);
  t.match(m.text, /outpost_mqtt_connections_closed_total\{reason="addressLimit"\} [1-9]/, 'counted');
  t.ok(
    gw.logs.some((l) => /refused a connection \(mqtt\.maxConnectionsPerAddress 32 reached by 127\.0\.0\.1\)/.test(l)),
    'logged with the address',
  );
  for (const s of held) s.destroy();
  device.destroy();
  again?.destroy();
});

const skip = hasBinary('mosquitto_pub')
  ? false
  : 'mosquitto_pub not installed (Debian: apt-get install mosquitto-clients)';

t.test('mosquitto_pub bound to another address publishes while one address is at its cap', { skip }, async (t) => {
  const held = await Promise.all(Array.from({ length: HELD }, () => socketFrom('127.0.0.1')));
  await until('the sockets over the cap to close', () => held.filter((s) => s.gone).length >= HELD - 32);
  const pub = await run('mosquitto_pub', [
    ...['-h', '127.0.0.1', '-p', String(port), '-A', '127.0.0.2', '-q', '1'],
    ...['-t', 'v1/devices/me/telemetry', '-u', dev.token, '-m', '{"bound":1}'],
  ]);
  t.equal(pub.code, 0, pub.out);
  t.equal((await latest(gw, admin, dev.id, 'bound'))['bound']?.[0]?.value, '1', 'stored');
  for (const s of held) s.destroy();
});

const noOpenssl = hasOpenssl ? false : 'openssl not installed';

t.test(
  'over TLS a socket counts from its TCP accept: silent handshakes keep no one out',
  { skip: noOpenssl },
  async (t) => {
    const certs = selfSignedCert(tempDir(t));
    const tlsGw = await startGateway(t, {
      args: ['--config', cfg, '--tls-cert', certs.cert, '--tls-key', certs.key],
    });
    const { tlsPort } = mqttPorts(tlsGw);
    const tlsDev = await addDevice(tlsGw.dataDir, 'tls-other-address');
    // TCP only: no ClientHello, the handshake never starts
    const held = await Promise.all(Array.from({ length: HELD }, () => socketFrom('127.0.0.1', tlsPort)));
    await until('the sockets over the cap to close', () => held.filter((s) => s.gone).length >= HELD - 32);
    t.equal(held.filter((s) => !s.gone).length, 32, '32 silent TCP sockets stay open');
    const code = await new Promise<number | undefined>((resolve, reject) => {
      const tcp = netConnect({ port: tlsPort, host: '127.0.0.1', localAddress: '127.0.0.2' });
      const s = tlsConnect({ socket: tcp, rejectUnauthorized: false });
      t.teardown(() => {
        s.destroy();
      });
      const parser = mqttPacket.parser({ protocolVersion: 4 });
      parser.on('packet', (p) => resolve(p.cmd === 'connack' ? p.returnCode : undefined));
      s.on('data', (b: Buffer) => parser.parse(b));
      s.once('error', reject);
      s.once('close', () => resolve(undefined));
      s.once('secureConnect', () =>
        s.write(
          mqttPacket.generate({
            cmd: 'connect',
            clientId: 'tls-dev',
            username: tlsDev.token,
            keepalive: 0,
            protocolVersion: 4,
          }),
        ),
      );
    });
    t.equal(code, 0, 'a device from 127.0.0.2 connects over TLS');
    for (const s of held) s.destroy();
  },
);
