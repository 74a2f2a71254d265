/**
 * The daemon's figures (docs/cli.md `outpost status`, docs/api.md "Status and metrics"): one JSON shape for `GET /api/outpost/status`
 * and `outpost status --json`, and the same figures in the Prometheus text format for `GET /metrics`.
 */
import type { AlarmSeverity } from '../store/alarms.js';
import type { AdmissionFigures } from '../ingest/admission.js';
import { readFileSync } from 'node:fs';
import type { Services } from '../context.js';
import { clockSynchronized } from '../upstream/uplink/clock.js';
import { SYNC_OFF, type SyncStatus } from '../upstream/uplink/status.js';
import type { RpcStatus } from '../rpc/broker.js';
import type { WriteFigures } from '../store/write-budget.js';
import { LATENCY_BUCKETS_SEC, type LoopDelayFigures, type Metrics, REQUEST_KINDS } from './metrics.js';

export interface StoreFigures {
  /** the LMDB file's size (its high-water mark) */
  readonly fileBytes: number;
  /** pages in use, what the disk budget compares */
  readonly liveBytes: number;
  /** the disk budget; 0 = none */
  readonly maxDiskBytes: number;
  readonly headFragments: number;
  readonly chunks: number;
  readonly rollupBlocks: number;
}

export interface StatusJson {
  readonly version: string;
  /** true: the daemon answered; false: `outpost status` read the data dir alone */
  readonly daemon: boolean;
  readonly startedTs: number | null;
  readonly uptimeSec: number | null;
  readonly now: number;
  /** systemd-timesyncd's verdict; null where it cannot be known */
  readonly clock: { readonly synchronized: boolean | null };
  readonly ingest: {
    readonly requests: number;
    readonly points: number;
    readonly pointsPerSec: number;
    /** uploads decoded and being written at once against ingest.maxBytesInFlight (absent from an older build) */
    readonly inFlight?: AdmissionFigures;
  } | null;
  readonly store: StoreFigures;
  /** head fragments waiting for compaction into chunks and rollups, and windows compacted since start */
  readonly compaction: { readonly backlogFragments: number; readonly compactedWindows: number | null };
  readonly sync: SyncStatus;
  readonly longPoll: RpcStatus | null;
  readonly websockets: number | null;
  /** the serve port (HTTPS when `tls`) and plain HTTP beside it, 0 = off (absent: read from the data dir alone) */
  readonly http?: { readonly port: number; readonly tls: boolean; readonly plainPort: number };
  /** the MQTT transport (null: read from the data dir alone) */
  readonly mqtt: MqttStatus | null;
  /** the CoAP transport (null: read from the data dir alone) */
  readonly coap?: CoapStatus | null;
  readonly process: { readonly rssBytes: number; readonly rssAnonBytes: number | null } | null;
  /** how late the daemon's event loop ran over the last minute (null: read from the data dir alone) */
  readonly eventLoop: LoopDelayFigures | null;
  /** bytes written against the daily write budget and the card life they imply (absent: read from the data dir alone) */
  readonly writes?: WriteFigures;
  /** uncleared alarms by severity (docs/api.md "Alarms"); absent from a daemon of an older build */
  readonly alarms?: {
    readonly active: Readonly<Record<AlarmSeverity, number>>;
    /**
     * profile alarm rules (docs/api.md "Alarm rules"): devices evaluated, progress records stored, their writes
     * not yet flushed
     */
    readonly rules?: { readonly devices: number; readonly pending: number; readonly unflushed: number };
  };
  /** devices and how many are active (docs/api.md "Device state"; absent: read from the data dir alone) */
  readonly devices?: { readonly total: number; readonly active: number };
}

export interface MqttStatus {
  /** listening ports, 0 = off */
  readonly port: number;
  readonly tlsPort: number;
  readonly connections: number;
  readonly acceptedConnections: number;
  readonly refusedConnections: number;
  readonly messagesIn: number;
  readonly messagesOut: number;
  /** QoS 1/2 publishes acknowledged, and the mean ms from receipt to PUBACK */
  readonly acks: number;
  readonly pubackMeanMs: number | null;
}

export interface CoapStatus {
  /** listening port, 0 = off */
  readonly port: number;
  readonly requests: number;
  readonly duplicates: number;
  readonly observations: number;
  readonly notifications: number;
  /** datagrams and requests refused (malformed, oversize, busy, blocks, observations) */
  readonly refused: number;
  /** uploads acknowledged 2.01, and the mean ms from receipt to 2.01 */
  readonly created: number;
  readonly createdMeanMs: number | null;
}

