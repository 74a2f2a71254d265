/**
 * CoAP datagrams (RFC 7252) through `coap-packet`: decoding that never throws, the few option values the
 * transport reads and writes (unsigned integers, Block1/Block2 of RFC 7959), and answer building.
 */
import { type ParsedPacket, generate, parse } from 'coap-packet';

export type Message = ParsedPacket;

/** Content-Format 50: application/json */
export const CONTENT_JSON = 50;

/** The highest token length (TKL) of RFC 7252 section 3; 9 to 15 are reserved, a message format error. */
const MAX_TOKEN = 8;

/**
 * The datagram, decoded, or undefined when it is not a well-formed CoAP message (RFC 7252 section 3).
 * coap-packet is lenient where the RFC calls it a format error: it reads token lengths 9 to 14, slices a token or
 * an option value cut short by the end of the datagram as far as it goes, and takes a payload marker with nothing
 * after it as an empty payload. Those are checked here around it.
 */
export function decode(buf: Buffer): Message | undefined {
  if (buf.length >= 1 && ((buf[0] as number) & 0x0f) > MAX_TOKEN) return undefined;
  let msg: Message;
  try {
    msg = parse(buf);
  } catch {
    return undefined;
  }
  if (msg.token.length !== ((buf[0] as number) & 0x0f)) return undefined;
  // A non-empty payload means the options ended exactly at a 0xFF marker inside the datagram: nothing was cut.
  // An empty message (code 0.00) coap-packet already requires to be the 4-byte header alone.
  if (msg.payload.length === 0 && msg.code !== '0.00' && !endsExactly(buf)) return undefined;
  return msg;
}

/** the datagram with `FF 00` after it: reused, so that the check below allocates nothing per datagram */
let probe = Buffer.alloc(0);

/**
 * Whether the options of a datagram without payload end exactly where the datagram does. Parsed again with a
 * payload marker and one byte 00 after it, such a datagram reads as the same message with payload `00`. An
 * option whose value the datagram cut short takes the appended bytes into that value instead (and the 00, if
 * left, is read as an option), and a marker with no payload makes `FF 00` the payload: either way the payload
 * is not the single byte 00.
 */
function endsExactly(buf: Buffer): boolean {
  if (probe.length < buf.length + 2) probe = Buffer.alloc(Math.max(2_050, buf.length + 2));
  buf.copy(probe);
  probe[buf.length] = 0xff;
  probe[buf.length + 1] = 0x00;
  try {
    const payload = parse(probe.subarray(0, buf.length + 2)).payload;
    return payload.length === 1 && payload[0] === 0x00;
  } catch {
    return false;
  }
}

/** RFC 7252 section 3.2 uint: big-endian, no leading zero bytes (0 = empty). */
export function uintOption(n: number): Buffer {
  if (n === 0) return Buffer.alloc(0);
  const bytes: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v % 256);
  return Buffer.from(bytes);
}

export function readUint(b: Buffer): number {
  let n = 0;
  for (const byte of b) n = n * 256 + byte;
  return n;
}

export function option(m: Message, name: string): Buffer | undefined {
  for (const o of m.options) if (o.name === name) return o.value;
  return undefined;
}

const NONE: readonly string[] = Object.freeze([]);

/** Every value of a repeatable option (Uri-Path, Uri-Query) as text; one shared empty list when it is absent. */
export function options(m: Message, name: string): readonly string[] {
  let out: string[] | undefined;
  for (const o of m.options) if (o.name === name) (out ??= []).push(o.value.toString('utf8'));
  return out ?? NONE;
}

export interface Block {
  readonly num: number;
  readonly more: boolean;
  /** block size in bytes (16..1024) */
  readonly size: number;
}

/** RFC 7959 section 2.2: NUM | M | SZX in up to 3 bytes; SZX 7 is reserved (undefined). */
export function readBlock(b: Buffer | undefined): Block | undefined {
  if (b === undefined || b.length > 3) return undefined;
  const v = readUint(b);
  const szx = v & 7;
  if (szx === 7) return undefined;
  return { num: Math.floor(v / 16), more: (v & 8) !== 0, size: 1 << (szx + 4) };
}

export function blockOption(num: number, more: boolean, size: number): Buffer {
  const szx = Math.log2(size) - 4;
  return uintOption(num * 16 + (more ? 8 : 0) + szx);
}

export interface Answer {
  /** `2.05` etc. */
  readonly code: string;
  readonly payload?: Buffer | undefined;
  readonly contentFormat?: number | undefined;
  /** extra options (Observe, Block1, Block2, Size1, Max-Age), in any order: coap-packet sorts them */
  readonly options?: Array<{ name: string; value: Buffer }>;
  /**
   * the answer to a request that proved nothing (no known device token, no provisioning secret): it goes out
   * with no more bytes than the request carried (`within`), so a spoofed source gains nothing by reflection
   */
  readonly unproven?: boolean;
}

