/**
 * The CoAP listener (docs/coap.md): one UDP socket on `coap.port`, in the daemon's process and event loop,
 * sharing its store, bus, RPC broker and auth. Between the message layer (exchange.ts) and TB's resources
 * (resources.ts) it does block-wise transfers (RFC 7959): Block1 uploads are reassembled per peer and URI
 * (libcoap sends every block with a new token), after the path and token were checked; answers and
 * notifications larger than a block go out in Block2 pieces, the rest fetched by GET with Block2. Assemblies
 * and large answers are bounded in number (`coap.maxBlockTransfers`), size (`coap.maxBodyBytes`) and age.
 */
import { type Socket, createSocket } from 'node:dgram';
import { isIPv6 } from 'node:net';
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import type { PollHandle } from '../../rpc/longpoll.js';
import type { CoapCounters } from '../../status/metrics.js';
import { type Answer, type Block, blockOption, option, options, readBlock, readUint, uintOption } from './codec.js';
import { CoapEndpoint, type Exchange } from './exchange.js';
import { type Observation, ObservationRegistry } from './observe.js';
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
  const socket = createSocket({ type: isIPv6(host) ? 'udp6' : 'udp4', reuseAddr: false });
  const assemblies = new Map<string, Assembly>();
  const large = new Map<string, LargeAnswer>();
  const held = new Set<PollHandle>();
  const bounded = <V>(m: Map<string, V>, key: string, v: V): void => {
    m.delete(key);
    if (m.size >= cfg.maxBlockTransfers) m.delete(m.keys().next().value as string);
    m.set(key, v);
  };

  /** An answer, cut into Block2 pieces when it is larger than the block the client asked for (or 1024). */
  const sized = (a: Answer, peerUri: string, want: Block | undefined): Answer => {
    const size = Math.min(MAX_BLOCK, want?.size ?? MAX_BLOCK);
    const body = a.payload;
    if (body === undefined || (body.length <= size && want === undefined)) return a;
    if (body.length > size) bounded(large, peerUri, { answer: a, body, at: Date.now() });
    return piece(a, body, want?.num ?? 0, size);
  };

  let endpoint: CoapEndpoint | undefined;
  const observations = new ObservationRegistry(s, cfg.maxObservations, counters, (o: Observation, a: Answer) => {
    const out = sized(a, `${o.peer.address}:${o.peer.port} ${o.uri}`, undefined);
    endpoint?.send1(o.peer, o.token, o.confirmable, out, o.key);
  });
  const hold = (h: PollHandle): (() => void) => {
    held.add(h);
    return () => held.delete(h);
  };
  const resources = new CoapResources(s, observations, hold);

  const onRequest = (ex: Exchange): void => {
    const { msg, peer } = ex;
    const path = options(msg, 'Uri-Path');
    const query = options(msg, 'Uri-Query');
    const uri = `${path.join('/')}?${query.join('&')}`;
    const peerUri = `${peer.address}:${peer.port} ${uri}`;
    const observeOpt = option(msg, 'Observe');
    const b2 = readBlock(option(msg, 'Block2'));
    if (b2 !== undefined && b2.num > 0 && msg.code === '0.01') {
      const cached = large.get(peerUri);
      if (cached !== undefined) {
        ex.answer(piece(cached.answer, cached.body, b2.num, Math.min(MAX_BLOCK, b2.size)));
        return;
      }
    }
    let payload = msg.payload;
    const b1raw = option(msg, 'Block1');
    const b1 = readBlock(b1raw);
    if (b1raw !== undefined) {
      const pre = precheck(s, { code: msg.code, path });
      if ('refused' in pre) {
        assemblies.delete(peerUri);
        ex.answer(pre.refused);
        return;
      }
      if (b1 === undefined || b1.size > MAX_BLOCK) {
        ex.answer({ code: '4.02', payload: Buffer.from('bad Block1 option') });
        return;
      }
      let a = assemblies.get(peerUri);
      if (b1.num === 0) {
        a = { parts: [], bytes: 0, at: Date.now() };
        bounded(assemblies, peerUri, a);
      } else if (a === undefined || a.bytes !== b1.num * b1.size) {
        counters.refused.blocks++;
        ex.answer({ code: '4.08', payload: Buffer.from('block out of order or assembly unknown') });
        return;
      }
      a.parts.push(Buffer.from(payload));
      a.bytes += payload.length;
      a.at = Date.now();
      if (a.bytes > cfg.maxBodyBytes) {
        assemblies.delete(peerUri);
        counters.refused.blocks++;
        ex.answer({ code: '4.13', options: [{ name: 'Size1', value: uintOption(cfg.maxBodyBytes) }] });
        return;
      }
      if (b1.more) {
        ex.answer({ code: '2.31', options: [{ name: 'Block1', value: blockOption(b1.num, true, b1.size) }] });
        return;
      }
      assemblies.delete(peerUri);
      payload = Buffer.concat(a.parts);
    } else if (payload.length > cfg.maxBodyBytes) {
      ex.answer({ code: '4.13', options: [{ name: 'Size1', value: uintOption(cfg.maxBodyBytes) }] });
      return;
    }
    const req: CoapRequest = {
      code: msg.code,
      path,
      query,
      payload,
      observe: observeOpt === undefined ? undefined : readUint(observeOpt),
      peer,
      token: msg.token,
      confirmable: msg.confirmable,
      uri,
    };
    let after: (() => void) | undefined;
    resources
      .handle(req, (fn) => {
        after = fn;
      })
      .then((a) => {
        let out = sized(a, peerUri, b2);
        if (b1 !== undefined) {
          const opts = [...(out.options ?? []), { name: 'Block1', value: blockOption(b1.num, false, b1.size) }];
          out = { ...out, options: opts };
        }
        ex.answer(out);
        after?.();
      })
      .catch((err: unknown) => {
        s.log.error(`coap: request failed: ${(err as Error)?.stack ?? String(err)}`);
        ex.answer({ code: '5.00' });
      });
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
    (key) => observations.cancel(key),
  );
  const ep = endpoint;
  socket.on('message', (buf, rinfo) => {
    try {
      ep.onDatagram(buf, { address: rinfo.address, port: rinfo.port });
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
