/**
 * The registry of held device requests (docs/api.md): `GET /attributes/updates`, `GET /rpc` and client-side
 * `POST /rpc` waiting for their answer. Bounded in total (`maxOpen`: one more → 429), per device (`maxPerDevice`:
 * one more answers the device's oldest as timed out, so one device can never take the others' share, and a
 * device whose old connections died unseen is still served) and per remote address (`maxPerOrigin`: one more →
 * 429, so one host cannot take them all with many tokens); one shared timer wheel for every deadline, and an
 * entry leaves the registry the moment it is answered, times out or its client goes away.
 *
 * Knows nothing of HTTP: an entry is settled exactly once with a PollOutcome and the handler turns that into a
 * reply.
 */
import { OutpostError } from '../errors.js';
import type { DurationMs } from '../types.js';
import type { TimerWheel, WheelEntry } from './timer-wheel.js';

export type PollKind = 'attributes' | 'rpc' | 'clientRpc';

export type PollOutcome =
  /** the answer body (JSON text) */
  | { readonly kind: 'data'; readonly body: string }
  /** the deadline passed with nothing to say */
  | { readonly kind: 'timeout' }
  /** the device was deleted while the request was held */
  | { readonly kind: 'deviceDeleted' }
  /** the device's credentials changed while the request was held: the token it came with is no longer valid */
  | { readonly kind: 'credentialsUpdated' };

/** A held request. `close` removes it without answering (the client went away); idempotent. */
export interface PollHandle {
  readonly deviceId: string;
  readonly kind: PollKind;
  readonly settled: boolean;
  /** Answers this request with `body`; false when it was already settled. */
  answer(body: string): boolean;
  close(): void;
}

/** A device's held requests of every kind, oldest first (a device holds a handful; one Set keeps 10k devices small). */
type DevicePolls = Set<Poll>;

class Poll implements PollHandle {
  settled = false;
  timer: WheelEntry | undefined;
  constructor(
    private readonly registry: LongPollRegistry,
    readonly deviceId: string,
    readonly kind: PollKind,
    /** the remote address it came from (HTTP), counted against maxPerOrigin */
    readonly origin: string | undefined,
    private readonly onSettle: (o: PollOutcome) => void,
  ) {}

  /** Settles once: removes the entry and its deadline, then hands over the outcome. */
  settle(o: PollOutcome | undefined): boolean {
    if (this.settled) return false;
    this.settled = true;
    this.timer?.cancel();
    this.registry.remove(this);
    if (o !== undefined) this.onSettle(o);
    return true;
  }

  answer(body: string): boolean {
    return this.settle({ kind: 'data', body });
  }

  close(): void {
    this.settle(undefined);
  }
}

export class LongPollRegistry {
  private readonly byDevice = new Map<string, DevicePolls>();
  private open_ = 0;
  private readonly perKind: Record<PollKind, number> = { attributes: 0, rpc: 0, clientRpc: 0 };
  /** held requests per remote address (only addresses holding some) */
  private readonly byOrigin = new Map<string, number>();

  constructor(
    private readonly wheel: TimerWheel,
    private readonly maxOpen: number,
    /** held requests per device, every kind together; 0 = no cap */
    private readonly maxPerDevice = 0,
    /** held requests per remote address; 0 = no cap */
    private readonly maxPerOrigin = 0,
  ) {}

  /** Requests held right now, over all devices and kinds. */
  get openCount(): number {
    return this.open_;
  }

  /** Devices with at least one held request. */
  get deviceCount(): number {
    return this.byDevice.size;
  }

  /** Requests of one kind held right now. */
  countKind(kind: PollKind): number {
    return this.perKind[kind];
  }

  /** Devices with at least one held request. */
  devices(): IterableIterator<string> {
    return this.byDevice.keys();
  }

  countFor(deviceId: string, kind: PollKind): number {
    const polls = this.byDevice.get(deviceId);
    if (polls === undefined) return 0;
    let n = 0;
    for (const p of polls) if (p.kind === kind) n++;
    return n;
  }

