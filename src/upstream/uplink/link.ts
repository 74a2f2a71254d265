/**
 * The state of the link to the upstream, shared by every device and lane: connected or backing off, how long
 * to wait, and the pace of the backlog.
 *
 * Back-off: a network error, timeout or 5xx backs the whole upstream off, exponentially with equal jitter
 * (backoffDelayMs), capped by sync.retryMaxMs; a 429/503 with Retry-After waits what the upstream asked, capped
 * by sync.retryMaxMs as well (an upstream's `Retry-After: 86400` must not stop a remote gateway for a day).
 * Any 2xx ends the back-off and the count of failures.
 */
import type { Config } from '../../config/index.js';
import type { Logger } from '../../log.js';

export interface LinkOptions {
  readonly config: Readonly<Pick<Config['sync'], 'retryBaseMs' | 'retryMaxMs' | 'maxPointsPerSec'>>;
  readonly url: string;
  readonly log: Logger;
  readonly now: () => number;
  readonly stopped: () => boolean;
  /**
   * the link came back after backing off: called before the state says connected (the service moves the
   * live/backlog boundary there)
   */
  readonly onReconnect: () => void;
}

/**
 * The back-off after the `failures`-th failure in a row: equal jitter, a delay drawn uniformly from
 * [ceiling / 2, ceiling] where ceiling = min(maxMs, baseMs * 2^(failures - 1)). Half the ceiling is a floor: a
 * gateway never retries a failing upstream sooner than that (full jitter can draw ~0 ms at any ceiling), and the
 * other half still spreads a fleet of gateways that lost the same upstream at once.
 */
export function backoffDelayMs(
  failures: number,
  baseMs: number,
  maxMs: number,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(30, Math.max(0, failures - 1)));
  return ceiling / 2 + (random() * ceiling) / 2;
}

export class Link {
  private failures = 0;
  private backoffUntil = 0;
  private state: 'unknown' | 'connected' | 'backoff' = 'unknown';
  /** the pacing bucket (pace): points that may go now, and when it was last filled */
  private tokens = 0;
  private tokensAt: number;

  constructor(private readonly o: LinkOptions) {
    this.tokensAt = o.now();
  }

  /** whether the last answer was a failure (until a 2xx) */
  get backingOff(): boolean {
    return this.state === 'backoff';
  }

  /** ms until the back-off ends; 0 when sending may go on */
  waitMs(now = this.o.now()): number {
    return Math.max(0, this.backoffUntil - now);
  }

  succeeded(): void {
    this.failures = 0;
    if (this.state === 'connected') return;
    if (this.state === 'backoff') this.o.onReconnect();
    this.o.log.info(`sync: connected to ${this.o.url}`);
    this.state = 'connected';
    // no burst after an outage: the bucket starts empty
    this.tokens = 0;
    this.tokensAt = this.o.now();
  }

  /**
   * The transport's connection came back (an MQTT session's CONNACK): the back-off ends at once, as after a 2xx
   * (the session waited its own back-off before reconnecting).
   */
  resumed(): void {
    this.backoffUntil = 0;
    this.succeeded();
  }

  /** The upstream failed (`afterMs`: its Retry-After); returns the delay chosen. */
  failed(what: string, afterMs: number | undefined): number {
    const cfg = this.o.config;
    let delay: number;
    if (afterMs !== undefined) {
      delay = Math.min(afterMs, cfg.retryMaxMs);
    } else {
      this.failures++;
      delay = backoffDelayMs(this.failures, cfg.retryBaseMs, cfg.retryMaxMs);
    }
    const until = this.o.now() + delay;
    if (until > this.backoffUntil) this.backoffUntil = until;
    if (this.state !== 'backoff') {
      this.o.log.warn(
        `sync: ${what} from ${this.o.url}; backing off (retry in ${Math.round(delay)} ms, then with growing delays up to ${cfg.retryMaxMs} ms)`,
      );
      this.state = 'backoff';
    }
    return delay;
  }

  /**
   * Token bucket over points: a paced sender (the backlog) waits for tokens, an unpaced one (live) takes them
   * without waiting (so live points count against the rate but are never held back). Bodies are cut to a tenth
   * of the rate; the bucket holds half a second, so a sender slowed by the upstream catches up that much and no
   * more, and it starts empty when the link comes back (no burst after an outage).
   */
  async pace(paced: boolean, n: number): Promise<void> {
    const rate = this.o.config.maxPointsPerSec;
    if (rate <= 0) return;
    const cap = Math.max(1, Math.ceil(rate / 2));
    for (;;) {
      const now = this.o.now();
      this.tokens = Math.min(cap, this.tokens + ((now - this.tokensAt) * rate) / 1000);
      this.tokensAt = now;
      const need = Math.min(n, cap);
      if (!paced || this.tokens >= need) {
        this.tokens = Math.max(-rate, this.tokens - n);
        return;
      }
      await new Promise<void>((r) => {
        setTimeout(r, Math.ceil(((need - this.tokens) * 1000) / rate)).unref();
      });
      if (this.o.stopped()) return;
    }
  }
}
