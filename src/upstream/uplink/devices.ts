/**
 * The devices the sync service knows: their upstream tokens (set with the CLI, or provisioned), parking, and
 * each device's in-flight flags and pending counts.
 *
 * Invariants:
 * - a token is stored durably (`Outbox.setToken`) before it is used, and one provisioning per
 *   device runs at a time (a second request for the same name is refused upstream, which would park it);
 * - a parked device sends nothing until its token changes (the CLI set one) or, with a provision key, its
 *   refused token was removed: `recheckParked` resumes it then. Over the MQTT gateway session a device has no
 *   token: one the upstream refused is tried again after PARKED_RETRY_MS (the fix is made upstream), and a
 *   refusal that repeats itself is not logged again;
 * - `busy[lane]`: at most one request of a device in flight per lane (`busyLog` for the live lane's points
 *   sent from the log).
 */
import type { Config } from '../../config/index.js';
import type { Logger } from '../../log.js';
import type { Dictionary } from '../../store/encoding/dict.js';
import type { EntityStore } from '../../store/entities.js';
import type { Outbox } from '../../store/outbox.js';
import type { SyncCounts } from './counts.js';
import type { Transport } from './transport.js';

export interface Dev {
  readonly id: string;
  /** undefined until the device's first points are in LMDB (entities are interned by the apply) */
  e: number | undefined;
  readonly name: string;
  parked: string | null;
  /** the token that was refused when parked for it (a different one set later unparks) */
  refusedToken: string | undefined;
  /** a request in flight in lane 0 (live) / 1 (backlog) */
  readonly busy: [boolean, boolean];
  /** a request in flight with points sent from the log */
  busyLog: boolean;
  /** its points in log records not applied and not sent yet (backlog counts what the outbox holds) */
  logged: number;
  backlog: number;
  /** the token in use was provisioned by this process: a refusal of it parks instead of provisioning again */
  freshlyProvisioned: boolean;
  /** when it was parked (ms) */
  parkedAt: number;
  /** the reason of its last parking, logged once: the same refusal after a retry says nothing new */
  lastParkReason: string | null;
}

/**
 * how long a device the upstream refused over the MQTT gateway session waits before it is tried again: it has
 * no token of its own that could change here, the fix is made upstream
 */
export const PARKED_RETRY_MS = 5 * 60_000;

export interface DevicesOptions {
  readonly outbox: Outbox;
  readonly dict: Dictionary;
  readonly entities: EntityStore;
  readonly transport: Transport;
  readonly config: Readonly<Pick<Config['sync'], 'provisionKey' | 'provisionSecret'>>;
  readonly counts: SyncCounts;
  readonly log: Logger;
  readonly now: () => number;
  /** a 2xx from the upstream */
  readonly succeeded: () => void;
  /** the upstream is away: back off (service.ts) */
  readonly retry: (what: string, afterMs: number | undefined) => void;
  /** a parked device goes on */
  readonly resumed: (dev: Dev) => void;
}

export class Devices {
  private readonly devs = new Map<string, Dev>();
  /** device id → its provisioning under way (tokenFor) */
  private readonly provisioning = new Map<string, Promise<string | undefined>>();

  constructor(private readonly o: DevicesOptions) {}

  all(): IterableIterator<Dev> {
    return this.devs.values();
  }

  /** The device of entity index `e`; undefined when it is not a device (an asset). */
  ofEntity(e: number): Dev | undefined {
    const id = this.o.dict.entityUuid(e);
    if (id === undefined) return undefined;
    let dev = this.devs.get(id);
    if (dev === undefined) {
      const rec = this.o.entities.device(id);
      if (rec === undefined) return undefined;
      dev = newDev(id, e, rec.name);
      this.devs.set(id, dev);
    }
    dev.e ??= e;
    return dev;
  }

  byId(id: string): Dev | undefined {
    const dev = this.devs.get(id);
    if (dev !== undefined) return dev;
    const e = this.o.dict.entityIdx(id);
    if (e !== undefined) return this.ofEntity(e);
    const rec = this.o.entities.device(id);
    if (rec === undefined) return undefined;
    const made = newDev(id, undefined, rec.name);
    this.devs.set(id, made);
    return made;
  }

