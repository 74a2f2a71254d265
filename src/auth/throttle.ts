/**
 * Failed-login throttling (docs/api.md "Failed logins"): after MAX_FAILURES failed logins within FAILURE_WINDOW_MS
 * for one username, or from one address, logins for that username (from that address) are refused for
 * LOCK_MS, even with the right password, with 429 and a Retry-After. ThingsBoard locks such an account until an
 * administrator unlocks it; a gateway at an unattended site has no one to do that, so a lock here ends by itself.
 * Logins refused while locked are not counted (they would keep the lock going for as long as a flood lasts), and
 * a successful login clears its username's and address's failures.
 *
 * Bounded memory: at most MAX_TRACKED usernames and as many addresses are tracked; past that the entry seen
 * least recently goes (a flood of made-up usernames or addresses cannot grow the maps).
 */

export const MAX_FAILURES = 10;
export const FAILURE_WINDOW_MS = 60_000;
export const LOCK_MS = 60_000;
export const MAX_TRACKED = 4096;

interface Failures {
  /** failures since windowStart */
  count: number;
  windowStart: number;
  /** refused until then (ms since the epoch); 0: not locked */
  lockedUntil: number;
}

/** A refusal: what is locked, and for how many more ms. */
export interface LoginLock {
  readonly by: 'user' | 'address';
  readonly retryAfterMs: number;
}

export class LoginThrottle {
  private readonly users = new Map<string, Failures>();
  private readonly addresses = new Map<string, Failures>();

  constructor(
    private readonly now: () => number = Date.now,
    private readonly limits = {
      maxFailures: MAX_FAILURES,
      windowMs: FAILURE_WINDOW_MS,
      lockMs: LOCK_MS,
      maxTracked: MAX_TRACKED,
    },
  ) {}

  /** The lock that refuses a login of `username` from `address` now, if any. */
  locked(username: string, address: string): LoginLock | undefined {
    const t = this.now();
    const u = this.users.get(userKey(username));
    if (u !== undefined && u.lockedUntil > t) return { by: 'user', retryAfterMs: u.lockedUntil - t };
    const a = this.addresses.get(address);
    if (a !== undefined && a.lockedUntil > t) return { by: 'address', retryAfterMs: a.lockedUntil - t };
    return undefined;
  }

  /** A wrong password (or unknown user): counted for both; returns the lock it starts, if it starts one. */
  failed(username: string, address: string): LoginLock | undefined {
    const t = this.now();
    const byUser = this.count(this.users, userKey(username), t);
    const byAddress = this.count(this.addresses, address, t);
    if (byUser) return { by: 'user', retryAfterMs: this.limits.lockMs };
    if (byAddress) return { by: 'address', retryAfterMs: this.limits.lockMs };
    return undefined;
  }

  succeeded(username: string, address: string): void {
    this.users.delete(userKey(username));
    this.addresses.delete(address);
  }

  /** entries tracked, usernames and addresses (for tests of the bound) */
  get tracked(): number {
    return this.users.size + this.addresses.size;
  }

  /** Counts one failure under `key`; true when it starts a lock. */
  private count(map: Map<string, Failures>, key: string, t: number): boolean {
    let f = map.get(key);
    if (f !== undefined) map.delete(key);
    if (f === undefined || (t - f.windowStart >= this.limits.windowMs && f.lockedUntil <= t))
      f = { count: 0, windowStart: t, lockedUntil: 0 };
    // re-inserted: the Map's order is the order entries were last seen, the oldest first
    map.set(key, f);
    while (map.size > this.limits.maxTracked) map.delete(map.keys().next().value as string);
    f.count++;
    if (f.count >= this.limits.maxFailures && f.lockedUntil <= t) {
      f.lockedUntil = t + this.limits.lockMs;
      // the next window starts when the lock ends: its failures start counting afresh
      f.windowStart = f.lockedUntil;
      f.count = 0;
      return true;
    }
    return false;
  }
}

/** usernames are emails, looked up without regard to case */
const userKey = (username: string): string => username.trim().toLowerCase();
