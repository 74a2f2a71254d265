/**
 * CoAP block-wise transfers (RFC 7959), between the message layer (exchange.ts) and TB's resources
 * (resources.ts): Block1 uploads are reassembled per peer and URI (libcoap sends every block with a new token),
 * after the path and token were checked; answers and notifications larger than a block go out in Block2 pieces,
 * the rest fetched by GET with Block2. Assemblies and large answers are bounded in number
 * (`coap.maxBlockTransfers`), size (`coap.maxBodyBytes`) and age (dropped by `sweep`).
 */
import type { CoapCounters } from '../../status/metrics.js';
import { type Answer, type Block, type Message, blockOption, option, readBlock, uintOption } from './codec.js';
import type { Peer } from './exchange.js';

/** the largest block (RFC 7959 SZX 6), the size Californium prefers too */
export const MAX_BLOCK = 1024;

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

/** Where a peer's block-wise transfer for one URI is kept: assemblies and large answers. */
export const peerUriOf = (peer: Peer, uri: string): string => `${peer.address}:${peer.port} ${uri}`;

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

/** A request's block options, for its answer (`outgoing`). */
export interface Blocks {
  readonly b1: Block | undefined;
  readonly b2: Block | undefined;
}

/** What the block layer did with a request: answered it now, or handed it on (its body whole). */
export type Incoming = { readonly now: Answer } | Blocks;

/** A request as the block layer sees it: its body is replaced by the reassembled one. */
export interface BlockRequest {
  /** peer and URI: where its assembly and large answer are kept */
  readonly peerUri: string;
  payload: Buffer;
}

/** What the resources decide from the method and path alone (resources.ts `precheck`). */
export type BlockPrecheck = () => { readonly refused: Answer } | { readonly device: unknown };

const NO_BLOCKS: Blocks = Object.freeze({ b1: undefined, b2: undefined });

export interface BlockLimits {
  /** coap.maxBlockTransfers */
  readonly maxTransfers: number;
  /** coap.maxBodyBytes */
  readonly maxBodyBytes: number;
}

export class BlockTransfers {
  private readonly assemblies = new Map<string, Assembly>();
  private readonly large = new Map<string, LargeAnswer>();

  constructor(
    private readonly limits: BlockLimits,
    private readonly counters: CoapCounters,
  ) {}

  /**
   * A request on its way in: a Block2 follow-up is answered from the large answer kept for it; a Block1 block is
   * added to its assembly (answered 2.31 until the last, whose whole body replaces the request's); a body over
   * `coap.maxBodyBytes` is refused (4.13). Otherwise the request goes on, with the blocks its answer must carry.
   */
  incoming(msg: Message, req: BlockRequest, precheck: BlockPrecheck): Incoming {
    const b2 = readBlock(option(msg, 'Block2'));
    if (b2 !== undefined && b2.num > 0 && msg.code === '0.01') {
      const cached = this.large.get(req.peerUri);
      if (cached !== undefined) return { now: piece(cached.answer, cached.body, b2.num, Math.min(MAX_BLOCK, b2.size)) };
    }
    const b1raw = option(msg, 'Block1');
    const maxBodyBytes = this.limits.maxBodyBytes;
    if (b1raw === undefined) {
      if (msg.payload.length > maxBodyBytes)
        return { now: { code: '4.13', options: [{ name: 'Size1', value: uintOption(maxBodyBytes) }] } };
      return b2 === undefined ? NO_BLOCKS : { b1: undefined, b2 };
    }
    const b1 = readBlock(b1raw);
    const pre = precheck();
    const peerUri = req.peerUri;
    if ('refused' in pre) {
      this.assemblies.delete(peerUri);
      return { now: pre.refused };
    }
    // a provisioning upload has proved nothing yet: what it is told is cut to its size
    const unproven = pre.device === undefined;
    if (b1 === undefined || b1.size > MAX_BLOCK)
      return { now: { code: '4.02', payload: Buffer.from('bad Block1 option'), unproven } };
    let a = this.assemblies.get(peerUri);
    if (b1.num === 0) {
      a = { parts: [], bytes: 0, at: Date.now() };
      this.bounded(this.assemblies, peerUri, a);
    } else if (a === undefined || a.bytes !== b1.num * b1.size) {
      this.counters.refused.blocks++;
      return { now: { code: '4.08', payload: Buffer.from('block out of order or assembly unknown'), unproven } };
    }
    a.parts.push(Buffer.from(msg.payload));
    a.bytes += msg.payload.length;
    a.at = Date.now();
    if (a.bytes > maxBodyBytes) {
      this.assemblies.delete(peerUri);
      this.counters.refused.blocks++;
      return { now: { code: '4.13', options: [{ name: 'Size1', value: uintOption(maxBodyBytes) }], unproven } };
    }
    if (b1.more)
      return {
        now: { code: '2.31', options: [{ name: 'Block1', value: blockOption(b1.num, true, b1.size) }], unproven },
      };
    this.assemblies.delete(peerUri);
    req.payload = Buffer.concat(a.parts);
    return { b1, b2 };
  }

  /** A request's answer on its way out: cut to the block the client asked for; a reassembled upload's last Block1. */
  outgoing(a: Answer, req: { readonly peerUri: string }, blocks: Blocks): Answer {
    const out = this.sized(a, req, blocks.b2);
    if (blocks.b1 === undefined) return out;
    return {
      ...out,
      options: [...(out.options ?? []), { name: 'Block1', value: blockOption(blocks.b1.num, false, blocks.b1.size) }],
    };
  }

  /**
   * An answer, cut into Block2 pieces when it is larger than the block the client asked for (or 1024); the
   * whole is kept under `where.peerUri` for the follow-ups.
   */
  sized(a: Answer, where: { readonly peerUri: string }, want: Block | undefined): Answer {
    const size = Math.min(MAX_BLOCK, want?.size ?? MAX_BLOCK);
    const body = a.payload;
    if (body === undefined || (body.length <= size && want === undefined)) return a;
    if (body.length > size) this.bounded(this.large, where.peerUri, { answer: a, body, at: Date.now() });
    return piece(a, body, want?.num ?? 0, size);
  }

  /** Drops the assemblies and large answers last touched before `oldest` (ms). */
  sweep(oldest: number): void {
    for (const m of [this.assemblies, this.large] as Array<Map<string, { at: number }>>) {
      for (const [k, v] of m) if (v.at < oldest) m.delete(k);
    }
    this.counters.blockTransfers = this.assemblies.size + this.large.size;
  }

  private bounded<V>(m: Map<string, V>, key: string, v: V): void {
    m.delete(key);
    if (m.size >= this.limits.maxTransfers) m.delete(m.keys().next().value as string);
    m.set(key, v);
  }
}
