/**
 * A session's PUBLISH and PUBREL handling (docs/mqtt.md): every publish is started at once and acknowledged in
 * order. A QoS 1 PUBACK (QoS 2 PUBREC) is written only once the publish's data is on disk, and in the order the
 * publishes came (MQTT 4.6): publishes are started at once, so the store's group commit takes a client's
 * pipelined messages together, and their acks wait in a FIFO until every earlier one is done. The acks a commit
 * releases are written together, in one socket write (see `settle`). At most `mqtt.maxInflight` wait; beyond that
 * the socket is not read.
 *
 * Bad input: an unknown topic is acknowledged and ignored (MQTT 5: reason 0x90, as TB); a malformed payload
 * stores nothing and gets PUBACK 0x99 on MQTT 5, and closes the connection on 3.1.x (its PUBACK cannot say
 * no). A store failure closes the connection: the client sends again.
 */
import { performance } from 'node:perf_hooks';
import type { IPublishPacket } from 'mqtt-packet';
import { OutpostError } from '../../errors.js';
import type { MqttCloseReason, MqttCounters } from '../../status/metrics.js';
import { type MqttConnection, PUBREC_FLAG } from './connection.js';
import type { PublishOutcome } from './device-topics.js';

/** MQTT 5 reason codes of acknowledgements */
const RC = {
  ok: 0,
  notAuthorized: 0x87,
  topicNameInvalid: 0x90,
  payloadFormatInvalid: 0x99,
} as const;

type Outcome = PublishOutcome | { readonly kind: 'failed'; readonly reason: MqttCloseReason };

interface AckEntry {
  readonly packetId: number;
  readonly qos: 1 | 2;
  readonly t0: number;
  outcome: Outcome | undefined;
}

/** A publish's handler: its outcome, and whether it stores data (later reads wait for it). */
export interface Routed {
  readonly promise: Promise<PublishOutcome>;
  readonly write: boolean;
}

/** The session the publishes are routed by. */
export interface PublishRouter {
  route(topic: string, payload: Buffer): Routed;
  /** a bad payload or an unknown topic, to count and log */
  refused(o: PublishOutcome, topic: string): void;
}

export interface AckLimits {
  readonly counters: MqttCounters;
  readonly maxInflight: number;
  readonly log: { error(msg: string): void };
}

const SETTLED: Promise<void> = Promise.resolve();

export class PublishAcks {
  private readonly acks: AckEntry[] = [];
  /** QoS 2 packet ids received and not yet released (PUBREL) */
  private qos2Set: Set<number> | undefined;
  private get qos2(): Set<number> {
    return (this.qos2Set ??= new Set());
  }
  /** the publishes that store data and are not done yet (written or failed); a read waits for them */
  private writingSet: Set<Promise<void>> | undefined;
  /** a flushAcks is queued (settle) */
  private flushQueued = false;
  private paused = false;

  constructor(
    private readonly conn: MqttConnection,
    private readonly limits: AckLimits,
    private readonly router: PublishRouter,
  ) {}

  /** A PUBLISH: routed at once; its ack (QoS 1, 2) waits behind the earlier ones. */
  publish(p: IPublishPacket): void {
    this.limits.counters.messagesIn++;
    const payload = typeof p.payload === 'string' ? Buffer.from(p.payload) : p.payload;
    const packetId = p.messageId ?? 0;
    if (p.qos === 2 && this.qos2Set?.has(packetId) === true) {
      // a resent QoS 2 message already taken: not stored twice; its PUBREC follows once the first is written
      if (!this.acks.some((a) => a.packetId === packetId)) this.conn.send({ cmd: 'pubrec', messageId: packetId });
      return;
    }
    const entry: AckEntry | undefined =
      p.qos === 0 ? undefined : { packetId, qos: p.qos, t0: performance.now(), outcome: undefined };
    if (entry !== undefined) {
      if (p.qos === 2) this.qos2.add(packetId);
      this.acks.push(entry);
      if (this.acks.length >= this.limits.maxInflight && !this.paused) {
        this.paused = true;
        this.conn.pause();
      }
    }
    const { promise, write } = this.router.route(p.topic, payload);
    if (!write) {
      promise.then(
        (o) => this.settle(entry, o, p.topic),
        (err: unknown) => this.settle(entry, this.failure(err, p.topic), p.topic),
      );
      return;
    }
    // one promise per write past its handler's: its outcome settles the ack, and later reads wait for it
    const writing = (this.writingSet ??= new Set());
    const done: Promise<void> = promise.then(
      (o) => {
        writing.delete(done);
        this.settle(entry, o, p.topic);
      },
      (err: unknown) => {
        writing.delete(done);
        this.settle(entry, this.failure(err, p.topic), p.topic);
      },
    );
    writing.add(done);
  }

  /** A PUBREL: the QoS 2 packet id is released, and PUBCOMP answers it. */
  release(messageId: number): void {
    this.qos2Set?.delete(messageId);
    this.conn.send({ cmd: 'pubcomp', messageId });
  }

