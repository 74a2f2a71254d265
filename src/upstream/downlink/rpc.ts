/**
 * RPC from the upstream to local devices, over the gateway session: `v1/gateway/rpc {"device","data":{"id",
 * "method","params"}}` becomes a pending RPC of that device in the local RPC broker (an HTTP long-poll, an MQTT
 * subscription or a LAN gateway's session takes it, now or at its next poll); the reply goes back as
 * `v1/gateway/rpc {"device","id","data"}`.
 *
 * Invariants:
 * - an RPC is stored (outbox `['R', deviceId, upstreamId]`) and flushed before its PUBACK: a restart re-queues
 *   what was not delivered yet, with what is left of its time;
 * - the same (device, upstream id, method, params) within sync.rpcTtlMs is delivered at most once: TB re-sends
 *   every pending RPC when a device's sub-session opens again. A copy of one already replied gets the reply
 *   again, never the device a second call. (TB's ids restart after its device actor restarts: the same id with
 *   another method or params is a new RPC.)
 * - a reply is stored before it is published, and published until a PUBACK (the link down, or a restart);
 * - an RPC not delivered within sync.rpcTtlMs expires (counted); records are forgotten a TTL after they end;
 * - a record's state the store refused (a full disk) is written again every tick until it is taken: the device
 *   gets an RPC a second time only if the daemon stops before the disk has room again.
 */
import type { Logger } from '../../log.js';
import { isJsonObject, stringifyJson } from '../../ingest/json.js';
import { parseBody } from '../../ingest/payload.js';
import type { RpcBroker, RpcOutcome } from '../../rpc/broker.js';
import type { EntityStore } from '../../store/entities.js';
import type { DownlinkStore } from '../../store/outbox.js';
import type { Outcome } from '../uplink/transport.js';
import { DOWNLINK_RPCS, type DownlinkRpcKey as RpcKey, type DownlinkState, downlinkRpcKey as rpcKey } from './state.js';
import type { UpstreamConnection } from '../session/connection.js';

interface RpcRecord {
  readonly device: string;
  readonly deviceId: string;
  readonly id: number;
  readonly method: string;
  readonly paramsJson: string;
  readonly receivedAt: number;
  state: 'pending' | 'delivered' | 'replied' | 'expired' | 'unanswered';
  reply?: string;
  replySent?: boolean;
  endedAt?: number;
}

export interface RpcDownlinkOptions {
  readonly store: DownlinkStore;
  readonly session: UpstreamConnection;
  readonly entities: EntityStore;
  readonly rpc: RpcBroker;
  readonly state: DownlinkState;
  readonly ttlMs: number;
  readonly log: Logger;
  /** the wall clock: what a record's times say on disk, across restarts */
  readonly now: () => number;
  /** a clock that is never stepped, for ages while the process runs (default: performance.now) */
  readonly monotonic?: () => number;
}

const TICK_MS = 1_000;