export interface Envelope {
  readonly messageId: number;
  readonly token: Buffer;
  readonly confirmable?: boolean;
  readonly ack?: boolean;
}

/**
 * `a` cut to at most `limit` bytes with a token of `tokenLength` (the request's size: an answer to a datagram
 * that proved nothing is never larger than it). A diagnostic text is cut short; a JSON body, which cut would no
 * longer parse, is left out, and the options too when even they do not fit. The bare code always fits: the
 * request had the same header and token.
 */
export function within(a: Answer, tokenLength: number, limit: number): Answer {
  const env: Envelope = { messageId: 0, token: Buffer.alloc(tokenLength) };
  if (encodeAnswer(env, a).length <= limit) return a;
  const headers: Answer = a.options === undefined ? { code: a.code } : { code: a.code, options: a.options };
  const size = encodeAnswer(env, headers).length;
  if (size > limit) return { code: a.code };
  const room = limit - size - 1;
  if (a.contentFormat !== undefined || a.payload === undefined || room <= 0) return headers;
  return { ...headers, payload: a.payload.subarray(0, room) };
}

/** One datagram: a response (piggybacked in an ACK, or a CON/NON of its own). */
export function encodeAnswer(env: Envelope, a: Answer): Buffer {
  if (a.options === undefined && a.contentFormat === undefined && (a.payload?.length ?? 0) === 0) {
    const bare = encodeBare(env, a.code);
    if (bare !== undefined) return bare;
  }
  const opts = [...(a.options ?? [])];
  if (a.contentFormat !== undefined) opts.push({ name: 'Content-Format', value: uintOption(a.contentFormat) });
  return generate({
    code: a.code,
    messageId: env.messageId,
    token: env.token,
    confirmable: env.confirmable ?? false,
    ack: env.ack ?? false,
    reset: false,
    options: opts,
    payload: a.payload ?? Buffer.alloc(0),
  });
}

/**
 * A header and token only (RFC 7252 section 3), e.g. the 2.01 of every telemetry post, which the exchange layer keeps
 * for `coap.exchangeLifetimeMs` to answer duplicates. coap-packet gives each datagram an ArrayBuffer of its own
 * (Buffer.alloc); these few bytes come from node's shared pool instead, so tens of thousands of remembered answers
 * are tens of pool slabs, not tens of thousands of separately allocated and collected buffers.
 */
function encodeBare(env: Envelope, code: string): Buffer | undefined {
  const codeByte = codeOctet(code);
  if (codeByte === undefined || env.token.length > 8) return undefined;
  const type = env.ack ? 2 : env.confirmable ? 0 : 1;
  const buf = Buffer.allocUnsafe(4 + env.token.length);
  buf[0] = 0x40 | (type << 4) | env.token.length;
  buf[1] = codeByte;
  buf.writeUInt16BE(env.messageId, 2);
  env.token.copy(buf, 4);
  return buf;
}

/** `c.dd` → the code octet (3-bit class, 5-bit detail, RFC 7252 section 3), read char by char, no regex per answer. */
function codeOctet(code: string): number | undefined {
  if (code.length !== 4 || code.charCodeAt(1) !== 0x2e) return undefined;
  const cls = code.charCodeAt(0) - 0x30;
  const tens = code.charCodeAt(2) - 0x30;
  const ones = code.charCodeAt(3) - 0x30;
  if (cls < 0 || cls > 7 || tens < 0 || tens > 3 || ones < 0 || ones > 9) return undefined;
  const detail = tens * 10 + ones;
  return detail > 31 ? undefined : (cls << 5) | detail;
}

/** An empty message: ACK (a separate answer follows) or RST (a ping, a CON that cannot be read). */
export function encodeEmpty(messageId: number, kind: 'ack' | 'reset'): Buffer {
  return generate({
    code: '0.00',
    messageId,
    token: Buffer.alloc(0),
    confirmable: false,
    ack: kind === 'ack',
    reset: kind === 'reset',
    options: [],
    payload: Buffer.alloc(0),
  });
}

/** RST for a datagram coap-packet refused: its message id is bytes 2..3 when the header is there. */
export function rawResetFor(buf: Buffer): Buffer | undefined {
  // version 1, type CON: only a confirmable message asks for an answer (RFC 7252 section 4.2)
  if (buf.length < 4 || (buf[0] as number) >> 6 !== 1 || (((buf[0] as number) >> 4) & 3) !== 0) return undefined;
  return encodeEmpty(buf.readUInt16BE(2), 'reset');
}
