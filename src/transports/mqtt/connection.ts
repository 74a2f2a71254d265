/**
 * One MQTT connection on the wire: mqtt-packet parses what the socket reads and writes what the session sends.
 * This layer owns the socket's bounds: a packet whose announced length is over the limit closes the
 * connection before its body is buffered, a malformed packet closes it, and a client that does not read what
 * it is sent is closed once `maxOutboundBytes` wait for it (a slow reader cannot grow the daemon's memory).
 * Keep-alive and the CONNECT deadline are checked by the listener's one sweep over all connections.
 *
 * Parsers are pooled: an idle connection holds no partial packet, so it holds no parser either (an mqtt-packet
 * parser with its buffer list is ~2 KB, more than the rest of an idle connection). A connection takes one from
 * its listener's `ParserPool` when bytes arrive and gives it back once they are parsed, unless a packet is
 * split across reads: then it keeps that parser until the packet is complete.
 */
import type { Socket } from 'node:net';
import mqttPacket, { type Packet, type Parser } from 'mqtt-packet';
import type { MqttCloseReason, MqttCounters } from '../../status/metrics.js';

export interface ConnectionLimits {
  /** bytes a PUBLISH payload may carry */
  readonly maxPayloadBytes: number;
  /** bytes waiting in the socket for a client that does not read */
  readonly maxOutboundBytes: number;
}

/** What the protocol layer (device-session.ts) does with the packets. */
export interface PacketSink {
  onPacket(packet: Packet): void;
  /** the connection is gone (either side); called once */
  onClose(): void;
}

/** sendAcks: this bit set on a packet id asks for a PUBREC, else a PUBACK */
export const PUBREC_FLAG = 0x10000;

/** Room beyond the payload limit for a PUBLISH's topic, packet id and MQTT 5 properties. */
const HEADER_ROOM = 65_536 + 1024;

/**
 * The parser state read here. mqtt-packet keeps it on the parser, untyped: `packet.length` is the announced
 * length of the packet being read (-1 before its header), `_list` the bytes not yet parsed, `_stateCounter`
 * the step of the packet being read (0 = between packets), and `settings.protocolVersion` decides whether
 * MQTT 5 properties are read (the parser sets it from a CONNECT it parses; a pooled one gets it before each use).
 */
interface ParserState {
  packet: { length: number };
  _list: { length: number };
  _stateCounter: number;
  error: Error | null;
  settings: { readonly protocolVersion?: number };
}

// mqtt-packet's writer, left as it ships, fills a cache of 65,536 two-byte Buffers (one per packet id) at the
// first packet it writes: ~10 MB of RssAnon for good and a ~20-ms task, for the first MQTT client a gateway
// ever sees. A packet id's two bytes are cheap to write as they come. (Process-wide: the upstream session's
// MQTT.js uses the same writer and is set the same way by its writeCache option.)
mqttPacket.writeToStream.cacheNumbers = false;

const V4_SETTINGS = Object.freeze({ protocolVersion: 4 });
const V5_SETTINGS = Object.freeze({ protocolVersion: 5 });

/** What a parser reports to the connection using it. */
interface ParserOwner {
  parsed(p: Packet): void;
  malformed(): void;
}

/** A parser and the connection using it now; its listeners report to that connection only. */
export interface ParserSlot {
  readonly parser: Parser;
  owner: ParserOwner | undefined;
}

/** Parsers not in use, shared by a listener's connections (one event loop: a parse runs to its end). */
export class ParserPool {
  private readonly free: ParserSlot[] = [];

  constructor(private readonly keep = 16) {}

  get idle(): number {
    return this.free.length;
  }

  take(owner: ParserOwner): ParserSlot {
    const slot = this.free.pop() ?? newSlot();
    slot.owner = owner;
    return slot;
  }

  /** Back to the pool: only a parser between packets, with no error (any other is dropped). */
  give(slot: ParserSlot): void {
    slot.owner = undefined;
    const st = slot.parser as unknown as ParserState;
    // the parser keeps the last CONNECT it parsed as its settings: not kept past its connection
    st.settings = V4_SETTINGS;
    if (this.free.length < this.keep && st.error === null && st._stateCounter === 0 && st._list.length === 0)
      this.free.push(slot);
  }
}

function newSlot(): ParserSlot {
  const slot: ParserSlot = { parser: mqttPacket.parser(V4_SETTINGS), owner: undefined };
  slot.parser.on('packet', (p: Packet) => slot.owner?.parsed(p));
  slot.parser.on('error', () => slot.owner?.malformed());
  return slot;
}

export class MqttConnection implements ParserOwner {
  /** 3 (MQTT 3.1), 4 (3.1.1) or 5; 4 until CONNECT says */
  protocolVersion = 4;
  /** ms of silence after which the sweep closes the connection; 0 = none (before CONNECT: the connect deadline) */
  keepAliveMs = 0;
  lastSeen: number;
  readonly openedAt: number;
  connected = false;
  closed = false;
  private sink: PacketSink | undefined;
  /** the parser of a packet split across reads; none between packets */
  private slot: ParserSlot | undefined;
  private readonly maxPacketBytes: number;
  private nextId = 0;

