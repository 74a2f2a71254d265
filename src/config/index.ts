/**
 * Configuration: one defaults object with units in comments, merged from file < env < flags, validated
 * (unknown keys and wrong types rejected), then frozen (docs/configuration.md).
 */
import { readFileSync } from 'node:fs';
import { arch, totalmem } from 'node:os';
import { resolve } from 'node:path';
import { OutpostError } from '../errors.js';

const GiB = 1024 * 1024 * 1024;
// LMDB map size (address space reserved, not disk used) by platform:
const MAP_SIZE_BYTES =
  // 32-bit ARM (Pi Zero/2/3 on armv7 images) cannot map a large LMDB file into its 3 GB address space.
  arch() === 'arm' || arch() === 'ia32'
    ? 1 * GiB
    : // Raspberry Pi arm64 kernels use 39-bit virtual addresses with 4 KiB pages (512 GiB per process; Pi 5's
      // 16 KiB-page kernel: 47 bits). 64 GiB would fit, but 16 GiB leaves V8 (a wasm memory reserves ~10 GiB) wide
      // room and is more than an SD card's store needs; it also runs under qemu-user on hosts with more RAM than
      // the map (qemu 7.2 backs a file mapping's tail with accounted memory: 24 GiB segfaulted on a 24 GB host).
      arch() === 'arm64'
      ? 16 * GiB
      : // x64 and others: 47-bit address space.
        64 * GiB;
// Below 1 GiB of RAM keep fewer verified tokens and smaller websocket buffers.
const LOW_RAM = totalmem() < 1024 * 1024 * 1024;

