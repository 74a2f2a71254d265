/**
 * A lean MQTT client for the benchmarks: mqtt-packet on a raw socket for CONNECT and everything unusual, and
 * the two packets of a QoS 1 load written and read directly (a PUBLISH's bytes assembled here, a PUBACK's 4
 * bytes read here), so the load generator's CPU, on the same shared cores as the daemon, stays smaller than
 * the raw HTTP client's.
 */
import { type Socket, connect } from 'node:net';
import mqttPacket, { type Packet } from 'mqtt-packet';

/** The bytes not yet parsed (mqtt-packet's untyped parser state). */
interface ParserState {
  _list: { length: number };
}

/** One MQTT connection: CONNECT, then QoS 1 publishes resolved on their PUBACK with its reason code. */
export class RawMqtt {
  private readonly acks = new Map<number, (rc: number) => void>();
  private nextId = 0;
  private connack: ((rc: number) => void) | undefined;
  private readonly parser = mqttPacket.parser();
  private readonly topics = new Map<string, Buffer>();

  private constructor(readonly socket: Socket) {
    this.parser.on('packet', (p: Packet) => {
      if (p.cmd === 'connack') this.connack?.(p.returnCode ?? p.reasonCode ?? 0);
      else if (p.cmd === 'puback') this.acked(p.messageId ?? 0, p.reasonCode ?? 0);
    });
    socket.on('data', (b: Buffer) => this.onData(b));
    socket.on('error', () => undefined);
    socket.setNoDelay(true);
  }

  /** `localAddress`: the client's source address (bench/lib.ts clientAddress) */
  static open(port: number, username: string, localAddress = '127.0.0.1'): Promise<RawMqtt> {
    return new Promise((resolve, reject) => {
      const socket = connect({ port, host: '127.0.0.1', localAddress });
      socket.once('error', reject);
      socket.once('connect', () => {
        const c = new RawMqtt(socket);
        c.connack = (rc) => (rc === 0 ? resolve(c) : reject(new Error(`CONNACK ${rc}`)));
        socket.write(
          mqttPacket.generate({
            cmd: 'connect',
            clientId: `b-${username}-${Math.random()}`,
            username,
            keepalive: 0,
            protocolVersion: 4,
            clean: true,
          }),
        );
      });
    });
  }

  private onData(b: Buffer): void {
    // whole plain PUBACKs (0x40 0x02 id id) with nothing pending in the parser: read here
    if ((this.parser as unknown as ParserState)._list.length === 0 && b.length % 4 === 0) {
      let plain = true;
      for (let i = 0; i < b.length; i += 4) if (b[i] !== 0x40 || b[i + 1] !== 2) plain = false;
      if (plain) {
        for (let i = 0; i < b.length; i += 4) this.acked(b.readUInt16BE(i + 2), 0);
        return;
      }
    }
    this.parser.parse(b);
  }

  private acked(id: number, rc: number): void {
    const done = this.acks.get(id);
    this.acks.delete(id);
    done?.(rc);
  }

  /** A QoS 1 PUBLISH (3.1.1): fixed header, remaining length, topic, packet id, payload. */
  publish(topic: string, payload: Buffer): Promise<number> {
    this.nextId = this.nextId >= 65_535 ? 1 : this.nextId + 1;
    const messageId = this.nextId;
    let t = this.topics.get(topic);
    if (t === undefined) {
      t = Buffer.from(topic);
      this.topics.set(topic, t);
    }
    let rest = 2 + t.length + 2 + payload.length;
    const len: number[] = [];
    do {
      let byte = rest % 128;
      rest = Math.floor(rest / 128);
      if (rest > 0) byte |= 0x80;
      len.push(byte);
    } while (rest > 0);
    const head = Buffer.allocUnsafe(1 + len.length + 2 + t.length + 2);
    head[0] = 0x32;
    let o = 1;
    for (const byte of len) head[o++] = byte;
    head.writeUInt16BE(t.length, o);
    t.copy(head, o + 2);
    head.writeUInt16BE(messageId, o + 2 + t.length);
    return new Promise((resolve) => {
      this.acks.set(messageId, resolve);
      this.socket.write(Buffer.concat([head, payload], head.length + payload.length));
    });
  }

  close(): void {
    this.socket.destroy();
  }
}
