/**
 * The sync's uplink over one MQTT gateway session (docs/sync.md "Downlink"): against a fake ThingsBoard MQTT
 * gateway endpoint (helpers/fake-tb-mqtt.ts) and, end to end, into a second Outpost's MQTT listener.
 */
import t, { type Test } from 'tap';
import { invalidMessage, messageOverhead } from '../../src/upstream/session/transport.js';
import { type FakeTbMqtt, type FakeTbMqttOptions, startFakeTbMqtt, until } from '../helpers/fake-tb-mqtt.js';
import { mqttPorts } from '../helpers/mqtt.js';
import { type Gateway, addDevice, cli, http, startGateway, tempDir } from '../helpers/server.js';
import { syncGateway, postTelemetry as post, records, syncStatusUntil } from '../helpers/sync.js';
import { addUser, authHeaders, login } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';

interface Status {
  state: string;
  transport: string;
  backlogPoints: number;
  sentPoints: number;
  lastError: string | null;
  session: { state: string; since: number; announcedDevices: number } | null;
}

const BASE = Date.UTC(2026, 0, 1);
const GW_TOKEN = 'GATEWAY-TOKEN';

async function admin(gw: Gateway): Promise<string> {
  await addUser(gw.dataDir, 'admin@downlink.test', 'secret', 'TENANT_ADMIN');
  return (await login(gw, 'admin@downlink.test', 'secret')).token;
}

const statusUntil = (
  gw: Gateway,
  jwt: string,
  pred: (s: Status) => boolean,
  label: string,
  ms = 20_000,
): Promise<Status> => syncStatusUntil<Status>(gw, jwt, pred, label, ms, 100);

const fakeTb = (t: Test, opts: Partial<FakeTbMqttOptions> = {}): Promise<FakeTbMqtt> =>
  startFakeTbMqtt(t, GW_TOKEN, opts);

t.test('validation before publish: what TB would close the session for is never sent', async (t) => {
  const u = (s: string): Uint8Array => new TextEncoder().encode(s);
  t.equal(invalidMessage('', u('[{"ts":1,"values":{"a":1}}]'), '['), 'a device without a name');
  t.ok(invalidMessage('d', u('[]'), '[') !== undefined, 'an empty array');
  t.ok(invalidMessage('d', u('{}'), '{') !== undefined, 'an empty map');
  t.ok(invalidMessage('d', u('{"a":1}'), '[') !== undefined, 'an object where an array goes');
  t.equal(invalidMessage('d', u('[{"ts":1,"values":{"a":1}}]'), '['), undefined);
  t.equal(messageOverhead('v1/gateway/telemetry', 'pump'), 10 + 20 + 6 + 3, 'packet, topic, {"name":} counted');
});

t.test(
  'points go up over one MQTT 5 session, each message within maxBatchBytes counting the topic, the window kept',
  async (t) => {
    const tb = await fakeTb(t);
    tb.pubackDelayMs = 30;
    const gw = await syncGateway(t, tb.url, {
      gatewayToken: GW_TOKEN,
      inflight: 2,
      maxBatchBytes: 2048,
      concurrency: 4,
    });
    const jwt = await admin(gw);
    const devs = await Promise.all(['m-a', 'm-b', 'm-c'].map((n) => addDevice(gw.dataDir, n)));
    for (const d of devs)
      await post(
        gw,
        d.token,
        records(BASE, 200, 4, (i, k) => (k === 0 ? `${i}.0` : k === 1 ? `"s${i}"` : `${i * 10 + k}`)),
      );
    await until(() => devs.every((d) => tb.pointCount(d.name) === 800), 'every point upstream');
    t.same(tb.connects, ['v5'], 'one session, MQTT 5');
    const tele = tb.received.filter((m) => m.topic === 'v1/gateway/telemetry');
    t.ok(tele.length >= 3 * 2, `several messages (${tele.length})`);
    t.ok(
      tele.every((m) => m.bytes <= 2048),
      `every message within 2048 bytes with its topic (largest ${Math.max(...tele.map((m) => m.bytes))})`,
    );
    t.ok(tb.maxUnacked <= 2, `at most sync.inflight (2) unacknowledged (saw ${tb.maxUnacked})`);
    const pts = tb.points.get('m-a');
    t.equal(pts?.get(`${BASE + 5000}|k0`), '5', 'a double arrives as a number (JSON 5.0)');
    t.equal(pts?.get(`${BASE + 5000}|k1`), '"s5"', 'a string as a string');
    t.equal(tb.closes.length, 0, 'the upstream never had to close the session');
    const s = await statusUntil(gw, jwt, (x) => x.backlogPoints === 0 && x.sentPoints === 2400, 'drained');
    t.equal(s.transport, 'mqtt');
    t.equal(s.session?.state, 'up');
  },
);

