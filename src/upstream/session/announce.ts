/**
 * Announcing devices on the gateway session (`v1/gateway/connect {"device","type"}`): TB opens a sub-device's
 * session (its downlinks: shared attributes, RPC) only when the gateway names it in this MQTT session, forgets
 * every one when the session closes, and drops one after 10 minutes without traffic. The announce carries the
 * device's type (its profile's name), so TB creates a device it does not know with the same profile; data for a
 * name TB has not seen in the session would connect it implicitly as type `default`.
 *
 * A device's local connections (an MQTT client, CoAP observations, a LAN gateway's sub-device: src/device/state.ts)
 * are told upstream as TB's gateway API tells them: the first opening → `v1/gateway/connect`, the last closing →
 * `v1/gateway/disconnect {"device"}`. TB connects a sub-device implicitly on any message naming it, so a
 * disconnected device's data (its backlog) goes up between a connect and a disconnect: the disconnect waits
 * until nothing of it is left to send, and follows any later message naming it (docs/sync.md "What the
 * upstream sees").
 *
 * Invariants:
 * - after every (re)connect, every candidate (a local session open, something to send, a local listener seen
 *   within sync.announceMs, a downlink in hand) is announced before anything else is asked of it (the
 *   reconcile); only the state at that moment is told, not what happened while the session was down (TB's own
 *   end of the old session disconnected every sub-device);
 * - an announced device still a candidate is announced again within every sync.announceMs;
 * - a device becoming a candidate is announced within one scan (SCAN_MS); a local connect at once;
 * - a device is announced before the first uplink message naming it in a session goes (ensure);
 * - a device whose local sessions all closed is no candidate for its listeners or downlinks, and is
 *   disconnected upstream within one scan of having nothing left to send.
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
  /** devices with a local session open */
  private readonly online = new Set<string>();
  /** devices whose local sessions all closed, as they were named then */
  private readonly offline = new Map<string, Candidate>();
  private settling: NodeJS.Immediate | undefined;
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
    clearImmediate(this.settling);
  }

  /** devices with a local session open: candidates whatever else they have */
  onlineDevices(): Iterable<string> {
    return this.online;
  }

  /** whether the device's local sessions all closed (it is a candidate only for what it has to send) */
  isOffline(id: string): boolean {
    return this.offline.has(id);
  }

  /** The device's first local session opened: connected upstream now (while the session is down, at its return). */
  connected(c: Candidate): void {
    this.offline.delete(c.id);
    this.online.add(c.id);
    // said even when it is in this session already for its data: the upstream sees the connect
    this.announce(c, !this.at.has(c.id));
  }

  /** The device's last local session closed: disconnected upstream once nothing of it is left to send. */
  disconnected(c: Candidate): void {
    this.online.delete(c.id);
    this.offline.set(c.id, c);
    // one scan, outside the turn of the transport that closed the session
    this.settling ??= setImmediate(() => {
      this.settling = undefined;
      this.scan();
    });
  }

  /** The device was deleted here. */
  forget(id: string): void {
    this.online.delete(id);
    this.offline.delete(id);
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
    for (const [id, c] of this.offline) {
      if (!this.at.has(id) || seen.has(id)) continue;
      if (this.o.session.publishQuietly('v1/gateway/disconnect', JSON.stringify({ device: c.name })))
        this.at.delete(id);
    }
  }

  private announce(c: Candidate, first: boolean): void {
    if (!this.o.session.publishQuietly('v1/gateway/connect', JSON.stringify({ device: c.name, type: c.type }))) return;
    this.at.set(c.id, this.o.now());
    if (first) this.o.announced(c);
  }
}
