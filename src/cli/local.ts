/**
 * Local mode (docs/cli.md): the data dir opened read-only beside the running daemon. LMDB readers take no
 * lock the writer waits for (a reader only pins the pages of its snapshot), and nothing here writes. The
 * daemon sees this process in LMDB's reader table and puts its write-ahead log into LMDB while it reads
 * (store/log-readers.ts), so recent points are here too. Answers
 * come from the daemon's own query and render code, so they are REST's bytes.
 */
import { statSync, watch } from 'node:fs';
import { join } from 'node:path';
import { type Config, loadConfig } from '../config/index.js';
import { renderHistoryChunks, renderLatest, renderValue } from '../query/render.js';
import { queryHistory, queryLatest } from '../query/history.js';
import type { AttributeScope } from '../store/attributes.js';
import { ACTIVE_KEY, LAST_ACTIVITY_KEY } from '../device/state.js';
import { Dictionary } from '../store/encoding/dict.js';
import { EntityStore } from '../store/entities.js';
import { type StoreEnv, openStoreEnv } from '../store/env.js';
import { awaitLogApplied } from '../store/log-readers.js';
import { LmdbTimeseriesStore } from '../store/series/store.js';
import type { StatusJson } from '../status/index.js';
import { NULL_UUID } from '../types.js';
import {
  type AttributeScopeArg,
  type Backend,
  byName,
  type DeviceRef,
  type DeviceRow,
  type HistoryQuery,
  type ModeOptions,
  SCOPE_PARAM,
  type TailPoint,
} from './backend-types.js';
import { CliError, noStore } from './errors.js';

/** the fastest a local `tail` reads the store: a few reads a second at most, and none while nothing is written */
const TAIL_MIN_GAP_MS = 250;

export class LocalBackend implements Backend {
  readonly mode = 'local';
  get where(): string {
    return `data dir ${this.config.dataDir}`;
  }
  private readonly dict: Dictionary;
  private readonly entities: EntityStore;
  private readonly timeseries: LmdbTimeseriesStore;

  private constructor(
    private readonly config: Readonly<Config>,
    private readonly env: StoreEnv,
  ) {
    // what `latest` needs is imported up front; the rest per command (`outpost latest` is timed: bench:cli)
    const dict = new Dictionary(env);
    this.dict = dict;
    this.entities = new EntityStore(env);
    this.timeseries = new LmdbTimeseriesStore(env, dict, {
      windowMs: config.store.chunkWindowMs,
      headWindowMs: config.store.headWindowMs,
      tiersMs: config.downsample.tiersMs,
      tierRetentionMs: config.downsample.tierRetentionMs,
      readCacheBytes: config.query.readCacheBytes,
      stepBudgetMs: config.downsample.stepBudgetMs,
    });
  }

  static async open(o: ModeOptions): Promise<LocalBackend> {
    const config = loadConfig({ dataDir: o.dataDir, config: o.config });
    let statOk = true;
    try {
      statSync(join(config.dataDir, 'outpost.mdb'));
    } catch {
      statOk = false;
    }
    if (!statOk) throw new CliError(noStore(config.dataDir));
    const env = openStoreEnv({ dataDir: config.dataDir, mapSizeBytes: config.store.mapSizeBytes, readOnly: true });
    // a running daemon keeps recent points in its write-ahead log: it puts them into LMDB for this process
    if (config.store.wal) await awaitLogApplied(env);
    return new LocalBackend(config, env);
  }

  deviceRefs(): Promise<DeviceRef[]> {
    return Promise.resolve(
      this.entities
        .list('DEVICE')
        .map((d) => ({ id: d.id as string, name: d.name }))
        .sort(byName),
    );
  }

