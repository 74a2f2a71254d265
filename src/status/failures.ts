/**
 * Failed requests leave a trace (docs/api.md "Failures in the log"): wrong logins, logins refused while
 * throttled, device posts with an unknown access token, refused MQTT CONNECTs (and those refused while
 * throttled), MQTT publishes with a payload that is not what the topic
 * takes, and publishes to topics that are not the API's. Each kind is counted (`/metrics`:
 * `outpost_failures_total{kind}`) and logged with its source (address, device, topic, a token's first
 * characters, never a whole token), at most one line per kind a minute: the first failure at once, then one line
 * a minute with how many more came while a flood lasts. A flood of thousands costs a line a minute, and the first
 * line shows where it comes from.
 *
 * Fixed memory: one small record per kind and at most one timer each.
 */

/** What failed, one counter and one log stream each. */
export type FailureKind =
  | 'login'
  | 'loginThrottled'
  | 'deviceToken'
  | 'mqttLogin'
  | 'mqttLoginThrottled'
  | 'mqttPayload'
  | 'mqttTopic'
  | 'provision';
export const FAILURE_KINDS: readonly FailureKind[] = [
  'login',
  'loginThrottled',
  'deviceToken',
  'mqttLogin',
  'mqttLoginThrottled',
  'mqttPayload',
  'mqttTopic',
  'provision',
];

/** what a kind's summary line says came again */
const SUMMARY: Record<FailureKind, string> = {
  login: 'failed logins',
  loginThrottled: 'logins refused while throttled',
  deviceToken: 'requests with an unknown device access token',
  mqttLogin: 'refused MQTT CONNECTs',
  mqttLoginThrottled: 'MQTT CONNECTs refused while throttled',
  mqttPayload: 'MQTT publishes with a bad payload',
  mqttTopic: 'MQTT publishes to unknown topics',
  provision: 'provisioning requests refused by the rate limits',
};

/** the least time between two log lines of one kind */
export const FAILURE_LOG_MS = 60_000;

interface KindState {
  /** when the last line of this kind was logged */
  loggedAt: number;
  /** failures since that line, not logged */
  more: number;
  /** where the last of those came from */
  lastSource: string;
  timer: NodeJS.Timeout | undefined;
}

export type FailureCounts = Record<FailureKind, number>;

export function emptyFailureCounts(): FailureCounts {
  return {
    login: 0,
    loginThrottled: 0,
    deviceToken: 0,
    mqttLogin: 0,
    mqttLoginThrottled: 0,
    mqttPayload: 0,
    mqttTopic: 0,
    provision: 0,
  };
}

export class FailureLog {
  private readonly kinds = new Map<FailureKind, KindState>();

  constructor(
    private readonly log: (line: string) => void,
    /** counted here; `/metrics` shows them */
    readonly counts: FailureCounts = emptyFailureCounts(),
    private readonly now: () => number = Date.now,
    private readonly intervalMs: number = FAILURE_LOG_MS,
  ) {}

  /**
   * One failure of `kind`: `line` says what and from where (logged when this kind has not been logged for a
   * minute), `source` is where it came from, for the summary of those not logged.
   */
  note(kind: FailureKind, line: string, source: string): void {
    this.counts[kind]++;
    let k = this.kinds.get(kind);
    if (k === undefined) {
      k = { loggedAt: -Infinity, more: 0, lastSource: '', timer: undefined };
      this.kinds.set(kind, k);
    }
    const t = this.now();
    if (t - k.loggedAt >= this.intervalMs && k.more === 0) {
      k.loggedAt = t;
      this.log(line);
      return;
    }
    k.more++;
    k.lastSource = source;
    // the summary goes out a minute after the last line, whether or not the flood goes on
    if (k.timer === undefined) {
      const state = k;
      state.timer = setTimeout(() => this.summarize(kind, state), Math.max(0, state.loggedAt + this.intervalMs - t));
      state.timer.unref();
    }
  }

  /** Logs what is not yet logged (at a graceful stop) and stops the timers. */
  close(): void {
    for (const [kind, k] of this.kinds) this.summarize(kind, k);
  }

  private summarize(kind: FailureKind, k: KindState): void {
    clearTimeout(k.timer);
    k.timer = undefined;
    if (k.more === 0) return;
    const span = Math.max(1, Math.round((this.now() - k.loggedAt) / 1000));
    this.log(
      `${k.more} more ${SUMMARY[kind]} in the last ${span >= 55 && span <= 65 ? 'minute' : `${span} s`} (the last from ${k.lastSource})`,
    );
    k.loggedAt = this.now();
    k.more = 0;
  }
}

/**
 * The first characters of an access token, enough to tell a typo from a stranger's token but never the whole:
 * at most 4, and at most a third of it.
 */
export function tokenPrefix(token: string): string {
  return `${token.slice(0, Math.min(4, Math.floor(token.length / 3)))}…`;
}

/** A client-given string (a username, a topic) for a log line: quoted, control characters escaped, at most 80 characters. */
export function quoted(text: string): string {
  return JSON.stringify(text.length > 80 ? `${text.slice(0, 80)}…` : text);
}
