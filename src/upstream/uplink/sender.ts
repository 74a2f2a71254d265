/**
 * The way upstream as the lanes see it: the transport, the link's state and pace, what an outcome does (a 2xx
 * resumes the link, a refused token parks the device, anything else backs the link off), and the estimate of
 * bytes per point on the wire that cuts the bodies.
 */
import type { Dev } from './devices.js';
import type { SyncCounts } from './counts.js';
import type { Link } from './link.js';
import type { Outcome, Transport } from './transport.js';

export type Failure = Exclude<Outcome, { kind: 'sent' } | { kind: 'setAside' }>;

export interface SenderDeps {
  readonly transport: Transport;
  readonly link: Link;
  readonly counts: SyncCounts;
  readonly now: () => number;
  readonly stopped: () => boolean;
  /** the upstream refused a device's token: park it, or provision it again (devices.ts) */
  readonly refused: (dev: Dev, token: string, what: string) => void;
}

export class Sender {
  readonly transport: Transport;
  readonly link: Link;
  private estimate = 30;

  constructor(private readonly d: SenderDeps) {
    this.transport = d.transport;
    this.link = d.link;
  }

  /** bytes per point on the wire, estimated from what was sent (the bodies' sizes are cut by it) */
  get bytesPerPoint(): number {
    return this.estimate;
  }

  /** A job sent `points` in `bytes`: counted, and the estimate follows. */
  sent(points: number, bytes: number): void {
    this.d.counts.counters.sent += points;
    if (points > 0) this.estimate = 0.8 * this.estimate + 0.2 * Math.max(8, bytes / points);
  }

  /** a 2xx from the upstream */
  succeeded(): void {
    this.d.counts.counters.lastSuccessTs = this.d.now();
    this.d.link.succeeded();
  }

  /** A send failed: a refused token parks its device (or provisions it again), anything else backs the link off. */
  failed(dev: Dev | undefined, token: string, o: Failure): void {
    // requests cut by stop() are not the upstream's fault: no back-off, no log line
    if (this.d.stopped()) return;
    if (o.kind === 'refused' && dev !== undefined) {
      this.d.refused(dev, token, o.what);
      return;
    }
    this.d.counts.error(`${o.what} from ${this.d.transport.url}`);
    this.d.link.failed(o.what, o.kind === 'retry' ? o.afterMs : undefined);
  }
}