t.test('an upstream that speaks 3.1.1 only is spoken to in 3.1.1', async (t) => {
  const tb = await fakeTb(t, { only311: true });
  const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN });
  const d = await addDevice(gw.dataDir, 'old-tb');
  await post(gw, d.token, records(BASE, 5, 1));
  await until(() => tb.pointCount('old-tb') === 5, 'the points');
  t.same(tb.connects, ['v3.1.1']);
});

t.test('a refused gateway token: nothing lost, shown, and sent once the token is accepted', async (t) => {
  const tb = await fakeTb(t, { tokens: ['OTHER'] });
  const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN });
  const jwt = await admin(gw);
  const d = await addDevice(gw.dataDir, 'refused');
  await post(gw, d.token, records(BASE, 5, 1));
  const s = await statusUntil(
    gw,
    jwt,
    (x) => x.lastError !== null && /refused|not authorized/i.test(x.lastError) && x.backlogPoints === 5,
    'refusal shown',
  );
  t.not(s.session?.state, 'up');
  (tb as unknown as { o: { tokens: string[] } }).o.tokens.push(GW_TOKEN);
  await until(() => tb.pointCount('refused') === 5, 'sent once accepted');
});

t.test(
  'outage: points posted while the upstream is away arrive when it returns; kill -9 mid-drain loses nothing',
  async (t) => {
    const tb = await fakeTb(t);
    const port = tb.port;
    await tb.stop();
    const gw = await syncGateway(t, `mqtt://127.0.0.1:${port}`, {
      gatewayToken: GW_TOKEN,
      maxBatchBytes: 1024,
      concurrency: 1,
      inflight: 1,
    });
    const jwt = await admin(gw);
    const d = await addDevice(gw.dataDir, 'outage');
    for (let r = 0; r < 10; r++) await post(gw, d.token, records(BASE + r * 100_000, 100, 2));
    await statusUntil(gw, jwt, (x) => x.backlogPoints === 2000 && x.state === 'backoff', 'backlog while away');
    tb.pubackDelayMs = 20;
    await tb.start();
    await until(() => tb.pointCount('outage') > 200, 'some of the drain');
    t.ok(tb.pointCount('outage') < 2000, `killed mid-drain (${tb.pointCount('outage')} of 2000 up)`);
    await gw.stop('SIGKILL');
    tb.pubackDelayMs = 0;
    const again = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN, maxBatchBytes: 1024 }, {}, gw.dataDir);
    await until(() => tb.pointCount('outage') === 2000, 'every point after the restart');
    const s = await statusUntil(again, jwt, (x) => x.backlogPoints === 0, 'drained after restart');
    t.equal(s.backlogPoints, 0);
    const sentMessages = tb.received.filter((m) => m.topic === 'v1/gateway/telemetry').length;
    t.ok(sentMessages < 2000 / 20 + 20, `duplicates bounded (${sentMessages} messages for 2000 points)`);
  },
);

