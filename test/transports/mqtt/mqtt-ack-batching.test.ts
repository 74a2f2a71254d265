/**
 * The acks one group commit releases leave in one socket write (docs/mqtt.md, Durability): a client that
 * pipelines 100 QoS 1 messages gets its 100 PUBACKs, in order, each only after its data is stored, from a
 * few write syscalls of the daemon rather than one each. The daemon's write syscalls are read from
 * /proc/<pid>/io (Linux); its log's writes count there too (one or two per group commit, and the
 * preallocation of its next segment, which a first burst triggers and the test waits out).
 */
import { existsSync, readFileSync } from 'node:fs';
import mqttPacket from 'mqtt-packet';
import t from 'tap';
import { adminHeaders, latest, mqttPorts, rawSocket, sleep } from '../../helpers/mqtt.js';
import { addDevice, startGateway } from '../../helpers/server.js';

const writeSyscalls = (pid: number): number =>
  Number(/syscw:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/io`, 'utf8'))?.[1] ?? NaN);

const MESSAGES = 100;

t.test(
  'a pipelined burst: 100 PUBACKs in order, from a few writes',
  { skip: existsSync('/proc/self/io') ? false : 'no /proc/<pid>/io' },
  async (t) => {
    const gw = await startGateway(t);
    const pid = gw.proc.pid as number;
    const dev = await addDevice(gw.dataDir, 'burst');
    const s = await rawSocket(t, mqttPorts(gw).port);
    s.setNoDelay(true);
    const connect = { cmd: 'connect', clientId: 'burst', username: dev.token, keepalive: 0, clean: true } as const;
    s.write(mqttPacket.generate({ ...connect, protocolVersion: 4 }));
    while (s.received.length === 0) await sleep(10);
    s.received.length = 0;
    // all 100 in one TCP write: the daemon reads them together and stores them in one or two group commits
    const burst = (round: number): Buffer =>
      Buffer.concat(
        Array.from({ length: MESSAGES }, (_, n) =>
          mqttPacket.generate({
            cmd: 'publish',
            topic: 'v1/devices/me/telemetry',
            payload: Buffer.from(`{"ts":${1_700_000_000_000 + round * MESSAGES + n},"values":{"n":${n}}}`),
            qos: 1,
            messageId: n + 1,
            dup: false,
            retain: false,
          }),
        ),
      );
    const acked = async (): Promise<Buffer> => {
      const deadline = Date.now() + 10_000;
      while (Buffer.concat(s.received).length < 4 * MESSAGES && Date.now() < deadline) await sleep(5);
      const all = Buffer.concat(s.received);
      s.received.length = 0;
      return all;
    };
    // a first burst, not counted: the log's first records make it preallocate its next segment (zeros
    // written for a while), which is waited out
    s.write(burst(0));
    await acked();
    for (let quiet = 0, last = writeSyscalls(pid), end = Date.now() + 20_000; quiet < 5 && Date.now() < end; ) {
      await sleep(100);
      const now = writeSyscalls(pid);
      quiet = now === last ? quiet + 1 : 0;
      last = now;
    }
    const before = writeSyscalls(pid);
    s.write(burst(1));
    const acks = await acked();
    const writes = writeSyscalls(pid) - before;
    t.equal(acks.length, 4 * MESSAGES, 'a PUBACK for each');
    const ids: number[] = [];
    const kinds = new Set<string>();
    for (let i = 0; i + 4 <= acks.length; i += 4) {
      kinds.add(acks.toString('hex', i, i + 2));
      ids.push(acks.readUInt16BE(i + 2));
    }
    t.same([...kinds], ['4002'], 'each a plain PUBACK (0x40, length 2)');
    t.same(
      ids,
      Array.from({ length: MESSAGES }, (_, n) => n + 1),
      'in the order of the publishes',
    );
    t.ok(writes < MESSAGES / 4, `the daemon wrote ${writes} times for ${MESSAGES} PUBACKs and their commits`);
    const n = await latest(gw, await adminHeaders(gw), dev.id, 'n');
    t.same(n['n']?.[0], { ts: 1_700_000_000_000 + 2 * MESSAGES - 1, value: String(MESSAGES - 1) }, 'all stored');
  },
);