function coapStatus(m: Metrics): CoapStatus {
  const c = m.coap;
  const h = c.createdLatency;
  return {
    port: c.port,
    requests: c.requests,
    duplicates: c.duplicates,
    observations: c.observations,
    notifications: c.notifications,
    refused: Object.values(c.refused).reduce((a, b) => a + b, 0),
    created: h.count,
    createdMeanMs: h.count === 0 ? null : Math.round((h.sum / h.count) * 1e4) / 10,
  };
}

function mqttStatus(m: Metrics): MqttStatus {
  const c = m.mqtt;
  const h = c.pubackLatency;
  return {
    port: c.plainPort,
    tlsPort: c.tlsPort,
    connections: c.connections,
    acceptedConnections: c.accepted,
    refusedConnections: c.closed.auth + c.closed.limit,
    messagesIn: c.messagesIn,
    messagesOut: c.messagesOut,
    acks: h.count,
    pubackMeanMs: h.count === 0 ? null : Math.round((h.sum / h.count) * 1e4) / 10,
  };
}

let version: string | undefined;
/** package.json's version (read once) */
export function outpostVersion(): string {
  version ??= (
    JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }
  ).version;
  return version;
}

/** One reading of the clock's state for the status and the sync (src/upstream/uplink/clock.ts says how it is read). */
export { clockSynchronized };

