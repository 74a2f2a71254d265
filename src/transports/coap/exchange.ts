/**
 * The CoAP message layer (RFC 7252 section 4) over one UDP socket: what `coap-packet` leaves to its user.
 *
 * - Requests: one exchange per (peer, message id). A duplicate while it is in progress is not handed on again
 *   (a CON past its empty ACK gets that ACK again); a duplicate once answered gets the cached answer: a
 *   retransmitted upload is never stored twice. Answered exchanges are remembered for `exchangeLifetimeMs`,
 *   at most `maxExchanges` of them (the oldest forgotten first). At most `maxPending` requests are in progress;
 *   one more is answered 5.03 at once and not processed.
 * - Answers: a CON request answered within `piggybackMs` gets its answer in the ACK; a slower one (a commit
 *   held back by the write budget, a client-side RPC) gets an empty ACK at `piggybackMs` and its answer later
 *   as a CON of its own, retransmitted until ACKed (RFC 7252 section 4.2: 2 s, doubled, 4 retransmissions). A NON
 *   request gets a NON answer.
 * - Sent CON/NON messages (separate answers, notifications) are matched with the peer's ACK or RST; an RST or
 *   four unanswered retransmissions of a notification end its observation (`onGone`).
 * - Empty CON (a ping) → RST; a CON that cannot be decoded → RST; anything else undecodable → nothing.
 * - An answer marked `unproven` (and 5.03 busy) is never larger than the request datagram: no reflection gain.
 * All timing is one sweep every SWEEP_MS, not a timer per message.
 */
import type { Socket } from 'node:dgram';
import type { CoapCounters } from '../../status/metrics.js';
import { AnsweredCache } from './answered.js';
import { type Answer, type Message, decode, encodeAnswer, encodeEmpty, rawResetFor, within } from './codec.js';

export interface Peer {
  readonly address: string;
  readonly port: number;
}

export interface ExchangeLimits {
  readonly maxExchanges: number;
  readonly maxPending: number;
  readonly piggybackMs: number;
  readonly exchangeLifetimeMs: number;
  /** a datagram larger than this is dropped unread */
  readonly maxDatagramBytes: number;
}

/** A request in progress; `answer` may be called once, at any time. */
export interface Exchange {
  readonly msg: Message;
  readonly peer: Peer;
  readonly receivedAt: number;
  answer(a: Answer): void;
}

/** A class, not a literal with an `answer` closure: one object per request, sharing the endpoint's method. */
class Pending implements Exchange {
  emptyAcked = false;
  answered = false;

  constructor(
    private readonly endpoint: CoapEndpoint,
    /** `address:port` */
    readonly who: string,
    /** `address:port#mid`: the exchange among those in progress */
    readonly key: string,
    readonly msg: Message,
    readonly peer: Peer,
    readonly receivedAt: number,
    /** the request datagram's bytes: the most an unproven answer may take */
    readonly size: number,
  ) {}

  answer(a: Answer): void {
    this.endpoint.answer(this, a);
  }
}

interface Outgoing {
  readonly buf: Buffer;
  readonly peer: Peer;
  readonly confirmable: boolean;
  /** the observation this notification belongs to (told when the peer rejects it or never ACKs) */
  readonly observation: string | undefined;
  /** told whether the peer acknowledged this CON (false: an RST, no ACK after the retransmissions, or evicted) */
  readonly settled: ((acked: boolean) => void) | undefined;
  attempts: number;
  deadline: number;
}

const ACK_TIMEOUT_MS = 2_000;
const MAX_RETRANSMIT = 4;
/** ms a NON notification's id stays matched to its observation, for an RST that cancels it */
const NON_MATCH_MS = 10_000;
const SWEEP_MS = 100;

const BUSY: Answer = Object.freeze({ code: '5.03', options: [{ name: 'Max-Age', value: Buffer.from([1]) }] });

