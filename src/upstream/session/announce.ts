/**
 * Announcing devices on the gateway session (`v1/gateway/connect {"device","type"}`): TB opens a sub-device's
 * session (its downlinks: shared attributes, RPC) only when the gateway names it in this MQTT session, forgets
 * every one when the session closes, and drops one after 10 minutes without traffic. The announce carries the
 * device's type (its profile's name), so TB creates a device it does not know with the same profile; data for a
 * name TB has not seen in the session would connect it implicitly as type `default`.
 *
 * Invariants:
 * - after every (re)connect, every candidate (something to send, a local listener seen within
 *   sync.announceMs, a downlink in hand) is announced before anything else is asked of it (the reconcile);
 * - an announced device still a candidate is announced again within every sync.announceMs;
 * - a device becoming a candidate is announced within one scan (SCAN_MS);
 * - a device is announced before the first uplink message naming it in a session goes (ensure).
 */
import type { UpstreamConnection } from './connection.js';

export interface Candidate {
  readonly id: string;
  readonly name: string;
  readonly type: string;
}

export interface AnnouncerOptions {
  readonly session: UpstreamConnection;
  /** the devices to announce now (deduplicated by id here) */
  readonly candidates: () => Iterable<Candidate>;
  readonly announceMs: number;
  readonly now: () => number;
  /** a device was announced for the first time in this session: reconcile it */
  readonly announced: (c: Candidate) => void;
}

const SCAN_MS = 2_000;

export class Announcer {
  /** device id → when it was last announced in this session */
  private readonly at = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private readonly interval: number;

  constructor(private readonly o: AnnouncerOptions) {
    this.interval = Math.min(SCAN_MS, Math.max(50, Math.floor(o.announceMs / 4)));
  }

  get count(): number {
    return this.at.size;
  }

  start(): void {
    this.timer = setInterval(() => this.scan(), this.interval);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** The session is (again) up: TB forgot every sub-device; all are announced afresh. */
  sessionUp(): void {
    this.at.clear();
    this.scan();
  }

  /**
   * Announces `c` now if it was not in this session: a downlink for a device that is no candidate yet, or the
   * first uplink message naming it (published after this, on the same session, so TB reads the type first).
   */
  ensure(c: Candidate): void {
    if (!this.at.has(c.id)) this.announce(c, true);
  }

  /** A message naming `c` was acknowledged: TB connected it implicitly, which counts as an announce. */
  carried(c: Candidate): void {
    if (this.o.session.state !== 'up') return;
    const first = !this.at.has(c.id);
    this.at.set(c.id, this.o.now());
    if (first) this.o.announced(c);
  }

  scan(): void {
    if (this.o.session.state !== 'up') return;
    const now = this.o.now();
    // announced again a scan early, so the gap between two announces never exceeds announceMs
    const due = this.o.announceMs - this.interval;
    const seen = new Set<string>();
    for (const c of this.o.candidates()) {
      if (seen.has(c.id)) continue;
      seen.add(c.id);
      const last = this.at.get(c.id);
      if (last === undefined) this.announce(c, true);
      else if (now - last >= due) this.announce(c, false);
    }
  }

  private announce(c: Candidate, first: boolean): void {
    if (!this.o.session.publishQuietly('v1/gateway/connect', JSON.stringify({ device: c.name, type: c.type }))) return;
    this.at.set(c.id, this.o.now());
    if (first) this.o.announced(c);
  }
}
