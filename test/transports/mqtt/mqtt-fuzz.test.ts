/**
 * Fuzz the MQTT listener (docs/mqtt.md), seeded and bounded. Wire: random bytes, truncated and bit-flipped
 * packets on raw sockets; the daemon never crashes and keeps serving. Payloads: random topics and random,
 * truncated or mutated JSON on the device and gateway topics over MQTT 5 and 3.1.1; a message that was not
 * acknowledged with success stores nothing: every key carries its message's number, and after the run no
 * key of a refused message is found.
 */
import mqttPacket, { type Packet } from 'mqtt-packet';
import t from 'tap';
import { rng } from '../../helpers/prng.js';
import { adminHeaders, mqttClient, mqttPorts, rawSocket, sleep } from '../../helpers/mqtt.js';
import { addDevice, http, startGateway } from '../../helpers/server.js';

const SEED = Number(process.env['OUTPOST_FUZZ_SEED'] ?? 20_261_126);
const WIRE_CONNECTIONS = 300;
const MESSAGES = 600;
/** ms; each phase stops early rather than exceed this */
const BUDGET_MS = 20_000;

const next = rng(SEED);
const int = (n: number): number => Math.floor(next() * n);
const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)] as T;

const gw = await startGateway(t);
const { port } = mqttPorts(gw);
const dev = await addDevice(gw.dataDir, 'fuzz-dev');
const gateway = await addDevice(gw.dataDir, 'fuzz-gw', ['--gateway']);
const admin = await adminHeaders(gw);

async function alive(): Promise<boolean> {
  const r = await http('GET', `${gw.url}/api/v1/${dev.token}/attributes`);
  return r.status === 200 && gw.proc.exitCode === null;
}

function validPackets(): Buffer[] {
  const v = pick([4, 5] as const);
  const packets: Packet[] = [
    {
      cmd: 'connect',
      clientId: `f${int(1e6)}`,
      username: pick([dev.token, gateway.token, 'provision', '', 'nope']),
      keepalive: int(100),
      protocolVersion: v,
      clean: true,
    },
    {
      cmd: 'subscribe',
      messageId: 1 + int(100),
      subscriptions: [
        { topic: pick(['v1/devices/me/attributes', '#', 'v1/gateway/rpc', 'a/+/b']), qos: pick([0, 1, 2] as const) },
      ],
    },
    {
      cmd: 'publish',
      topic: pick(['v1/devices/me/telemetry', 'v1/gateway/telemetry', 'x']),
      payload: Buffer.from(`{"wire${int(1000)}":1}`),
      qos: pick([0, 1, 2] as const),
      messageId: 1 + int(100),
      dup: false,
      retain: false,
    },
    { cmd: 'pingreq' },
    { cmd: 'pubrel', messageId: 1 + int(100) },
    { cmd: 'unsubscribe', messageId: 1 + int(100), unsubscriptions: ['v1/devices/me/attributes'] },
  ];
  return packets.map((p) => mqttPacket.generate(p, { protocolVersion: v }));
}

function wireBytes(): Buffer {
  const kind = int(5);
  if (kind === 0) return Buffer.from(Array.from({ length: 1 + int(300) }, () => int(256)));
  const all = Buffer.concat(validPackets());
  if (kind === 1) return all.subarray(0, int(all.length)); // truncated
  if (kind === 2) {
    // bit flips
    const b = Buffer.from(all);
    for (let i = 0; i < 1 + int(6); i++) {
      const at = int(b.length);
      b[at] = (b[at] as number) ^ (1 << int(8));
    }
    return b;
  }
  if (kind === 3) {
    // a huge announced length, then little
    return Buffer.concat([all.subarray(0, int(all.length)), Buffer.from([0x30, 0xff, 0xff, 0xff, 0x7f, 0x00, 0x01])]);
  }
  return all;
}

t.test('wire: random, truncated and mutated packets never take the daemon down', async (t) => {
  const t0 = Date.now();
  let sent = 0;
  for (let i = 0; i < WIRE_CONNECTIONS && Date.now() - t0 < BUDGET_MS; i += 10) {
    await Promise.all(
      Array.from({ length: 10 }, async () => {
        const s = await rawSocket(t, port);
        const bytes = wireBytes();
        // sometimes split across writes, as a slow link would deliver it
        const cut = int(bytes.length + 1);
        s.write(bytes.subarray(0, cut));
        await sleep(int(3));
        s.write(bytes.subarray(cut));
        sent++;
        await Promise.race([s.ended, sleep(150)]);
        s.destroy();
      }),
    );
  }
  t.ok(sent >= 50, `${sent} connections fuzzed`);
  t.ok(await alive(), 'still serving HTTP');
  const c = await mqttClient(t, gw, dev.token);
  await c.publishAsync('v1/devices/me/telemetry', '{"afterWire":1}', { qos: 1 });
  t.pass('still serving MQTT');
});

