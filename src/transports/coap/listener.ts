/**
 * The CoAP listener (docs/coap.md): one UDP socket on `coap.port`, in the daemon's process and event loop,
 * calling the device layer HTTP and MQTT call (src/device/actions.ts). Between the message layer (exchange.ts) and TB's resources
 * (resources.ts) it does block-wise transfers (RFC 7959): Block1 uploads are reassembled per peer and URI
 * (libcoap sends every block with a new token), after the path and token were checked; answers and
 * notifications larger than a block go out in Block2 pieces, the rest fetched by GET with Block2. Assemblies
 * and large answers are bounded in number (`coap.maxBlockTransfers`), size (`coap.maxBodyBytes`) and age.
 */
import { type Socket, createSocket } from 'node:dgram';
import { type LookupOneOptions, lookup } from 'node:dns';
import { isIP, isIPv6 } from 'node:net';
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import type { PollHandle } from '../../device/actions.js';
import type { CoapCounters } from '../../status/metrics.js';
import {
  type Answer,
  type Block,
  type Message,
  blockOption,
  option,
  options,
  readBlock,
  readUint,
  uintOption,
} from './codec.js';
import { CoapEndpoint, type Exchange, type Peer } from './exchange.js';
import { ObservationRegistry } from './observe.js';
import { CoapResources, type CoapRequest, precheck } from './resources.js';

export interface CoapListener {
  /** the bound port; 0 = off */
  readonly port: number;
  close(): Promise<void>;
}

/** the largest block (RFC 7959 SZX 6), the size Californium prefers too */
const MAX_BLOCK = 1024;
/** a datagram above this is dropped unread (Californium's UDP buffer) */
const MAX_DATAGRAM = 2048;
const SWEEP_MS = 1_000;

interface Assembly {
  readonly parts: Buffer[];
  bytes: number;
  at: number;
}

interface LargeAnswer {
  readonly answer: Answer;
  readonly body: Buffer;
  readonly at: number;
}

/** Block `num` of a large answer (Block2, Size2 on the first). */
function piece(a: Answer, body: Buffer, num: number, size: number): Answer {
  const start = num * size;
  if (start >= body.length && num > 0) return { code: '4.02', payload: Buffer.from('no such block') };
  const more = start + size < body.length;
  const opts = (a.options ?? []).filter((o) => o.name !== 'Block2' && o.name !== 'Size2');
  opts.push({ name: 'Block2', value: blockOption(num, more, size) });
  if (num === 0) opts.push({ name: 'Size2', value: uintOption(body.length) });
  return { ...a, payload: body.subarray(start, start + size), options: opts };
}

/** Where a peer's block-wise transfer for one URI is kept: assemblies and large answers. */
const peerUriOf = (peer: Peer, uri: string): string => `${peer.address}:${peer.port} ${uri}`;

/**
 * A request as the resources see it. Its URI (path and query joined) and the peer-and-URI key are made only when
 * asked for (Observe, block-wise, a large answer), not for every upload.
 */
class IncomingRequest implements CoapRequest {
  readonly code: string;
  readonly path: readonly string[];
  readonly query: readonly string[];
  /** the datagram's payload, or the reassembled Block1 body */
  payload: Buffer;
  readonly observe: number | undefined;
  readonly token: Buffer;
  readonly confirmable: boolean;
  /** set by `registered`, run after the answer went out */
  after: (() => void) | undefined;
  private joined: string | undefined;

  constructor(
    msg: Message,
    readonly peer: Peer,
  ) {
    this.code = msg.code;
    this.path = options(msg, 'Uri-Path');
    this.query = options(msg, 'Uri-Query');
    this.payload = msg.payload;
    const observe = option(msg, 'Observe');
    this.observe = observe === undefined ? undefined : readUint(observe);
    this.token = msg.token;
    this.confirmable = msg.confirmable;
  }

  get uri(): string {
    this.joined ??= `${this.path.join('/')}?${this.query.join('&')}`;
    return this.joined;
  }

  get peerUri(): string {
    return peerUriOf(this.peer, this.uri);
  }

  registered(fn: () => void): void {
    this.after = fn;
  }
}

