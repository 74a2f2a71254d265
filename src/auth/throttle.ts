/**
 * Failed-login throttling (docs/api.md "Failed logins"): after MAX_FAILURES failed logins within FAILURE_WINDOW_MS
 * for one username, or from one address, logins for that username (from that address) are refused for
 * LOCK_MS, even with the right password, with 429 and a Retry-After. ThingsBoard locks such an account until an
 * administrator unlocks it; a gateway at an unattended site has no one to do that, so a lock here ends by itself.
 * Logins refused while locked are not counted (they would keep the lock going for as long as a flood lasts), and
 * a successful login clears its username's and address's failures.
 *
 * The counting itself (WindowLimit) is shared with provisioning's rate limits (device/provision.ts).
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
  private readonly users: WindowLimit;
  private readonly addresses: WindowLimit;

  constructor(
    private readonly now: () => number = Date.now,
    limits = {
      maxFailures: MAX_FAILURES,
      windowMs: FAILURE_WINDOW_MS,
      lockMs: LOCK_MS,
      maxTracked: MAX_TRACKED,
    },
  ) {
    const window = { max: limits.maxFailures, windowMs: limits.windowMs, lockMs: limits.lockMs };
    this.users = new WindowLimit(window, limits.maxTracked);
    this.addresses = new WindowLimit(window, limits.maxTracked);
  }

  /** The lock that refuses a login of `username` from `address` now, if any. */
  locked(username: string, address: string): LoginLock | undefined {
    const t = this.now();
    const byUser = this.users.lockedFor(userKey(username), t);
    if (byUser > 0) return { by: 'user', retryAfterMs: byUser };
    const byAddress = this.addresses.lockedFor(address, t);
    if (byAddress > 0) return { by: 'address', retryAfterMs: byAddress };
    return undefined;
  }

  /** A wrong password (or unknown user): counted for both; returns the lock it starts, if it starts one. */
  failed(username: string, address: string): LoginLock | undefined {
    const t = this.now();
    const byUser = this.users.count(userKey(username), t);
    const byAddress = this.addresses.count(address, t);
    if (byUser) return { by: 'user', retryAfterMs: this.users.lockMs };
    if (byAddress) return { by: 'address', retryAfterMs: this.addresses.lockMs };
    return undefined;
  }

  succeeded(username: string, address: string): void {
    this.users.clear(userKey(username));
    this.addresses.clear(address);
  }

  /** entries tracked, usernames and addresses (for tests of the bound) */
  get tracked(): number {
    return this.users.size + this.addresses.size;
  }
}

/**
 * Events counted per key (a username, an address, a provisioning key) in fixed windows: the `max`th within
 * `windowMs` locks the key for `lockMs`, and the next window starts when the lock ends. Events while locked are
 * the caller's to refuse, not to count. At most `maxTracked` keys, the one seen least recently dropped first.
 */
export class WindowLimit {
  private readonly map = new Map<string, Failures>();

  constructor(
    private readonly limits: { readonly max: number; readonly windowMs: number; readonly lockMs: number },
    private readonly maxTracked: number = MAX_TRACKED,
  ) {}

  get lockMs(): number {
    return this.limits.lockMs;
  }

  get size(): number {
    return this.map.size;
  }

  /** ms `key` stays locked from `t` on; 0: not locked */
  lockedFor(key: string, t: number): number {
    const f = this.map.get(key);
    return f !== undefined && f.lockedUntil > t ? f.lockedUntil - t : 0;
  }

  /** Counts one event under `key`; true when it starts a lock. */
  count(key: string, t: number): boolean {
    const map = this.map;
    let f = map.get(key);
    if (f !== undefined) map.delete(key);
    if (f === undefined || (t - f.windowStart >= this.limits.windowMs && f.lockedUntil <= t))
      f = { count: 0, windowStart: t, lockedUntil: 0 };
    // re-inserted: the Map's order is the order entries were last seen, the oldest first
    map.set(key, f);
    while (map.size > this.maxTracked) map.delete(map.keys().next().value as string);
    f.count++;
    if (f.count >= this.limits.max && f.lockedUntil <= t) {
      f.lockedUntil = t + this.limits.lockMs;
      // the next window starts when the lock ends: its events start counting afresh
      f.windowStart = f.lockedUntil;
      f.count = 0;
      return true;
    }
    return false;
  }

  clear(key: string): void {
    this.map.delete(key);
  }
}

/** usernames are emails, looked up without regard to case */
const userKey = (username: string): string => username.trim().toLowerCase();
