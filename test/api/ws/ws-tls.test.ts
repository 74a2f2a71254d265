/**
 * Websocket over TLS (docs/cli.md, docs/api.md, docs/configuration.md "TLS"): wss on the serve port, certificate
 * verified by the client; plain ws beside it on `http.plainPort`, both fed by the same subscriptions.
 */
import { readFileSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import t from 'tap';
import { hasOpenssl, selfSignedCert } from '../../helpers/tls.js';
import { addDevice, startGateway, tempDir } from '../../helpers/server.js';
import { addUser } from '../../helpers/users.js';
import { WsClient } from '../../helpers/ws.js';

function post(url: string, ca: Buffer, body: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(url, { method: 'POST', ca, headers: { 'content-type': 'application/json' } }, (r) => {
      let text = '';
      r.on('data', (c: Buffer) => {
        text += c.toString();
      });
      r.on('end', () => resolve({ status: r.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

t.test('wss: subscribe and receive an update', { skip: hasOpenssl ? false : 'openssl is not available' }, async (t) => {
  const dir = tempDir(t);
  const { cert, key } = selfSignedCert(dir);
  const ca = readFileSync(cert);
  const gw = await startGateway(t, {
    args: ['--tls-cert', cert, '--tls-key', key],
    env: { OUTPOST_HTTP_PLAIN_PORT: 'ephemeral' },
  });
  t.equal(gw.url, gw.httpsUrl, 'HTTPS on the serve port');
  const dev = await addDevice(gw.dataDir, 'tls-ws-dev');
  await addUser(gw.dataDir, 'admin@example.com', 'secret-1', 'TENANT_ADMIN');
  const login = await post(
    `${gw.url}/api/auth/login`,
    ca,
    JSON.stringify({ username: 'admin@example.com', password: 'secret-1' }),
  );
  t.equal(login.status, 200, login.text);
  const token = (JSON.parse(login.text) as { token: string }).token;

  const c = await WsClient.connect(`wss://127.0.0.1:${gw.port}/api/ws/plugins/telemetry?token=${token}`, { ca });
  t.teardown(() => c.close());
  c.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, keys: 'secure', cmdId: 1 }] });
  t.equal((await c.nextJson()).errorCode, 0);
  const plain = await WsClient.connect(`${gw.httpUrl.replace('http', 'ws')}/api/ws/plugins/telemetry?token=${token}`);
  t.teardown(() => plain.close());
  plain.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, keys: 'secure', cmdId: 1 }] });
  t.equal((await plain.nextJson()).errorCode, 0, 'plain ws on http.plainPort');
  t.equal((await post(`${gw.url}/api/v1/${dev.token}/telemetry`, ca, '{"ts":7,"values":{"secure":true}}')).status, 200);
  const update =
    '{"subscriptionId":1,"errorCode":0,"errorMsg":null,"data":{"secure":[[7,"true"]]},"latestValues":{"secure":7}}';
  t.equal(await c.next(), update);
  t.equal(await plain.next(), update, 'the plain socket sees the HTTPS post too');

  const bad = await WsClient.connect(`wss://127.0.0.1:${gw.port}/api/ws/plugins/telemetry?token=nope`, { ca });
  t.equal((await bad.waitClosed()).code, 1011, 'invalid token closes 1011 over wss too');
});