  async devices(): Promise<DeviceRow[]> {
    const [{ LmdbAttributeStore }, { EventBus }, { readProfile }] = await Promise.all([
      import('../store/attributes.js'),
      import('../bus/index.js'),
      import('../store/profile-records.js'),
    ]);
    const attrs = new LmdbAttributeStore(this.env, this.dict, new EventBus());
    const rows = this.entities.list('DEVICE').map((d): DeviceRow => {
      const state = attrs.get(d.id, 'SERVER_SCOPE', [ACTIVE_KEY, LAST_ACTIVITY_KEY]);
      const activity = state.find((a) => a.key === LAST_ACTIVITY_KEY)?.value;
      const last = activity?.type === 'LONG' ? Number(activity.v) : null;
      const active = state.find((a) => a.key === ACTIVE_KEY);
      const customer = d.customerId === NULL_UUID ? null : (this.entities.customer(d.customerId)?.title ?? null);
      const profile = readProfile(this.env, d.deviceProfileId)?.name ?? d.type;
      return {
        id: d.id,
        name: d.name,
        type: d.type,
        profile,
        customer,
        lastActivityTs: last,
        active: active?.value.type === 'BOOLEAN' ? active.value.v : null,
        activeSinceTs: active?.lastUpdateTs ?? null,
      };
    });
    return rows.sort(byName);
  }

  latest(deviceId: string, keys: readonly string[] | undefined): Promise<string> {
    return Promise.resolve(renderLatest(queryLatest(this.timeseries, deviceId, keys, Date.now()), false));
  }

  history(deviceId: string, keys: readonly string[], q: HistoryQuery): Promise<string> {
    const series = queryHistory(
      this.timeseries,
      deviceId,
      keys,
      { ...q, orderBy: q.order ?? 'ASC' },
      this.config.query,
    );
    return Promise.resolve([...renderHistoryChunks(series, false)].join(''));
  }

  async exportCsv(
    deviceId: string,
    type: 'ts' | 'ds',
    start: number,
    end: number,
    keys: readonly string[] | undefined,
    write: (chunk: Buffer) => Promise<void>,
  ): Promise<void> {
    const [{ LmdbDepthStore }, { seriesTable }, { wideTableChunks }] = await Promise.all([
      import('../store/depth.js'),
      import('../api/download/series.js'),
      import('../api/download/stream.js'),
    ]);
    const depth = new LmdbDepthStore(this.env, this.dict);
    const table = seriesTable(
      { timeseries: this.timeseries, depth, config: this.config },
      { deviceId, type, start, end, keys },
    );
    // each chunk is a view of one reused buffer: written (and awaited) before the next is made
    for (const chunk of wideTableChunks(table)) await write(chunk);
  }

  async attributes(deviceId: string, scope: AttributeScopeArg | undefined): Promise<string> {
    const [{ LmdbAttributeStore }, { EventBus }, { renderAttributeValues }] = await Promise.all([
      import('../store/attributes.js'),
      import('../bus/index.js'),
      import('../query/render.js'),
    ]);
    const s = scope === undefined ? undefined : (SCOPE_PARAM[scope] as AttributeScope);
    return renderAttributeValues(new LmdbAttributeStore(this.env, this.dict, new EventBus()).get(deviceId, s));
  }

  async credentials(deviceId: string): Promise<string> {
    const { deviceCredentialsJson } = await import('../api/entities/render.js');
    const d = this.entities.device(deviceId);
    if (d === undefined) throw new CliError(`no device ${deviceId}`);
    return JSON.stringify(deviceCredentialsJson(d));
  }

  rpc(): Promise<string> {
    throw new CliError('rpc reaches the device through the running daemon: use --url URL (after outpost login)');
  }