  /**
   * Holds a request until answered or `timeoutMs` passes (then `settle({kind:'timeout'})`). Throws
   * TOO_MANY_REQUESTS (429) when `maxOpen` requests are already held, or `maxPerOrigin` from `origin`; nothing
   * is registered then. A device already holding `maxPerDevice` has its oldest answered as timed out first.
   */
  open(
    deviceId: string,
    kind: PollKind,
    timeoutMs: DurationMs,
    settle: (o: PollOutcome) => void,
    origin?: string,
  ): PollHandle {
    let polls = this.byDevice.get(deviceId);
    // the device's oldest, to be answered if this one is taken: it frees its place in every count
    const displaced =
      this.maxPerDevice > 0 && polls !== undefined && polls.size >= this.maxPerDevice
        ? polls.values().next().value
        : undefined;
    if (origin !== undefined && this.maxPerOrigin > 0) {
      const fromOrigin = (this.byOrigin.get(origin) ?? 0) - (displaced?.origin === origin ? 1 : 0);
      if (fromOrigin >= this.maxPerOrigin) {
        throw new OutpostError(
          'TOO_MANY_REQUESTS',
          `Too many open long-polls from this address (limit ${this.maxPerOrigin})`,
        );
      }
    }
    if (this.open_ - (displaced === undefined ? 0 : 1) >= this.maxOpen) {
      throw new OutpostError('TOO_MANY_REQUESTS', `Too many open long-polls (limit ${this.maxOpen})`);
    }
    if (displaced?.settle({ kind: 'timeout' })) polls = this.byDevice.get(deviceId);
    const p = new Poll(this, deviceId, kind, origin, settle);
    if (polls === undefined) {
      polls = new Set();
      this.byDevice.set(deviceId, polls);
    }
    polls.add(p);
    this.open_++;
    this.perKind[kind]++;
    if (origin !== undefined) this.byOrigin.set(origin, (this.byOrigin.get(origin) ?? 0) + 1);
    p.timer = this.wheel.schedule(timeoutMs, () => p.settle({ kind: 'timeout' }));
    return p;
  }

  /** Answers every held request of the device of that kind with `body`; returns how many were answered. */
  answerAll(deviceId: string, kind: PollKind, body: string): number {
    const polls = this.byDevice.get(deviceId);
    if (polls === undefined) return 0;
    let n = 0;
    for (const p of [...polls]) if (p.kind === kind && p.settle({ kind: 'data', body })) n++;
    return n;
  }

  /** Answers the oldest held request of the device of that kind; false when none is held. */
  answerOldest(deviceId: string, kind: PollKind, body: string): boolean {
    const polls = this.byDevice.get(deviceId);
    if (polls === undefined) return false;
    for (const p of polls) if (p.kind === kind) return p.settle({ kind: 'data', body });
    return false;
  }

  /** The device was deleted, or its credentials changed: every held request of it is answered with `outcome`. */
  endDevice(deviceId: string, outcome: PollOutcome = { kind: 'deviceDeleted' }): number {
    const polls = this.byDevice.get(deviceId);
    if (polls === undefined) return 0;
    let n = 0;
    for (const p of [...polls]) if (p.settle(outcome)) n++;
    return n;
  }

  /** Forgets every held request without answering (shutdown: the server closes the connections). */
  closeAll(): void {
    for (const polls of [...this.byDevice.values()]) for (const p of [...polls]) p.close();
  }

  /** @internal called by Poll.settle */
  remove(p: Poll): void {
    const polls = this.byDevice.get(p.deviceId);
    if (polls === undefined || !polls.delete(p)) return;
    this.open_--;
    this.perKind[p.kind]--;
    if (polls.size === 0) this.byDevice.delete(p.deviceId);
    if (p.origin !== undefined) {
      const n = (this.byOrigin.get(p.origin) ?? 1) - 1;
      if (n === 0) this.byOrigin.delete(p.origin);
      else this.byOrigin.set(p.origin, n);
    }
  }
}
