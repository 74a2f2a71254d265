/**
 * One MQTT connection on the wire: mqtt-packet parses what the socket reads and writes what the session sends.
 * This layer owns the socket's bounds: a packet whose announced length is over the limit closes the
 * connection before its body is buffered, a malformed packet closes it, and a client that does not read what
 * it is sent is closed once `maxOutboundBytes` wait for it (a slow reader cannot grow the daemon's memory).
 * Keep-alive and the CONNECT deadline are checked by the listener's one sweep over all connections.
 */
import type { Socket } from 'node:net';
import mqttPacket, { type Packet, type Parser } from 'mqtt-packet';
import type { MqttCloseReason, MqttCounters } from '../status/metrics.js';

export interface ConnectionLimits {
  /** bytes a PUBLISH payload may carry */
  readonly maxPayloadBytes: number;
  /** bytes waiting in the socket for a client that does not read */
  readonly maxOutboundBytes: number;
}

/** What the protocol layer (session.ts) does with the packets. */
export interface PacketSink {
  onPacket(packet: Packet): void;
  /** the connection is gone (either side); called once */
  onClose(): void;
}

/** Room beyond the payload limit for a PUBLISH's topic, packet id and MQTT 5 properties. */
const HEADER_ROOM = 65_536 + 1024;

export class MqttConnection {
  /** 3 (MQTT 3.1), 4 (3.1.1) or 5; 4 until CONNECT says */
  protocolVersion = 4;
  /** ms of silence after which the sweep closes the connection; 0 = none (before CONNECT: the connect deadline) */
  keepAliveMs = 0;
  lastSeen: number;
  readonly openedAt: number;
  connected = false;
  closed = false;
  private sink: PacketSink | undefined;
  private readonly parser: Parser;
  private readonly maxPacketBytes: number;
  private nextId = 0;

  constructor(
    readonly socket: Socket,
    private readonly limits: ConnectionLimits,
    private readonly counters: MqttCounters,
    now: number,
  ) {
    this.openedAt = now;
    this.lastSeen = now;
    this.maxPacketBytes = limits.maxPayloadBytes + HEADER_ROOM;
    this.parser = mqttPacket.parser();
    this.parser.on('packet', (p: Packet) => this.onPacket(p));
    this.parser.on('error', () => this.close('malformed'));
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', () => this.close());
    socket.on('close', () => this.close());
    socket.setNoDelay(true);
  }

  attach(sink: PacketSink): void {
    this.sink = sink;
  }

  private onData(chunk: Buffer): void {
    if (this.closed) return;
    this.lastSeen = Date.now();
    this.parser.parse(chunk);
    // the parser knows a packet's length from its header: a too large one is refused before it is buffered
    const pending = (this.parser as unknown as { packet: { length: number } }).packet.length;
    if (!this.closed && pending > this.maxPacketBytes) this.close('oversize');
  }

  private onPacket(p: Packet): void {
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
    const buf = mqttPacket.generate(packet, { protocolVersion: this.protocolVersion });
    this.socket.write(buf);
    if (packet.cmd === 'publish') this.counters.messagesOut++;
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
  pause(): void { if (!this.closed) this.socket.pause(); }
  resume(): void { if (!this.closed) this.socket.resume(); }

  /**
   * Closes the connection; `reason` counts a close the daemon decided. MQTT 5 clients are told why with a
   * DISCONNECT where the protocol has a code for it.
   */
  close(reason?: MqttCloseReason): void {
    if (this.closed) return;
    if (reason !== undefined) {
      this.counters.closed[reason]++;
      const code = this.connected && this.protocolVersion === 5 ? DISCONNECT_REASON[reason] : undefined;
      if (code !== undefined) this.socket.write(mqttPacket.generate({ cmd: 'disconnect', reasonCode: code }, { protocolVersion: 5 }));
    }
    this.closed = true;
    this.parser.removeAllListeners('packet');
    if (this.socket.writableLength > 0 && reason !== 'slowReader') this.socket.end();
    else this.socket.destroy();
    // end() may keep a half-closed socket: it goes for good after a short grace
    if (!this.socket.destroyed) setTimeout(() => this.socket.destroy(), 1_000).unref();
    this.sink?.onClose();
  }
}

/** MQTT 5 DISCONNECT reason codes for the closes the daemon decides. */
const DISCONNECT_REASON: Partial<Record<MqttCloseReason, number>> = {
  malformed: 0x81, oversize: 0x95, keepalive: 0x8d, takeover: 0x8e, badPayload: 0x99, protocol: 0x82, storeError: 0x80,
};
