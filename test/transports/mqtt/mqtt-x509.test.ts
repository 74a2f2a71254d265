/**
 * X.509 device credentials over MQTT/TLS (docs/mqtt.md "Logging in"): the TLS listener asks for a client
 * certificate without requiring one or judging its issuer; the certificate's hash names the device and its dates
 * are checked. Certificates are made here with openssl: CA-signed, self-signed, expired, unknown. Real clients:
 * MQTT.js and mosquitto_pub.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type IClientOptions, connectAsync } from 'mqtt';
import t from 'tap';
import { hasBinary, mqttPorts, run } from '../../helpers/mqtt.js';
import { type Gateway, addDevice, cliJson, startGateway, tempDir } from '../../helpers/server.js';
import { hasOpenssl, selfSignedCert } from '../../helpers/tls.js';

const sha3 = (s: string): string => createHash('sha3-256').update(s).digest('hex');
const body = (pemFile: string): string =>
  readFileSync(pemFile, 'utf8')
    .replace(/-----(BEGIN|END) CERTIFICATE-----/g, '')
    .replace(/[\r\n]/g, '');

interface KeyPair {
  cert: string;
  key: string;
}

const openssl = (args: string[]): void => {
  execFileSync('openssl', args, { stdio: 'ignore' });
};

/** A CA, a device certificate it signed, an expired one it signed, a self-signed one and an unknown one. */
function deviceCertificates(dir: string): {
  ca: KeyPair;
  signed: KeyPair;
  expired: KeyPair;
  self: KeyPair;
  unknown: KeyPair;
} {
  const pair = (name: string): KeyPair => ({ cert: join(dir, `${name}.pem`), key: join(dir, `${name}.key`) });
  const ca = pair('ca');
  openssl([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    ca.key,
    '-out',
    ca.cert,
    '-days',
    '2',
    '-subj',
    '/CN=Test CA',
  ]);
  const signedBy = (name: string, days: string): KeyPair => {
    const p = pair(name);
    const csr = join(dir, `${name}.csr`);
    openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', p.key, '-out', csr, '-subj', `/CN=${name}`]);
    openssl([
      'x509',
      '-req',
      '-in',
      csr,
      '-CA',
      ca.cert,
      '-CAkey',
      ca.key,
      '-CAcreateserial',
      '-out',
      p.cert,
      '-days',
      days,
    ]);
    return p;
  };
  const selfSigned = (name: string): KeyPair => {
    const p = pair(name);
    openssl([
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      p.key,
      '-out',
      p.cert,
      '-days',
      '2',
      '-subj',
      `/CN=${name}`,
    ]);
    return p;
  };
  // -days -1: notAfter a day before notBefore, both in the past or now: expired
  return {
    ca,
    signed: signedBy('signed', '2'),
    expired: signedBy('expired', '-1'),
    self: selfSigned('self'),
    unknown: selfSigned('unknown'),
  };
}

