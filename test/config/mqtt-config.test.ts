/**
 * The MQTT and CoAP port config keys (docs/mqtt.md, docs/coap.md): defaults, 0 = off, -1 / `ephemeral` = an
 * OS-chosen port, and `--port 0` taking any free MQTT and CoAP ports unless they were set.
 */
import '../helpers/sandbox.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { loadConfig } from '../../src/config/index.js';

t.test('defaults: 1883 and 8883, 64 KiB payloads', async (t) => {
  const c = loadConfig({}, {});
  t.equal(c.mqtt.port, 1883);
  t.equal(c.mqtt.tlsPort, 8883);
  t.equal(c.mqtt.maxPayloadBytes, 65_536);
});

t.test('--port 0 takes any free MQTT ports too, unless set in the file or the environment', async (t) => {
  t.same([loadConfig({ port: 0 }, {}).mqtt.port, loadConfig({ port: 0 }, {}).mqtt.tlsPort], [-1, -1]);
  const dir = mkdtempSync(join(tmpdir(), 'outpost-mqtt-config-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'c.json');
  writeFileSync(file, JSON.stringify({ mqtt: { port: 1999 } }));
  const c = loadConfig({ port: 0, config: file }, {});
  t.equal(c.mqtt.port, 1999, "the file's port kept");
  t.equal(c.mqtt.tlsPort, -1);
  writeFileSync(file, JSON.stringify({ mqtt: { port: 0 } }));
  t.equal(loadConfig({ port: 0, config: file }, {}).mqtt.port, 0, 'off stays off');
  t.equal(loadConfig({ port: 0 }, { OUTPOST_MQTT_PORT: '2883' }).mqtt.port, 2883);
  t.equal(loadConfig({ port: 8080 }, { OUTPOST_MQTT_PORT: 'ephemeral' }).mqtt.port, -1);
  t.equal(loadConfig({ port: 8080 }, {}).mqtt.port, 1883, 'a fixed HTTP port leaves MQTT at its default');
});

t.test('bad values are refused with a clear message', async (t) => {
  t.throws(() => loadConfig({}, { OUTPOST_MQTT_PORT: 'abc' }), /OUTPOST_MQTT_PORT: port must be an integer/);
  t.throws(() => loadConfig({}, {}, { mqtt: { maxPayloadBytes: 0 } }), /"mqtt.maxPayloadBytes" must be > 0/);
  t.throws(() => loadConfig({}, {}, { mqtt: { port: 70_000 } }), /port must be an integer 0..65535/);
  t.throws(() => loadConfig({}, {}, { mqtt: { maxConnections: -1 } }), /"mqtt.maxConnections" must be > 0/);
  t.throws(
    () => loadConfig({}, {}, { mqtt: { maxConnectionsPerAddress: -1 } }),
    /"mqtt.maxConnectionsPerAddress" must be an integer >= 0/,
  );
  t.equal(loadConfig({}, {}, { mqtt: { maxConnectionsPerAddress: 0 } }).mqtt.maxConnectionsPerAddress, 0, '0: no cap');
});

t.test('coap.port: 5683 by default, 0 off, -1 / `ephemeral` an OS-chosen port, --port 0 takes any', async (t) => {
  t.equal(loadConfig({}, {}).coap.port, 5683);
  t.equal(loadConfig({ port: 0 }, {}).coap.port, -1, '--port 0: any free CoAP port too');
  t.equal(loadConfig({ port: 8080 }, { OUTPOST_COAP_PORT: 'ephemeral' }).coap.port, -1);
  t.equal(loadConfig({ port: 8080 }, { OUTPOST_COAP_PORT: '-1' }).coap.port, -1);
  t.equal(loadConfig({ port: 0 }, { OUTPOST_COAP_PORT: '5999' }).coap.port, 5999, 'the environment wins');
  t.equal(loadConfig({ port: 0 }, {}, { coap: { port: 0 } }).coap.port, 0, 'off stays off');
  t.throws(() => loadConfig({}, { OUTPOST_COAP_PORT: 'abc' }), /OUTPOST_COAP_PORT: port must be an integer/);
  t.throws(() => loadConfig({}, {}, { coap: { port: 70_000 } }), /port must be an integer 0..65535/);
});