/**
 * dgram's default lookup answers even an IP literal through dns.lookup, a process.nextTick per datagram sent;
 * every address the listener sends to came from a received datagram, so a literal is handed straight back.
 * A host name (the bind address in the config) still goes through dns.lookup.
 */
function literalLookup(
  host: string,
  // Node 20 passes the socket's family as a number here; dns.lookup takes either
  how: LookupOneOptions,
  callback: (err: NodeJS.ErrnoException | null, address: string, family: number) => void,
): void {
  const literal = isIP(host);
  if (literal !== 0) callback(null, host, literal);
  else lookup(host, how, callback);
}

function bind(socket: Socket, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error): void =>
      reject(new OutpostError('CONFIG_INVALID', `cannot listen for CoAP on ${host}:${port}: ${err.message}`));
    socket.once('error', onError);
    // exclusive: a second daemon on the same port is refused, never sharing it
    socket.bind({ address: host, port: port === -1 ? 0 : port, exclusive: true }, () => {
      socket.off('error', onError);
      resolve(socket.address().port);
    });
  });
}

export async function startCoap(s: Services, counters: CoapCounters): Promise<CoapListener> {
  const cfg = s.config.coap;
  if (cfg.port === 0) return { port: 0, close: async () => undefined };
  const host = cfg.host === '' ? s.config.host : cfg.host;
  const socket = createSocket({ type: isIPv6(host) ? 'udp6' : 'udp4', reuseAddr: false, lookup: literalLookup });
  const assemblies = new Map<string, Assembly>();
  const large = new Map<string, LargeAnswer>();
  const held = new Set<PollHandle>();
  const bounded = <V>(m: Map<string, V>, key: string, v: V): void => {
    m.delete(key);
    if (m.size >= cfg.maxBlockTransfers) m.delete(m.keys().next().value as string);
    m.set(key, v);
  };

  /**
   * An answer, cut into Block2 pieces when it is larger than the block the client asked for (or 1024); the
   * whole is kept under `where.peerUri` for the follow-ups.
   */
  const sized = (a: Answer, where: { readonly peerUri: string }, want: Block | undefined): Answer => {
    const size = Math.min(MAX_BLOCK, want?.size ?? MAX_BLOCK);
    const body = a.payload;
    if (body === undefined || (body.length <= size && want === undefined)) return a;
    if (body.length > size) bounded(large, where.peerUri, { answer: a, body, at: Date.now() });
    return piece(a, body, want?.num ?? 0, size);
  };

  let endpoint: CoapEndpoint | undefined;
  const limits = {
    max: cfg.maxObservations,
    maxPerAddress: cfg.maxObservationsPerAddress,
    checkMs: cfg.observeCheckMs,
  };
  const observations = new ObservationRegistry(
    s.devices,
    limits,
    counters,
    (o, a, settled, confirmable = o.confirmable) => {
      const out = sized(a, { peerUri: peerUriOf(o.peer, o.uri) }, undefined);
      if (endpoint === undefined) settled?.(false);
      else endpoint.send1(o.peer, o.token, confirmable, out, o.tag, settled);
    },
  );
  const hold = (h: PollHandle): (() => void) => {
    held.add(h);
    return () => held.delete(h);
  };
  const resources = new CoapResources(s.devices, observations, hold);

  const onRequest = (ex: Exchange): void => {
    const { msg } = ex;
    const req = new IncomingRequest(msg, ex.peer);
    const b2 = readBlock(option(msg, 'Block2'));
    if (b2 !== undefined && b2.num > 0 && msg.code === '0.01') {
      const cached = large.get(req.peerUri);
      if (cached !== undefined) {
        ex.answer(piece(cached.answer, cached.body, b2.num, Math.min(MAX_BLOCK, b2.size)));
        return;
      }
    }
    const b1raw = option(msg, 'Block1');
    const b1 = readBlock(b1raw);
    if (b1raw !== undefined) {
      const pre = precheck(s.devices, req);
      const peerUri = req.peerUri;
      if ('refused' in pre) {
        assemblies.delete(peerUri);
        ex.answer(pre.refused);
        return;
      }
      // a provisioning upload has proved nothing yet: what it is told is cut to its size
      const unproven = pre.device === undefined;
      if (b1 === undefined || b1.size > MAX_BLOCK) {
        ex.answer({ code: '4.02', payload: Buffer.from('bad Block1 option'), unproven });
        return;
      }
      let a = assemblies.get(peerUri);
      if (b1.num === 0) {
        a = { parts: [], bytes: 0, at: Date.now() };
        bounded(assemblies, peerUri, a);
      } else if (a === undefined || a.bytes !== b1.num * b1.size) {
        counters.refused.blocks++;
        ex.answer({ code: '4.08', payload: Buffer.from('block out of order or assembly unknown'), unproven });
        return;
      }
      a.parts.push(Buffer.from(msg.payload));
      a.bytes += msg.payload.length;
      a.at = Date.now();
      if (a.bytes > cfg.maxBodyBytes) {
        assemblies.delete(peerUri);
        counters.refused.blocks++;
        ex.answer({ code: '4.13', options: [{ name: 'Size1', value: uintOption(cfg.maxBodyBytes) }], unproven });
        return;
      }
      if (b1.more) {
        ex.answer({
          code: '2.31',
          options: [{ name: 'Block1', value: blockOption(b1.num, true, b1.size) }],
          unproven,
        });
        return;
      }
      assemblies.delete(peerUri);
      req.payload = Buffer.concat(a.parts);
    } else if (msg.payload.length > cfg.maxBodyBytes) {
      ex.answer({ code: '4.13', options: [{ name: 'Size1', value: uintOption(cfg.maxBodyBytes) }] });
      return;
    }
    const answered = (a: Answer): void => {
      try {
        let out = sized(a, req, b2);
        if (b1 !== undefined) {
          const opts = [...(out.options ?? []), { name: 'Block1', value: blockOption(b1.num, false, b1.size) }];
          out = { ...out, options: opts };
        }
        ex.answer(out);
        req.after?.();
      } catch (err) {
        failed(err);
      }
    };
    const failed = (err: unknown): void => {
      s.log.error(`coap: request failed: ${(err as Error)?.stack ?? String(err)}`);
      ex.answer({ code: '5.00' });
    };
    resources.handle(req).then(answered, failed);
  };

  endpoint = new CoapEndpoint(
    socket,
    {
      maxExchanges: cfg.maxExchanges,
      maxPending: cfg.maxPending,
      piggybackMs: cfg.piggybackMs,
      exchangeLifetimeMs: cfg.exchangeLifetimeMs,
      maxDatagramBytes: MAX_DATAGRAM,
    },
    counters,
    onRequest,
    (tag) => observations.gone(tag),
  );
  const ep = endpoint;
  socket.on('message', (buf, rinfo) => {
    try {
      // rinfo is a fresh object per datagram: it is the peer (an observation copies what it keeps)
      ep.onDatagram(buf, rinfo);
    } catch (err) {
      // a datagram must never take the daemon down; what it did is logged
      counters.refused.malformed++;
      s.log.error(`coap: datagram from ${rinfo.address}:${rinfo.port} failed: ${(err as Error)?.stack ?? String(err)}`);
    }
  });
  let port: number;
  try {
    port = await bind(socket, host, cfg.port);
  } catch (err) {
    ep.close();
    observations.close();
    socket.close();
    throw err;
  }
  socket.on('error', (err) => s.log.error(`coap: socket: ${err.message}`));
  counters.port = port;

  const sweep = setInterval(() => {
    const oldest = Date.now() - cfg.exchangeLifetimeMs;
    for (const m of [assemblies, large] as Array<Map<string, { at: number }>>) {
      for (const [k, v] of m) if (v.at < oldest) m.delete(k);
    }
    counters.blockTransfers = assemblies.size + large.size;
  }, SWEEP_MS);
  sweep.unref();

  return {
    port,
    async close() {
      clearInterval(sweep);
      for (const h of held) h.close();
      held.clear();
      observations.close();
      ep.close();
      await new Promise<void>((r) => socket.close(() => r()));
    },
  };
}
