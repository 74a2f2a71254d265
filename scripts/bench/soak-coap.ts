/**
 * The soak's CoAP device (docs/design/soak.md): one UDP socket per device, as a sensor has, posting CON requests
 * one at a time. A post counts only when a 2.01 Created comes back for it: piggybacked in the ACK of its message
 * id with its token, or after an empty ACK as a separate response with its token (ACKed, as RFC 7252 section 5.2.2
 * asks). Without an ACK the same datagram (same message id) goes again after a timeout that doubles, a few
 * times; then the post is given up. The daemon's port is read at each transmission, so that a restarted daemon on
 * another port would still be reached.
 */
import { type Socket, createSocket } from 'node:dgram';
import { type ParsedPacket, generate, parse } from 'coap-packet';

export interface CoapPostResult {
  /** a 2.01 arrived for it */
  created: boolean;
  /** the answer's code, or 'timeout' */
  code: string;
  /** datagrams sent for it, the first included */
  transmissions: number;
  /** Date.now() of the last transmission */
  lastSentAt: number;
}

/** Shorter than RFC 7252's ACK_TIMEOUT 2 s and MAX_RETRANSMIT 4, so that a reading given up fits a fault's length */
const ACK_TIMEOUT_MS = 1_000;
const MAX_RETRANSMIT = 3;
/** after an empty ACK, how long the separate response may take (the daemon's commit under a full disk or a freeze) */
const SEPARATE_TIMEOUT_MS = 15_000;

export class SoakCoapDevice {
  private mid: number;
  private tok: number;
  private waiter: ((p: ParsedPacket) => void) | undefined;
  private closed = false;

  private constructor(
    private readonly socket: Socket,
    private readonly port: () => number,
    random: () => number,
  ) {
    this.mid = Math.floor(random() * 0xffff);
    this.tok = Math.floor(random() * 0xffffff);
    socket.on('message', (buf) => {
      let p: ParsedPacket;
      try {
        p = parse(buf);
      } catch {
        return;
      }
      // every CON from the daemon is a separate response: ACK it, even one for a post already given up
      if (p.confirmable) this.send(generate({ code: '0.00', messageId: p.messageId, ack: true }));
      this.waiter?.(p);
    });
    socket.on('error', () => undefined);
  }

  static async open(port: () => number, random: () => number): Promise<SoakCoapDevice> {
    const s = createSocket('udp4');
    await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
    return new SoakCoapDevice(s, port, random);
  }

  private send(buf: Buffer): void {
    const port = this.port();
    if (this.closed || port === 0) return;
    this.socket.send(buf, port, '127.0.0.1', () => undefined);
  }

  /** POSTs `payload` as one CON request to `path` and waits for its answer (see the file's comment). */
  post(path: string, payload: string): Promise<CoapPostResult> {
    this.mid = (this.mid + 1) & 0xffff;
    this.tok = (this.tok + 1) & 0xffffffff;
    const messageId = this.mid;
    const token = Buffer.alloc(4);
    token.writeUInt32BE(this.tok >>> 0);
    const buf = generate({
      code: 'POST',
      messageId,
      token,
      confirmable: true,
      options: [
        ...path.split('/').map((seg) => ({ name: 'Uri-Path' as const, value: Buffer.from(seg) })),
        { name: 'Content-Format', value: Buffer.from([50]) },
      ],
      payload: Buffer.from(payload),
    });
    return new Promise((resolve) => {
      const result: CoapPostResult = { created: false, code: 'timeout', transmissions: 0, lastSentAt: 0 };
      let timer: NodeJS.Timeout | undefined;
      let acked = false;
      const finish = (code: string): void => {
        clearTimeout(timer);
        this.waiter = undefined;
        result.code = code;
        result.created = code === '2.01';
        resolve(result);
      };
      const transmit = (timeoutMs: number): void => {
        if (result.transmissions > MAX_RETRANSMIT) {
          finish('timeout');
          return;
        }
        result.transmissions++;
        result.lastSentAt = Date.now();
        this.send(buf);
        timer = setTimeout(() => transmit(timeoutMs * 2), timeoutMs);
      };
      this.waiter = (p) => {
        if (p.reset && p.messageId === messageId) finish('RST');
        else if (p.ack && p.messageId === messageId && p.code !== '0.00')
          finish(p.token.equals(token) ? p.code : `${p.code} (another token)`);
        else if (p.ack && p.messageId === messageId && !acked) {
          // an empty ACK: no more retransmissions; the answer comes as a CON of its own
          acked = true;
          clearTimeout(timer);
          timer = setTimeout(() => finish('timeout'), SEPARATE_TIMEOUT_MS);
        } else if (!p.ack && !p.reset && p.token.equals(token) && p.code !== '0.00') finish(p.code);
      };
      transmit(ACK_TIMEOUT_MS * (1 + Math.random() * 0.5));
    });
  }

  close(): void {
    this.closed = true;
    this.waiter = undefined;
    this.socket.close();
  }
}