t.test('Outpost into Outpost over MQTT: points appear on the upper one under the same device names', async (t) => {
  const upper = await startGateway(t, { env: { OUTPOST_MQTT_PORT: 'ephemeral', OUTPOST_MQTT_TLS_PORT: '0' } });
  const upJwt = await admin(upper);
  const gwDev = await addDevice(upper.dataDir, 'site-gw', ['--gateway']);
  const { port } = mqttPorts(upper);
  const lower = await syncGateway(t, `mqtt://127.0.0.1:${port}`, { gatewayToken: gwDev.token }, { mqtt: { port: 0 } });
  const d = await addDevice(lower.dataDir, 'lan-sensor');
  await post(lower, d.token, records(BASE, 30, 2));
  let n = 0;
  let id: string | undefined;
  await waitFor(
    async () => {
      const list = await http(
        'GET',
        `${upper.url}/api/tenant/devices?deviceName=lan-sensor`,
        undefined,
        authHeaders(upJwt),
      );
      if (list.status === 200) id = list.json<{ id: { id: string } }>().id.id;
      if (id === undefined) return false;
      const r = await http(
        'GET',
        `${upper.url}/api/plugins/telemetry/DEVICE/${id}/values/timeseries?keys=k0,k1&startTs=${BASE}&endTs=${BASE + 60_000}&limit=1000`,
        undefined,
        authHeaders(upJwt),
      );
      const body = r.json<Record<string, unknown[]>>();
      n = (body['k0']?.length ?? 0) + (body['k1']?.length ?? 0);
      return n === 60;
    },
    { interval: 200, message: 'every point on the upper Outpost' },
  ).catch(() => undefined);
  t.equal(n, 60, 'every point on the upper Outpost');
});

t.test(
  'a batch the upstream refuses (MQTT 5 PUBACK 0x99) is set aside; outpost sync lists it, retries it, and prints the session',
  async (t) => {
    const tb = await fakeTb(t);
    tb.refuseDevice = 'bad-dev';
    const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN });
    const jwt = await admin(gw);
    const bad = await addDevice(gw.dataDir, 'bad-dev');
    const good = await addDevice(gw.dataDir, 'good-dev');
    await post(gw, bad.token, records(BASE, 10, 1));
    await post(gw, good.token, records(BASE, 10, 1));
    await until(() => tb.pointCount('good-dev') === 10, 'the other device goes on');
    await statusUntil(gw, jwt, (x) => (x as unknown as { setAsidePoints: number }).setAsidePoints === 10, 'set aside');
    t.equal(tb.closes.length, 0, 'the session was kept');
    const env = { XDG_CONFIG_HOME: tempDir(t), OUTPOST_URL: '' };
    const li = await cli(['login', '--url', gw.url, '--username', 'admin@downlink.test', '--password', 'secret'], env);
    t.equal(li.code, 0, li.stderr);
    const shown = await cli(['sync', '--url', gw.url], env);
    t.match(shown.stdout, /transport {2}MQTT gateway session: up \(MQTT 5\) since/);
    t.match(shown.stdout, /downlink {3}0 shared attributes applied/);
    t.match(shown.stdout, /rpc down {3}0 received/);
    const listed = await cli(['sync', '--url', gw.url, '--set-aside'], env);
    t.match(listed.stdout, /1 batch set aside:\n {2}bad-dev: 10 points stamped .*PUBACK 0x99/);
    const status = await cli(['status', '--url', gw.url], env);
    t.match(
      status.stdout,
      /10 points set aside \(outpost sync --set-aside\)/,
      'outpost status shows what the sync added',
    );
    t.match(status.stdout, /transport {2}MQTT gateway session/);
    tb.refuseDevice = undefined;
    const retried = await cli(['sync', '--url', gw.url, '--retry-set-aside'], env);
    t.match(retried.stdout, /10 points put back in the queue/);
    await until(() => tb.pointCount('bad-dev') === 10, 'sent once retried');
    const none = await cli(['sync', '--url', gw.url, '--set-aside'], env);
    t.match(none.stdout, /no batches set aside/);
  },
);

