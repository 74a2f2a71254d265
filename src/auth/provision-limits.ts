/**
 * Provisioning's rate limits (docs/api.md "Device API", `provision.*` in docs/configuration.md): requests per
 * address and per key a minute, devices created per key an hour, shared by HTTP, MQTT and CoAP. The counting is
 * the failed-login throttle's (auth/throttle.ts); the decisions are device/provision.ts's.
 */
import type { Config } from '../config/index.js';
import { WindowLimit } from './throttle.js';

const MINUTE = 60_000;
const HOUR = 3_600_000;

/** The rate limits of provisioning; one per daemon, shared by HTTP, MQTT and CoAP. */
export class ProvisionGuard {
  private readonly byAddress: WindowLimit | undefined;
  private readonly byKey: WindowLimit | undefined;
  private readonly created: WindowLimit | undefined;

  constructor(limits: Config['provision']) {
    const per = (max: number, windowMs: number): WindowLimit | undefined =>
      max > 0 ? new WindowLimit({ max, windowMs, lockMs: windowMs }) : undefined;
    this.byAddress = per(limits.maxPerAddressPerMinute, MINUTE);
    this.byKey = per(limits.maxPerKeyPerMinute, MINUTE);
    this.created = per(limits.maxDevicesPerKeyPerHour, HOUR);
  }

  /** false: `address` is refused now; else the request is counted */
  address(address: string, t: number): boolean {
    // an IPv4 client of a dual-stack socket shows as ::ffff:a.b.c.d on some transports: one address for all
    return admit(this.byAddress, address.startsWith('::ffff:') ? address.slice(7) : address, t);
  }

  /** false: the key (by the id of what owns it) is refused now; else the request is counted */
  key(owner: string, t: number): boolean {
    return admit(this.byKey, owner, t);
  }

  mayCreate(owner: string, t: number): boolean {
    return this.created === undefined || this.created.lockedFor(owner, t) === 0;
  }

  createdOne(owner: string, t: number): void {
    this.created?.count(owner, t);
  }
}

function admit(limit: WindowLimit | undefined, key: string, t: number): boolean {
  if (limit === undefined) return true;
  if (limit.lockedFor(key, t) > 0) return false;
  limit.count(key, t);
  return true;
}