export const DEFAULTS = {
  host: '0.0.0.0',
  port: 8080,
  /** Data directory holding the LMDB environment and the JWT signing key. */
  dataDir: './data',
  tls: {
    /** PEM certificate file; with `key`, serves HTTPS and WSS on `port` (and MQTT over TLS on `mqtt.tlsPort`). */
    cert: '',
    key: '',
  },
  http: {
    /**
     * With a certificate `port` serves HTTPS and WSS only, as it always did; this adds plain HTTP and ws beside it
     * for the devices that cannot speak TLS (docs/configuration.md "TLS"). 0 = off, -1 = OS-chosen; refused
     * without a certificate (then `port` is plain already). Env OUTPOST_HTTP_PLAIN_PORT.
     */
    plainPort: 0,
    /** bytes; request bodies above this answer 413 (docs/api.md). */
    maxBodyBytes: 4 * 1024 * 1024,
    /** bytes; cap for `/api/v1/<token>/rpc/**` bodies. */
    maxRpcBodyBytes: 64 * 1024,
  },
  ingest: {
    /**
     * bytes; device uploads (telemetry, attributes, depth; HTTP, MQTT, CoAP, the gateway API) decoded and being
     * written at once. One more waits, first come first served, until earlier ones are answered (one larger than
     * this goes in alone); none is refused for it. Bounds the memory a flood of posts holds
     * (docs/design/memory-budget.md).
     */
    maxBytesInFlight: LOW_RAM ? 1024 * 1024 : 4 * 1024 * 1024,
  },
  store: {
    /** bytes; LMDB map size (virtual address space reserved, not disk used). */
    mapSizeBytes: MAP_SIZE_BYTES,
    /** ms; how long a raw point waits in the head before compaction into a chunk. */
    headWindowMs: 2 * 60 * 60 * 1000,
    /**
     * ms; span of one compressed chunk (aligned to epoch 0); every rollup tier divides it or is a multiple of it.
     * 20 min keeps the raw edges of an aggregated query cheap to decode (≤ 120 points of 10-s data per chunk).
     */
    chunkWindowMs: 20 * 60 * 1000,
    /**
     * ms a telemetry write may wait for others to share its commit (its log record's fdatasync with `store.wal`,
     * else its LMDB commit); 0: the next event-loop turn. Each post is still answered only once its commit is
     * on disk. -1 (default): set by the write budget below, 0 while it has room. A value of 0 or more is a fixed
     * delay, whatever the budget says (the budget is still counted and shown).
     */
    commitDelayMs: -1,
    /**
     * bytes the store may write per day on average (log, LMDB applies, compaction, sync's bookkeeping), counted
     * from the kernel's write_bytes of the process. While there is room, writes are committed at once; under
     * sustained load commits are grouped so the long-run rate holds (docs/write-budget.md). Never refuses data.
     */
    writeBudgetBytesPerDay: 1.5e9,
    /** bytes the SD card is rated to have written over its life (TBW; 16 TB: a 32 GB consumer card), for the status */
    cardEnduranceBytes: 16e12,
    /**
     * Telemetry is acknowledged from a write-ahead log of our own (`<dataDir>/wal`, preallocated recycled
     * segments) and put into LMDB in bulk every `applyIntervalMs`, before any read, and at shutdown (docs/design/write-path.md).
     * false: each group commit is an LMDB commit, flushed before the answer (more fdatasyncs and page writes per point: docs/design/write-path.md).
     */
    wal: true,
    /**
     * ms; logged points go into LMDB at least this often (a read of telemetry puts them in at once). Each apply
     * is one LMDB commit touching every series written since the last: the longer, the fewer bytes per point.
     */
    applyIntervalMs: 300_000,
    /** logged points not yet in LMDB that make them go in before applyIntervalMs (bounds memory and the log) */
    applyMaxPoints: 20_000,
    /** bytes per log segment, written with zeros once and recycled */
    walSegmentBytes: 1024 * 1024,
  },
  downsample: {
    /**
     * ms, ascending; rollup tier bucket sizes, each a multiple of the previous (docs/design/downsampling.md). 10 min, not
     * 1 min, is the finest by default: a 1-min bucket of 10-s data holds 6 points, and its exact state costs more
     * disk than the raw chunk and more time to read than the raw edge it would replace (BENCHMARKS.md).
     * Add 60_000 in front for sparse 1-s data or when raw retention is short.
     */
    tiersMs: [600_000, 3_600_000, 86_400_000],
    /**
     * ms; raw points (chunks) older than this (counted back from the newest point) are dropped, answers there
     * come from rollups; 0 keeps them. Default 0: the REST API promises raw history at any ts (TB clients post
     * ts 1000 next to server-time points); 30 days (2_592_000_000) is the recommended setting for SD cards.
     */
    rawRetentionMs: 0,
    /** ms per tier (same order as tiersMs); 0 keeps that tier forever. */
    tierRetentionMs: [365 * 24 * 3_600_000, 0, 0],
    /**
     * bytes; live LMDB pages above 90% of this drop the oldest raw chunks (rollups stay). 0 = automatic: 80% of
     * what the data dir's filesystem can hold for the store at start (store size + free space), so an SD card
     * never fills; -1 = no budget. Never more than store.mapSizeBytes (a 32-bit build maps 1 GiB).
     */
    maxDiskBytes: 0,
    /** ms; time one background step (compaction, retention) may run before yielding the event loop. */
    stepBudgetMs: 2,
    /** ms; pause between background sweeps when there is no pending work. */
    sweepIntervalMs: 1_000,
  },
  longPoll: {
    /** ms; `timeout` when the device gives none (docs/api.md). */
    defaultTimeoutMs: 60_000,
    /** ms; upper bound on a device-requested timeout. */
    maxTimeoutMs: 300_000,
    /** polls held at once; more answer 429. */
    maxOpen: 50_000,
    /** polls one device holds at once, every kind together; one more answers its oldest as timed out. */
    maxPerDevice: 4,
    /** polls held at once from one remote address; more answer 429 (0 = no cap). */
    maxPerAddress: 1_000,
  },
  rpc: {
    /** ms; REST server-side RPC default timeout (docs/api.md). */
    defaultTimeoutMs: 10_000,
    /** ms; smaller REST timeouts are raised to this. */
    minTimeoutMs: 5_000,
    /** ms; client-side RPC wait before `{"error":"timeout"}`. */
    clientSideTimeoutMs: 60_000,
    /** pending server-side RPCs per device. */
    maxPendingPerDevice: 100,
  },
  query: {
    /** aggregation buckets per query without an explicit limit (docs/api.md). */
    maxIntervals: 700,
    /** raw points per key when no `limit` is given. */
    defaultLimit: 100,
    /**
     * bytes; decoded rollup blocks (11/16), edge chunks (1/4) and head fragments (1/16) kept for aggregated
     * queries until compaction, a delete or retention changes them. A month at a 2-h interval needs ~2.6 MiB of blocks and ~0.5 MiB of
     * chunks per key: 48 MiB keeps ~13 keys' month views warm, 16 MiB ~4. Filled by queries only.
     */
    readCacheBytes: LOW_RAM ? 16 * 1024 * 1024 : 48 * 1024 * 1024,
  },
  auth: {
    /** s; access JWT lifetime (docs/api.md). */
    accessTokenTtlSec: 9000,
    /** s; refresh JWT lifetime. */
    refreshTokenTtlSec: 604_800,
    issuer: 'thingsboard.io',
    /** verified tokens (and access tickets) kept in memory until they expire. */
    tokenCacheSize: LOW_RAM ? 256 : 4096,
    /**
     * Ed25519 public keys (base64url, 32 bytes) of the operators whose access tickets this gateway accepts
     * (docs/cli.md "Access tickets"; `outpost ticket keygen` prints one). Empty: tickets are refused.
     */
    ticketKeys: [] as string[],
  },
  metrics: {
    /**
     * `GET /metrics` answers loopback clients; with a token set, others too when they send
     * `Authorization: Bearer <token>`. Empty: loopback only.
     */
    token: '',
  },
  ws: {
    /** bytes; inbound frame cap (TB: 32768). */
    maxPayloadLength: 32_768,
    /** bytes; outbound buffer per socket before it is closed as a slow consumer. */
    maxBackpressure: LOW_RAM ? 256 * 1024 : 1024 * 1024,
    /** s; idle sockets are closed (uWS sends pings). */
    idleTimeoutSec: 60,
    maxSubscriptionsPerSession: 1000,
    /** open sockets per user (per access ticket); one more is closed 1008 (TB tenant profile maxWsSessionsPerRegularUser). */
    maxSessionsPerUser: 10,
    /** subscriptions per user over all its sockets; one more answers errorCode 2 (TB maxWsSubscriptionsPerRegularUser). */
    maxSubscriptionsPerUser: 2000,
    /** ms; a socket opened without `?token=` must send `authCmd` within this (TB server.ws.auth_timeout_ms). */
    authTimeoutMs: 10_000,
  },
  sync: {
    /** upstream base URL, `http://` or `https://` (docs/sync.md); empty = sync off. */
    url: '',
    /** TB device provisioning key and secret; empty = devices without an upstream token are parked. */
    provisionKey: '',
    provisionSecret: '',
    /**
     * when sync.url names an upstream this data dir never synced to (sync set for the first time, or another
     * url), the telemetry the store already holds goes up too, oldest first behind live data; false: only what
     * is written from then on (docs/sync.md).
     */
    backfill: true,
    /** points/s for the backlog drain (live points are never held back); 0 = unpaced. */
    maxPointsPerSec: 0,
    /** bytes; the largest telemetry array one request carries. */
    maxBatchBytes: 65_536,
    /** devices with a request in flight at once. */
    concurrency: 4,
    /** ms; the first retry delay after a network error, timeout or 5xx; doubled per failure, with jitter. */
    retryBaseMs: 1_000,
    /** ms; cap of the retry delay (and of a Retry-After honoured), at most 60000. */
    retryMaxMs: 60_000,
    /** ms; an upstream request not answered within this counts as a network error. */
    requestTimeoutMs: 30_000,
    /** ms; an upstream found without the depth-series endpoint is asked again after this (and at each start). */
    depthProbeMs: 3_600_000,
    /**
     * read the backlog back, encode it and post it from a thread of its own (src/upstream/uplink/thread.ts), at a lower CPU
     * priority than ingest; false: all in the main thread (a single-core board, where the thread's memory, +6 to
     * +16 MiB at peak while draining, buys no parallelism).
     */
    encoderThread: true,
    /** the gateway device's access token upstream, for an `mqtt://`/`mqtts://` sync.url; empty: provisioned (sync.provisionKey/Secret, `"gateway": true`). */
    gatewayToken: '',
    /** the name the gateway provisions itself under upstream; empty: the host name. */
    gatewayName: '',
    /** MQTT: publishes at most waiting for their PUBACK. */
    inflight: 16,
    /** ms; MQTT: every announced device is announced again within this (TB drops a sub-device after 10 min without traffic). */
    announceMs: 300_000,
    /** ms; MQTT: an RPC from upstream not delivered to its device within this expires (counted). */
    rpcTtlMs: 300_000,
  },
  mqtt: {
    /**
     * TB's MQTT device and Gateway API (docs/mqtt.md); 0 = off, -1 = a port the OS chooses (named in the
     * listening line; for tests). Env OUTPOST_MQTT_PORT (a number or `ephemeral`).
     */
    port: 1883,
    /** '' = the HTTP host (`host`) */
    host: '',
    /** MQTT over TLS with the daemon's certificate (`tls.cert`/`tls.key`); 0 = off, -1 = OS-chosen. Env OUTPOST_MQTT_TLS_PORT. */
    tlsPort: 8883,
    /** bytes; a PUBLISH payload above this closes the connection (TB's 65536) */
    maxPayloadBytes: 65_536,
    /** open MQTT connections (before CONNECT included); one more is closed at once */
    maxConnections: 10_000,
    /**
     * open MQTT connections from one remote address (before CONNECT included); one more from it is closed at
     * once; 0 = no cap. 32: room for a NATed site's devices, while even every address of a /24 (254 × 32 = 8,128)
     * cannot fill maxConnections.
     */
    maxConnectionsPerAddress: 32,
    /** ms; a connection must send CONNECT within this */
    connectTimeoutMs: 10_000,
    /** bytes queued for a client that does not read; beyond this its connection is closed */
    maxOutboundBytes: 1024 * 1024,
    /** publishes of one connection waiting for their commit; beyond this its socket is not read */
    maxInflight: 64,
  },
  coap: {
    /**
     * TB's CoAP device API on UDP (docs/coap.md); 0 = off, -1 = a port the OS chooses (named in the listening
     * line; for tests). Env OUTPOST_COAP_PORT (a number or `ephemeral`).
     */
    port: 5683,
    /** '' = the HTTP host (`host`) */
    host: '',
    /** observations (a device's shared attributes or RPCs) open at once; one more is answered as a plain GET */
    maxObservations: 20_000,
    /** observations registered from one address; one more is answered as a plain GET (0 = no cap) */
    maxObservationsPerAddress: 1_000,
    /**
     * ms; an observer not asked to acknowledge a notification for this long gets a CON one (RFC 7641 section 4.5:
     * at least every 24 h); one that answers RST or nothing is dropped
     */
    observeCheckMs: 86_400_000,
    /** answered exchanges remembered for duplicate detection (the oldest forgotten first) */
    maxExchanges: 20_000,
    /** requests in progress (waiting for a commit or an RPC answer); one more is answered 5.03 */
    maxPending: 2_000,
    /** Block1 uploads being reassembled plus large answers held for Block2 follow-ups */
    maxBlockTransfers: 1_000,
    /** bytes; a request body (reassembled) above this is refused 4.13 */
    maxBodyBytes: 65_536,
    /** ms; a CON request not answered by then gets an empty ACK, its answer follows as a CON (TB: 500) */
    piggybackMs: 500,
    /** ms; how long an answered exchange is remembered (RFC 7252 EXCHANGE_LIFETIME 247 s) */
    exchangeLifetimeMs: 247_000,
  },
  state: {
    /** ms; a device with no activity for this long is inactive, unless its SERVER_SCOPE `inactivityTimeout` says otherwise (TB: 600 s) */
    inactivityTimeoutMs: 600_000,
    /** ms; how often devices are checked for inactivity (TB: 60 s) */
    checkIntervalMs: 60_000,
  },
  provision: {
    /** TB device provisioning on this Outpost (`POST /api/v1/provision`, docs/api.md); empty = refused. */
    key: '',
    secret: '',
    /** provisioning requests from one address a minute; more are refused for a minute (0 = no cap) */
    maxPerAddressPerMinute: 300,
    /** provisioning requests naming one key a minute; more are refused for a minute (0 = no cap) */
    maxPerKeyPerMinute: 600,
    /** devices one key creates in an hour; more are refused for an hour (0 = no cap) */
    maxDevicesPerKeyPerHour: 1_000,
  },
  alarms: {
    /** alarms kept per device (any originator); at the cap its oldest cleared ones go, and a new one is refused when all are uncleared (0 = no cap) */
    maxPerDevice: 100,
    /** rules a device profile may carry in `profileData.alarms` (each create rule and each clear rule counts one); more → the save is refused (0 = no cap) */
    maxRulesPerProfile: 50,
    /** DURATION/REPEATING progress records kept (one per device and profile alarm in progress); at the cap no further one starts (0 = no cap) */
    maxPendingRuleStates: 10_000,
    /**
     * ms; 0: each rule progress change is flushed at once (a power cut loses none). Above 0 changes are gathered this
     * long and written in one commit: a site whose rules move often spares its card, and a power cut may lose that
     * much progress, never an alarm
     */
    progressFlushMs: 0,
  },
  /** 'info' logs one line per lifecycle event; 'debug' adds per-request detail. */
  logLevel: 'info' as 'info' | 'debug' | 'silent',
};

