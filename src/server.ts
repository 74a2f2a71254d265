/**
 * The daemon: opens the store, wires services, registers every API module on one uWS app and listens.
 * `close()` is the graceful path for SIGTERM: stop listening, close live connections, flush and close LMDB.
 */
import { existsSync, statSync, statfsSync } from 'node:fs';
import { join } from 'node:path';
import * as uws from 'uWebSockets.js';
import { registerAuthApi } from './api/auth/index.js';
import { registerDeviceApi } from './transports/http/index.js';
import { registerDownloadApi } from './api/download/index.js';
import { registerEntityApi } from './api/entities/index.js';
import { registerRpcApi } from './api/rpc/index.js';
import { registerTelemetryApi } from './api/telemetry/index.js';
import { registerWsApi } from './api/ws/index.js';
import { AuthService } from './auth/index.js';
import { EventBus } from './bus/index.js';
import { type Config, checkServeConfig } from './config/index.js';
import type { Services } from './context.js';
import { type Logger, makeLogger } from './log.js';
import { OutpostError, describeError } from './errors.js';
import { HttpRouter } from './uws/adapter.js';
import { IngestAdmission } from './ingest/admission.js';
import { TelemetryIngest } from './ingest/service.js';
import { Dictionary } from './store/encoding/dict.js';
import { EntityStore } from './store/entities.js';
import { RelationStore } from './store/relations.js';
import { AlarmStore } from './store/alarms.js';
import { openStoreEnv } from './store/env.js';
import { openTimeseries } from './store/open.js';
import { DownsampleEngine } from './store/background/downsample.js';
import { LmdbAttributeStore } from './store/attributes.js';
import { RpcBroker } from './rpc/broker.js';
import { LmdbDepthStore } from './store/depth.js';
import { registerMetricsHead, registerStatusApi } from './api/status/index.js';
import { FailureLog } from './status/failures.js';
import { ProvisionGuard } from './auth/provision-limits.js';
import { Metrics } from './status/metrics.js';
import { registerSyncApi } from './api/sync/index.js';
import { outpostCommand } from './daemon/invocation.js';
import { lockDataDir } from './daemon/lock.js';
import { markRunning, markStopped } from './daemon/running-marker.js';
import { serveAdminRequests } from './admin/channel.js';
import { type AdminOp, type AdminResult, type AttributeWriter, adminOpDone, runAdminOp } from './admin/ops.js';
import { DeviceStateService, StateAttributes } from './device/state.js';
import { AlarmRuleService } from './alarms/service.js';
import { AlarmRuleStateStore } from './store/alarm-rule-state.js';
import { DeviceActions } from './device/actions.js';
import { daemonStatus } from './status/index.js';
import { SYNC_OFF } from './upstream/uplink/status.js';
import { checkPortFree, checkTcpPortFree, checkUdpPortFree, listenExclusive } from './daemon/port.js';
import { type MqttListener, startMqtt } from './transports/mqtt/listener.js';
import { type CoapListener, startCoap } from './transports/coap/listener.js';

export interface RunningServer {
  /** the serve port: HTTPS with a certificate, else plain HTTP */
  readonly port: number;
  /** plain HTTP beside HTTPS (`http.plainPort`), 0 = off */
  readonly plainPort: number;
  readonly services: Services;
  close(): Promise<void>;
}