  /**
   * The writes received so far, taken now: the promise settles once each is done (written or failed), never
   * rejects, and is made only when a handler asks (most publishes are writes, which do not).
   */
  writesSoFar(): () => Promise<unknown> {
    const w = this.writingSet;
    if (w === undefined || w.size === 0) return () => SETTLED;
    const earlier = [...w];
    return () => Promise.all(earlier);
  }

  /** What a handler's error means for the client; never throws (`done` must not reject). */
  private failure(err: unknown, topic: string): Outcome {
    if (err instanceof OutpostError && err.code === 'NAME_INVALID') return { kind: 'badName', message: err.message };
    if (err instanceof OutpostError && err.status === 400) return { kind: 'bad', message: err.message };
    if (err instanceof OutpostError && err.status === 403) return { kind: 'denied', message: err.message };
    try {
      this.limits.log.error(`mqtt: publish to ${topic} failed: ${err instanceof Error ? err.message : String(err)}`);
    } catch {
      // an error that cannot be told (a throwing toString): the client is closed all the same
    }
    return { kind: 'failed', reason: 'storeError' };
  }

  /**
   * A publish is done (its data on disk, or refused): its ack goes out in order, one microtask later. The
   * publishes of one group commit settle in the same run of microtasks, all queued ahead of that one, so a
   * pipelining client's acks of a commit leave in one socket write rather than one each.
   */
  private settle(entry: AckEntry | undefined, o: Outcome, topic: string): void {
    try {
      if (o.kind === 'bad' || o.kind === 'unknownTopic') this.router.refused(o, topic);
      if (entry === undefined) this.afterQos0(o);
      else {
        entry.outcome = o;
        if (!this.flushQueued) {
          this.flushQueued = true;
          queueMicrotask(() => {
            this.flushQueued = false;
            this.guarded(() => this.flushAcks());
          });
        }
      }
    } catch (err) {
      this.failedAck(err);
    }
  }

  /** Runs `f`; a throw closes this client, never the daemon (an uncaught error or rejection would end it). */
  private guarded(f: () => void): void {
    try {
      f();
    } catch (err) {
      this.failedAck(err);
    }
  }

  private failedAck(err: unknown): void {
    try {
      this.limits.log.error(
        `mqtt: acknowledging a publish failed: ${err instanceof Error ? err.message : String(err)}`,
      );
    } catch {
      // an error that cannot be told (a throwing toString): the client is closed all the same
    }
    this.conn.close('protocol');
  }

  private afterQos0(o: Outcome): void {
    if (o.kind === 'failed') this.conn.close(o.reason);
    // 3.1.x cannot refuse a QoS 0 message either: bad input closes the connection (TB)
    else if ((o.kind === 'bad' || o.kind === 'denied') && this.conn.protocolVersion !== 5)
      this.conn.close('badPayload');
  }

  /**
   * Writes the acks at the head of the FIFO whose publishes are done, in order: the plain ones gathered into
   * one write, sent before anything else this writes (an ack with a reason code, a close).
   */
  private flushAcks(): void {
    const c = this.conn;
    const plain: number[] = [];
    const flushPlain = (): void => {
      if (plain.length > 0) c.sendAcks(plain.splice(0));
    };
    while (this.acks.length > 0 && (this.acks[0] as AckEntry).outcome !== undefined) {
      const a = this.acks.shift() as AckEntry;
      const o = a.outcome as Outcome;
      if (c.closed) continue;
      if (o.kind === 'failed') {
        flushPlain();
        c.close(o.reason);
        continue;
      }
      let reasonCode: number = RC.ok;
      if (o.kind === 'unknownTopic') reasonCode = RC.topicNameInvalid;
      else if (o.kind === 'badName') reasonCode = RC.payloadFormatInvalid;
      else if (o.kind === 'bad' || o.kind === 'denied') {
        if (c.protocolVersion !== 5) {
          flushPlain();
          c.close('badPayload');
          continue;
        }
        reasonCode = o.kind === 'bad' ? RC.payloadFormatInvalid : RC.notAuthorized;
      }
      // MQTT 5: a PUBREC with a failure code ends the QoS 2 exchange (no PUBREL follows)
      if (a.qos === 2 && c.protocolVersion === 5 && reasonCode >= 0x80) this.qos2.delete(a.packetId);
      // 3.1.x has no reason code: an unknown topic's ack is a plain one there
      if (reasonCode === RC.ok || c.protocolVersion !== 5)
        plain.push(a.qos === 1 ? a.packetId : PUBREC_FLAG | a.packetId);
      else {
        flushPlain();
        c.send({ cmd: a.qos === 1 ? 'puback' : 'pubrec', messageId: a.packetId, reasonCode });
      }
      if (reasonCode === RC.ok) this.limits.counters.pubackLatency.observe((performance.now() - a.t0) / 1000);
    }
    flushPlain();
    if (this.paused && this.acks.length < this.limits.maxInflight / 2) {
      this.paused = false;
      c.resume();
    }
  }
}
