/**
 * Query benchmark: what the telemetry read API costs, and what auth adds to it.
 *
 * Scenarios (loopback only, bounded): latest of 10 keys at 64 connections; a raw page of 1000 points; a 1-day
 * AVG over 1-second data (86,400 points → 24 one-hour buckets). Each runs against the SAME handlers twice:
 * with the real AuthService (JWT from the cache + access check) and with an AuthService subclass that returns a
 * fixed principal and skips the access check (the baseline). There is no auth-off switch in the product: the
 * baseline exists only in this file.
 *
 * Entity data queries (docs/api.md): 1,000 devices of 5 types, each with 10 server attributes and 5 latest
 * keys; `POST /api/entitiesQuery/find` by device type with 3 latest values, a key filter and a page of 20,
 * beside the REST `/api/tenant/devices` page of 20, both with real auth; p99 and the server's RssAnon growth
 * over each scenario's runs (targets: p99 ≤ 20 ms, ≤ 5 MB).
 *
 * The servers run in a child process (this file with `--serve`), so autocannon's load generation does not
 * share the server's event loop. Rounds alternate auth/no-auth in ABBA order; the table reports medians over
 * rounds.
 *
 *   npm run bench:query [-- --duration 4 --rounds 3]
 */
import { type ChildProcess, fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as uws from 'uWebSockets.js';
import { createRequire } from 'node:module';
import { getTimeseriesValues, registerTimeseriesRoutes } from '../../src/api/telemetry/timeseries.js';
import { type AccessOp, AuthService, type Principal } from '../../src/auth/index.js';
import { hashPassword } from '../../src/auth/password.js';
import { EventBus } from '../../src/bus/index.js';
import { loadConfig } from '../../src/config/index.js';
import type { Services } from '../../src/context.js';
import { makeLogger } from '../../src/log.js';
import { OutpostError } from '../../src/errors.js';
import { type HttpContext, HttpRouter } from '../../src/uws/adapter.js';
import { TelemetryIngest } from '../../src/ingest/service.js';
import type { TsRecord } from '../../src/model/record.js';
import { kvDouble, kvLong } from '../../src/model/kv.js';
import { Dictionary } from '../../src/store/encoding/dict.js';
import { type EntityRecord, EntityStore } from '../../src/store/entities.js';
import { openStoreEnv } from '../../src/store/env.js';
import { LmdbTimeseriesStore } from '../../src/store/series/store.js';
import { registerNamedRoutes } from '../../src/api/entities/named.js';
import { registerEntityQueryRoutes } from '../../src/api/entities/query.js';
import { LmdbAttributeStore } from '../../src/store/attributes.js';
import { RelationStore } from '../../src/store/relations.js';
import { readFileSync } from 'node:fs';
import { argValue, median } from './lib.js';

const DAY_START = Date.UTC(2026, 0, 1);
const HOUR = 3_600_000;

interface Ready {
  authPort: number;
  openPort: number;
  token: string;
  deviceId: string;
  /** µs per call, measured in-process over MICRO_CALLS calls (median of 5 runs) */
  authenticateUs: number;
  checkAccessUs: number;
  /** per scenario: µs per call of the values handler itself (no HTTP), without and with auth */
  handlerUs: Array<{ off: number; on: number }>;
  /** the entity API (queries and device lists) over 1,000 devices, with real auth */
  entityPort: number;
}

const FLEET_DEVICES = 1000;
const FLEET_TYPES = 5;

/** The entity-query row's request: TB's device list as its widgets send it. */
const ENTITY_QUERY = {
  entityFilter: { type: 'deviceType', deviceTypes: ['type-2'], deviceNameFilter: '' },
  entityFields: [
    { type: 'ENTITY_FIELD', key: 'name' },
    { type: 'ENTITY_FIELD', key: 'label' },
  ],
  latestValues: [
    { type: 'TIME_SERIES', key: 'temperature' },
    { type: 'TIME_SERIES', key: 'humidity' },
    { type: 'SERVER_ATTRIBUTE', key: 'a0' },
  ],
  keyFilters: [
    {
      key: { type: 'TIME_SERIES', key: 'temperature' },
      valueType: 'NUMERIC',
      predicate: { type: 'NUMERIC', operation: 'GREATER', value: { defaultValue: 20, dynamicValue: null } },
    },
  ],
  pageLink: { page: 0, pageSize: 20, sortOrder: { key: { type: 'ENTITY_FIELD', key: 'name' }, direction: 'ASC' } },
};

/** 1,000 devices of 5 types, 10 server attributes and 5 latest keys each; written 100 at a time */
async function fleet(entities: EntityStore, attributes: LmdbAttributeStore, timeseries: LmdbTimeseriesStore) {
  for (let from = 0; from < FLEET_DEVICES; from += 100) {
    await Promise.all(
      Array.from({ length: 100 }, async (_, j) => {
        const i = from + j;
        const d = await entities.createDevice({
          name: `fleet-${String(i).padStart(4, '0')}`,
          type: `type-${i % FLEET_TYPES}`,
        });
        await attributes.save(
          'DEVICE',
          d.id,
          'SERVER_SCOPE',
          Array.from({ length: 10 }, (_, k) => [`a${k}`, kvLong(i * 10 + k)] as const),
          DAY_START,
        );
        await timeseries.write(d.id, [
          {
            ts: DAY_START,
            values: [
              ['temperature', kvDouble(10 + (i % 20) + 0.5)],
              ['humidity', kvDouble(40 + (i % 30))],
              ['pressure', kvDouble(1000 + i)],
              ['battery', kvLong(i % 100)],
              ['rssi', kvLong(-40 - (i % 50))],
            ],
          },
        ]);
      }),
    );
  }
}

interface Scenario {
  name: string;
  path: string;
  connections: number /** handler calls per in-process run */;
  calls: number;
}

function scenariosFor(deviceId: string): Scenario[] {
  const p = `/api/plugins/telemetry/DEVICE/${deviceId}/values/timeseries`;
  return [
    {
      name: 'latest, 10 keys',
      path: `${p}?keys=${Array.from({ length: 10 }, (_, i) => `k${i}`).join(',')}`,
      connections: 64,
      calls: 5000,
    },
    {
      name: 'raw page, 1000 points',
      path: `${p}?keys=raw&startTs=${DAY_START}&endTs=${DAY_START + 2_000_000}&limit=1000`,
      connections: 16,
      calls: 200,
    },
    {
      name: '1-day AVG, 86,400 pts → 24 buckets',
      path: `${p}?keys=sec&startTs=${DAY_START}&endTs=${DAY_START + 24 * HOUR}&interval=${HOUR}&agg=AVG`,
      connections: 4,
      calls: 10,
    },
  ];
}

/** A request as the adapter would hand it to the handler (GET, no body). */
function contextFor(path: string, deviceId: string, token: string): HttpContext {
  const query = new URLSearchParams(path.slice(path.indexOf('?') + 1));
  return {
    method: 'get',
    url: path,
    query,
    params: ['DEVICE', deviceId],
    aborted: false,
    header: (name) => (name === 'x-authorization' ? `Bearer ${token}` : undefined),
    body: () => Promise.resolve(Buffer.alloc(0)),
    onAbort: () => undefined,
    remoteAddress: () => '127.0.0.1',
  };
}

const MICRO_CALLS = 20_000;

/** Median µs per call of `fn` over 5 runs of MICRO_CALLS calls. */
function microUs(fn: () => void): number {
  const runs: number[] = [];
  for (let r = 0; r < 5; r++) {
    const t0 = performance.now();
    for (let i = 0; i < MICRO_CALLS; i++) fn();
    runs.push(((performance.now() - t0) * 1000) / MICRO_CALLS);
  }
  return median(runs);
}

/** The baseline: same handlers, no token verification and no access check. */
class NoAuth extends AuthService {
  constructor(
    base: ConstructorParameters<typeof AuthService>,
    private readonly fixed: Principal,
  ) {
    super(...base);
  }
  override authenticateHeader(): Principal {
    return this.fixed;
  }
  override checkAccess(_p: Principal, _type: string, id: string, _op?: AccessOp): EntityRecord {
    // The entity is known to exist; skip the lookup a real check makes.
    return { id } as unknown as EntityRecord;
  }
}

async function serve(dataDir: string): Promise<void> {
  const config = loadConfig({ dataDir }, {}, { logLevel: 'silent' });
  const log = makeLogger('silent');
  const env = openStoreEnv({ dataDir, mapSizeBytes: config.store.mapSizeBytes });
  const entities = new EntityStore(env);
  await entities.ensureTenant();
  const dict = new Dictionary(env);
  const timeseries = new LmdbTimeseriesStore(env, dict);
  const bus = new EventBus();
  const user = await entities.createUser({
    email: 'bench@example.com',
    passwordHash: await hashPassword('bench-pw'),
    authority: 'TENANT_ADMIN',
  });
  const device = await entities.createDevice({ name: 'bench-device' });

  // 10 latest keys; 2000 raw points; 86,400 one-second points over one day.
  await timeseries.write(device.id, [
    { ts: DAY_START, values: Array.from({ length: 10 }, (_, i) => [`k${i}`, kvDouble(i + 0.5)] as const) },
  ]);
  const raw: TsRecord[] = Array.from({ length: 2000 }, (_, i) => ({
    ts: DAY_START + i * 1000,
    values: [['raw', kvLong(i)]],
  }));
  await timeseries.write(device.id, raw);
  for (let from = 0; from < 86_400; from += 3600) {
    const batch: TsRecord[] = [];
    for (let s = from; s < from + 3600; s++)
      batch.push({ ts: DAY_START + s * 1000, values: [['sec', kvDouble(20 + Math.sin(s / 600))]] });
    await timeseries.write(device.id, batch);
  }

  const realAuth = new AuthService(config, env, entities);
  const { token } = realAuth.issue(user);
  const principal = realAuth.authenticateToken(token);
  const base = {
    config,
    log,
    env,
    dict,
    entities,
    timeseries,
    bus,
    ingest: new TelemetryIngest(timeseries, bus),
    now: Date.now,
  };
  // The timeseries routes use only the fields above plus `auth`; the rest of Services is not wired here.
  const withAuth = { ...base, auth: realAuth } as unknown as Services;
  const withoutAuth = { ...base, auth: new NoAuth([config, env, entities], principal) } as unknown as Services;

  const listen = (s: Services): Promise<number> => {
    const app = uws.App();
    const router = new HttpRouter(app, { maxBodyBytes: config.http.maxBodyBytes, log: (m) => log.error(m) });
    registerTimeseriesRoutes(router, s);
    router.fallback();
    return new Promise((resolve, reject) => {
      app.listen('127.0.0.1', 0, (ls) => {
        if (ls) resolve(uws.us_socket_local_port(ls as unknown as uws.us_socket));
        else reject(new OutpostError('CONFIG_INVALID', 'cannot listen'));
      });
    });
  };
  const header = `Bearer ${token}`;
  const handlerUs = scenariosFor(device.id).map((sc) => {
    const ctx = contextFor(sc.path, device.id, token);
    const onHandler = getTimeseriesValues(withAuth, false);
    const offHandler = getTimeseriesValues(withoutAuth, false);
    const off: number[] = [];
    const on: number[] = [];
    // warm-up: JIT both variants before timing either
    for (let i = 0; i < sc.calls; i++) {
      offHandler(ctx);
      onHandler(ctx);
    }
    for (let r = 0; r < 10; r++) {
      // ABAB… so drift affects both variants alike
      for (const [h, out] of r % 2 === 0
        ? ([
            [offHandler, off],
            [onHandler, on],
          ] as const)
        : ([
            [onHandler, on],
            [offHandler, off],
          ] as const)) {
        const t0 = performance.now();
        for (let i = 0; i < sc.calls; i++) h(ctx);
        out.push(((performance.now() - t0) * 1000) / sc.calls);
      }
    }
    return { off: median(off), on: median(on) };
  });
  const attributes = new LmdbAttributeStore(env, dict, bus);
  await fleet(entities, attributes, timeseries);
  const entityServices = {
    ...base,
    auth: realAuth,
    attributes,
    relations: new RelationStore(env, entities),
  } as unknown as Services;
  const entityApp = uws.App();
  const entityRouter = new HttpRouter(entityApp, { maxBodyBytes: config.http.maxBodyBytes, log: (m) => log.error(m) });
  registerNamedRoutes(entityRouter, entityServices, 'DEVICE');
  registerEntityQueryRoutes(entityRouter, entityServices);
  entityRouter.fallback();
  const entityPort = await new Promise<number>((resolve, reject) => {
    entityApp.listen('127.0.0.1', 0, (ls) => {
      if (ls) resolve(uws.us_socket_local_port(ls as unknown as uws.us_socket));
      else reject(new OutpostError('CONFIG_INVALID', 'cannot listen'));
    });
  });
  const ready: Ready = {
    entityPort,
    authPort: await listen(withAuth),
    openPort: await listen(withoutAuth),
    token,
    deviceId: device.id,
    authenticateUs: microUs(() => realAuth.authenticateHeader(header, undefined)),
    checkAccessUs: microUs(() => realAuth.checkAccess(principal, 'DEVICE', device.id, 'read')),
    handlerUs,
  };
  process.send?.(ready);
  process.on('disconnect', () => process.exit(0));
}

interface Sample {
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
}

// autocannon ships no types; this is the part of its result we read.
interface CannonResult {
  requests: { average: number };
  latency: { p50: number; p99: number };
  non2xx: number;
  errors: number;
}
type Cannon = (opts: Record<string, unknown>) => Promise<CannonResult>;
// Loaded through require so no ambient module declaration is needed (autocannon has no types).
const autocannon = createRequire(import.meta.url)('autocannon') as Cannon;

async function run(
  url: string,
  headers: Record<string, string>,
  connections: number,
  duration: number,
  post?: string,
): Promise<Sample> {
  const r = await autocannon({
    url,
    connections,
    duration,
    headers: post === undefined ? headers : { ...headers, 'content-type': 'application/json' },
    pipelining: 1,
    ...(post === undefined ? {} : { method: 'POST', body: post }),
  });
  return { rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx + r.errors };
}

async function main(): Promise<void> {
  const duration = argValue('--duration', 4);
  const rounds = argValue('--rounds', 3);
  const dataDir = mkdtempSync(join(tmpdir(), 'outpost-bench-query-'));
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), ['--serve', dataDir], { stdio: 'inherit' });
  try {
    const ready = await new Promise<Ready>((resolve, reject) => {
      child.once('message', (m) => resolve(m as Ready));
      child.once('exit', (code) => reject(new Error(`bench server exited with ${code}`)));
    });
    const scenarios = scenariosFor(ready.deviceId);
    const headers = { 'X-Authorization': `Bearer ${ready.token}` };
    const rows: string[] = [];
    for (const [idx, sc] of scenarios.entries()) {
      const on: Sample[] = [];
      const off: Sample[] = [];
      // warm-up (JIT, page cache) on both, not recorded
      await run(`http://127.0.0.1:${ready.authPort}${sc.path}`, headers, sc.connections, 1);
      await run(`http://127.0.0.1:${ready.openPort}${sc.path}`, headers, sc.connections, 1);
      // ABBA order: alternate which variant goes first, so drift on the shared machine cancels out.
      for (let i = 0; i < rounds; i++) {
        const offRun = (): Promise<number> =>
          run(`http://127.0.0.1:${ready.openPort}${sc.path}`, headers, sc.connections, duration).then((x) =>
            off.push(x),
          );
        const onRun = (): Promise<number> =>
          run(`http://127.0.0.1:${ready.authPort}${sc.path}`, headers, sc.connections, duration).then((x) =>
            on.push(x),
          );
        if (i % 2 === 0) {
          await offRun();
          await onRun();
        } else {
          await onRun();
          await offRun();
        }
      }
      const errors = [...on, ...off].reduce((n, s) => n + s.non2xx, 0);
      if (errors > 0) throw new Error(`${sc.name}: ${errors} non-2xx answers or errors`);
      const [rOn, rOff] = [median(on.map((s) => s.rps)), median(off.map((s) => s.rps))];
      const f = (n: number): string => n.toFixed(n >= 100 ? 0 : 1);
      const hu = ready.handlerUs[idx] ?? { off: NaN, on: NaN };
      rows.push(
        `| ${sc.name} | ${sc.connections} | ${f(rOff)} | ${f(rOn)} | ${((1 - rOn / rOff) * 100).toFixed(1)}% | ` +
          `${median(off.map((s) => s.p50))} / ${median(off.map((s) => s.p99))} | ${median(on.map((s) => s.p50))} / ${median(on.map((s) => s.p99))} | ` +
          `${f(hu.off)} / ${f(hu.on)} | ${((hu.on / hu.off - 1) * 100).toFixed(1)}% |`,
      );
    }
    console.log(
      `query bench: ${rounds} alternating rounds × ${duration} s per variant, medians; latency in ms (autocannon)`,
    );
    console.log(
      '| scenario | conns | req/s no auth | req/s auth | auth cost (req/s) | p50/p99 ms no auth | p50/p99 ms auth | handler µs no auth / auth | auth cost (handler) |',
    );
    console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|');
    for (const r of rows) console.log(r);
    const entityRows: string[] = [];
    const entityScenarios: Array<{ name: string; path: string; body?: string }> = [
      {
        name: `entitiesQuery/find: ${FLEET_DEVICES} devices, by type, 3 latest, a key filter, page of 20`,
        path: '/api/entitiesQuery/find',
        body: JSON.stringify(ENTITY_QUERY),
      },
      { name: 'REST /api/tenant/devices, page of 20', path: '/api/tenant/devices?pageSize=20&page=0' },
    ];
    for (const sc of entityScenarios) {
      const url = `http://127.0.0.1:${ready.entityPort}${sc.path}`;
      const rssBefore = rssAnonKb(child.pid);
      await run(url, headers, 4, 1, sc.body);
      const samples: Sample[] = [];
      for (let i = 0; i < rounds; i++) samples.push(await run(url, headers, 4, duration, sc.body));
      const growthMb = (rssAnonKb(child.pid) - rssBefore) / 1024;
      const errors = samples.reduce((n, x) => n + x.non2xx, 0);
      if (errors > 0) throw new Error(`${sc.name}: ${errors} non-2xx answers or errors`);
      entityRows.push(
        `| ${sc.name} | 4 | ${median(samples.map((x) => x.rps)).toFixed(0)} | ${median(samples.map((x) => x.p50))} / ${median(samples.map((x) => x.p99))} | ${growthMb.toFixed(1)} |`,
      );
    }
    console.log('');
    console.log('| entity API (auth on) | conns | req/s | p50/p99 ms | server RssAnon growth MB |');
    console.log('|---|---:|---:|---:|---:|');
    for (const r of entityRows) console.log(r);
    console.log(
      `in-process, per request: authenticateHeader (cached token) ${ready.authenticateUs.toFixed(2)} µs, ` +
        `checkAccess ${ready.checkAccessUs.toFixed(2)} µs`,
    );
  } finally {
    child.kill('SIGTERM');
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** the child's anonymous resident memory (kB), from /proc; 0 where there is none */
function rssAnonKb(pid: number | undefined): number {
  try {
    const m = /RssAnon:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m === null ? 0 : Number(m[1]);
  } catch {
    return 0;
  }
}

if (process.argv[2] === '--serve') {
  await serve(process.argv[3] as string);
} else {
  await main();
}