export async function startServer(
  config: Readonly<Config>,
  log: Logger = makeLogger(config.logLevel),
): Promise<RunningServer> {
  // Configuration errors are reported before the store is created or touched.
  checkServeConfig(config);
  for (const f of config.tls.cert ? [config.tls.cert, config.tls.key] : []) {
    if (!existsSync(f)) throw new OutpostError('CONFIG_INVALID', `TLS file not found: ${f}`);
  }
  // One daemon per port and per data dir, checked before the store is opened: a refused daemon changes nothing.
  // A certificate makes `port` HTTPS, as it always did (scripts give --port with it and expect HTTPS there);
  // plain HTTP beside it, for devices that cannot speak TLS, only on a port of its own (docs/configuration.md).
  const tls = config.tls.cert !== '';
  const besideOn = tls && config.http.plainPort !== 0;
  await checkPortFree(config.host, config.port);
  if (besideOn) await checkPortFree(config.host, Math.max(0, config.http.plainPort));
  const mqttHost = config.mqtt.host === '' ? config.host : config.mqtt.host;
  await checkTcpPortFree(mqttHost, config.mqtt.port, 'MQTT', 'OUTPOST_MQTT_PORT or mqtt.port');
  if (config.tls.cert !== '')
    await checkTcpPortFree(mqttHost, config.mqtt.tlsPort, 'MQTT over TLS', 'OUTPOST_MQTT_TLS_PORT or mqtt.tlsPort');
  const coapHost = config.coap.host === '' ? config.host : config.coap.host;
  await checkUdpPortFree(coapHost, config.coap.port, 'CoAP', 'OUTPOST_COAP_PORT or coap.port');
  const lock = await lockDataDir(config.dataDir);
  warnIfShared(config.dataDir, log);
  const uncleanStop = markRunning(config.dataDir);
  const env = openStoreEnv({
    dataDir: config.dataDir,
    mapSizeBytes: config.store.mapSizeBytes,
    onCommitFailure: commitFailureLog(log),
  });
  const entities = new EntityStore(env);
  const { created } = await entities.ensureTenant();
  // admin commands beside the daemon write through it: one writing process (src/admin/channel.ts)
  // the reads only the daemon can answer (`outpost status` / `sync` beside it) are bound once its services exist
  let daemonRead: ((op: AdminOp) => AdminResult | undefined) | undefined;
  let afterAdminOp: ((op: AdminOp, result: AdminResult) => void) | undefined;
  // the daemon's own attribute store once it exists: its bus events reach every subscriber, as REST's writes do
  let adminAttributes: (() => AttributeWriter) | undefined;
  const stopAdmin = serveAdminRequests(lock, async (op) => {
    const read = daemonRead?.(op);
    if (read !== undefined) return read;
    const result = await runAdminOp(entities, env, op, adminAttributes);
    afterAdminOp?.(op, result);
    return result;
  });
  if (created) {
    log.info(
      `created "Default tenant" in ${config.dataDir}; create the first user with: ` +
        `${outpostCommand()} user add --data-dir ${config.dataDir} --email admin@example.com --password <secret> --authority TENANT_ADMIN`,
    );
  }
  const dict = new Dictionary(env);
  // upstream sync's bookkeeping goes into the store before its log is replayed, which records it too
  // its modules load only when it is configured (src/daemon/sync-modules.ts)
  const upstream = config.sync.url === '' ? undefined : await import('./daemon/sync-modules.js');
  const relay = upstream === undefined ? undefined : new upstream.SyncRelay();
  const recorder = upstream === undefined || relay === undefined ? undefined : new upstream.OutboxRecorder(env, relay);
  // what the sync reads and writes of the outbox (the recorder writes each batch's entries itself)
  const outbox = upstream === undefined ? undefined : new upstream.LmdbOutbox(env);
  const openedAt = performance.now();
  const { timeseries, writeBudget } = openTimeseries(config, env, dict, recorder, log);
  if (uncleanStop) {
    const { records, points } = timeseries.replayed;
    log.warn(
      `the previous stop was not clean (killed, crashed or a power cut): replayed ${records} log records (${points} points) in ${Math.round(performance.now() - openedAt)} ms`,
    );
  }
  // Compaction, rollups, retention and the disk budget, in small background steps (docs/design/downsampling.md).
  const maxDiskBytes = diskBudget(config);
  log.info(
    maxDiskBytes > 0
      ? `disk budget ${(maxDiskBytes / 2 ** 20).toFixed(0)} MiB: past 90% the oldest raw chunks go (rollups stay)`
      : 'no disk budget',
  );
  const downsample = new DownsampleEngine(
    timeseries,
    {
      rawRetentionMs: config.downsample.rawRetentionMs,
      maxDiskBytes,
      stepBudgetMs: config.downsample.stepBudgetMs,
      sweepIntervalMs: config.downsample.sweepIntervalMs,
      dataDir: config.dataDir,
    },
    Date.now,
    (m) => log.error(m),
  );
  const bus = new EventBus((m) => log.error(m));
  const metrics = new Metrics();
  metrics.listen(bus);
  const failures = new FailureLog((m) => log.warn(m), metrics.failures);
  // Upstream sync (docs/sync.md): told of the writes from the first one on, sends once listening.
  const attributes = new LmdbAttributeStore(
    env,
    dict,
    bus,
    Date.now,
    outbox === undefined ? undefined : (id) => outbox.mark(id),
  );
  adminAttributes = () => attributes;
  // the one owner of device connectivity (docs/api.md "Device state"); readers see its in-memory times
  const state = new DeviceStateService(entities, attributes, bus, {
    inactivityTimeoutMs: config.state.inactivityTimeoutMs,
    checkIntervalMs: config.state.checkIntervalMs,
    now: Date.now,
    log: (m) => log.error(m),
  });
  const depth = new LmdbDepthStore(env, dict, relay);
  const rpc = new RpcBroker(bus, {
    maxPendingPerDevice: config.rpc.maxPendingPerDevice,
    maxOpenPolls: config.longPoll.maxOpen,
    maxPollsPerDevice: config.longPoll.maxPerDevice,
    maxPollsPerAddress: config.longPoll.maxPerAddress,
    clientSideTimeoutMs: config.rpc.clientSideTimeoutMs,
    log: (m) => log.error(m),
  });
  // before listening: what MQTT.js loads on its first connect would otherwise stall the running event loop
  if (upstream?.isMqttUrl(config.sync.url)) await upstream.loadMqtt();
  const sync =
    upstream === undefined || outbox === undefined || recorder === undefined || relay === undefined
      ? undefined
      : new upstream.SyncService({
          dict,
          entities,
          timeseries,
          attributes,
          outbox,
          downlinkStore: new upstream.LmdbDownlinkStore(env),
          recorder,
          relay,
          rpc,
          bus,
          config: config.sync,
          log,
          threadSetup: { dataDir: config.dataDir, mapSizeBytes: config.store.mapSizeBytes },
        });
  const alarms = new AlarmStore(env, (id) => entities.get(id), { maxPerOriginator: config.alarms.maxPerDevice });
  const readAttributes = new StateAttributes(attributes, state);
  // profile alarm rules on every committed write and activity change (docs/api.md "Alarm rules")
  const alarmRules = new AlarmRuleService(
    entities,
    readAttributes,
    timeseries,
    alarms,
    new AlarmRuleStateStore(env, (m) => log.error(m), config.alarms.progressFlushMs),
    bus,
    { maxPending: config.alarms.maxPendingRuleStates, now: Date.now, log: (m) => log.warn(m) },
  );
  const base: Omit<Services, 'devices'> = {
    config,
    log,
    env,
    dict,
    entities,
    relations: new RelationStore(env, entities),
    alarms,
    timeseries,
    bus,
    downsample,
    metrics,
    writeBudget,
    ingest: new TelemetryIngest(timeseries, bus),
    admission: new IngestAdmission(config.ingest.maxBytesInFlight),
    depth,
    auth: new AuthService(config, env, entities),
    attributes: readAttributes,
    state,
    alarmRules,
    ...(sync === undefined ? {} : { sync }),
    rpc,
    failures,
    provisionGuard: new ProvisionGuard(config.provision),
    now: Date.now,
  };
  const services: Services = { ...base, devices: new DeviceActions(base) };

  const mainApp = tls ? uws.SSLApp({ cert_file_name: config.tls.cert, key_file_name: config.tls.key }) : uws.App();
  const besideApp = besideOn ? uws.App() : undefined;
  const apps = [mainApp, besideApp].filter((a): a is uws.TemplatedApp => a !== undefined);
  const router = new HttpRouter(apps, {
    maxBodyBytes: config.http.maxBodyBytes,
    log: (m) => log.error(m),
    observe: (method, pattern, ms, failed) => metrics.observe(method, pattern, ms, failed),
  });
  registerDeviceApi(router, services);
  registerAuthApi(router, services);
  registerEntityApi(router, services);
  registerTelemetryApi(router, services);
  registerRpcApi(router, services);
  registerDownloadApi(router, services);
  registerStatusApi(router, services, metrics);
  daemonRead = (op) =>
    op.op === 'status'
      ? (daemonStatus(services, metrics) as unknown as AdminResult)
      : op.op === 'sync.status'
        ? ((services.sync?.status() ?? SYNC_OFF) as unknown as AdminResult)
        : undefined;
  afterAdminOp = (op, result) => adminOpDone(services, op, result);
  registerSyncApi(router, services);
  registerWsApi(apps, services);
  registerMetricsHead(apps, services, metrics, (m) => log.error(m));
  router.fallback();

  const listenSockets: uws.us_listen_socket[] = [];
  const closeHttp = (): void => {
    for (const ls of listenSockets) uws.us_listen_socket_close(ls);
    for (const a of apps) a.close();
  };
  const listenOn = async (app: uws.TemplatedApp | undefined, p: number): Promise<number> => {
    if (app === undefined) return 0;
    const ls = await listenExclusive(app, config.host, Math.max(0, p));
    listenSockets.push(ls);
    return uws.us_socket_local_port(ls as unknown as uws.us_socket);
  };
  let port: number;
  let plainPort: number;
  try {
    port = await listenOn(mainApp, config.port);
    plainPort = await listenOn(besideApp, config.http.plainPort);
  } catch (err) {
    closeHttp();
    throw err;
  }
  metrics.http.port = port;
  metrics.http.tls = tls;
  metrics.http.plainPort = plainPort;
  let mqtt: MqttListener;
  let coap: CoapListener;
  try {
    mqtt = await startMqtt(services, metrics.mqtt);
  } catch (err) {
    closeHttp();
    throw err;
  }
  try {
    coap = await startCoap(services, metrics.coap);
  } catch (err) {
    await mqtt.close();
    closeHttp();
    throw err;
  }
  // the serve port comes first (HTTPS with a certificate): scripts read the first URL of this line
  const urls = [
    `${tls ? 'https' : 'http'}://${config.host}:${port}`,
    ...(plainPort > 0 ? [`http://${config.host}:${plainPort}`] : []),
    ...(mqtt.port > 0 ? [`mqtt://${mqttHost}:${mqtt.port}`] : []),
    ...(mqtt.tlsPort > 0 ? [`mqtts://${mqttHost}:${mqtt.tlsPort}`] : []),
    ...(coap.port > 0 ? [`coap://${coapHost}:${coap.port}`] : []),
  ];
  log.info(`outpost listening on ${urls.join(', ')} (data dir ${config.dataDir})`);
  downsample.start();
  // before the state service's first check: its inactivity events reach the rules
  alarmRules.start();
  state.start();
  sync?.start();

  let closing: Promise<void> | undefined;
  return {
    port,
    plainPort,
    services,
    close() {
      closing ??= (async () => {
        stopAdmin();
        stopAdmin();
        for (const ls of listenSockets) uws.us_listen_socket_close(ls);
        await mqtt.close();
        await coap.close();
        // after the transports: their sessions' ends are recorded, then what memory holds is written
        await state.stop();
        await alarmRules.stop();
        metrics.loopDelay.close();
        failures.close();
        services.rpc.close();
        for (const a of apps) a.close();
        await downsample.stop();
        await sync?.stop();
        // a batch held back by store.commitDelayMs is written now, and the log's points go into LMDB
        timeseries.flushPending();
        await timeseries.closeLog();
        await env.flushed();
        await env.close();
        markStopped(config.dataDir);
        await lock.release();
      })();
      return closing;
    },
  };
}