const peerKey = (p: Peer, mid: number): string => `${p.address}:${p.port}#${mid}`;
const peerName = (p: Peer): string => `${p.address}:${p.port}`;

export class CoapEndpoint {
  private readonly pending = new Map<string, Pending>();
  /** answered exchanges: the datagram a duplicate gets (the answer, or the empty ACK of a separate answer) */
  private readonly answered: AnsweredCache;
  private readonly outgoing = new Map<string, Outgoing>();
  private nextMid = Math.floor(Math.random() * 65536);
  /** after close: answers of requests still in progress (a commit, a held RPC) are dropped, not sent */
  private closed = false;
  private readonly sweep: NodeJS.Timeout;

  constructor(
    private readonly socket: Socket,
    private readonly limits: ExchangeLimits,
    private readonly counters: CoapCounters,
    private readonly onRequest: (ex: Exchange) => void,
    /** an observation's notification was rejected (RST) or never acknowledged */
    private readonly onGone: (observation: string) => void,
    private readonly now: () => number = Date.now,
  ) {
    this.answered = new AnsweredCache(limits.maxExchanges);
    this.sweep = setInterval(() => this.tick(), SWEEP_MS);
    this.sweep.unref();
  }

  get inProgress(): number {
    return this.pending.size;
  }

  onDatagram(buf: Buffer, peer: Peer): void {
    this.counters.datagramsIn++;
    if (buf.length > this.limits.maxDatagramBytes) {
      this.counters.refused.oversize++;
      return;
    }
    const msg = decode(buf);
    if (msg === undefined) {
      this.counters.refused.malformed++;
      const rst = rawResetFor(buf);
      if (rst !== undefined) this.send(rst, peer);
      return;
    }
    if (msg.code === '0.00') {
      if (msg.confirmable) this.send(encodeEmpty(msg.messageId, 'reset'), peer);
      else if (msg.ack || msg.reset) this.matched(peerKey(peer, msg.messageId), msg.reset);
      return;
    }
    if (msg.ack || msg.reset) {
      // a piggybacked answer to something we sent: only notifications and separate answers are sent, so an
      // ACK carrying a code is a peer's mistake; it still acknowledges the message id
      this.matched(peerKey(peer, msg.messageId), msg.reset);
      return;
    }
    if (msg.code[0] !== '0') {
      // a response sent as a request (CON/NON with a response code): not ours to process
      if (msg.confirmable) this.send(encodeEmpty(msg.messageId, 'reset'), peer);
      return;
    }
    const who = peerName(peer);
    const done = this.answered.get(who, msg.messageId);
    if (done !== undefined) {
      this.counters.duplicates++;
      this.send(done, peer);
      return;
    }
    const key = `${who}#${msg.messageId}`;
    const inProgress = this.pending.get(key);
    if (inProgress !== undefined) {
      this.counters.duplicates++;
      if (inProgress.emptyAcked) this.send(encodeEmpty(msg.messageId, 'ack'), peer);
      return;
    }
    if (this.pending.size >= this.limits.maxPending) {
      this.counters.refused.busy++;
      // decided before the request is read, so before it proved anything
      const busy = within(BUSY, msg.token.length, buf.length);
      this.send(encodeAnswer({ messageId: msg.messageId, token: msg.token, ack: msg.confirmable }, busy), peer);
      return;
    }
    const ex = new Pending(this, who, key, msg, peer, this.now(), buf.length);
    this.pending.set(key, ex);
    this.counters.requests++;
    this.onRequest(ex);
  }

