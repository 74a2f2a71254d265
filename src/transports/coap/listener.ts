/**
 * The CoAP listener (docs/coap.md): one UDP socket on `coap.port`, in the daemon's process and event loop,
 * calling the device layer HTTP and MQTT call (src/device/actions.ts). It wires the parts: a datagram goes to
 * the message layer (exchange.ts), a request through the block-wise layer (blockwise.ts) to TB's resources
 * (resources.ts), and their answer back out through the block-wise layer to its exchange; notifications of
 * observations (observe.ts) go out the same way.
 */
import { type Socket, createSocket } from 'node:dgram';
import { type LookupOneOptions, lookup } from 'node:dns';
import { isIP, isIPv6 } from 'node:net';
import type { TransportServices } from '../services.js';
import { OutpostError } from '../../errors.js';
import type { PollHandle } from '../../device/actions.js';
import type { CoapCounters } from '../../status/metrics.js';
import { BlockTransfers, peerUriOf } from './blockwise.js';
import { type Answer, type Message, option, options, readUint } from './codec.js';
import { CoapEndpoint, type Exchange, type Peer } from './exchange.js';
import { ObservationRegistry } from './observe.js';
import { CoapResources, type CoapRequest, precheck } from './resources.js';

export interface CoapListener {
  /** the bound port; 0 = off */
  readonly port: number;
  close(): Promise<void>;
}

/** a datagram above this is dropped unread (Californium's UDP buffer) */
const MAX_DATAGRAM = 2048;
const SWEEP_MS = 1_000;

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

export async function startCoap(s: TransportServices, counters: CoapCounters): Promise<CoapListener> {
  const cfg = s.config.coap;
  if (cfg.port === 0) return { port: 0, close: async () => undefined };
  const host = cfg.host === '' ? s.config.host : cfg.host;
  const socket = createSocket({ type: isIPv6(host) ? 'udp6' : 'udp4', reuseAddr: false, lookup: literalLookup });
  const blocks = new BlockTransfers({ maxTransfers: cfg.maxBlockTransfers, maxBodyBytes: cfg.maxBodyBytes }, counters);
  const held = new Set<PollHandle>();

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
      const out = blocks.sized(a, { peerUri: peerUriOf(o.peer, o.uri) }, undefined);
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
    const req = new IncomingRequest(ex.msg, ex.peer);
    const step = blocks.incoming(ex.msg, req, () => precheck(s.devices, req));
    if ('now' in step) {
      ex.answer(step.now);
      return;
    }
    const answered = (a: Answer): void => {
      try {
        ex.answer(blocks.outgoing(a, req, step));
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
    blocks.sweep(Date.now() - cfg.exchangeLifetimeMs);
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
