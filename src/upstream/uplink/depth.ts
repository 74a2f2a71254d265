/**
 * Depth series upstream (docs/sync.md): `POST {url}/api/v1/{T}/depth/telemetry` with
 * `[{"ds":..,"values":{..}},..]`, where the upstream answers that path (another Outpost, Tempus).
 *
 * The backlog is the store, as for telemetry: each depth write records in its own transaction which points it
 * stored (`['d', e, seq]` in the outbox, see src/store/outbox.ts, through the DepthSyncRecorder LmdbDepthStore
 * is made with); the values are read back from the depth series (`Outbox.depthValue`) when sent, so a point overwritten before it went sends
 * its newest value, and a point gone (its device deleted) is counted as dropped. An entry leaves the outbox only
 * after a 2xx, in one transaction with the counters; a kill -9 re-sends at most the body in flight.
 *
 * The sync service owns the rest (DepthSyncHost): tokens and parking, back-off, the shared rate of
 * `sync.maxPointsPerSec`, the slots of `sync.concurrency`. Depth takes at most one slot, after live telemetry,
 * and one device at a time, a few bodies per turn, so it never holds the others back for long.
 *
 * An upstream without the endpoint (plain ThingsBoard answers 404 for a path it does not know, where a refused
 * token is 401): a 404 on the depth path is checked with an empty telemetry post of the same token. Accepted
 * (2xx, or 400 for the empty body: the token was checked first) means "no depth endpoint": every pending depth
 * point and every one written from then on is counted in `depthNotSyncedPoints` and not kept (an outbox that
 * can never drain would grow with every write), until `sync.depthProbeMs` has passed or the daemon restarts;
 * then depth writes are recorded again and the next send asks again. Refused, the device is parked as for
 * telemetry (its depth waits with it).
 *
 * Memory does not grow with the backlog: per device a count and a seq, one body at a time, entries read in
 * key order a body's worth at a time.
 */
import type { SyncPorts } from './ports.js';
import type { Logger } from '../../log.js';
import type { EntityIdx } from '../../store/encoding/codec.js';
import type { DepthSyncRecorder } from '../../store/depth.js';
import type { Dictionary } from '../../store/encoding/dict.js';
import type { EntityStore } from '../../store/entities.js';
import {
  type DepthCounters,
  type DepthQueueKey,
  type DepthSetAsideKey,
  type Outbox,
  depthEntryPoints,
  DEPTH_SET_ASIDE_RANGE,
  depthQueueKey,
  depthQueueRange,
  depthSetAsideKey,
} from '../../store/outbox.js';
import type { Outcome, Transport } from './transport.js';
import { plainDouble, wireValue } from './wire.js';

/** What the depth sender needs of the sync service. */
export interface DepthSyncHost {
  /** the device's upstream token (provisioned if need be); undefined when it has none: it is parked then */
  token(deviceId: string): Promise<string | undefined>;
  parked(deviceId: string): boolean;
  stopped(): boolean;
  /** a 2xx from the upstream */
  succeeded(): void;
  /** any other answer but 400 and the depth path's 404: back-off, Retry-After, or the device parked */
  failed(deviceId: string, token: string, outcome: Exclude<Outcome, { kind: 'sent' } | { kind: 'setAside' }>): void;
  /** waits until `points` fit the shared rate (sync.maxPointsPerSec) */
  pace(points: number): Promise<void>;
  /** resolves in an event-loop turn of its own, after live telemetry's (turns.ts): a body is read and encoded there */
  turn(): Promise<void>;
  /** a request to the upstream starts (+1) or ends (-1): it takes one of the service's slots meanwhile */
  inFlight(delta: 1 | -1): void;
  /** new depth points to send */
  wake(): void;
  /** shown as the status's lastError */
  error(message: string): void;
}