type Widen<T> = T extends string
  ? string
  : T extends number
    ? number
    : T extends boolean
      ? boolean
      : { [K in keyof T]: Widen<T[K]> };
export type Config = Widen<typeof DEFAULTS> & { logLevel: 'info' | 'debug' | 'silent' };
type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? DeepPartial<T[K]> : T[K] };
export type ConfigOverrides = DeepPartial<Config>;

/** Flags a CLI command passes in (undefined = not given). */
export interface ConfigFlags {
  host?: string | undefined;
  port?: string | number | undefined;
  dataDir?: string | undefined;
  config?: string | undefined;
  tlsCert?: string | undefined;
  tlsKey?: string | undefined;
}

type Env = Record<string, string | undefined>;

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Merge `src` into `dst` in place; every key of src must exist in `shape` with the same type. */
function mergeChecked(
  dst: Record<string, unknown>,
  src: Record<string, unknown>,
  shape: Record<string, unknown>,
  where: string,
  path = '',
): void {
  for (const [k, v] of Object.entries(src)) {
    const name = path ? `${path}.${k}` : k;
    if (!Object.hasOwn(shape, k)) throw new OutpostError('CONFIG_INVALID', `${where}: unknown config key "${name}"`);
    const expected = shape[k];
    if (isPlainObject(expected)) {
      if (!isPlainObject(v)) throw new OutpostError('CONFIG_INVALID', `${where}: "${name}" must be an object`);
      mergeChecked(dst[k] as Record<string, unknown>, v, expected, where, name);
    } else if (typeof v !== typeof expected) {
      throw new OutpostError(
        'CONFIG_INVALID',
        `${where}: "${name}" must be a ${typeof expected}, got ${JSON.stringify(v)}`,
      );
    } else {
      dst[k] = v;
    }
  }
}