t.test(
  'no gateway token: the gateway provisions itself with "gateway": true, stores the token, and keeps it across restarts',
  async (t) => {
    const upperCfg = tempDir(t, 'outpost-upper-cfg-');
    const { writeFileSync } = await import('node:fs');
    const { join } = await import('node:path');
    writeFileSync(join(upperCfg, 'c.json'), JSON.stringify({ provision: { key: 'PK', secret: 'PS' } }));
    const upper = await startGateway(t, { args: ['--config', join(upperCfg, 'c.json')] });
    const upJwt = await admin(upper);
    const { port } = mqttPorts(upper);
    const url = `mqtt://127.0.0.1:${port}`;
    const lower = await syncGateway(t, url, { provisionKey: 'PK', provisionSecret: 'PS', gatewayName: 'site-7' });
    const d = await addDevice(lower.dataDir, 'prov-sensor');
    await post(lower, d.token, records(BASE, 5, 1));
    const gwRow = async (): Promise<{ additionalInfo?: { gateway?: boolean } } | undefined> => {
      const r = await http('GET', `${upper.url}/api/tenant/devices?deviceName=site-7`, undefined, authHeaders(upJwt));
      return r.status === 200 ? r.json() : undefined;
    };
    await until(
      () => lower.logs.some((l) => l.includes('provisioned this gateway upstream as "site-7"')),
      'provisioned',
    );
    const row = await gwRow();
    t.equal(row?.additionalInfo?.gateway, true, 'provisioned as a gateway upstream');
    let seen = 0;
    await waitFor(
      async () => {
        const r = await http(
          'GET',
          `${upper.url}/api/tenant/devices?deviceName=prov-sensor`,
          undefined,
          authHeaders(upJwt),
        );
        if (r.status === 200) seen = 1;
        return seen === 1;
      },
      { interval: 200, message: 'prov-sensor on the upper one' },
    ).catch(() => undefined);
    t.equal(seen, 1, 'its devices reach the upper one through the provisioned session');
    await lower.stop('SIGTERM');
    const again = await syncGateway(
      t,
      url,
      { provisionKey: 'PK', provisionSecret: 'PS', gatewayName: 'site-7' },
      {},
      lower.dataDir,
    );
    await post(again, d.token, records(BASE + 60_000, 5, 1));
    await until(
      () => again.logs.some((l) => l.includes('MQTT gateway session') && l.includes(' up ')),
      'up again with the stored token',
    );
    t.notOk(
      again.logs.some((l) => l.includes('provisioned this gateway')),
      'not provisioned a second time (the name exists upstream: it would be refused)',
    );
  },
);

t.test(
  'depth series to an upstream without them (MQTT 5 PUBACK 0x90): counted as not synced, telemetry goes on',
  async (t) => {
    const tb = await fakeTb(t);
    tb.depthAbsent = true;
    const gw = await syncGateway(t, tb.url, { gatewayToken: GW_TOKEN });
    const jwt = await admin(gw);
    const d = await addDevice(gw.dataDir, 'well');
    const r = await http(
      'POST',
      `${gw.url}/api/v1/${d.token}/depth/telemetry`,
      '[{"ds":1.5,"values":{"p":1.0}},{"ds":2.5,"values":{"p":2.0}}]',
    );
    t.equal(r.status, 200);
    await post(gw, d.token, records(BASE, 3, 1));
    const s = await statusUntil(
      gw,
      jwt,
      (x) => (x as unknown as { depthEndpoint: string }).depthEndpoint === 'absent',
      'depth absent upstream',
    );
    t.ok((s as unknown as { depthNotSyncedPoints: number }).depthNotSyncedPoints >= 2, 'counted as not synced');
    await until(() => tb.pointCount('well') === 3, 'telemetry went on');
    t.equal(tb.closes.length, 0, 'the session was kept');
  },
);
