/**
 * The daemon's own counters for `GET /api/outpost/status` and `GET /metrics` (docs/api.md "Status and metrics"): HTTP
 * requests and their latency by kind, ingested points (from the bus: every committed telemetry write), open
 * websockets. Collected in the HTTP/API layer, so the store's write path knows nothing of them. Fixed memory:
 * one histogram per kind and a 60-slot ring of points per second.
 */
import { type IntervalHistogram, monitorEventLoopDelay } from 'node:perf_hooks';
import type { EventBus } from '../bus/index.js';
import { type FailureCounts, emptyFailureCounts } from './failures.js';

/** What a request was, for the histograms: device telemetry posts, reads of stored data, everything else. */
export type RequestKind = 'ingest' | 'query' | 'other';
export const REQUEST_KINDS: readonly RequestKind[] = ['ingest', 'query', 'other'];

/** Upper bounds of the latency buckets, in seconds (Prometheus `le`); +Inf is implied. */
export const LATENCY_BUCKETS_SEC: readonly number[] = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

export class Histogram {
  /** per bucket, not cumulative; the last slot is +Inf */
  readonly counts = new Float64Array(LATENCY_BUCKETS_SEC.length + 1);
  sum = 0;
  count = 0;

  observe(sec: number): void {
    let i = 0;
    while (i < LATENCY_BUCKETS_SEC.length && sec > (LATENCY_BUCKETS_SEC[i] as number)) i++;
    this.counts[i] = (this.counts[i] as number) + 1;
    this.sum += sec;
    this.count++;
  }
}

/** ms between the samples of the event-loop delay (what a blocked loop is measured against) */
const LOOP_SAMPLE_MS = 10;

/** How late the event loop ran, in ms: what a device post waits on top of its own work and fdatasync. */
export interface LoopDelayFigures {
  readonly p99Ms: number;
  readonly maxMs: number;
}

/**
 * The event loop's delay over the last full minute (since start while younger): a loop blocked by a long task
 * delays every device post and websocket frame behind it, and the RSS figures cannot show that.
 */
export class LoopDelay {
  private readonly h: IntervalHistogram = monitorEventLoopDelay({ resolution: LOOP_SAMPLE_MS });
  private lastMinute: LoopDelayFigures | undefined;
  private readonly timer: NodeJS.Timeout;

  constructor() {
    this.h.enable();
    this.timer = setInterval(() => {
      this.lastMinute = this.current();
      this.h.reset();
    }, 60_000);
    this.timer.unref();
  }

  figures(): LoopDelayFigures {
    return this.lastMinute ?? this.current();
  }

  close(): void {
    clearInterval(this.timer);
    this.h.disable();
  }

  private current(): LoopDelayFigures {
    // the histogram holds whole sampling intervals: an idle loop records LOOP_SAMPLE_MS
    const late = (ns: number): number =>
      this.h.count === 0 ? 0 : Math.max(0, Math.round((ns / 1e6 - LOOP_SAMPLE_MS) * 10) / 10);
    return { p99Ms: late(this.h.percentile(99)), maxMs: late(this.h.max) };
  }
}

/** seconds over which `pointsPerSec` is averaged */
const RATE_WINDOW_SEC = 60;

/** The route patterns whose requests count as ingest or query. */
export function kindOf(method: string, pattern: string): RequestKind {
  if (method === 'post' && pattern.startsWith('/api/v1/')) return 'ingest';
  if (method === 'get' && (pattern.startsWith('/api/plugins/telemetry/') || pattern.startsWith('/api/download/')))
    return 'query';
  return 'other';
}

/** Why an MQTT connection was refused or closed by the daemon (one counter each). */
export type MqttCloseReason =
  | 'auth'
  | 'limit'
  | 'addressLimit'
  | 'malformed'
  | 'oversize'
  | 'keepalive'
  | 'slowReader'
  | 'badPayload'
  | 'takeover'
  | 'credentialsUpdated'
  | 'connectTimeout'
  | 'protocol'
  | 'storeError';

