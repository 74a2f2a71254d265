/**
 * Failures leave a trace (docs/api.md "Failures in the log", "Failed logins"): wrong logins, unknown device
 * tokens, bad MQTT publishes and typo'd topics are logged with their source, a line a minute of each however many
 * come, and counted in /metrics; failed logins are throttled per user and per address; a start after a crash
 * says so, with what the log replayed.
 */
import { type MqttClient, connectAsync } from 'mqtt';
import t from 'tap';
import { mqttPorts } from '../helpers/mqtt.js';
import { type Gateway, addDevice, http, startGateway } from '../helpers/server.js';
import { addUser } from '../helpers/users.js';

async function loginAs(gw: Gateway, username: string, password: string) {
  return http('POST', `${gw.url}/api/auth/login`, { username, password });
}

function metric(text: string, kind: string): number {
  const m = new RegExp(`^outpost_failures_total\\{kind="${kind}"\\} (\\d+)$`, 'm').exec(text);
  return m === null ? Number.NaN : Number(m[1]);
}

const matching = (gw: Gateway, pattern: RegExp): string[] => gw.logs.filter((l) => pattern.test(l));

t.test('failed logins are throttled per user and per address, logged a line a minute and counted', async (t) => {
  const gw = await startGateway(t);
  await addUser(gw.dataDir, 'admin@example.com', 'secret', 'TENANT_ADMIN');
  await addUser(gw.dataDir, 'other@example.com', 'other-secret', 'TENANT_ADMIN');
  const statuses: number[] = [];
  for (let i = 0; i < 30; i++) statuses.push((await loginAs(gw, 'admin@example.com', `wrong-${i}`)).status);
  t.same(statuses.slice(0, 10), Array(10).fill(401), 'the first 10 wrong passwords: 401');
  t.same(statuses.slice(10), Array(20).fill(429), 'then refused without a check: 429');
  const right = await loginAs(gw, 'admin@example.com', 'secret');
  t.equal(right.status, 429, 'even the right password is refused while locked');
  const retry = Number(right.headers.get('retry-after'));
  t.ok(retry >= 1 && retry <= 60, `Retry-After: ${retry} s`);
  const body = right.json<{ status: number; errorCode: number; message: string }>();
  t.equal(body.status, 429);
  t.equal(body.errorCode, 33, "ThingsBoard's TOO_MANY_REQUESTS");
  t.match(body.message, /^Too many failed logins for this user; try again in \d+ s$/);
  // the address made those 10 failures too: another user's login from it is refused as well
  const other = await loginAs(gw, 'other@example.com', 'other-secret');
  t.equal(other.status, 429);
  t.match(other.json<{ message: string }>().message, /from this address/);

  const failed = matching(gw, /auth: failed login/);
  t.equal(failed.length, 1, `one line for 10 failed logins: ${failed.join(' | ')}`);
  t.match(failed[0], /"admin@example\.com" from 127\.0\.0\.1/, 'it names the user and the address');
  t.equal(matching(gw, /auth: refused a login/).length, 1, 'one line for 22 refused logins');
  t.notOk(
    gw.logs.some((l) => l.includes('wrong-')),
    'no password in the log',
  );
  const metrics = (await http('GET', `${gw.url}/metrics`)).text;
  t.equal(metric(metrics, 'login'), 10, 'outpost_failures_total{kind="login"}');
  t.equal(metric(metrics, 'loginThrottled'), 22, 'outpost_failures_total{kind="loginThrottled"}');
  t.match(metrics, /# TYPE outpost_failures_total counter/);
});

t.test('device posts with an unknown token: one line naming the token’s first characters, counted', async (t) => {
  const gw = await startGateway(t);
  for (let i = 0; i < 20; i++) {
    const r = await http('POST', `${gw.url}/api/v1/WRONGTOKEN123/telemetry`, { temperature: 21 });
    t.equal(r.status, 401);
  }
  const lines = matching(gw, /unknown device access token/);
  t.equal(lines.length, 1, `20 posts, one line: ${lines.join(' | ')}`);
  t.match(lines[0], /WRON… from 127\.0\.0\.1 on POST \/api\/v1\/WRON…\/telemetry/);
  t.notOk(
    gw.logs.some((l) => l.includes('WRONGTOKEN123')),
    'never the whole token',
  );
  t.equal(metric((await http('GET', `${gw.url}/metrics`)).text, 'deviceToken'), 20);
});

t.test(
  'MQTT publishes of bad payloads and to unknown topics: one line each, naming the device and topic',
  async (t) => {
    const gw = await startGateway(t);
    await addDevice(gw.dataDir, 'thermo-1', ['--token', 'MQTT_TOKEN']);
    const { port } = mqttPorts(gw);
    const client: MqttClient = await connectAsync(`mqtt://127.0.0.1:${port}`, {
      username: 'MQTT_TOKEN',
      reconnectPeriod: 0,
      protocolVersion: 5,
    });
    t.teardown(() => {
      client.end(true);
    });
    const refusedCodes: Array<number | undefined> = [];
    const publish = async (topic: string, payload: string): Promise<void> => {
      try {
        await client.publishAsync(topic, payload, { qos: 1 });
        refusedCodes.push(0);
      } catch (err) {
        refusedCodes.push((err as { code?: number }).code);
      }
    };
    for (let i = 0; i < 5; i++) await publish('v1/devices/me/telemetry', `temperature=${i}`);
    for (let i = 0; i < 5; i++) await publish('v1/devices/me/telemtry', JSON.stringify({ temperature: i }));
    t.same(refusedCodes, [...Array(5).fill(0x99), ...Array(5).fill(0x90)], 'PUBACK 0x99 and 0x90 (MQTT 5)');
    const bad = matching(gw, /published a bad payload/);
    t.equal(bad.length, 1, bad.join(' | '));
    t.match(bad[0], /device "thermo-1" at \S*127\.0\.0\.1 published a bad payload to "v1\/devices\/me\/telemetry"/);
    const typo = matching(gw, /not a topic of the device or gateway API/);
    t.equal(typo.length, 1, typo.join(' | '));
    t.match(typo[0], /"v1\/devices\/me\/telemtry"/);
    const metrics = (await http('GET', `${gw.url}/metrics`)).text;
    t.equal(metric(metrics, 'mqttPayload'), 5);
    t.equal(metric(metrics, 'mqttTopic'), 5);
  },
);

t.test('a start after kill -9 says the previous stop was not clean and what the log replayed', async (t) => {
  const gw = await startGateway(t);
  t.notOk(matching(gw, /previous stop was not clean/).length, 'a fresh data dir: nothing to say');
  await addDevice(gw.dataDir, 'd1', ['--token', 'D1']);
  for (let i = 0; i < 3; i++)
    t.equal((await http('POST', `${gw.url}/api/v1/D1/telemetry`, { ts: 1_000 + i, values: { a: i } })).status, 200);
  await gw.stop('SIGKILL');
  const again = await startGateway(t, { dataDir: gw.dataDir });
  const line = matching(again, /previous stop was not clean/);
  t.equal(line.length, 1, line.join(' | '));
  t.match(line[0], /replayed [1-9]\d* log records \(3 points\) in \d+ ms/);
  await again.stop('SIGTERM');
  const third = await startGateway(t, { dataDir: gw.dataDir });
  t.equal(matching(third, /previous stop was not clean/).length, 0, 'after a graceful stop: nothing to say');
});