  constructor(
    readonly socket: Socket,
    private readonly limits: ConnectionLimits,
    private readonly counters: MqttCounters,
    private readonly parsers: ParserPool,
    now: number,
  ) {
    this.openedAt = now;
    this.lastSeen = now;
    this.maxPacketBytes = limits.maxPayloadBytes + HEADER_ROOM;
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', () => this.close());
    socket.on('close', () => this.close());
  }

  /** true while a packet split across reads is being parsed */
  get holdsParser(): boolean {
    return this.slot !== undefined;
  }

  attach(sink: PacketSink): void {
    this.sink = sink;
  }

  private onData(chunk: Buffer): void {
    if (this.closed) return;
    this.lastSeen = Date.now();
    const slot = (this.slot ??= this.parsers.take(this));
    const st = slot.parser as unknown as ParserState;
    // set before every parse: a pooled parser last read another connection's packets
    st.settings = this.protocolVersion === 5 ? V5_SETTINGS : V4_SETTINGS;
    try {
      slot.parser.parse(chunk);
    } catch {
      // the codec reports bad input as an 'error' event; a throw is a codec bug, and still only this client's
      this.close('malformed');
      return;
    }
    if (this.closed) return;
    // the parser knows a packet's length from its header: a too large one is refused before it is buffered
    if (st.packet.length > this.maxPacketBytes) {
      this.close('oversize');
      return;
    }
    if (st._stateCounter === 0 && st._list.length === 0) {
      this.slot = undefined;
      this.parsers.give(slot);
    }
  }

  malformed(): void {
    this.close('malformed');
  }

  parsed(p: Packet): void {
    if (this.closed) return;
    if (p.cmd === 'publish') {
      const payload = p.payload;
      if (payload.length > this.limits.maxPayloadBytes) {
        this.close('oversize');
        return;
      }
    }
    try {
      this.sink?.onPacket(p);
    } catch {
      // a handler bug must not take the daemon down: this client goes, the others stay
      this.close('protocol');
    }
  }

  /** Writes one packet; false when the connection is closed (or was closed now for not reading). */
  send(packet: Packet): boolean {
    if (this.closed) return false;
    let buf: Buffer;
    try {
      buf = mqttPacket.generate(packet, { protocolVersion: this.protocolVersion });
    } catch {
      // a packet the codec cannot write (a bug of ours): this client goes, never the daemon
      this.close('protocol');
      return false;
    }
    if (packet.cmd === 'publish') this.counters.messagesOut++;
    return this.write(buf);
  }

  /**
   * PUBACKs (packet id n) and PUBRECs (PUBREC_FLAG | n) with success, the answer to nearly every PUBLISH,
   * in one socket write: 4 bytes each, written directly, not through the codec's generic writer. The same
   * bytes in 3.1.x and 5 (MQTT 5 omits reason code 0 with no properties, 3.4.2.1).
   */
  sendAcks(acks: readonly number[]): boolean {
    if (this.closed) return false;
    const buf = Buffer.allocUnsafe(4 * acks.length);
    for (let i = 0; i < acks.length; i++) {
      const id = acks[i] as number;
      buf[4 * i] = id & PUBREC_FLAG ? 0x50 : 0x40;
      buf[4 * i + 1] = 2;
      buf.writeUInt16BE(id & 0xffff, 4 * i + 2);
    }
    return this.write(buf);
  }

  private write(buf: Buffer): boolean {
    this.socket.write(buf);
    if (this.socket.writableLength > this.limits.maxOutboundBytes) {
      this.close('slowReader');
      return false;
    }
    return true;
  }

  /** A packet id for a QoS 1 publish to the client (1..65535; MQTT forbids 0). */
  packetId(): number {
    this.nextId = this.nextId >= 65_535 ? 1 : this.nextId + 1;
    return this.nextId;
  }

  /** Stops reading from the socket while the session has too much in flight. */
  pause(): void {
    if (!this.closed) this.socket.pause();
  }
  resume(): void {
    if (!this.closed) this.socket.resume();
  }

  /**
   * Closes the connection; `reason` counts a close the daemon decided. MQTT 5 clients are told why with a
   * DISCONNECT where the protocol has a code for it.
   */
  close(reason?: MqttCloseReason): void {
    if (this.closed) return;
    if (reason !== undefined) {
      this.counters.closed[reason]++;
      const code = this.connected && this.protocolVersion === 5 ? DISCONNECT_REASON[reason] : undefined;
      if (code !== undefined)
        this.socket.write(mqttPacket.generate({ cmd: 'disconnect', reasonCode: code }, { protocolVersion: 5 }));
    }
    this.closed = true;
    // a closed connection's parser may hold part of a packet or an error: it is dropped, not pooled
    if (this.slot !== undefined) this.slot.owner = undefined;
    this.slot = undefined;
    if (this.socket.writableLength > 0 && reason !== 'slowReader') this.socket.end();
    else this.socket.destroy();
    // end() may keep a half-closed socket: it goes for good after a short grace
    if (!this.socket.destroyed) setTimeout(() => this.socket.destroy(), 1_000).unref();
    this.sink?.onClose();
  }
}

/** MQTT 5 DISCONNECT reason codes for the closes the daemon decides. */
const DISCONNECT_REASON: Partial<Record<MqttCloseReason, number>> = {
  malformed: 0x81,
  oversize: 0x95,
  keepalive: 0x8d,
  takeover: 0x8e,
  credentialsUpdated: 0x98,
  badPayload: 0x99,
  protocol: 0x82,
  storeError: 0x80,
};
