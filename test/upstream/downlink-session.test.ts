/**
 * Opening the MQTT gateway session is no long task on the event loop that answers devices (docs/sync.md
 * "Downlink"): MQTT.js's stream builders are loaded ahead (the daemon does it before it listens), not on the
 * first connect, and its cache of 65,536 packet-id Buffers is never filled.
 */
import '../helpers/sandbox.js';
import { createRequire } from 'node:module';
import { writeToStream } from 'mqtt-packet';
import t from 'tap';
import { UpstreamConnection, loadMqtt } from '../../src/upstream/session/connection.js';
import type { Outcome } from '../../src/upstream/uplink/transport.js';
import { FakeTbMqtt } from '../helpers/fake-tb-mqtt.js';

const GW_TOKEN = 'GATEWAY-TOKEN';
const quiet = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

t.test('the stream builders are loaded before any connect, and the first publish fills no number cache', async (t) => {
  const builders = (): string[] =>
    Object.keys(createRequire(import.meta.url).cache).map((p) => p.replaceAll('\\', '/'));
  t.notOk(
    builders().some((p) => p.endsWith('/mqtt/build/lib/connect/ws.js')),
    'importing the session module alone loads no stream builder (an HTTP-only daemon pays nothing)',
  );
  t.notOk(
    builders().some((p) => p.endsWith('/mqtt/build/index.js')),
    'nor MQTT.js itself (~1.8 MB of heap)',
  );
  await loadMqtt();
  const loaded = builders();
  for (const builder of ['tcp', 'tls', 'ws'])
    t.ok(
      loaded.some((p) => p.endsWith(`/mqtt/build/lib/connect/${builder}.js`)),
      `MQTT.js's ${builder} builder is loaded ahead`,
    );

  const tb = new FakeTbMqtt({ tokens: [GW_TOKEN] });
  await tb.start();
  t.teardown(() => tb.stop());
  let up!: () => void;
  const isUp = new Promise<void>((r) => {
    up = r;
  });
  const session = new UpstreamConnection({
    url: tb.url,
    token: () => Promise.resolve(GW_TOKEN),
    inflight: 4,
    timeoutMs: 5_000,
    retryBaseMs: 100,
    retryMaxMs: 1_000,
    log: quiet,
    now: Date.now,
    onUp: up,
    onDown: () => undefined,
    onMessage: () => Promise.resolve(),
  });
  t.teardown(() => session.stop());
  session.start();
  await isUp;
  const out: Outcome = await session.publish('v1/gateway/telemetry', '{"d":[{"ts":1,"values":{"k":1}}]}');
  t.same(out, { kind: 'sent' }, 'the publish is acknowledged');
  t.equal(writeToStream.cacheNumbers, false, 'packet ids are written without the 65,536-Buffer cache');
});
