/**
 * The pooled packet parser (src/transports/mqtt/connection.ts): connections take a parser only while they have bytes to
 * parse. Real sockets on loopback; each byte is written alone and read alone (the next is written once the
 * server has read the last), so every split point of every packet is crossed, interleaved across an MQTT 5
 * and an MQTT 3.1.1 connection sharing one pool.
 */
import '../../helpers/sandbox.js';
import { type Server, type Socket, connect, createServer } from 'node:net';
import mqttPacket, { type Packet } from 'mqtt-packet';
import t, { type Test } from 'tap';
import { MqttConnection, ParserPool } from '../../../src/transports/mqtt/connection.js';
import { MqttCounters } from '../../../src/status/metrics.js';

interface Side {
  readonly client: Socket;
  readonly conn: MqttConnection;
  readonly packets: Packet[];
  /** bytes the server has read */
  read: number;
  closed: boolean;
}

async function pair(
  t: Test,
  pool: ParserPool,
  counters: MqttCounters,
  maxPayloadBytes = 1 << 20,
): Promise<{ open: () => Promise<Side> }> {
  const accepted: Array<(s: Socket) => void> = [];
  const server: Server = createServer((s) => accepted.shift()?.(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  const clients: Socket[] = [];
  t.teardown(async () => {
    for (const c of clients) c.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  });
  return {
    open: async () => {
      const serverSide = new Promise<Socket>((r) => accepted.push(r));
      const client = connect(port, '127.0.0.1');
      client.on('error', () => undefined);
      clients.push(client);
      client.setNoDelay(true);
      const socket = await serverSide;
      const conn = new MqttConnection(
        socket,
        { maxPayloadBytes, maxOutboundBytes: 1 << 20 },
        counters,
        pool,
        Date.now(),
      );
      const side: Side = { client, conn, packets: [], read: 0, closed: false };
      socket.on('data', (b: Buffer) => {
        side.read += b.length;
      });
      conn.attach({
        onPacket: (p) => {
          // as the session does: the version a CONNECT names decides how the next packets are read
          if (p.cmd === 'connect') conn.protocolVersion = p.protocolVersion ?? 4;
          side.packets.push(p);
        },
        onClose: () => {
          side.closed = true;
        },
      });
      return side;
    },
  };
}

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

/** Writes one byte and waits until the server has read it. */
async function writeByte(side: Side, b: number): Promise<void> {
  const before = side.read;
  side.client.write(Buffer.from([b]));
  for (let i = 0; side.read === before && !side.closed; i++) {
    if (i > 10_000) throw new Error('the server did not read the byte');
    await tick();
  }
}

const v5Packets: Packet[] = [
  {
    cmd: 'connect',
    protocolId: 'MQTT',
    protocolVersion: 5,
    clientId: 'five',
    username: 'token-5',
    keepalive: 30,
    clean: true,
    properties: { sessionExpiryInterval: 0, receiveMaximum: 10, userProperties: { site: 'north' } },
  },
  {
    cmd: 'publish',
    topic: 'v1/devices/me/telemetry',
    payload: Buffer.from('{"t":1}'),
    qos: 1,
    messageId: 7,
    dup: false,
    retain: false,
    properties: { contentType: 'application/json', messageExpiryInterval: 60, userProperties: { a: 'b' } },
  },
  {
    cmd: 'subscribe',
    messageId: 8,
    subscriptions: [{ topic: 'v1/devices/me/rpc/request/+', qos: 1, nl: false, rap: false, rh: 0 }],
    properties: { subscriptionIdentifier: 3 },
  },
  { cmd: 'pingreq' },
  {
    cmd: 'publish',
    topic: 'v1/devices/me/attributes',
    payload: Buffer.from('{"a":2}'),
    qos: 0,
    dup: false,
    retain: false,
    properties: { payloadFormatIndicator: true },
  },
];

const v4Packets: Packet[] = [
  {
    cmd: 'connect',
    protocolId: 'MQTT',
    protocolVersion: 4,
    clientId: 'four',
    username: 'token-4',
    keepalive: 30,
    clean: true,
  },
  {
    cmd: 'publish',
    topic: 'v1/devices/me/telemetry',
    payload: Buffer.from('{"u":2}'),
    qos: 1,
    messageId: 9,
    dup: false,
    retain: false,
  },
  { cmd: 'pingreq' },
  {
    cmd: 'publish',
    topic: 'v1/devices/me/telemetry',
    payload: Buffer.from('{"u":3}'),
    qos: 0,
    dup: false,
    retain: false,
  },
];

/** What each packet must read as: the fields the session uses, MQTT 5 properties included. */
function summary(p: Packet): unknown {
  const r = p as unknown as Record<string, unknown>;
  return {
    cmd: p.cmd,
    topic: r.topic,
    messageId: r.messageId,
    qos: r.qos,
    username: r.username,
    protocolVersion: r.protocolVersion,
    payload: Buffer.isBuffer(r.payload) ? r.payload.toString() : r.payload,
    properties: r.properties,
    subscriptions: (r.subscriptions as Array<{ topic: string; qos: number }> | undefined)?.map((s) => [s.topic, s.qos]),
  };
}

t.test(
  'packets split at every byte, interleaved across an MQTT 5 and an MQTT 3.1.1 connection, read whole',
  async (t) => {
    const pool = new ParserPool();
    const counters = new MqttCounters();
    const { open } = await pair(t, pool, counters);
    const five = await open();
    const four = await open();
    const fiveBytes = Buffer.concat(v5Packets.map((p) => mqttPacket.generate(p, { protocolVersion: 5 })));
    const fourBytes = Buffer.concat(v4Packets.map((p) => mqttPacket.generate(p, { protocolVersion: 4 })));
    let heldBetween = 0;
    for (let i = 0; i < Math.max(fiveBytes.length, fourBytes.length); i++) {
      if (i < fiveBytes.length) await writeByte(five, fiveBytes[i] as number);
      if (i < fourBytes.length) await writeByte(four, fourBytes[i] as number);
      // at most one parser per connection in use, and the pool never grows past them
      t.ok(pool.idle <= 2, 'the pool holds at most the two parsers');
      if (!five.conn.holdsParser && !four.conn.holdsParser) heldBetween++;
    }
    t.equal(five.read, fiveBytes.length);
    t.equal(four.read, fourBytes.length);
    t.notOk(five.closed || four.closed, 'neither connection was closed');
    t.same(five.packets.map(summary), reparse(fiveBytes, 5), 'the MQTT 5 packets, properties included');
    t.same(four.packets.map(summary), reparse(fourBytes, 4), 'the MQTT 3.1.1 packets');
    t.equal(five.packets.length, v5Packets.length);
    t.equal(four.packets.length, v4Packets.length);
    t.same(
      five.packets[1] !== undefined ? summary(five.packets[1]) : undefined,
      {
        cmd: 'publish',
        topic: 'v1/devices/me/telemetry',
        messageId: 7,
        qos: 1,
        username: undefined,
        protocolVersion: undefined,
        payload: '{"t":1}',
        properties: { contentType: 'application/json', messageExpiryInterval: 60, userProperties: { a: 'b' } },
        subscriptions: undefined,
      },
      'the MQTT 5 PUBLISH: its properties are not read as payload',
    );
    t.notOk(five.conn.holdsParser || four.conn.holdsParser, 'between packets, neither connection holds a parser');
    t.ok(heldBetween >= v4Packets.length, `both were between packets at ${heldBetween} points`);
    t.equal(counters.closed.malformed, 0);
  },
);

/** The packets a fresh parser of that version reads from the whole stream at once. */
function reparse(bytes: Buffer, protocolVersion: 4 | 5): unknown[] {
  const out: unknown[] = [];
  const p = mqttPacket.parser({ protocolVersion });
  p.on('packet', (x: Packet) => out.push(summary(x)));
  p.parse(bytes);
  return out;
}

t.test('a whole packet in one read: the parser goes back to the pool at once', async (t) => {
  const pool = new ParserPool();
  const { open } = await pair(t, pool, new MqttCounters());
  const a = await open();
  const bytes = Buffer.concat(v4Packets.map((p) => mqttPacket.generate(p, { protocolVersion: 4 })));
  a.client.write(bytes);
  while (a.read < bytes.length) await tick();
  t.equal(a.packets.length, v4Packets.length);
  t.notOk(a.conn.holdsParser);
  t.equal(pool.idle, 1, 'one parser, back in the pool');
});

t.test('an oversize packet split across writes is refused once its length is read, before its body', async (t) => {
  const pool = new ParserPool();
  const counters = new MqttCounters();
  const { open } = await pair(t, pool, counters, 100);
  const a = await open();
  for (const b of mqttPacket.generate({
    cmd: 'connect',
    protocolId: 'MQTT',
    protocolVersion: 4,
    clientId: 'x',
    keepalive: 0,
    clean: true,
  }))
    await writeByte(a, b);
  t.equal(a.packets.length, 1);
  // PUBLISH announcing 1,000,000 bytes (over 100 + the header room): fixed header, then its 3-byte length
  const header = [0x30, 0xc0, 0x84, 0x3d];
  for (const b of header) {
    t.notOk(a.closed, 'open until the whole length is read');
    await writeByte(a, b);
  }
  for (let i = 0; i < 100 && !a.closed; i++) await tick();
  t.ok(a.closed, 'closed without the body');
  t.equal(counters.closed.oversize, 1);
  t.equal(pool.idle, 0, 'the parser that read the refused header is dropped, not pooled');
  t.notOk(a.conn.holdsParser);
});

t.test('a malformed packet closes only its connection; the pool takes no broken parser', async (t) => {
  const pool = new ParserPool();
  const counters = new MqttCounters();
  const { open } = await pair(t, pool, counters);
  const bad = await open();
  const good = await open();
  const connect4 = mqttPacket.generate({
    cmd: 'connect',
    protocolId: 'MQTT',
    protocolVersion: 4,
    clientId: 'g',
    keepalive: 0,
    clean: true,
  });
  good.client.write(connect4.subarray(0, 5));
  while (good.read < 5) await tick();
  t.ok(good.conn.holdsParser, 'a CONNECT split across reads keeps its parser');
  bad.client.write(Buffer.from([0x36, 0x00])); // PUBLISH with both QoS bits set: malformed
  for (let i = 0; i < 1000 && !bad.closed; i++) await tick();
  t.ok(bad.closed);
  t.equal(counters.closed.malformed, 1);
  good.client.write(connect4.subarray(5));
  while (good.read < connect4.length) await tick();
  t.equal(good.packets.length, 1, "the other connection's split CONNECT is read whole");
  t.equal(pool.idle, 1, 'only the good parser came back');
});

t.test('writing packets fills no cache of packet-id Buffers (65,536 of them, ~10 MB held for good)', async (t) => {
  const { createRequire } = await import('node:module');
  const numbers = createRequire(import.meta.url)('mqtt-packet/numbers.js') as { cache: Record<number, Buffer> };
  // connection.js, imported above, switched the cache off when it loaded; a PUBACK writes a packet id
  const bytes = mqttPacket.generate({ cmd: 'puback', messageId: 513 });
  t.same([...bytes], [0x40, 2, 2, 1]);
  t.equal(Object.keys(numbers.cache).length, 0, 'no cache filled');
});