export class RpcDownlink {
  /** records by key text, in memory as in the store */
  private readonly records = new Map<string, RpcRecord>();
  /** keys handed to the broker by this process */
  private readonly inBroker = new Set<string>();
  /** new records whose first write is not on disk yet: received() submits them then, never a tick meanwhile */
  private readonly storing = new Set<RpcRecord>();
  private readonly publishing = new Set<string>();
  /** replies on disk (loaded at start, or flushed since): published at once, no flush to wait for first */
  private readonly durable = new WeakSet<RpcRecord>();
  /** records whose latest state the store refused (a full disk): written again on each tick until it takes it */
  private readonly unsaved = new Map<string, RpcRecord>();
  /**
   * When each record was received and ended, on the monotonic clock: ages are measured on it, so a wall clock
   * stepped back or ahead (NTP's first sync on a board without a clock battery) makes no record look younger
   * or older than it is. A record loaded at start is placed by its wall-clock times, the only ones a restart
   * keeps.
   */
  private readonly receivedMono = new WeakMap<RpcRecord, number>();
  private readonly endedMono = new WeakMap<RpcRecord, number>();
  private readonly mono: () => number;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: RpcDownlinkOptions) {
    this.mono = o.monotonic ?? (() => performance.now());
  }

  /** ms since the record was received */
  private age(r: RpcRecord): number {
    return this.since(this.receivedMono, r, r.receivedAt);
  }

  /** ms since the record ended (since it was received, when it has no end yet) */
  private endedAge(r: RpcRecord): number {
    return r.endedAt === undefined ? this.age(r) : this.since(this.endedMono, r, r.endedAt);
  }

  /** ms since `wallAt` on the monotonic clock, placed by the wall clock the first time it is asked */
  private since(marks: WeakMap<RpcRecord, number>, r: RpcRecord, wallAt: number): number {
    let at = marks.get(r);
    if (at === undefined) {
      at = this.mono() - Math.max(0, this.o.now() - wallAt);
      marks.set(r, at);
    }
    return this.mono() - at;
  }

  /** Loads what a previous run left: pending RPCs go back to the broker, unsent replies out. */
  start(): void {
    for (const { key, value } of this.o.store.entries(DOWNLINK_RPCS)) {
      const [, deviceId, id] = key as RpcKey;
      this.records.set(`${deviceId}:${id}`, value as RpcRecord);
      this.durable.add(value as RpcRecord);
    }
    this.timer = setInterval(() => this.tick(), TICK_MS);
    this.timer.unref();
    this.tick();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  get pending(): number {
    let n = 0;
    for (const r of this.records.values()) if (r.state === 'pending') n++;
    return n;
  }

  /** Device ids with an RPC in hand (announced, so the upstream keeps their sub-sessions). */
  *devices(): IterableIterator<string> {
    for (const r of this.records.values())
      if (r.state === 'pending' || r.state === 'delivered' || (r.state === 'replied' && r.replySent !== true))
        yield r.deviceId;
  }

  /** `v1/gateway/rpc` from upstream: stored durably when this resolves. */
  async received(payload: Buffer): Promise<void> {
    const msg = parseBody(payload);
    const data = isJsonObject(msg) ? msg['data'] : undefined;
    if (
      !isJsonObject(msg) ||
      typeof msg['device'] !== 'string' ||
      data === undefined ||
      !isJsonObject(data) ||
      typeof data['id'] !== 'number' ||
      typeof data['method'] !== 'string'
    ) {
      this.o.log.warn('sync: an RPC from upstream without device, id or method; ignored');
      return;
    }
    const device = msg['device'];
    const rec = this.o.entities.byName('DEVICE', device);
    if (rec === undefined) {
      this.o.log.warn(`sync: an RPC from upstream for "${device}", which is not a device here; ignored`);
      return;
    }
    const id = data['id'];
    const params = data['params'];
    const paramsJson = params === undefined ? 'null' : stringifyJson(params);
    const k = `${rec.id}:${id}`;
    const had = this.records.get(k);
    const now = this.o.now();
    if (
      had !== undefined &&
      had.method === data['method'] &&
      had.paramsJson === paramsJson &&
      this.age(had) <= this.o.ttlMs
    ) {
      // TB re-sent it (a new sub-session): the device does not get it twice; a reply it gave goes again
      if (had.state === 'replied') {
        had.replySent = false;
        this.publishReply(k, had);
      }
      return;
    }
    const r: RpcRecord = {
      device,
      deviceId: rec.id,
      id,
      method: data['method'],
      paramsJson,
      receivedAt: now,
      state: 'pending',
    };
    this.receivedMono.set(r, this.mono());
    this.records.set(k, r);
    this.inBroker.delete(k);
    this.o.state.counters.rpcReceived++;
    void this.o.state.save();
    this.storing.add(r);
    try {
      await this.o.store.put(rpcKey(rec.id, id), r);
      await this.o.store.flushed();
    } finally {
      this.storing.delete(r);
    }
    // an RPC with the same id and other params may have replaced it meanwhile
    if (this.records.get(k) === r) this.submit(k, r);
  }

  /** The session is up again: replies waiting go. */
  sessionUp(): void {
    for (const [k, r] of this.records) if (r.state === 'replied' && r.replySent !== true) this.publishReply(k, r);
  }

  private tick(): void {
    for (const [k, r] of this.unsaved) this.persist(k, r);
    for (const [k, r] of this.records) {
      if (r.state === 'pending' && !this.inBroker.has(k) && !this.storing.has(r)) {
        if (this.age(r) >= this.o.ttlMs) this.end(k, r, 'expired');
        else this.submit(k, r);
      } else if (r.state !== 'pending' && r.state !== 'delivered' && (r.state !== 'replied' || r.replySent === true)) {
        // ended: kept a TTL for recognising copies, then forgotten
        if (this.endedAge(r) >= this.o.ttlMs && this.age(r) >= this.o.ttlMs) {
          this.records.delete(k);
          void this.o.store.remove(rpcKey(r.deviceId, r.id));
        }
      } else if (r.state === 'replied' && r.replySent !== true && this.age(r) >= 2 * this.o.ttlMs) {
        // the caller upstream gave up long ago (TB's own RPC timeout is shorter): the reply is of no further use
        r.replySent = true;
        this.o.log.warn(
          `sync: the reply to the RPC ${r.method} (id ${r.id}) of ${r.device} could not be sent upstream in time; dropped`,
        );
        this.persist(k, r);
      } else if (r.state === 'delivered' && !this.inBroker.has(k) && this.age(r) >= this.o.ttlMs) {
        // delivered before a restart: its reply can no longer come (the device's local id is gone)
        this.end(k, r, 'unanswered');
      }
    }
    if (this.o.session.state === 'up') this.sessionUp();
  }

  private submit(k: string, r: RpcRecord): void {
    const left = this.o.ttlMs - this.age(r);
    if (left <= 0) {
      this.end(k, r, 'expired');
      return;
    }
    let outcome: Promise<RpcOutcome>;
    try {
      outcome = this.o.rpc.submit(r.deviceId, {
        method: r.method,
        paramsJson: r.paramsJson,
        oneway: false,
        timeoutMs: left,
        onDelivered: () => {
          r.state = 'delivered';
          this.o.state.counters.rpcDelivered++;
          void this.o.state.save();
          this.persist(k, r);
        },
      });
    } catch {
      // the device's queue is full: tried again on the next tick
      return;
    }
    this.inBroker.add(k);
    void outcome.then((o) => {
      this.inBroker.delete(k);
      if (o.kind === 'reply') {
        r.reply = o.body;
        r.replySent = false;
        // the record on disk has no reply yet: published once the write below is flushed
        this.durable.delete(r);
        // counted before end() writes the counters, so that write includes it (a restart keeps the count)
        this.o.state.counters.rpcReplied++;
        this.end(k, r, 'replied');
        this.publishReply(k, r);
      } else if (o.kind === 'undelivered') {
        this.end(k, r, 'expired');
      } else {
        this.end(k, r, 'unanswered');
      }
    });
  }

  private end(k: string, r: RpcRecord, state: 'replied' | 'expired' | 'unanswered'): void {
    r.state = state;
    r.endedAt = this.o.now();
    this.endedMono.set(r, this.mono());
    if (state === 'expired') {
      this.o.state.counters.rpcExpired++;
      this.o.log.warn(`sync: the RPC ${r.method} (id ${r.id}) from upstream for ${r.device} expired undelivered`);
    }
    void this.o.state.save();
    this.persist(k, r);
  }

  /**
   * Writes a record's current state. One the store refuses (a full disk) is written again on every tick until
   * it takes it: a record left `pending` on disk after its device got it would hand the device the same call
   * again after the next restart.
   */
  private persist(k: string, r: RpcRecord): void {
    if (this.records.get(k) !== r) return;
    this.unsaved.delete(k);
    this.o.store.put(rpcKey(r.deviceId, r.id), r).then(
      () => undefined,
      () => {
        if (this.records.get(k) === r) this.unsaved.set(k, r);
      },
    );
  }

  private publishReply(k: string, r: RpcRecord): void {
    if (this.publishing.has(k) || this.o.session.state !== 'up') return;
    this.publishing.add(k);
    const body = `{"device":${JSON.stringify(r.device)},"id":${r.id},"data":${replyJson(r.reply ?? '')}}`;
    // A reply stored (and flushed) while the session was down goes out in the turn the session comes up, before the
    // uplink starts, and ahead of it in the window: a session the upstream keeps closing (over MQTT 3.1.1 a refused
    // device's message ends it) still carries it, and the caller upstream gets it within its timeout.
    const sent = this.durable.has(r)
      ? this.o.session.publish('v1/gateway/rpc', body, true)
      : this.o.store.flushed().then(() => {
          this.durable.add(r);
          return this.o.session.publish('v1/gateway/rpc', body, true);
        });
    void sent
      .catch((err: unknown): Outcome => ({ kind: 'retry', what: (err as Error).message, afterMs: undefined }))
      .then((out) => {
        this.publishing.delete(k);
        if (out.kind === 'sent' || out.kind === 'setAside') {
          r.replySent = true;
          this.persist(k, r);
        }
      });
  }
}

/** A device's reply as the `data` of the answer: itself when it is JSON, else as a string. */
function replyJson(body: string): string {
  try {
    JSON.parse(body);
    return body === '' ? '""' : body;
  } catch {
    return JSON.stringify(body);
  }
}