/** RssAnon from /proc/self/status (Linux): the process' own heap, not its mapped LMDB pages. */
export function rssAnonBytes(): number | null {
  try {
    const m = /^RssAnon:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

export function daemonStatus(s: Services, metrics: Metrics): StatusJson {
  const now = s.now();
  const st = s.downsample?.stats();
  const requests = metrics.requests.ingest.count;
  return {
    version: outpostVersion(),
    daemon: true,
    startedTs: metrics.startedTs,
    uptimeSec: Math.floor((now - metrics.startedTs) / 1000),
    now,
    clock: { synchronized: clockSynchronized() },
    ingest: {
      requests,
      points: metrics.ingestedPoints,
      pointsPerSec: Math.round(metrics.pointsPerSec() * 10) / 10,
      ...(s.admission === undefined ? {} : { inFlight: s.admission.figures() }),
    },
    store: {
      fileBytes: st?.fileBytes ?? 0,
      liveBytes: st?.liveBytes ?? 0,
      maxDiskBytes: st?.maxDiskBytes ?? 0,
      headFragments: st?.headFragments ?? 0,
      chunks: st?.chunks ?? 0,
      rollupBlocks: st?.rollupBlocks ?? 0,
    },
    compaction: { backlogFragments: st?.headFragments ?? 0, compactedWindows: st?.compactedWindows ?? 0 },
    sync: s.sync?.status() ?? SYNC_OFF,
    longPoll: s.rpc.status(),
    websockets: metrics.websockets,
    http: { ...metrics.http },
    mqtt: mqttStatus(metrics),
    coap: coapStatus(metrics),
    process: { rssBytes: process.memoryUsage.rss(), rssAnonBytes: rssAnonBytes() },
    eventLoop: metrics.loopDelay.figures(),
    ...(s.writeBudget === undefined ? {} : { writes: s.writeBudget.figures() }),
    alarms: {
      active: s.alarms.activeBySeverity(),
      ...(s.alarmRules === undefined ? {} : { rules: s.alarmRules.stats() }),
    },
    ...(s.state === undefined ? {} : { devices: deviceCounts(s.state) }),
  };
}

function deviceCounts(state: NonNullable<Services['state']>): { total: number; active: number } {
  const c = state.counts();
  return { total: c.devices, active: c.active };
}

/** The Prometheus text exposition format (version 0.0.4) of the status and the request histograms. */
export function prometheusText(status: StatusJson, metrics: Metrics): string {
  const out: string[] = [];
  const metric = (name: string, type: 'counter' | 'gauge' | 'histogram', help: string, lines: string[]): void => {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`, ...lines);
  };
  const one = (name: string, type: 'counter' | 'gauge', help: string, v: number | null | undefined): void => {
    if (v !== null && v !== undefined) metric(name, type, help, [`${name} ${v}`]);
  };
  /** One counter with a sample per label value (`{reason="…"}`), from a record of counts. */
  const byLabel = (name: string, help: string, label: string, counts: Readonly<Record<string, number>>): void =>
    metric(
      name,
      'counter',
      help,
      Object.entries(counts).map(([value, n]) => `${name}{${label}="${value}"} ${n}`),
    );
  const hist: string[] = [];
  for (const kind of REQUEST_KINDS) {
    const h = metrics.requests[kind];
    let cum = 0;
    LATENCY_BUCKETS_SEC.forEach((le, i) => {
      cum += h.counts[i] as number;
      hist.push(`outpost_http_request_duration_seconds_bucket{kind="${kind}",le="${le}"} ${cum}`);
    });
    hist.push(`outpost_http_request_duration_seconds_bucket{kind="${kind}",le="+Inf"} ${h.count}`);
    hist.push(`outpost_http_request_duration_seconds_sum{kind="${kind}"} ${h.sum}`);
    hist.push(`outpost_http_request_duration_seconds_count{kind="${kind}"} ${h.count}`);
  }
  metric(
    'outpost_http_request_duration_seconds',
    'histogram',
    'HTTP request latency by kind (ingest: device posts; query: telemetry reads and downloads).',
    hist,
  );
  metric(
    'outpost_http_request_errors_total',
    'counter',
    'HTTP requests answered with a status >= 400, by kind.',
    REQUEST_KINDS.map((k) => `outpost_http_request_errors_total{kind="${k}"} ${metrics.errors[k]}`),
  );
  one('outpost_ingest_requests_total', 'counter', 'Device telemetry and attribute posts.', status.ingest?.requests);
  one('outpost_ingest_points_total', 'counter', 'Telemetry points stored since start.', status.ingest?.points);
  const inFlight = status.ingest?.inFlight;
  one(
    'outpost_ingest_in_flight_bytes',
    'gauge',
    'Device upload bytes decoded and being written now (ingest.maxBytesInFlight bounds them).',
    inFlight?.inFlightBytes,
  );
  one(
    'outpost_ingest_in_flight_peak_bytes',
    'gauge',
    'The most device upload bytes decoded and being written at once since start.',
    inFlight?.peakBytes,
  );
  one(
    'outpost_ingest_admission_waits_total',
    'counter',
    'Device uploads that waited for room in ingest.maxBytesInFlight since start.',
    inFlight?.waited,
  );
  one('outpost_uptime_seconds', 'gauge', 'Seconds since the daemon started.', status.uptimeSec);
  one(
    'outpost_clock_synchronized',
    'gauge',
    '1 when systemd-timesyncd reports the clock synchronized.',
    status.clock.synchronized === null ? null : Number(status.clock.synchronized),
  );
  one('outpost_store_file_bytes', 'gauge', 'Size of the LMDB file.', status.store.fileBytes);
  one(
    'outpost_store_live_bytes',
    'gauge',
    'LMDB pages in use (what the disk budget compares).',
    status.store.liveBytes,
  );
  one('outpost_store_budget_bytes', 'gauge', 'The disk budget (0 = none).', status.store.maxDiskBytes);
  const w = status.writes;
  one(
    'outpost_store_written_bytes_total',
    'counter',
    "Bytes the daemon wrote to storage since start (log, LMDB, compaction, sync, and its filesystem's journal).",
    w?.sinceStartBytes,
  );
  one(
    'outpost_store_write_budget_bytes_per_day',
    'gauge',
    'The daily write budget (store.writeBudgetBytesPerDay).',
    w?.budgetBytesPerDay,
  );
  one(
    'outpost_store_write_reserve_left_bytes',
    'gauge',
    "What is left of the write budget's reserve; commits are grouped when it runs low.",
    w?.reserveLeftBytes,
  );
  one(
    'outpost_store_commit_delay_seconds',
    'gauge',
    'How long a telemetry commit may wait for others to share it.',
    w === undefined ? undefined : w.commitDelayMs / 1000,
  );
  one(
    'outpost_compaction_backlog_fragments',
    'gauge',
    'Head fragments waiting for compaction.',
    status.compaction.backlogFragments,
  );
  one(
    'outpost_compacted_windows_total',
    'counter',
    'Windows compacted into chunks since start.',
    status.compaction.compactedWindows,
  );
  one('outpost_sync_enabled', 'gauge', '1 when upstream sync is configured.', Number(status.sync.enabled));
  one('outpost_sync_backlog_points', 'gauge', 'Points waiting to go upstream.', status.sync.backlogPoints);
  one(
    'outpost_sync_sent_points_total',
    'counter',
    'Points sent upstream since the data dir was created.',
    status.sync.sentPoints,
  );
  one(
    'outpost_sync_dropped_points_total',
    'counter',
    'Points removed before they were sent upstream.',
    status.sync.droppedPoints,
  );
  one('outpost_longpolls_open', 'gauge', 'Device long-polls held open.', status.longPoll?.openPolls);
  one('outpost_websockets_open', 'gauge', 'Open websockets.', status.websockets);
  if (status.alarms !== undefined)
    metric(
      'outpost_alarms_active',
      'gauge',
      'Uncleared alarms, by severity.',
      Object.entries(status.alarms.active).map(([sev, n]) => `outpost_alarms_active{severity="${sev}"} ${n}`),
    );
  one('outpost_devices_active', 'gauge', 'Devices whose `active` attribute is true.', status.devices?.active);
  const mq = metrics.mqtt;
  one('outpost_mqtt_connections_open', 'gauge', 'Open MQTT connections.', mq.connections);
  one('outpost_mqtt_connections_accepted_total', 'counter', 'MQTT connections accepted.', mq.accepted);
  byLabel(
    'outpost_mqtt_connections_closed_total',
    'MQTT connections refused or closed by the daemon, by reason.',
    'reason',
    mq.closed,
  );
  byLabel(
    'outpost_failures_total',
    'Failed requests by kind: wrong logins, logins refused while throttled, unknown device tokens, MQTT publishes with a bad payload or to an unknown topic.',
    'kind',
    metrics.failures,
  );
  one('outpost_mqtt_messages_in_total', 'counter', 'MQTT PUBLISH packets received.', mq.messagesIn);
  one('outpost_mqtt_messages_out_total', 'counter', 'MQTT PUBLISH packets sent.', mq.messagesOut);
  const ph: string[] = [];
  let cum = 0;
  LATENCY_BUCKETS_SEC.forEach((le, i) => {
    cum += mq.pubackLatency.counts[i] as number;
    ph.push(`outpost_mqtt_puback_seconds_bucket{le="${le}"} ${cum}`);
  });
  ph.push(
    `outpost_mqtt_puback_seconds_bucket{le="+Inf"} ${mq.pubackLatency.count}`,
    `outpost_mqtt_puback_seconds_sum ${mq.pubackLatency.sum}`,
    `outpost_mqtt_puback_seconds_count ${mq.pubackLatency.count}`,
  );
  metric(
    'outpost_mqtt_puback_seconds',
    'histogram',
    'Receipt of a QoS 1/2 MQTT publish to its PUBACK (after the commit).',
    ph,
  );
  const co = metrics.coap;
  one('outpost_coap_requests_total', 'counter', 'CoAP requests handled (duplicates not counted).', co.requests);
  one(
    'outpost_coap_duplicates_total',
    'counter',
    'Retransmitted CoAP requests answered from the cache.',
    co.duplicates,
  );
  byLabel('outpost_coap_answers_total', 'CoAP answers sent, by class.', 'class', co.answers);
  byLabel('outpost_coap_refused_total', 'CoAP datagrams or requests refused, by reason.', 'reason', co.refused);
  one('outpost_coap_observations', 'gauge', 'Open CoAP observations.', co.observations);
  one('outpost_coap_notifications_total', 'counter', 'CoAP notifications sent.', co.notifications);
  one('outpost_coap_retransmissions_total', 'counter', 'CoAP CON messages sent again.', co.retransmissions);
  one('outpost_coap_block_transfers', 'gauge', 'Block-wise uploads and answers held.', co.blockTransfers);
  one('outpost_process_rss_bytes', 'gauge', 'Resident set size.', status.process?.rssBytes);
  one(
    'outpost_process_rss_anon_bytes',
    'gauge',
    'RssAnon: the heap, without mapped store pages.',
    status.process?.rssAnonBytes,
  );
  one(
    'outpost_event_loop_delay_p99_seconds',
    'gauge',
    'p99 of how late the event loop ran, over the last minute.',
    status.eventLoop === null ? null : status.eventLoop.p99Ms / 1000,
  );
  one(
    'outpost_event_loop_delay_max_seconds',
    'gauge',
    'Longest event-loop delay over the last minute.',
    status.eventLoop === null ? null : status.eventLoop.maxMs / 1000,
  );
  return `${out.join('\n')}\n`;
}