t.test('X.509 credentials over MQTT/TLS', { skip: hasOpenssl ? false : 'openssl is not available' }, async (t) => {
  const dir = tempDir(t);
  const server = selfSignedCert(dir);
  const certs = deviceCertificates(dir);
  const gw: Gateway = await startGateway(t, { args: ['--tls-cert', server.cert, '--tls-key', server.key] });
  const { tlsPort } = mqttPorts(gw);
  t.ok(tlsPort > 0, 'MQTT over TLS listening');

  const signed = await cliJson([
    'device',
    'add',
    '--data-dir',
    gw.dataDir,
    '--name',
    'x-signed',
    '--cert',
    certs.signed.cert,
  ]);
  t.match(signed, { credentialsType: 'X509_CERTIFICATE', credentialsId: sha3(body(certs.signed.cert)) });
  await cliJson(['device', 'add', '--data-dir', gw.dataDir, '--name', 'x-self', '--cert', certs.self.cert]);
  await cliJson(['device', 'add', '--data-dir', gw.dataDir, '--name', 'x-expired', '--cert', certs.expired.cert]);
  const tokenDev = await addDevice(gw.dataDir, 'tls-token');
  const shown = await cliJson(['device', 'credentials', 'x-self', '--data-dir', gw.dataDir]);
  t.match(shown, {
    credentialsType: 'X509_CERTIFICATE',
    credentialsId: sha3(body(certs.self.cert)),
    credentialsValue: body(certs.self.cert),
  });

  const ca = readFileSync(server.cert);
  const tls = (pair: KeyPair | undefined, extra: IClientOptions = {}): IClientOptions => ({
    ca,
    ...(pair === undefined ? {} : { cert: readFileSync(pair.cert), key: readFileSync(pair.key) }),
    reconnectPeriod: 0,
    connectTimeout: 5_000,
    protocolVersion: 4,
    ...extra,
  });
  const code = async (o: IClientOptions): Promise<number> => {
    try {
      const c = await connectAsync(`mqtts://127.0.0.1:${tlsPort}`, o);
      await c.endAsync(true);
      return 0;
    } catch (err) {
      return (err as { code?: number }).code ?? -1;
    }
  };

  for (const v of [4, 5] as const) {
    const at = `(MQTT ${v === 5 ? '5' : '3.1.1'})`;
    const refused = v === 5 ? 0x87 : 5;
    t.equal(await code(tls(certs.signed, { protocolVersion: v })), 0, `CA-signed certificate, no CA configured ${at}`);
    t.equal(await code(tls(certs.self, { protocolVersion: v })), 0, `self-signed certificate ${at}`);
    t.equal(await code(tls(certs.expired, { protocolVersion: v })), refused, `expired certificate ${at}`);
    t.equal(await code(tls(certs.unknown, { protocolVersion: v })), refused, `unknown certificate ${at}`);
    t.equal(
      await code(tls(certs.unknown, { protocolVersion: v, username: tokenDev.token })),
      refused,
      `a certificate decides alone: a valid token beside an unknown certificate is refused ${at}`,
    );
    t.equal(
      await code(tls(undefined, { protocolVersion: v, username: tokenDev.token })),
      0,
      `TLS without a certificate, token ${at}`,
    );
  }

  const c = await connectAsync(`mqtts://127.0.0.1:${tlsPort}`, tls(certs.signed));
  await c.publishAsync('v1/devices/me/telemetry', '{"x509":1}', { qos: 1 });
  await c.endAsync();
  const latest = await cliJson<Record<string, Array<{ value: unknown }>>>([
    'latest',
    'x-signed',
    '--data-dir',
    gw.dataDir,
    '--json',
  ]);
  t.match(latest, { x509: [{ value: /^1$/ }] }, "stored on the certificate's device");

  t.test(
    'mosquitto_pub --cert/--key/--cafile',
    {
      skip: hasBinary('mosquitto_pub')
        ? false
        : 'mosquitto_pub not installed (Debian: apt-get install mosquitto-clients)',
    },
    async (t) => {
      const pub = (pair: KeyPair, m: string) =>
        run('mosquitto_pub', [
          '-d',
          '-q',
          '1',
          '-h',
          '127.0.0.1',
          '-p',
          String(tlsPort),
          '--cafile',
          server.cert,
          '--cert',
          pair.cert,
          '--key',
          pair.key,
          '-t',
          'v1/devices/me/telemetry',
          '-m',
          m,
        ]);
      const ok = await pub(certs.self, '{"mosqx":5}');
      t.equal(ok.code, 0, ok.out);
      const stored = await cliJson<Record<string, Array<{ value: unknown }>>>([
        'latest',
        'x-self',
        '--data-dir',
        gw.dataDir,
        '--json',
      ]);
      t.match(stored, { mosqx: [{ value: /^5$/ }] });
      const expired = await pub(certs.expired, '{"mosqx":6}');
      t.not(expired.code, 0, expired.out);
      const unknown = await pub(certs.unknown, '{"mosqx":7}');
      t.not(unknown.code, 0, unknown.out);
      t.match(unknown.out, /not authori[sz]ed/i);
    },
  );
});