/** The host over the sync's ports: the device's token and parking, the shared slots, pace and outcomes. */
export function depthHost(ports: SyncPorts): DepthSyncHost {
  const { jobs, sender, accounting } = ports;
  const { devices } = accounting;
  return {
    token: async (id) => {
      const dev = devices.byId(id);
      return dev === undefined ? undefined : devices.tokenFor(dev);
    },
    parked: (id) => (devices.byId(id)?.parked ?? null) !== null,
    stopped: () => jobs.stopped(),
    succeeded: () => sender.succeeded(),
    failed: (id, token, o) => {
      const dev = devices.byId(id);
      if (dev !== undefined) sender.failed(dev, token, o);
    },
    pace: (n) => sender.link.pace(ports.cfg.maxPointsPerSec > 0, n),
    turn: () => jobs.turns.take(false),
    inFlight: (delta) => {
      jobs.slots.inFlight += delta;
    },
    wake: () => jobs.wake(),
    error: (message) => {
      accounting.counts.error(message);
    },
  };
}

export interface DepthSyncDeps {
  readonly outbox: Outbox;
  readonly dict: Dictionary;
  readonly entities: EntityStore;
  readonly transport: Transport;
  readonly maxBatchBytes: number;
  /** ms until an upstream found without the depth endpoint is asked again */
  readonly probeMs: number;
  readonly log: Logger;
  readonly now: () => number;
  readonly host: DepthSyncHost;
}

/** Whether the upstream answers the depth path: unknown until a depth send got an answer. */
export type DepthEndpoint = 'unknown' | 'present' | 'absent';

/** Status fields of depth series (README "Upstream sync"); counters count since the data dir was created. */
export interface DepthSyncStatus {
  /** depth points recorded and not sent yet */
  readonly depthBacklogPoints: number;
  readonly depthSentPoints: number;
  /** depth points the upstream refused with 400 (kept under ['y', ..], not retried) */
  readonly depthSetAsidePoints: number;
  /** depth points gone from the store (their device deleted) before they were sent */
  readonly depthDroppedPoints: number;
  /** depth points not kept for upstream: written while the upstream had no depth endpoint */
  readonly depthNotSyncedPoints: number;
  readonly depthEndpoint: DepthEndpoint;
}

/** The part of one outbox entry a body carries. */
interface BodyPart {
  readonly key: DepthQueueKey;
  /** what of the entry the body covers, flat (ds, n, k*)* */
  readonly covered: number[];
  /** what of the entry is left for the next body; null: all of it is covered */
  readonly rest: number[] | null;
  readonly count: number;
}

interface Body {
  readonly text: string;
  /** distinct points in the text */
  readonly points: number;
  /** points whose value is gone from the store */
  readonly dropped: number;
  readonly parts: BodyPart[];
}

const SEQ_MAX = Number.MAX_SAFE_INTEGER;
/** bodies one turn of a device sends before the slot is offered to the others */
const JOB_BODIES = 4;
/** entries one body reads at most (each is one depth write: a body of dropped points must stop somewhere) */
const BODY_ENTRIES = 4096;
/** entries removed per transaction when counting what cannot go (no endpoint upstream, a deleted device) */
const SWEEP_PAGE = 1000;

/** A depth batch set aside, for the list (set-aside.ts). */
export interface DepthSetAside {
  readonly e: EntityIdx;
  readonly seq: number;
  readonly points: number;
  readonly minDs: number;
  readonly maxDs: number;
  readonly status: number;
  readonly error: string;
}

export class DepthSync implements DepthSyncRecorder {
  private readonly outbox: Outbox;
  private readonly host: DepthSyncHost;
  private readonly counters: DepthCounters;
  /** per entity: points in its pending entries */
  private readonly pending = new Map<EntityIdx, number>();
  private total = 0;
  /** per entity: the last seq of an entry recorded or found (an entry's key is never reused) */
  private readonly lastSeq = new Map<EntityIdx, number>();
  private endpoint: DepthEndpoint = 'unknown';
  private absentUntil = 0;
  private busy = false;
  /** the entity served last: the next turn goes to the next one (round robin) */
  private cursor = -1;
  private loaded = false;
  /** entries recorded while the backlog is being counted at start (already counted: skipped by the count) */
  private recordedWhileLoading: Set<string> | undefined = new Set();

  constructor(private readonly deps: DepthSyncDeps) {
    this.outbox = deps.outbox;
    this.host = deps.host;
    const saved = this.outbox.depthCounters();
    // before depth was sent, its points were counted as not synced in the service's counters
    const legacy = saved === undefined ? (this.outbox.counters()?.depthNotSynced ?? 0) : 0;
    this.counters = { sent: 0, setAside: 0, dropped: 0, notSynced: legacy, ...saved };
  }