/** JSON text for message `i`: every key names the message (`k<n>_m<i>`), so stored keys can be traced back. */
function payload(i: number, gatewayTopic: boolean): string {
  const key = (): string => `k${int(5)}_m${i}`;
  const value = (): string =>
    pick(['1', '42.0', '"s"', 'true', 'null', '{"o":1}', '[1]', '1e400', '"42"', '-0', '12345678901234567890']);
  const obj = (): string => `{${Array.from({ length: 1 + int(3) }, () => `"${key()}":${value()}`).join(',')}}`;
  const shape = (): string =>
    pick([
      obj(),
      `{"ts":${1700000000000 + int(1e6)},"values":${obj()}}`,
      `[${obj()},{"ts":${1700000000000 + int(1e6)},"values":${obj()}}]`,
    ]);
  let text = gatewayTopic ? `{"fuzz-sub-${int(3)}":[${shape()}]}` : shape();
  const m = int(6);
  if (m === 0)
    text = text.slice(0, int(text.length)); // truncated
  else if (m === 1) {
    // a character replaced
    const at = int(text.length);
    text = text.slice(0, at) + pick(['"', '{', '}', ',', ':', 'x', '\\', ']']) + text.slice(at + 1);
  } else if (m === 2)
    text = pick([
      '',
      'null',
      '[]',
      '[1,2]',
      '"str"',
      '{"ts":1}',
      '{"ts":"x","values":{}}',
      '{"values":1,"ts":1}',
      '\u0000',
    ]);
  return text;
}

const TOPICS = [
  'v1/devices/me/telemetry',
  'v2/t',
  'v1/devices/me/attributes',
  'v2/a',
  'v1/gateway/telemetry',
  'v1/gateway/attributes',
];

t.test('payloads: a message not acknowledged with success stores nothing', async (t) => {
  const refused = new Set<number>();
  let accepted = 0;
  const t0 = Date.now();
  const v5 = await mqttClient(t, gw, gateway.token, { protocolVersion: 5 });
  for (let i = 0; i < MESSAGES && Date.now() - t0 < BUDGET_MS; i++) {
    const topic =
      int(10) === 0
        ? pick(['v1/devices/me/x', 'v1/gateway/nope', '', 'a/b/c', 'v1/devices/me/rpc/response/x']) +
          (int(2) === 0 ? '' : `/${int(9)}`)
        : pick(TOPICS);
    if (topic === '') continue;
    const body = payload(i, topic.startsWith('v1/gateway/'));
    const code = await v5.publishAsync(topic, body, { qos: 1 }).then(
      () => 0,
      (e: { code?: number }) => e.code ?? -1,
    );
    if (code === 0 && TOPICS.includes(topic)) accepted++;
    else refused.add(i);
  }
  t.ok(v5.connected, 'MQTT 5 session kept through bad payloads');
  // 3.1.1: a bad payload closes the connection; the next message opens a new one
  for (let i = MESSAGES; i < MESSAGES + 60; i++) {
    const c = await mqttClient(t, gw, dev.token);
    const topic = pick(TOPICS.slice(0, 4));
    const ok = await Promise.race([
      c.publishAsync(topic, payload(i, false), { qos: 1 }).then(
        () => true,
        () => false,
      ),
      new Promise<boolean>((r) => c.once('close', () => r(false))),
    ]);
    if (ok) accepted++;
    else refused.add(i);
    c.end(true);
  }
  t.ok(accepted > 20 && refused.size > 20, `${accepted} accepted, ${refused.size} refused`);
  // every key stored anywhere: the plain device and the gateway's sub-devices, telemetry and client attributes
  const names = ['fuzz-dev', 'fuzz-sub-0', 'fuzz-sub-1', 'fuzz-sub-2'];
  const stored: string[] = [];
  for (const name of names) {
    const d = await http('GET', `${gw.url}/api/tenant/devices?deviceName=${name}`, undefined, admin);
    if (d.status !== 200) continue;
    const id = d.json<{ id: { id: string } }>().id.id;
    stored.push(
      ...(await http('GET', `${gw.url}/api/plugins/telemetry/DEVICE/${id}/keys/timeseries`, undefined, admin)).json<
        string[]
      >(),
    );
    stored.push(
      ...(
        await http('GET', `${gw.url}/api/plugins/telemetry/DEVICE/${id}/keys/attributes/CLIENT_SCOPE`, undefined, admin)
      ).json<string[]>(),
    );
  }
  const leaked = stored.filter((k) => {
    const m = /^k\d_m(\d+)$/.exec(k);
    return m !== null && refused.has(Number(m[1]));
  });
  t.ok(stored.length > 0, `${stored.length} keys stored`);
  t.same(leaked, [], 'no key of a refused message was stored');
  t.ok(await alive(), 'still serving');
});
