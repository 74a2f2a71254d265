/**
 * What a quiet gateway loads (docs/design/memory-budget.md "Code"): V8 keeps every loaded module's source text and
 * bytecode for the process's life, so serve loads at start only what a gateway without upstream needs, and its
 * modules carry no comments. A loader hook (helpers/module-probe.ts) records every module the real daemon loads.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { FakeTb } from '../helpers/fake-tb.js';
import { adminHeaders, latest, mqttClient } from '../helpers/mqtt.js';
import { type Gateway, addDevice, http, startGateway, tempDir } from '../helpers/server.js';

const PROBE = new URL('../helpers/module-probe.js', import.meta.url).href;

/** Starts serve with the probe; `loaded()` reads the module URLs it has loaded so far. */
async function probed(t: Test, config: Record<string, unknown>): Promise<{ gw: Gateway; loaded: () => string[] }> {
  const dir = tempDir(t, 'outpost-modules-');
  const log = join(dir, 'modules.txt');
  writeFileSync(log, '');
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify(config));
  const gw = await startGateway(t, {
    args: ['--config', cfg],
    env: {
      NODE_OPTIONS: `--import ${PROBE}`,
      OUTPOST_MODULE_LOG: log,
      OUTPOST_MQTT_PORT: 'ephemeral',
      OUTPOST_COAP_PORT: 'ephemeral',
    },
  });
  return {
    gw,
    loaded: () =>
      readFileSync(log, 'utf8')
        .split('\n')
        .filter((l) => l !== ''),
  };
}

/** Modules only upstream sync uses: its uplink, session, outbox and MQTT.js. */
const UPSTREAM_ONLY = [
  /\/src\/upstream\/uplink\/service\.js$/,
  /\/src\/upstream\/session\//,
  /\/src\/store\/outbox\.js$/,
];
const MQTT_JS = /\/node_modules\/mqtt\//;
/** The MQTT listener's per-connection code: the codec and the device session, loaded by the first connection. */
const MQTT_WIRE = [/\/node_modules\/mqtt-packet\//, /\/src\/transports\/mqtt\/(connection|device-session)\.js$/];
/** Issuing tickets is the CLI's; a gateway verifies them with node:crypto. */
const TICKET_ISSUING = [/\/node_modules\/tweetnacl\//, /\/src\/auth\/ticket-issue\.js$/];

t.test('a gateway without upstream listens on HTTP, MQTT and CoAP without loading the sync', async (t) => {
  const { gw, loaded } = await probed(t, {});
  t.match(gw.logs.join('\n'), /mqtt:\/\/.*coap:\/\//, 'MQTT and CoAP listen');
  const mods = loaded();
  t.ok(
    mods.some((m) => m.endsWith('/src/server.js')),
    'the probe sees the daemon load',
  );
  for (const re of [...UPSTREAM_ONLY, MQTT_JS, ...MQTT_WIRE, ...TICKET_ISSUING])
    t.same(
      mods.filter((m) => re.test(m)),
      [],
      `not loaded at rest: ${re}`,
    );
});

t.test("the daemon's loaded modules carry no comments: V8 holds their source text", async (t) => {
  const { loaded } = await probed(t, {});
  const ours = loaded().filter((m) => m.startsWith('file:') && m.includes('/dist/src/'));
  t.ok(ours.length > 50, `the daemon's own modules are listed (${ours.length})`);
  const commented = ours.filter((m) =>
    readFileSync(fileURLToPath(m), 'utf8')
      .split('\n')
      .some((l) => /^\s*(\/\*\*|\/\/(?!# sourceMappingURL=))/.test(l)),
  );
  t.same(commented, [], 'no module keeps its comments');
});

t.test('a configured upstream loads the sync at start, and it sends the first point', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  const { gw, loaded } = await probed(t, { sync: { url: tb.url, retryBaseMs: 50, retryMaxMs: 400 } });
  const mods = loaded();
  for (const re of UPSTREAM_ONLY)
    t.ok(
      mods.some((m) => re.test(m)),
      `loaded with a sync URL: ${re}`,
    );
  const dev = await addDevice(gw.dataDir, 'first', ['--upstream-token', 'UP1']);
  const r = await http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, {
    ts: Date.UTC(2026, 0, 1),
    values: { t: 21.5 },
  });
  t.equal(r.status, 200, r.text);
  await tb.waitFor(() => tb.distinct('UP1').size === 1, 'the point upstream');
  t.equal(tb.distinct('UP1').get(`t@${Date.UTC(2026, 0, 1)}`)?.value, '21.5', 'sent as posted');
});

t.test('over an MQTT upstream URL, MQTT.js is loaded before serve listens', async (t) => {
  const { loaded } = await probed(t, { sync: { url: 'mqtt://127.0.0.1:1', retryBaseMs: 50, retryMaxMs: 400 } });
  t.ok(
    loaded().some((m) => MQTT_JS.test(m)),
    'MQTT.js is loaded',
  );
});

t.test(
  "the first MQTT connections load the listener's codec and session, and their publishes are stored",
  async (t) => {
    const { gw, loaded } = await probed(t, {});
    const devs = await Promise.all(['m1', 'm2', 'm3'].map((n) => addDevice(gw.dataDir, n)));
    // connecting at once: the later ones arrive while the first is loading the code
    const clients = await Promise.all(devs.map((d) => mqttClient(t, gw, d.token)));
    await Promise.all(
      clients.map((c, i) =>
        c.publishAsync('v1/devices/me/telemetry', JSON.stringify({ ts: 1000 + i, values: { n: i } }), { qos: 1 }),
      ),
    );
    const headers = await adminHeaders(gw);
    for (const [i, d] of devs.entries())
      t.same((await latest(gw, headers, d.id, 'n'))['n']?.[0], { ts: 1000 + i, value: `${i}` }, `${d.name} stored`);
    const mods = loaded();
    for (const re of MQTT_WIRE)
      t.ok(
        mods.some((m) => re.test(m)),
        `loaded on the first connection: ${re}`,
      );
  },
);