  // ---- recording (LmdbDepthStore.write, in the write's turn) ------------------------------------------

  record(e: EntityIdx, points: number[], count: number): (committed: boolean) => void {
    if (this.endpoint === 'absent' && this.deps.now() < this.absentUntil) {
      this.counters.notSynced += count;
      void this.outbox.write({ depthCounters: { ...this.counters } }).catch(() => undefined);
      return (committed) => {
        if (!committed) this.counters.notSynced -= count;
      };
    }
    const seq = this.nextSeq(e);
    void this.outbox.write({ depth: [{ key: depthQueueKey(e, seq), value: points }] }).catch(() => undefined);
    this.recordedWhileLoading?.add(`${e}:${seq}`);
    return (committed) => {
      if (!committed) return;
      this.addPending(e, count);
      this.host.wake();
    };
  }

  private nextSeq(e: EntityIdx): number {
    let seq = this.lastSeq.get(e);
    if (seq === undefined) {
      seq = 0;
      // entries set aside keep their seq: a new entry must not take it either
      for (const [kind, table] of [
        ['d', this.outbox.depth],
        ['y', this.outbox.depthSetAside],
      ] as const) {
        for (const key of table.keys({ start: [kind, e, SEQ_MAX], end: [kind, e], reverse: true, limit: 1 }))
          seq = Math.max(seq, key[2]);
      }
    }
    seq++;
    this.lastSeq.set(e, seq);
    return seq;
  }

  private addPending(e: EntityIdx, n: number): void {
    // a count may go below 0 for a moment: a body can read an entry whose write's commit is not announced yet
    const cur = (this.pending.get(e) ?? 0) + n;
    if (cur !== 0) this.pending.set(e, cur);
    else this.pending.delete(e);
    this.total += n;
  }

  /** Counts the pending entries (in bounded steps, yielding), once at start. */
  async load(): Promise<void> {
    let n = 0;
    for (const { key, value } of this.outbox.depth.entries(depthQueueRange())) {
      const [, e, seq] = key;
      if (!this.recordedWhileLoading?.has(`${e}:${seq}`)) this.addPending(e, depthEntryPoints(value));
      if (++n % 5000 === 0) await new Promise<void>((r) => setImmediate(r));
      if (this.host.stopped()) return;
    }
    this.recordedWhileLoading = undefined;
    this.loaded = true;
    if (this.total > 0) this.host.wake();
  }

  // ---- sending -------------------------------------------------------------------------------------------

  /**
   * Starts one job when depth has something to do and a slot is free: the next device's bodies, or counting
   * what cannot go. Returns the job (the service tracks it), undefined when none started.
   */
  dispatch(freeSlots: number): Promise<void> | undefined {
    if (this.busy || freeSlots <= 0 || !this.loaded || this.total <= 0 || this.host.stopped()) return undefined;
    if (this.endpoint === 'absent') {
      if (this.deps.now() >= this.absentUntil) {
        this.endpoint = 'unknown';
        this.deps.log.info(`sync: asking ${this.deps.transport.url} for the depth-series endpoint again`);
      } else {
        return this.run(() => this.sweep(undefined));
      }
    }
    const e = this.nextDevice();
    if (e === undefined) return undefined;
    this.cursor = e;
    return this.run(() => this.sendDevice(e));
  }

  private run(job: () => Promise<void>): Promise<void> {
    this.busy = true;
    return job()
      .catch((err: unknown) => {
        this.deps.log.error(`sync: sending depth series failed: ${(err as Error).message}`);
      })
      .finally(() => {
        this.busy = false;
        this.host.wake();
      });
  }

  /** The pending entity after the cursor (round robin) whose device is not parked. */
  private nextDevice(): EntityIdx | undefined {
    let after: EntityIdx | undefined;
    let first: EntityIdx | undefined;
    for (const [e, n] of this.pending) {
      if (n <= 0) continue;
      const id = this.deps.dict.entityUuid(e);
      if (id !== undefined && this.host.parked(id)) continue;
      if (first === undefined || e < first) first = e;
      if (e > this.cursor && (after === undefined || e < after)) after = e;
    }
    return after ?? first;
  }

