/**
 * ingest.maxBytesInFlight (docs/design/memory-budget.md): device uploads beyond the budget wait for room, none is
 * refused, each is answered once on disk and reads back; the status and /metrics say the budget was reached.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { IngestAdmission } from '../../src/ingest/admission.js';
import { mqttClient } from '../helpers/mqtt.js';
import { addDevice, cli, http, startGateway, tempDir } from '../helpers/server.js';
import { adminHeaders } from '../helpers/users.js';

interface InFlight {
  budgetBytes: number;
  inFlightBytes: number;
  peakBytes: number;
  waited: number;
  waiting: number;
}

t.test('a flood of posts beyond a tiny budget: every one answered 200, stored, and the waits counted', async (t) => {
  const dir = tempDir(t);
  const cfg = join(dir, 'config.json');
  // each commit waits 50 ms for others to share it, so posts sent together are in flight together
  writeFileSync(cfg, JSON.stringify({ ingest: { maxBytesInFlight: 200 }, store: { commitDelayMs: 50 } }));
  const gw = await startGateway(t, { args: ['--config', cfg] });
  const dev = await addDevice(gw.dataDir, 'flood-dev');
  const admin = await adminHeaders(gw, 'admin@flood.test');
  const N = 40;
  const T0 = 1_700_000_000_000;
  const posts = Array.from({ length: N }, (_, i) =>
    http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, { ts: T0 + i * 1000, values: { v: i, s: `p${i}` } }),
  );
  // one body larger than the whole budget still goes in (alone)
  const big = Array.from({ length: 20 }, (_, i) => ({
    ts: T0 + (N + i) * 1000,
    values: { v: N + i, s: 'x'.repeat(10) },
  }));
  posts.push(http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, big));
  const answers = await Promise.all(posts);
  t.same(
    answers.map((r) => r.status),
    answers.map(() => 200),
    'every post answered 200',
  );

  const q = `keys=v&startTs=${T0}&endTs=${T0 + 100_000}&limit=1000`;
  const read = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/values/timeseries?${q}`,
    undefined,
    admin,
  );
  t.equal(read.status, 200);
  const values = read.json<{ v: Array<{ ts: number; value: string }> }>().v;
  t.equal(values.length, N + 20, 'every point reads back');
  t.same(
    values.map((p) => Number(p.value)).sort((a, b) => a - b),
    Array.from({ length: N + 20 }, (_, i) => i),
  );

  const status = await http('GET', `${gw.url}/api/outpost/status`, undefined, admin);
  const f = status.json<{ ingest: { inFlight: InFlight } }>().ingest.inFlight;
  t.equal(f.budgetBytes, 200);
  t.ok(f.waited > 0, `posts waited for room (${f.waited})`);
  t.equal(f.inFlightBytes, 0, 'all given back');
  t.equal(f.waiting, 0);
  const bigBytes = Buffer.byteLength(JSON.stringify(big));
  t.equal(f.peakBytes, bigBytes, 'the peak: the big body alone, never beside others');
  const metrics = await http('GET', `${gw.url}/metrics`);
  t.match(metrics.text, /^outpost_ingest_admission_waits_total [1-9]\d*$/m);
  t.match(metrics.text, /^outpost_ingest_in_flight_bytes 0$/m);
  const cliStatus = await cli(['status', '--data-dir', gw.dataDir], { COLUMNS: '200' });
  t.match(cliStatus.stdout, /^ingest .*; \d+ uploads waited for room \(at most 0\.0 MiB of the 0\.0 MiB in flight\)$/m);
});

t.test('MQTT publishes beyond the budget: every one acknowledged and stored', async (t) => {
  const dir = tempDir(t);
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify({ ingest: { maxBytesInFlight: 100 }, store: { commitDelayMs: 50 } }));
  const gw = await startGateway(t, { args: ['--config', cfg] });
  const devices = await Promise.all([0, 1, 2, 3].map((i) => addDevice(gw.dataDir, `mqtt-flood-${i}`)));
  const clients = await Promise.all(devices.map((d) => mqttClient(t, gw, d.token)));
  const admin = await adminHeaders(gw, 'admin@mqtt-flood.test');
  const T0 = 1_700_000_000_000;
  const acks: Array<Promise<unknown>> = [];
  for (let n = 0; n < 80; n++) {
    const c = clients[n % 4];
    if (c === undefined) throw new Error('no client');
    // pipelined: all in flight at once
    acks.push(c.publishAsync('v1/devices/me/telemetry', `{"ts":${T0 + n},"values":{"n":${n}}}`, { qos: 1 }));
  }
  await Promise.all(acks);
  for (const [i, d] of devices.entries()) {
    const r = await http(
      'GET',
      `${gw.url}/api/plugins/telemetry/DEVICE/${d.id}/values/timeseries?keys=n&startTs=${T0}&endTs=${T0 + 100}&limit=100`,
      undefined,
      admin,
    );
    const ns = r
      .json<{ n: Array<{ value: string }> }>()
      .n.map((p) => Number(p.value))
      .sort((a, b) => a - b);
    t.same(
      ns,
      Array.from({ length: 20 }, (_, k) => k * 4 + i),
      `device ${i}: its 20 points`,
    );
  }
  const status = await http('GET', `${gw.url}/api/outpost/status`, undefined, admin);
  const f = status.json<{ ingest: { inFlight: InFlight } }>().ingest.inFlight;
  t.ok(f.waited > 0, `publishes waited for room (${f.waited})`);
  t.equal(f.inFlightBytes, 0);
});

t.test(
  'admission: first come first served; a body over the budget alone; a failure gives its bytes back',
  async (t) => {
    const a = new IngestAdmission(100);
    const order: string[] = [];
    const gates = new Map<string, () => void>();
    const job = (name: string) => () => {
      order.push(name);
      return new Promise<string>((resolve) => gates.set(name, () => resolve(name)));
    };
    const open = (name: string): void => (gates.get(name) as () => void)();
    const pa = a.run(60, job('a'));
    const pb = a.run(60, job('b')); // waits: 120 > 100
    const pc = a.run(30, job('c')); // fits, but waits behind b
    const pBig = a.run(500, job('big'));
    t.same(order, ['a'], 'only the first runs');
    t.same(a.figures(), { budgetBytes: 100, inFlightBytes: 60, peakBytes: 60, waited: 3, waiting: 3 });
    open('a');
    t.equal(await pa, 'a');
    t.same(order, ['a', 'b', 'c'], 'b, then c beside it');
    open('b');
    open('c');
    await Promise.all([pb, pc]);
    t.same(order, ['a', 'b', 'c', 'big'], 'the big one once alone');
    t.equal(a.figures().inFlightBytes, 500);
    open('big');
    await pBig;
    const failing = a.run(10, () => Promise.reject(new Error('bad body')));
    await t.rejects(failing, /bad body/);
    const throwing = a.run(10, () => {
      throw new Error('bad json');
    });
    await t.rejects(throwing, /bad json/);
    t.same(a.figures(), { budgetBytes: 100, inFlightBytes: 0, peakBytes: 500, waited: 3, waiting: 0 });
  },
);
