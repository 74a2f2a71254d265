/**
 * CoAP for tests: the daemon's CoAP port from its listening line, a small programmatic client over coap-packet
 * and dgram (every datagram it receives is kept, so a test can assert message types, ids, Observe numbers),
 * and Debian's libcoap `coap-client-notls` run the way TB's docs run it.
 */
import { spawn, spawnSync } from 'node:child_process';
import { type Socket, createSocket } from 'node:dgram';
import { type ParsedPacket, generate, parse } from 'coap-packet';
import type { Gateway } from './server.js';
import { waitFor } from './wait.js';

export function coapPort(gw: Gateway): number {
  const line = gw.logs.find((l) => l.includes('listening on')) ?? '';
  const m = /coap:\/\/[^:]+:(\d+)/.exec(line);
  return m ? Number(m[1]) : 0;
}

export const LIBCOAP = '/usr/bin/coap-client-notls';
export const hasLibcoap = (): boolean => spawnSync('sh', ['-c', `test -x ${LIBCOAP}`]).status === 0;

/** Runs coap-client-notls; resolves with stdout, stderr. */
export function libcoap(args: string[], timeoutMs = 15_000): Promise<{ out: string; err: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(LIBCOAP, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (c: Buffer) => {
      out += c.toString();
    });
    p.stderr.on('data', (c: Buffer) => {
      err += c.toString();
    });
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.once('error', reject);
    p.once('exit', () => {
      clearTimeout(timer);
      resolve({ out, err });
    });
  });
}

export interface ReqOpts {
  method?: 'GET' | 'POST' | 'PUT' | 'DELETE';
  path: string;
  query?: string[];
  payload?: string | Buffer;
  confirmable?: boolean;
  observe?: number;
  token?: Buffer;
  messageId?: number;
  extra?: Array<{ name: string; value: Buffer }>;
}

export function uint(n: number): Buffer {
  if (n === 0) return Buffer.alloc(0);
  const b: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) b.unshift(v % 256);
  return Buffer.from(b);
}

export function readUint(b: Buffer | undefined): number | undefined {
  if (b === undefined) return undefined;
  let n = 0;
  for (const x of b) n = n * 256 + x;
  return n;
}

export const opt = (p: ParsedPacket, name: string): Buffer | undefined => p.options.find((o) => o.name === name)?.value;

export class CoapTestClient {
  readonly received: ParsedPacket[] = [];
  private waiters: Array<() => void> = [];
  private pings = 0;
  private mid = Math.floor(Math.random() * 60000);
  private tok = Math.floor(Math.random() * 1e6);
  /** answer CON notifications with an ACK (node-coap and libcoap do) */
  autoAck = true;

  private constructor(
    readonly socket: Socket,
    readonly port: number,
  ) {
    socket.on('message', (buf) => {
      let p: ParsedPacket;
      try {
        p = parse(buf);
      } catch {
        return;
      }
      this.received.push(p);
      if (this.autoAck && p.confirmable) this.sendRaw(generate({ code: '0.00', messageId: p.messageId, ack: true }));
      for (const w of [...this.waiters]) w();
    });
  }

  /** `from`: the loopback address to send from (all of 127.0.0.0/8 is loopback on Linux) */
  static async open(t: { teardown(fn: () => void): void }, port: number, from = '127.0.0.1'): Promise<CoapTestClient> {
    const s = createSocket('udp4');
    await new Promise<void>((r) => s.bind(0, from, () => r()));
    const c = new CoapTestClient(s, port);
    t.teardown(() => s.close());
    return c;
  }

  sendRaw(buf: Buffer): void {
    this.socket.send(buf, this.port, '127.0.0.1');
  }

  nextMid(): number {
    this.mid = (this.mid + 1) & 0xffff;
    return this.mid;
  }

  nextToken(): Buffer {
    this.tok++;
    return Buffer.from(this.tok.toString(16).padStart(8, '0'), 'hex');
  }

  /** Builds a request datagram. */
  build(o: ReqOpts): { buf: Buffer; messageId: number; token: Buffer } {
    const messageId = o.messageId ?? this.nextMid();
    const token = o.token ?? this.nextToken();
    const options: Array<{ name: string; value: Buffer }> = [];
    for (const seg of o.path.split('/').filter((x) => x !== ''))
      options.push({ name: 'Uri-Path', value: Buffer.from(seg) });
    for (const q of o.query ?? []) options.push({ name: 'Uri-Query', value: Buffer.from(q) });
    if (o.observe !== undefined) options.push({ name: 'Observe', value: uint(o.observe) });
    options.push(...(o.extra ?? []));
    const buf = generate(
      {
        code: o.method ?? 'GET',
        messageId,
        token,
        confirmable: o.confirmable ?? true,
        options: options as never,
        payload: o.payload === undefined ? Buffer.alloc(0) : Buffer.from(o.payload),
      },
      4096,
    );
    return { buf, messageId, token };
  }

  /** Waits for a datagram matching `pred` (among those received since index `from`). */
  async waitFor(pred: (p: ParsedPacket) => boolean, timeoutMs = 10_000, from = 0): Promise<ParsedPacket> {
    return waitFor(() => this.received.slice(from).find(pred), {
      timeout: timeoutMs,
      interval: 1_000,
      message: 'a matching CoAP datagram',
      wake: (check) => {
        this.waiters.push(check);
        return () => {
          const i = this.waiters.indexOf(check);
          if (i >= 0) this.waiters.splice(i, 1);
        };
      },
    });
  }

  /**
   * A CoAP ping (an empty CON), resolved by its RST: the listener handles one client's datagrams in order, so
   * whatever this client sent before (an RST that ends an observation, a request) has been handled by then.
   */
  async ping(): Promise<void> {
    const messageId = 0xf000 + (this.pings++ % 0x1000);
    const from = this.received.length;
    this.sendRaw(Buffer.from([0x40, 0, messageId >> 8, messageId & 255]));
    await this.waitFor((p) => p.reset && p.messageId === messageId, 10_000, from);
  }

  /** Sends a request and resolves with its answer (piggybacked, or separate after an empty ACK). */
  async request(o: ReqOpts, timeoutMs = 10_000): Promise<ParsedPacket> {
    const { buf, token } = this.build(o);
    const from = this.received.length;
    this.sendRaw(buf);
    return this.waitFor((p) => p.code !== '0.00' && p.token.equals(token), timeoutMs, from);
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