  private async sendDevice(e: EntityIdx): Promise<void> {
    const id = this.deps.dict.entityUuid(e);
    const device = id === undefined ? undefined : this.deps.entities.device(id);
    if (id === undefined || device === undefined) {
      await this.sweep(e);
      return;
    }
    const token = await this.host.token(id);
    if (token === undefined) return;
    for (let b = 0; b < JOB_BODIES && !this.host.stopped(); b++) {
      await this.host.turn();
      if (this.host.stopped()) return;
      const body = this.nextBody(e);
      if (body === undefined) {
        // nothing left of it in the outbox, whatever the count said
        this.addPending(e, -(this.pending.get(e) ?? 0));
        return;
      }
      if (body.points === 0) {
        await this.acknowledge(e, body, 'sent', null);
        continue;
      }
      await this.host.pace(body.points);
      if (this.host.stopped()) return;
      this.host.inFlight(1);
      let o: Outcome;
      try {
        o = await this.deps.transport.depth(token, body.text);
      } finally {
        this.host.inFlight(-1);
      }
      if (o.kind === 'sent') {
        this.host.succeeded();
        if (this.endpoint !== 'present') {
          if (this.endpoint === 'absent')
            this.deps.log.info(`sync: ${this.deps.transport.url} answers depth series now`);
          this.endpoint = 'present';
        }
        await this.acknowledge(e, body, 'sent', null);
      } else if (o.kind === 'setAside') {
        const { error } = o;
        const message = `HTTP 400 from ${this.deps.transport.url} for a depth batch of ${device.name}: ${error.slice(0, 200)}`;
        this.host.error(message);
        this.deps.log.warn(
          `sync: the upstream refused a depth batch of ${device.name} (${body.points} points) with 400; set aside: ${error.slice(0, 200)}`,
        );
        await this.acknowledge(e, body, 'setAside', error);
      } else if (o.kind === 'refused' && o.missing) {
        await this.checkEndpoint(id, token);
        return;
      } else {
        this.host.failed(id, token, o);
        return;
      }
    }
  }

  /**
   * The next body of entity e's pending points: whole entries while they fit in sync.maxBatchBytes, the last
   * one cut between points if need be (a point bigger than that goes alone). Undefined when none is pending.
   */
  private nextBody(e: EntityIdx): Body | undefined {
    const { dict, outbox } = this.deps;
    const maxBytes = this.deps.maxBatchBytes;
    const byDepth = new Map<number, string[]>();
    const seen = new Set<string>();
    const parts: BodyPart[] = [];
    let bytes = 2;
    let points = 0;
    let dropped = 0;
    let full = false;
    for (const { key, value: flat } of outbox.depth.entries({ ...depthQueueRange(e), limit: BODY_ENTRIES })) {
      const covered: number[] = [];
      let count = 0;
      let rest: number[] | null = null;
      for (let i = 0; i + 1 < flat.length && rest === null; i += 2 + (flat[i + 1] as number)) {
        const ds = flat[i] as number;
        const n = flat[i + 1] as number;
        const keys: number[] = [];
        for (let j = 0; j < n; j++) {
          const k = flat[i + 2 + j] as number;
          const name = dict.keyName(k);
          const stored = name === undefined ? undefined : outbox.depthValue(e, k, ds);
          let piece = '';
          if (name !== undefined && stored !== undefined && !seen.has(`${k}:${ds}`)) {
            piece = `${JSON.stringify(name)}:${wireValue(stored)}`;
            const els = byDepth.get(ds);
            const add = Buffer.byteLength(piece) + 1 + (els === undefined ? 17 + plainDouble(ds).length : 0);
            if (points > 0 && bytes + add > maxBytes) {
              rest = [ds, n - j, ...flat.slice(i + 2 + j, i + 2 + n), ...flat.slice(i + 2 + n)];
              full = true;
              break;
            }
            bytes += add;
            if (els === undefined) byDepth.set(ds, [piece]);
            else els.push(piece);
            seen.add(`${k}:${ds}`);
            points++;
          } else if (name === undefined || stored === undefined) {
            dropped++;
          }
          keys.push(k);
          count++;
        }
        if (keys.length > 0) {
          covered.push(ds, keys.length);
          for (const k of keys) covered.push(k);
        }
      }
      if (count > 0) parts.push({ key, covered, rest, count });
      if (full) break;
    }
    if (parts.length === 0) return undefined;
    const els: string[] = [];
    for (const ds of [...byDepth.keys()].sort((a, b) => a - b)) {
      els.push(`{"ds":${plainDouble(ds)},"values":{${(byDepth.get(ds) as string[]).join(',')}}}`);
    }
    return { text: `[${els.join(',')}]`, points, dropped, parts };
  }