function parsePort(v: string | number, where: string): number {
  const n = typeof v === 'number' ? v : Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535 || (typeof v === 'string' && !/^\d+$/.test(v))) {
    throw new OutpostError('CONFIG_INVALID', `${where}: port must be an integer 0..65535, got "${v}"`);
  }
  return n;
}

/** An MQTT port: 0 = off, -1 (or `ephemeral` from env) = chosen by the OS, else 1..65535. */
function mqttPort(v: string | number, where: string): number {
  if (v === 'ephemeral' || v === -1 || v === '-1') return -1;
  return parsePort(v, where);
}

function validate(c: Config): void {
  const positive: Array<[string, number]> = [
    ['http.maxBodyBytes', c.http.maxBodyBytes],
    ['http.maxRpcBodyBytes', c.http.maxRpcBodyBytes],
    ['ingest.maxBytesInFlight', c.ingest.maxBytesInFlight],
    ['longPoll.defaultTimeoutMs', c.longPoll.defaultTimeoutMs],
    ['longPoll.maxTimeoutMs', c.longPoll.maxTimeoutMs],
    ['rpc.defaultTimeoutMs', c.rpc.defaultTimeoutMs],
    ['rpc.clientSideTimeoutMs', c.rpc.clientSideTimeoutMs],
    ['query.maxIntervals', c.query.maxIntervals],
    ['query.defaultLimit', c.query.defaultLimit],
    ['query.readCacheBytes', c.query.readCacheBytes],
    ['auth.accessTokenTtlSec', c.auth.accessTokenTtlSec],
    ['auth.refreshTokenTtlSec', c.auth.refreshTokenTtlSec],
    ['store.mapSizeBytes', c.store.mapSizeBytes],
    ['store.headWindowMs', c.store.headWindowMs],
    ['store.chunkWindowMs', c.store.chunkWindowMs],
    ['store.applyIntervalMs', c.store.applyIntervalMs],
    ['store.applyMaxPoints', c.store.applyMaxPoints],
    ['store.walSegmentBytes', c.store.walSegmentBytes],
    ['store.writeBudgetBytesPerDay', c.store.writeBudgetBytesPerDay],
    ['store.cardEnduranceBytes', c.store.cardEnduranceBytes],
    ['downsample.stepBudgetMs', c.downsample.stepBudgetMs],
    ['downsample.sweepIntervalMs', c.downsample.sweepIntervalMs],
    ['ws.maxPayloadLength', c.ws.maxPayloadLength],
    ['ws.authTimeoutMs', c.ws.authTimeoutMs],
    ['ws.maxSubscriptionsPerSession', c.ws.maxSubscriptionsPerSession],
    ['ws.maxSessionsPerUser', c.ws.maxSessionsPerUser],
    ['ws.maxSubscriptionsPerUser', c.ws.maxSubscriptionsPerUser],
    ['longPoll.maxPerDevice', c.longPoll.maxPerDevice],
    ['sync.maxBatchBytes', c.sync.maxBatchBytes],
    ['sync.concurrency', c.sync.concurrency],
    ['sync.retryBaseMs', c.sync.retryBaseMs],
    ['sync.retryMaxMs', c.sync.retryMaxMs],
    ['sync.requestTimeoutMs', c.sync.requestTimeoutMs],
    ['sync.depthProbeMs', c.sync.depthProbeMs],
    ['sync.inflight', c.sync.inflight],
    ['sync.announceMs', c.sync.announceMs],
    ['sync.rpcTtlMs', c.sync.rpcTtlMs],
    ['mqtt.maxPayloadBytes', c.mqtt.maxPayloadBytes],
    ['mqtt.maxConnections', c.mqtt.maxConnections],
    ['mqtt.connectTimeoutMs', c.mqtt.connectTimeoutMs],
    ['mqtt.maxOutboundBytes', c.mqtt.maxOutboundBytes],
    ['mqtt.maxInflight', c.mqtt.maxInflight],
    ['coap.maxObservations', c.coap.maxObservations],
    ['coap.maxExchanges', c.coap.maxExchanges],
    ['coap.maxPending', c.coap.maxPending],
    ['coap.maxBlockTransfers', c.coap.maxBlockTransfers],
    ['coap.maxBodyBytes', c.coap.maxBodyBytes],
    ['coap.piggybackMs', c.coap.piggybackMs],
    ['coap.exchangeLifetimeMs', c.coap.exchangeLifetimeMs],
    ['coap.observeCheckMs', c.coap.observeCheckMs],
    ['state.inactivityTimeoutMs', c.state.inactivityTimeoutMs],
    ['state.checkIntervalMs', c.state.checkIntervalMs],
  ];
  for (const [name, v] of positive) {
    if (!Number.isFinite(v) || v <= 0)
      throw new OutpostError('CONFIG_INVALID', `config: "${name}" must be > 0, got ${v}`);
  }
  if (typeof c.sync.encoderThread !== 'boolean') {
    throw new OutpostError(
      'CONFIG_INVALID',
      `config: "sync.encoderThread" must be true or false, got ${String(c.sync.encoderThread)}`,
    );
  }
  if (typeof c.sync.backfill !== 'boolean') {
    throw new OutpostError(
      'CONFIG_INVALID',
      `config: "sync.backfill" must be true or false, got ${String(c.sync.backfill)}`,
    );
  }
  if (typeof c.store.wal !== 'boolean')
    throw new OutpostError('CONFIG_INVALID', `config: "store.wal" must be true or false, got ${String(c.store.wal)}`);
  const delay = c.store.commitDelayMs;
  if (!Number.isInteger(delay) || delay < -1 || delay > 60_000) {
    throw new OutpostError(
      'CONFIG_INVALID',
      `config: "store.commitDelayMs" must be -1 (set by the write budget) or an integer 0..60000, got ${delay}`,
    );
  }
  if (c.sync.url !== '' && !/^(https?|mqtts?):\/\/[^/]/.test(c.sync.url)) {
    throw new OutpostError(
      'CONFIG_INVALID',
      `config: "sync.url" must start with http://, https://, mqtt:// or mqtts://, got ${JSON.stringify(c.sync.url)}`,
    );
  }
  const caps: Array<[string, number]> = [
    ['mqtt.maxConnectionsPerAddress', c.mqtt.maxConnectionsPerAddress],
    ['coap.maxObservationsPerAddress', c.coap.maxObservationsPerAddress],
    ['provision.maxPerAddressPerMinute', c.provision.maxPerAddressPerMinute],
    ['provision.maxPerKeyPerMinute', c.provision.maxPerKeyPerMinute],
    ['provision.maxDevicesPerKeyPerHour', c.provision.maxDevicesPerKeyPerHour],
    ['alarms.maxPerDevice', c.alarms.maxPerDevice],
    ['alarms.maxRulesPerProfile', c.alarms.maxRulesPerProfile],
    ['alarms.maxPendingRuleStates', c.alarms.maxPendingRuleStates],
  ];
  for (const [name, v] of caps) {
    if (!Number.isInteger(v) || v < 0)
      throw new OutpostError('CONFIG_INVALID', `config: "${name}" must be an integer >= 0 (0 = no cap), got ${v}`);
  }
  if (!Number.isInteger(c.alarms.progressFlushMs) || c.alarms.progressFlushMs < 0 || c.alarms.progressFlushMs > 60_000)
    throw new OutpostError(
      'CONFIG_INVALID',
      `config: "alarms.progressFlushMs" must be an integer 0..60000 (0 = each change at once), got ${c.alarms.progressFlushMs}`,
    );

  if (!(c.sync.maxPointsPerSec >= 0))
    throw new OutpostError('CONFIG_INVALID', `config: "sync.maxPointsPerSec" must be >= 0`);
  if (!Number.isInteger(c.sync.concurrency))
    throw new OutpostError('CONFIG_INVALID', `config: "sync.concurrency" must be an integer`);
  if (c.sync.retryMaxMs > 60_000)
    throw new OutpostError('CONFIG_INVALID', `config: "sync.retryMaxMs" must be at most 60000`);
  if (Boolean(c.sync.provisionKey) !== Boolean(c.sync.provisionSecret)) {
    throw new OutpostError(
      'CONFIG_INVALID',
      'config: sync provisioning needs both "sync.provisionKey" and "sync.provisionSecret"',
    );
  }
  parsePort(c.port, 'config');
  mqttPort(c.mqtt.port, 'config: "mqtt.port"');
  mqttPort(c.mqtt.tlsPort, 'config: "mqtt.tlsPort"');
  mqttPort(c.coap.port, 'config: "coap.port"');
  if (c.mqtt.maxPayloadBytes > 268_435_455)
    throw new OutpostError(
      'CONFIG_INVALID',
      'config: "mqtt.maxPayloadBytes" must be at most 268435455 (MQTT\'s limit)',
    );
  const budget = c.downsample.maxDiskBytes;
  if (!Number.isInteger(budget) || (budget < 0 && budget !== -1)) {
    throw new OutpostError(
      'CONFIG_INVALID',
      `config: "downsample.maxDiskBytes" must be bytes, 0 (automatic) or -1 (none), got ${budget}`,
    );
  }
  if (Boolean(c.tls.cert) !== Boolean(c.tls.key)) {
    throw new OutpostError('CONFIG_INVALID', 'config: TLS needs both a certificate and a key');
  }
  mqttPort(c.http.plainPort, 'config: "http.plainPort"');
  if (c.http.plainPort > 0 && c.http.plainPort === c.port) {
    throw new OutpostError(
      'CONFIG_INVALID',
      `config: "http.plainPort" is "port" (${c.port}): plain HTTP beside HTTPS needs a port of its own`,
    );
  }
  for (const k of c.auth.ticketKeys as unknown[]) {
    if (typeof k !== 'string' || !/^[A-Za-z0-9_-]{43}$/.test(k) || Buffer.from(k, 'base64url').length !== 32) {
      throw new OutpostError(
        'CONFIG_INVALID',
        `config: "auth.ticketKeys" holds ${JSON.stringify(k)}, not a base64url Ed25519 public key (outpost ticket keygen prints one)`,
      );
    }
  }
  if (!['info', 'debug', 'silent'].includes(c.logLevel)) {
    throw new OutpostError('CONFIG_INVALID', `config: "logLevel" must be info, debug or silent`);
  }
}

