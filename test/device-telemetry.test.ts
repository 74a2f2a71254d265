import t from 'tap';
import { addDevice, http, startGateway } from './helpers/server.js';

t.test('device telemetry: accepted, rejected, unknown token, unknown path', async (t) => {
  const gw = await startGateway(t);
  const dev = await addDevice(gw.dataDir, 'dev-1');
  const base = `${gw.url}/api/v1/${dev.token}`;

  const ok = await http('POST', `${base}/telemetry`, '{"temperature":42.0,"humidity":73}');
  t.equal(ok.status, 200);
  t.equal(ok.text, '');

  const bad = await http('POST', `${base}/telemetry`, '{abc');
  t.equal(bad.status, 400);
  t.equal(bad.json<{ errorCode: number }>().errorCode, 31);

  const unauth = await http('POST', `${gw.url}/api/v1/nope/telemetry`, '{abc');
  t.equal(unauth.status, 401, 'token checked before the body is parsed');

  const missing = await http('GET', `${gw.url}/api/v1/${dev.token}/nothing-here`);
  t.equal(missing.status, 404);
});