  /** Removes (or cuts) the entries a body covered, in one transaction with the counters. */
  private async acknowledge(e: EntityIdx, body: Body, as: 'sent' | 'setAside', error: string | null): Promise<void> {
    const aside =
      as === 'setAside'
        ? body.parts.map((p) => {
            const key = depthSetAsideKey(e, p.key[2]);
            const prev = this.outbox.depthSetAside.get(key);
            const points = prev === undefined ? p.covered : [...prev.points, ...p.covered];
            return { key, value: { points, status: 400, error } };
          })
        : [];
    const depth = body.parts.map((p) => ({ key: p.key, value: p.rest }));
    if (as === 'sent') this.counters.sent += body.points;
    else this.counters.setAside += body.points;
    this.counters.dropped += body.dropped;
    // counted with the counters, so the status never shows a point both sent and pending
    this.addPending(e, -body.parts.reduce((s, p) => s + p.count, 0));
    await this.outbox.write({ depth, depthSetAside: aside, depthCounters: { ...this.counters } });
  }

  /** The upstream answered 404 on the depth path: no such endpoint there, or the token refused (an empty telemetry post tells). */
  private async checkEndpoint(id: string, token: string): Promise<void> {
    this.host.inFlight(1);
    let o: Outcome;
    try {
      o = await this.deps.transport.telemetry(token, '[]');
    } finally {
      this.host.inFlight(-1);
    }
    if (o.kind === 'sent' || o.kind === 'setAside') {
      this.host.succeeded();
      this.endpoint = 'absent';
      this.absentUntil = this.deps.now() + this.deps.probeMs;
      const message = `${this.deps.transport.url} has no depth-series endpoint (404 for /api/v1/{token}/depth/telemetry with a token it accepts)`;
      this.host.error(message);
      this.deps.log.warn(
        `sync: ${message}: depth points are counted in depthNotSyncedPoints, not kept for upstream; ` +
          `asked again in ${Math.round(this.deps.probeMs / 60_000)} min or at the next start`,
      );
      this.host.wake();
      return;
    }
    // the token refused (the device is parked as for telemetry), or the upstream away (back-off)
    this.host.failed(id, token, o);
  }

  /**
   * Removes pending entries that cannot go, counting their points, SWEEP_PAGE entries per transaction: every
   * entity's as not synced (no endpoint upstream), or entity e's as dropped (its device was deleted).
   */
  private async sweep(e: EntityIdx | undefined): Promise<void> {
    const range = depthQueueRange(e);
    let swept = 0;
    // what is recorded once the endpoint is to be asked again is no longer this sweep's
    while (
      !this.host.stopped() &&
      (e !== undefined || (this.endpoint === 'absent' && this.deps.now() < this.absentUntil))
    ) {
      const page: Array<{ key: DepthQueueKey; n: number }> = [];
      for (const { key, value } of this.outbox.depth.entries({ ...range, limit: SWEEP_PAGE }))
        page.push({ key, n: depthEntryPoints(value) });
      if (page.length === 0) break;
      const n = page.reduce((sum, p) => sum + p.n, 0);
      if (e === undefined) this.counters.notSynced += n;
      else this.counters.dropped += n;
      for (const p of page) this.addPending(p.key[1], -p.n);
      await this.outbox.write({
        depth: page.map((p) => ({ key: p.key, value: null })),
        depthCounters: { ...this.counters },
      });
      swept += n;
      await new Promise<void>((r) => setImmediate(r));
    }
    if (e !== undefined && swept > 0) {
      this.deps.log.warn(
        `sync: ${swept} depth points of a deleted device were not sent (counted in depthDroppedPoints)`,
      );
    }
  }