  /**
   * What the transport addresses the device by: its name over the MQTT gateway session; else its upstream token,
   * set with the CLI or provisioned (stored durably before use), or none (parked).
   */
  async tokenFor(dev: Dev): Promise<string | undefined> {
    // one gateway session carries every device by its name (session/transport.ts): no token of its own
    if (this.o.transport.addressing === 'name') return dev.name;
    const rec = this.o.outbox.token(dev.id);
    if (rec !== undefined) return rec.token;
    if (this.o.config.provisionKey === '') {
      this.park(dev, 'no upstream token (outpost device upstream <device> --token T, or sync.provisionKey)');
      return undefined;
    }
    // One provisioning per device at a time: a device's lanes (live, backlog, the log, attributes, depth) can each
    // ask at once, and a second request for the same name is refused upstream ("already exists"), parking it.
    let pending = this.provisioning.get(dev.id);
    if (pending === undefined) {
      pending = this.provision(dev).finally(() => this.provisioning.delete(dev.id));
      this.provisioning.set(dev.id, pending);
    }
    return pending;
  }

  private async provision(dev: Dev): Promise<string | undefined> {
    const r = await this.o.transport.provision(dev.name, this.o.config.provisionKey, this.o.config.provisionSecret);
    if (r.kind === 'retry') {
      this.o.retry(r.what, r.afterMs);
      return undefined;
    }
    if (r.kind === 'denied') {
      this.park(dev, r.reason);
      return undefined;
    }
    this.o.succeeded();
    await this.o.outbox.setToken(dev.id, { token: r.token, provisioned: true });
    dev.freshlyProvisioned = true;
    this.o.log.info(`sync: provisioned ${dev.name} upstream`);
    return r.token;
  }

  /** The upstream refused the device's token: provisioned again (once) when a provision key is set, else parked. */
  async refused(dev: Dev, token: string, what: string): Promise<void> {
    if (this.o.transport.addressing === 'name') {
      // over the gateway session the name is the device's only credential: nothing to provision, the fix is upstream
      this.park(
        dev,
        `the upstream refused it over the gateway session (${what}): it will not let this gateway act for a device ` +
          `of that name (an Outpost upstream refuses a name that is a gateway there); rename it upstream or rename ` +
          `${dev.name} here; tried again every ${PARKED_RETRY_MS / 60_000} min`,
      );
      return;
    }
    if (this.o.config.provisionKey !== '' && !dev.freshlyProvisioned) {
      // the stored token is no longer valid upstream: provision again (once) before parking
      if (this.o.outbox.token(dev.id)?.token === token) await this.o.outbox.removeToken(dev.id);
      this.o.log.info(`sync: upstream refused the token of ${dev.name} (${what}); provisioning it again`);
      return;
    }
    this.park(dev, `upstream refused its token (${what})`, token);
  }

  park(dev: Dev, reason: string, refusedToken?: string): void {
    if (dev.parked === reason) return;
    dev.parked = reason;
    dev.parkedAt = this.o.now();
    dev.refusedToken = refusedToken;
    this.o.counts.error(`device ${dev.name} parked: ${reason}`);
    if (dev.lastParkReason !== reason) this.o.log.warn(`sync: device ${dev.name} parked: ${reason}`);
    dev.lastParkReason = reason;
  }

  /** Parked devices whose token changed since (the CLI set one) go on; over MQTT, those parked long enough. */
  recheckParked(): void {
    const now = this.o.now();
    for (const dev of this.devs.values()) {
      if (dev.parked === null) continue;
      if (this.o.transport.addressing === 'name') {
        if (now - dev.parkedAt >= PARKED_RETRY_MS) this.unpark(dev, false);
        continue;
      }
      const rec = this.o.outbox.token(dev.id);
      if (rec !== undefined && rec.token !== dev.refusedToken) this.unpark(dev);
      else if (rec === undefined && dev.refusedToken !== undefined && this.o.config.provisionKey !== '')
        this.unpark(dev);
    }
  }

  /** `fixed`: its token changed (logged); else a retry that may be refused again (logged once it goes through) */
  private unpark(dev: Dev, fixed = true): void {
    dev.parked = null;
    dev.refusedToken = undefined;
    dev.freshlyProvisioned = false;
    if (fixed) dev.lastParkReason = null;
    this.o.resumed(dev);
    if (fixed) this.o.log.info(`sync: device ${dev.name} resumed`);
  }

  /** A device's data went through: a refusal of it is news again (a retry after parking worked: said so). */
  accepted(dev: Dev): void {
    if (dev.lastParkReason === null) return;
    dev.lastParkReason = null;
    this.o.log.info(`sync: device ${dev.name} resumed: the upstream accepts it again`);
  }
}

function newDev(id: string, e: number | undefined, name: string): Dev {
  return {
    id,
    e,
    name,
    parked: null,
    refusedToken: undefined,
    busy: [false, false],
    busyLog: false,
    logged: 0,
    backlog: 0,
    freshlyProvisioned: false,
    parkedAt: 0,
    lastParkReason: null,
  };
}