/** The MQTT transport's counters (src/transports/mqtt): open connections, messages each way, PUBACK latency, refusals. */
export class MqttCounters {
  /** the listening ports, 0 = off */
  plainPort = 0;
  tlsPort = 0;
  connections = 0;
  accepted = 0;
  messagesIn = 0;
  messagesOut = 0;
  /** receipt of a QoS 1/2 PUBLISH to its PUBACK/PUBREC (after the commit) */
  readonly pubackLatency = new Histogram();
  readonly closed: Record<MqttCloseReason, number> = {
    auth: 0,
    limit: 0,
    addressLimit: 0,
    malformed: 0,
    oversize: 0,
    keepalive: 0,
    slowReader: 0,
    badPayload: 0,
    takeover: 0,
    credentialsUpdated: 0,
    connectTimeout: 0,
    protocol: 0,
    storeError: 0,
  };
}

/** Why a CoAP datagram or request was refused (one counter each). */
export type CoapRefusal = 'malformed' | 'oversize' | 'busy' | 'blocks' | 'observations';

/** The CoAP transport's counters (src/transports/coap): datagrams, requests, answers, observations, refusals. */
export class CoapCounters {
  /** the listening port, 0 = off */
  port = 0;
  datagramsIn = 0;
  datagramsOut = 0;
  /** requests handed to the resources (duplicates and refusals not counted) */
  requests = 0;
  /** retransmitted requests answered from the exchange cache */
  duplicates = 0;
  readonly answers = { success: 0, clientError: 0, serverError: 0 };
  observations = 0;
  notifications = 0;
  retransmissions = 0;
  /** Block1 assemblies and Block2 answers held */
  blockTransfers = 0;
  /** receipt of an upload to its 2.01 (after the commit) */
  readonly createdLatency = new Histogram();
  readonly refused: Record<CoapRefusal, number> = { malformed: 0, oversize: 0, busy: 0, blocks: 0, observations: 0 };
}

export class Metrics {
  readonly startedTs: number;
  readonly requests: Record<RequestKind, Histogram> = {
    ingest: new Histogram(),
    query: new Histogram(),
    other: new Histogram(),
  };
  /** requests answered with an error status (>= 400), by kind */
  readonly errors: Record<RequestKind, number> = { ingest: 0, query: 0, other: 0 };
  ingestedPoints = 0;
  websockets = 0;
  /** the serve port (HTTPS when `tls`) and plain HTTP beside it, 0 = off; set once listening */
  readonly http = { port: 0, tls: false, plainPort: 0 };
  readonly mqtt = new MqttCounters();
  /** failed logins, unknown device tokens, bad MQTT publishes, by kind (status/failures.ts counts them) */
  readonly failures: FailureCounts = emptyFailureCounts();
  readonly coap = new CoapCounters();
  readonly loopDelay = new LoopDelay();
  private readonly perSecond = new Float64Array(RATE_WINDOW_SEC);
  private second = 0;

  constructor(private readonly now: () => number = Date.now) {
    this.startedTs = now();
    this.second = Math.floor(this.startedTs / 1000);
  }

  /** Counts every committed telemetry write's points. */
  listen(bus: EventBus): void {
    bus.on('telemetry', (ev) => {
      let n = 0;
      for (const col of ev.series.values()) n += col.length;
      this.ingestedPoints += n;
      this.advance();
      const i = this.second % RATE_WINDOW_SEC;
      this.perSecond[i] = (this.perSecond[i] as number) + n;
    });
  }

  observe(method: string, pattern: string, ms: number, failed: boolean): void {
    const kind = kindOf(method, pattern);
    this.requests[kind].observe(ms / 1000);
    if (failed) this.errors[kind]++;
  }

  /** points per second over the last minute (or since start, when younger) */
  pointsPerSec(): number {
    this.advance();
    let sum = 0;
    for (const v of this.perSecond) sum += v;
    const span = Math.min(RATE_WINDOW_SEC, Math.max(1, (this.now() - this.startedTs) / 1000));
    return sum / span;
  }

  /** Clears the ring slots of the seconds that passed without a write. */
  private advance(): void {
    const s = Math.floor(this.now() / 1000);
    for (let t = Math.max(this.second + 1, s - RATE_WINDOW_SEC + 1); t <= s; t++)
      this.perSecond[t % RATE_WINDOW_SEC] = 0;
    if (s > this.second) this.second = s;
  }
}