  // ---- set aside (outpost sync --set-aside, set-aside.ts) -------------------------------------------------

  /** The depth batches set aside (a 400 upstream): per entity and seq of the entry they came from. */
  *setAsideBatches(): IterableIterator<DepthSetAside> {
    for (const { key, value: v } of this.outbox.depthSetAside.entries(DEPTH_SET_ASIDE_RANGE)) {
      const [, e, seq] = key;
      let minDs = Number.POSITIVE_INFINITY;
      let maxDs = Number.NEGATIVE_INFINITY;
      for (let i = 0; i + 1 < v.points.length; i += 2 + (v.points[i + 1] as number)) {
        minDs = Math.min(minDs, v.points[i] as number);
        maxDs = Math.max(maxDs, v.points[i] as number);
      }
      yield { e, seq, points: depthEntryPoints(v.points), minDs, maxDs, status: v.status, error: v.error ?? '' };
    }
  }

  /**
   * Every depth batch set aside back in the queue; the points put back. Each goes under a new seq of its
   * entity: the entry it was cut from may still be pending, and in a job's hands.
   */
  async retrySetAside(): Promise<number> {
    const moved: Array<{ key: DepthSetAsideKey; e: EntityIdx; seq: number; points: number[]; n: number }> = [];
    for (const { key, value } of this.outbox.depthSetAside.entries(DEPTH_SET_ASIDE_RANGE)) {
      const points = value.points;
      moved.push({ key, e: key[1], seq: this.nextSeq(key[1]), points, n: depthEntryPoints(points) });
    }
    if (moved.length === 0) return 0;
    const n = moved.reduce((sum, m) => sum + m.n, 0);
    this.counters.setAside = Math.max(0, this.counters.setAside - n);
    await this.outbox.commit(() => {
      // the start-up count has not reached them yet: they are counted here, not there
      for (const m of moved) this.recordedWhileLoading?.add(`${m.e}:${m.seq}`);
      return {
        depthSetAside: moved.map((m) => ({ key: m.key, value: null })),
        depth: moved.map((m) => ({ key: depthQueueKey(m.e, m.seq), value: m.points })),
        depthCounters: { ...this.counters },
      };
    });
    for (const m of moved) this.addPending(m.e, m.n);
    this.host.wake();
    return n;
  }

  /** Forgets every depth batch set aside (its points stay in the store); the points cleared. */
  async clearSetAside(): Promise<number> {
    const keys: DepthSetAsideKey[] = [];
    let n = 0;
    for (const { key, value } of this.outbox.depthSetAside.entries(DEPTH_SET_ASIDE_RANGE)) {
      keys.push(key);
      n += depthEntryPoints(value.points);
    }
    if (keys.length === 0) return 0;
    this.counters.setAside = Math.max(0, this.counters.setAside - n);
    await this.outbox.commit(() => ({
      depthSetAside: keys.map((key) => ({ key, value: null })),
      depthCounters: { ...this.counters },
    }));
    return n;
  }

  // ---- status --------------------------------------------------------------------------------------------

  status(): DepthSyncStatus {
    const c = this.counters;
    return {
      depthBacklogPoints: Math.max(0, this.total),
      depthSentPoints: c.sent,
      depthSetAsidePoints: c.setAside,
      depthDroppedPoints: c.dropped,
      depthNotSyncedPoints: c.notSynced,
      depthEndpoint: this.endpoint,
    };
  }

  /** Depth points pending for one device. */
  pendingOf(deviceId: string): number {
    const e = this.deps.dict.entityIdx(deviceId);
    return e === undefined ? 0 : Math.max(0, this.pending.get(e) ?? 0);
  }

  /** Devices with depth points pending. */
  *pendingDevices(): IterableIterator<string> {
    for (const [e, n] of this.pending) {
      const id = n > 0 ? this.deps.dict.entityUuid(e) : undefined;
      if (id !== undefined) yield id;
    }
  }
}