  /**
   * Sends a notification or a message of its own (not an answer in an ACK); returns its message id. A CON is
   * retransmitted until ACKed, and `settled` told whether it was; an RST to either ends `observation`.
   */
  send1(
    peer: Peer,
    token: Buffer,
    confirmable: boolean,
    a: Answer,
    observation?: string,
    settled?: (acked: boolean) => void,
  ): number {
    const mid = this.mid();
    const buf = encodeAnswer({ messageId: mid, token, confirmable }, a);
    this.send(buf, peer);
    const key = peerKey(peer, mid);
    if (this.outgoing.size >= this.limits.maxExchanges) {
      const oldest = this.outgoing.keys().next().value as string;
      const evicted = this.outgoing.get(oldest);
      this.outgoing.delete(oldest);
      evicted?.settled?.(false);
    }
    if (confirmable || observation !== undefined) {
      this.outgoing.set(key, {
        buf,
        peer,
        confirmable,
        observation,
        settled: confirmable ? settled : undefined,
        attempts: 0,
        deadline: this.now() + (confirmable ? ACK_TIMEOUT_MS : NON_MATCH_MS),
      });
    }
    return mid;
  }

  close(): void {
    this.closed = true;
    clearInterval(this.sweep);
    this.pending.clear();
    this.answered.clear();
    this.outgoing.clear();
  }

  /** Pending.answer: once per exchange */
  answer(ex: Pending, given: Answer): void {
    if (ex.answered) return;
    ex.answered = true;
    this.pending.delete(ex.key);
    const { msg, peer } = ex;
    const a = given.unproven === true ? within(given, msg.token.length, ex.size) : given;
    if (msg.confirmable && !ex.emptyAcked) {
      const buf = encodeAnswer({ messageId: msg.messageId, token: msg.token, ack: true }, a);
      this.send(buf, peer);
      this.remember(ex, buf);
    } else {
      this.send1(peer, msg.token, msg.confirmable, a);
      if (!msg.confirmable) this.remember(ex, encodeAnswer({ messageId: msg.messageId, token: msg.token }, a));
    }
    if (a.code === '2.01') this.counters.createdLatency.observe((this.now() - ex.receivedAt) / 1000);
    this.counters.answers[a.code[0] === '2' ? 'success' : a.code[0] === '4' ? 'clientError' : 'serverError']++;
  }

  private remember(ex: Pending, buf: Buffer): void {
    this.answered.set(ex.who, ex.msg.messageId, buf, this.now());
  }

  private matched(key: string, reset: boolean): void {
    const out = this.outgoing.get(key);
    if (out === undefined) return;
    this.outgoing.delete(key);
    // the observation ends first: what its RPC sink held goes back to the queue, not to it again
    if (reset && out.observation !== undefined) this.onGone(out.observation);
    out.settled?.(!reset);
  }

  private mid(): number {
    this.nextMid = (this.nextMid + 1) & 0xffff;
    return this.nextMid;
  }

  private send(buf: Buffer, peer: Peer): void {
    if (this.closed) return;
    this.counters.datagramsOut++;
    // No callback, so none is scheduled per answer. A send error (unreachable peer, full buffer) is dropped
    // unseen, which is all the callback did: it is the peer's problem, and UDP gives no guarantee anyway.
    this.socket.send(buf, peer.port, peer.address);
  }

  private tick(): void {
    const now = this.now();
    for (const ex of this.pending.values()) {
      if (now - ex.receivedAt < this.limits.piggybackMs) break;
      if (ex.emptyAcked || !ex.msg.confirmable) continue;
      ex.emptyAcked = true;
      const ack = encodeEmpty(ex.msg.messageId, 'ack');
      this.send(ack, ex.peer);
      // once answered, a duplicate gets this ACK again (the answer itself is retransmitted as a CON)
      this.remember(ex, ack);
    }
    this.answered.expire(now - this.limits.exchangeLifetimeMs);
    for (const [key, out] of this.outgoing) {
      if (now < out.deadline) continue;
      if (out.confirmable && out.attempts < MAX_RETRANSMIT) {
        out.attempts++;
        out.deadline = now + ACK_TIMEOUT_MS * 2 ** out.attempts;
        this.counters.retransmissions++;
        this.send(out.buf, out.peer);
        continue;
      }
      this.outgoing.delete(key);
      if (out.confirmable && out.observation !== undefined) this.onGone(out.observation);
      out.settled?.(false);
    }
  }
}