  /**
   * Watches the store file (inotify: LMDB writes its pages with write(2)) and reads the device's latest values
   * at most every TAIL_MIN_GAP_MS after a change, then the points newer than the last seen per key. Points that
   * arrive with a ts older than the newest already shown are not printed.
   */
  tail(
    deviceId: string,
    keys: readonly string[] | undefined,
    onPoint: (p: TailPoint) => void,
    signal: AbortSignal,
    onReady?: () => void,
  ): Promise<void> {
    const seen = new Map<string, number>();
    for (const [k, p] of this.timeseries.latest(deviceId, keys)) seen.set(k, p.ts);
    let timer: NodeJS.Timeout | undefined;
    let lastRead = 0;
    const read = (): void => {
      timer = undefined;
      lastRead = Date.now();
      const out: TailPoint[] = [];
      for (const [key, p] of this.timeseries.latest(deviceId, keys)) {
        const from = seen.get(key);
        if (from !== undefined && p.ts <= from) continue;
        for (const q of this.timeseries.range(deviceId, key, {
          startTs: from === undefined ? p.ts : from + 1,
          endTs: p.ts + 1,
          order: 'ASC',
        })) {
          out.push({ ts: q.ts, key, value: JSON.parse(renderValue(q.value, false)) as string });
        }
        seen.set(key, p.ts);
      }
      out.sort((a, b) => a.ts - b.ts || (a.key < b.key ? -1 : 1));
      for (const p of out) onPoint(p);
    };
    return new Promise<void>((resolve) => {
      const watcher = watch(join(this.config.dataDir, 'outpost.mdb'), () => {
        if (timer !== undefined) return;
        timer = setTimeout(read, Math.max(0, lastRead + TAIL_MIN_GAP_MS - Date.now()));
      });
      onReady?.();
      signal.addEventListener(
        'abort',
        () => {
          watcher.close();
          clearTimeout(timer);
          resolve();
        },
        { once: true },
      );
    });
  }

  /** The running daemon's own figures over the admin channel (src/admin/channel.ts), else the data dir's. */
  async status(): Promise<StatusJson> {
    const { askDaemon } = await import('../admin/channel.js');
    const fromDaemon = await askDaemon(this.config.dataDir, { op: 'status' });
    if (fromDaemon !== undefined) return fromDaemon as unknown as StatusJson;
    const [{ diskBudget }, { liveBytes }, { SYNC_OFF }, { clockSynchronized, outpostVersion }, { AlarmStore }] =
      await Promise.all([
        import('../server.js'),
        import('../store/background/downsample.js'),
        import('../upstream/uplink/status.js'),
        import('../status/index.js'),
        import('../store/alarms.js'),
      ]);
    const stats = (db: { getStats(): unknown }): number => (db.getStats() as { entryCount: number }).entryCount;
    let fileBytes = 0;
    try {
      fileBytes = statSync(join(this.config.dataDir, 'outpost.mdb')).size;
    } catch {
      /* reported as 0 */
    }
    const headFragments = stats(this.env.head);
    return {
      version: outpostVersion(),
      daemon: false,
      startedTs: null,
      uptimeSec: null,
      now: Date.now(),
      clock: { synchronized: clockSynchronized() },
      ingest: null,
      store: {
        fileBytes,
        liveBytes: liveBytes(this.env),
        maxDiskBytes: diskBudget(this.config),
        headFragments,
        chunks: stats(this.env.chunks),
        rollupBlocks: stats(this.env.rollups),
      },
      compaction: { backlogFragments: headFragments, compactedWindows: null },
      sync: SYNC_OFF,
      longPoll: null,
      websockets: null,
      mqtt: null,
      process: null,
      eventLoop: null,
      alarms: { active: new AlarmStore(this.env, () => undefined).activeBySeverity() },
    };
  }

  /** the REST handlers' filter, paging and JSON over the data dir's alarms: the same bytes as remotely */
  async alarms(deviceId: string | undefined, query: string): Promise<string> {
    const [{ AlarmStore }, { alarmInfoJson }, aq] = await Promise.all([
      import('../store/alarms.js'),
      import('../api/entities/alarm-json.js'),
      import('../api/entities/alarm-query.js'),
    ]);
    const q = new URLSearchParams(query);
    const f = aq.v1Filter(q);
    const entity = (id: string) => this.entities.get(id);
    const store = new AlarmStore(this.env, entity);
    const all =
      deviceId !== undefined ? store.byOriginator(deviceId) : f.cleared === false ? store.active() : store.all();
    const page = aq.alarmPage(
      all.filter((a) => aq.matches(a, f)),
      aq.alarmPageQuery(q),
    );
    return JSON.stringify({ ...page, data: page.data.map((a) => alarmInfoJson(a, entity)) });
  }

  close(): Promise<void> {
    return this.env.close();
  }
}