/**
 * What only `serve` refuses: the admin CLI loads the same file without the daemon's certificate when that comes
 * from a flag or the unit's environment, and must not fail over a listener it does not open.
 */
export function checkServeConfig(c: Readonly<Config>): void {
  if (c.http.plainPort !== 0 && c.tls.cert === '') {
    throw new OutpostError(
      'CONFIG_INVALID',
      `config: "http.plainPort" (${c.http.plainPort}) needs --tls-cert/--tls-key: without a certificate "port" serves plain HTTP`,
    );
  }
}

function deepFreeze<T>(o: T): T {
  if (isPlainObject(o)) for (const v of Object.values(o)) deepFreeze(v);
  return Object.freeze(o);
}

/** flags > env > config file > defaults (docs/configuration.md). The result is frozen. */
export function loadConfig(
  flags: ConfigFlags = {},
  env: Env = process.env,
  overrides: ConfigOverrides = {},
): Readonly<Config> {
  const config = structuredClone(DEFAULTS) as Config;
  const shape = DEFAULTS as unknown as Record<string, unknown>;
  const target = config as unknown as Record<string, unknown>;

  const file = flags.config ?? env['OUTPOST_CONFIG'];
  let fileJson: unknown;
  if (file) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(file, 'utf8'));
    } catch (err) {
      throw new OutpostError('CONFIG_INVALID', `reading config file ${file}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    if (!isPlainObject(parsed))
      throw new OutpostError('CONFIG_INVALID', `config file ${file}: must hold a JSON object`);
    mergeChecked(target, parsed, shape, `config file ${file}`);
    fileJson = parsed;
  }
  mergeChecked(target, overrides as Record<string, unknown>, shape, 'overrides');

  const layer = (
    src: 'env' | 'flag',
    host?: string,
    port?: string | number,
    dataDir?: string,
    cert?: string,
    key?: string,
  ): void => {
    if (host !== undefined && host !== '') config.host = host;
    if (port !== undefined && port !== '') config.port = parsePort(port, src);
    if (dataDir !== undefined && dataDir !== '') config.dataDir = dataDir;
    if (cert !== undefined && cert !== '') config.tls.cert = cert;
    if (key !== undefined && key !== '') config.tls.key = key;
  };
  layer(
    'env',
    env['OUTPOST_HOST'],
    env['OUTPOST_PORT'],
    env['OUTPOST_DATA_DIR'],
    env['OUTPOST_TLS_CERT'],
    env['OUTPOST_TLS_KEY'],
  );
  layer('flag', flags.host, flags.port, flags.dataDir, flags.tlsCert, flags.tlsKey);
  // `port: 0` (any free port, as tests and benchmarks run) takes any free MQTT ports too, unless they were set:
  // two such daemons must never fight over 1883.
  if (config.port === 0) {
    const given = (src: unknown, k: 'port' | 'tlsPort'): boolean =>
      isPlainObject(src) && isPlainObject(src['mqtt']) && Object.hasOwn(src['mqtt'], k);
    for (const k of ['port', 'tlsPort'] as const) {
      if (!given(fileJson, k) && !given(overrides, k) && config.mqtt[k] !== 0) config.mqtt[k] = -1;
    }
    const coapGiven = (src: unknown): boolean =>
      isPlainObject(src) && isPlainObject(src['coap']) && Object.hasOwn(src['coap'], 'port');
    if (!coapGiven(fileJson) && !coapGiven(overrides) && config.coap.port !== 0) config.coap.port = -1;
  }
  const envPlain = env['OUTPOST_HTTP_PLAIN_PORT'];
  if (envPlain !== undefined && envPlain !== '') config.http.plainPort = mqttPort(envPlain, 'OUTPOST_HTTP_PLAIN_PORT');
  const envMqtt = env['OUTPOST_MQTT_PORT'];
  if (envMqtt !== undefined && envMqtt !== '') config.mqtt.port = mqttPort(envMqtt, 'OUTPOST_MQTT_PORT');
  const envMqtts = env['OUTPOST_MQTT_TLS_PORT'];
  if (envMqtts !== undefined && envMqtts !== '') config.mqtt.tlsPort = mqttPort(envMqtts, 'OUTPOST_MQTT_TLS_PORT');

  const envCoap = env['OUTPOST_COAP_PORT'];
  if (envCoap !== undefined && envCoap !== '') config.coap.port = mqttPort(envCoap, 'OUTPOST_COAP_PORT');

  config.dataDir = resolve(config.dataDir);
  validate(config);
  return deepFreeze(config);
}