/**
 * The store holds password hashes and device tokens: new files are created private (serve's umask, the
 * installer's 0700 directory), but a data dir made by hand or by an older version may let others in.
 */
function warnIfShared(dataDir: string, log: Logger): void {
  const mode = statSync(dataDir).mode & 0o777;
  if ((mode & 0o077) !== 0) {
    log.warn(
      `data dir ${dataDir} is readable by other users (mode ${mode.toString(8)}); it holds password hashes and device tokens: chmod 700 ${dataDir}`,
    );
  }
}

/** the least time between two log lines about failed commits: a full disk fails every write, and logs share it */
const COMMIT_FAILURE_LOG_MS = 60_000;

/** Logs failed commits, the first at once and then at most one line a minute with how many failed meanwhile. */
function commitFailureLog(log: Logger): (err: OutpostError) => void {
  let lastAt = -Infinity;
  let missed = 0;
  return (err) => {
    const now = Date.now();
    if (now - lastAt < COMMIT_FAILURE_LOG_MS) {
      missed++;
      return;
    }
    log.error(
      `store write failed (${err.code}): ${describeError(err)}${missed > 0 ? `; ${missed} more since the last report` : ''}`,
    );
    lastAt = now;
    missed = 0;
  };
}

/**
 * The store's disk budget in bytes (0 = none). `downsample.maxDiskBytes: 0` means automatic: 80% of what the
 * filesystem can give the store now (its current size + the space free to this user), so a gateway whose SD card
 * is shared with logs and the OS never fills it; the budget is fixed at start, not re-read. Either way at most
 * the map size. Should the disk still fill (other files grow), writes answer 507 STORE_FULL and nothing is kept.
 */
export function diskBudget(config: Readonly<Config>): number {
  const b = config.downsample.maxDiskBytes;
  if (b === -1) return 0;
  if (b > 0) return Math.min(b, config.store.mapSizeBytes);
  let storeBytes = 0;
  try {
    storeBytes = statSync(join(config.dataDir, 'outpost.mdb')).size;
  } catch {
    /* first start */
  }
  const fsStat = statfsSync(config.dataDir);
  // A 32-bit build maps 1 GiB: there the map, not the SD card, is what fills first.
  return Math.floor(Math.min(0.8 * (storeBytes + fsStat.bavail * fsStat.bsize), config.store.mapSizeBytes));
}
