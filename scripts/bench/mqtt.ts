/**
 * MQTT benchmark (docs/mqtt.md), side by side in one run, medians over rounds:
 * 1. QoS 1 telemetry from N connections, each waiting for its PUBACK before the next publish: msgs/s and
 *    PUBACK p50/p99, against the same devices posting over HTTP keep-alive, and against Debian's `mosquitto`
 *    broker (`persistence true`, which saves on an interval, not per message: it acknowledges before anything
 *    is durable) as the anchor.
 * 2. Gateway API: one gateway publishing 1,000-point batches for 100 sub-devices (8 in flight): points/s.
 * 3. 10,000 idle MQTT connections: RssAnon per connection on top of the idle daemon, against a bare node:net
 *    server holding as many idle sockets, and HTTP ingest p99 before and while they are open.
 * The daemon of these rounds runs with `store.commitDelayMs: 0`, the same for both transports: each commit is
 * written at once, so the figures measure what each transport costs. With the default config the write budget
 * (docs/write-budget.md) spends its reserve under such flat-out load and then groups commits, up to 1 s apart,
 * on both transports alike: the figures would measure the budget. Two rounds with the default config run first
 * on a daemon of their own; the table's last row is the second, once the reserve is spent.
 * Before the rounds, one second of each phase warms the daemon up (not counted); before each phase, a REST
 * read puts what the log holds into LMDB, so a phase pays for its own applies; the batch phases go first,
 * then mosquitto's (a pause for the batches' background work), then the telemetry: a lead-in not counted,
 * then MQTT, HTTP, HTTP, MQTT (the mirror order in odd rounds), half the time each. The load generator is
 * lean (raw-mqtt.ts on raw sockets, raw HTTP/1.1) so its CPU cost stays small on the shared cores; the table
 * shows it per message. Loopback only; temp dirs removed at the end.
 *
 *   npm run bench:mqtt [-- --connections 100 --seconds 5 --rounds 3 --idle 10000]
 *     [--no-default] [--no-idle] [--only mqtt|http|gw|httpbatch] [--cpu-prof <dir>]
 *   npm run bench:mqtt -- --idle-only [--rounds 3 --idle 10000 --baseline <another build's dist/src/main.js>]
 */
import { type ChildProcess, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { type Socket, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import mqttPacket from 'mqtt-packet';
import { RawHttpConnection, clientAddress, encodeRequest, intArg, median, rssAnonBytes, stopDaemon } from './lib.js';
import { cpuUs, openIdle, percentile, spawnBare, spawnUntil } from './mqtt-procs.js';
import { RawMqtt } from './raw-mqtt.js';

const argv = process.argv.slice(2);
const CONNECTIONS = intArg(argv, 'connections', 100);
const SECONDS = intArg(argv, 'seconds', 5);
const ROUNDS = intArg(argv, 'rounds', 3);
const IDLE = intArg(argv, 'idle', 10_000);
const BASELINE = argv.includes('--baseline') ? argv[argv.indexOf('--baseline') + 1] : undefined;
const SUB_DEVICES = 100;
const BATCH_POINTS = 1_000;
const GATEWAY_WINDOW = 8;
const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
/** `--only mqtt|http|gw|httpbatch`: that load phase alone (with `--cpu-prof <dir>`, to profile it) */
const ONLY = argv.includes('--only') ? argv[argv.indexOf('--only') + 1] : undefined;
/** the daemon measured in the rounds started with `node --cpu-prof`, its profile written into this dir at exit */
const CPU_PROF = argv.includes('--cpu-prof') ? argv[argv.indexOf('--cpu-prof') + 1] : undefined;
const WITH_DEFAULT = !argv.includes('--no-default');
const WITH_IDLE = !argv.includes('--no-idle');
/**
 * The rounds' daemon commits each write at once (the write budget counts but does not pace): under this
 * flat-out load the default budget spends its reserve and then groups commits up to 1 s, on both transports
 * alike, and the figures would measure the budget instead of the transports.
 */
const BENCH_CONFIG = { mqtt: { maxConnections: IDLE + 1000 }, store: { commitDelayMs: 0 } };
/** the default write path (`store.commitDelayMs` -1: set by the write budget), for one row of the table */
const DEFAULT_CONFIG = { mqtt: { maxConnections: IDLE + 1000 } };

interface LoadFigures {
  msgsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  cpuUsPerMsg: number;
  /** the load generator's own CPU per message (µs): it shares the cores with the daemon */
  clientUsPerMsg: number;
}

/** the process whose CPU the load phases measure (the daemon, or mosquitto) */
let measuredPid = 0;

/** What one closed loop saw: each answer's latency (ms), its length (s), and CPU (µs) of the measured process and of this one. */
interface Sample {
  lat: number[];
  secs: number;
  cpu: number;
  client: number;
}

/** N workers, each sending one message and waiting for its answer before the next, for `seconds`. */
async function closedLoop(
  workers: number,
  seconds: number,
  send: (w: number, n: number) => Promise<void>,
): Promise<Sample> {
  const lat: number[] = [];
  const cpu0 = measuredPid === 0 ? 0 : cpuUs(measuredPid);
  const client0 = process.cpuUsage();
  const end = performance.now() + seconds * 1000;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      for (let n = 0; performance.now() < end; n++) {
        const s = performance.now();
        await send(w, n);
        lat.push(performance.now() - s);
      }
    }),
  );
  const secs = (performance.now() - t0) / 1000;
  const cpu = measuredPid === 0 ? NaN : cpuUs(measuredPid) - cpu0;
  const client = process.cpuUsage(client0);
  return { lat, secs, cpu, client: client.user + client.system };
}

/** The figures of one or more closed loops taken together. */
function figures(samples: readonly Sample[]): LoadFigures {
  const lat = samples.flatMap((x) => x.lat).sort((a, b) => a - b);
  const sum = (f: (x: Sample) => number): number => samples.reduce((a, x) => a + f(x), 0);
  return {
    msgsPerSec: lat.length / sum((x) => x.secs),
    p50Ms: percentile(lat, 50),
    p99Ms: percentile(lat, 99),
    cpuUsPerMsg: sum((x) => x.cpu) / lat.length,
    clientUsPerMsg: sum((x) => x.client) / lat.length,
  };
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** The median of 5 RssAnon readings 1 s apart: a V8 heap grows and shrinks in steps, one reading is noise. */
async function settledRssAnon(pid: number): Promise<number> {
  const xs: number[] = [];
  for (let i = 0; i < 5; i++) {
    if (i > 0) await sleep(1_000);
    xs.push(rssAnonBytes(pid));
  }
  return median(xs);
}
const kb = (b: number): string => (b / 1024).toFixed(2);

/** The figures of one round of the load phases. */
interface Round {
  mqtt: LoadFigures;
  http: LoadFigures;
  mosq: LoadFigures | undefined;
  gwPointsPerSec: number;
  httpBatchPointsPerSec: number;
}

const payload = (n: number): Buffer => Buffer.from(`{"temperature":${20 + (n % 100) / 10},"seq":${n}}`);
let gwSeq = 0;
/** 1,000 points: 10 keys × 100 timestamps */
function batchRows(seq: number): string[] {
  const ts0 = 1_700_000_000_000 + seq * 100;
  return Array.from(
    { length: BATCH_POINTS / 10 },
    (_, k) =>
      `{"ts":${ts0 + k},"values":{${Array.from({ length: 10 }, (_, j) => `"k${j}":${(seq + k + j) % 1000}`).join(',')}}}`,
  );
}

/** The clients of a daemon's load phases: one MQTT connection per device, and the gateway's. */
interface Clients {
  daemon: Daemon;
  mqtt: RawMqtt[];
  gw: RawMqtt;
  /** a REST read of telemetry: the store puts what its log holds into LMDB first */
  settle: () => Promise<void>;
}

async function connectClients(daemon: Daemon): Promise<Clients> {
  const mqtt = await Promise.all(
    Array.from({ length: CONNECTIONS }, (_, i) => RawMqtt.open(daemon.mqttPort, `bench-token-${i}`, clientAddress(i))),
  );
  const gw = await RawMqtt.open(daemon.mqttPort, 'bench-gw-token');
  for (let s = 0; s < SUB_DEVICES; s++) await gw.publish('v1/gateway/connect', Buffer.from(`{"device":"sub-${s}"}`));
  const { get } = await restClient(daemon.httpPort);
  const id = ((await get('/api/tenant/devices?deviceName=bench-0')) as { id: { id: string } }).id.id;
  const settle = async (): Promise<void> => {
    await get(`/api/plugins/telemetry/DEVICE/${id}/values/timeseries?keys=temperature`);
    await sleep(500);
  };
  return { daemon, mqtt, gw, settle };
}

/**
 * One round, each phase for `secs`: the batches (Gateway API, HTTP arrays; in turn first), mosquitto (`mosq`
 * empty: left out), then QoS 1 telemetry over MQTT and HTTP (below). Before each Outpost
 * phase the log's points go into LMDB (`settle`): a phase pays for its own applies, not the previous one's.
 */
async function loadRound(
  c: Clients,
  mosq: readonly RawMqtt[],
  mosqPid: number,
  r: number,
  secs = SECONDS,
): Promise<Round> {
  const on = (phase: string): boolean => ONLY === undefined || ONLY === phase;
  const none: LoadFigures = { msgsPerSec: NaN, p50Ms: NaN, p99Ms: NaN, cpuUsPerMsg: NaN, clientUsPerMsg: NaN };
  const { httpPort } = c.daemon;
  const mqttPhase = async (secs: number): Promise<Sample | undefined> => {
    if (!on('mqtt')) return undefined;
    await c.settle();
    measuredPid = c.daemon.proc.pid as number;
    return closedLoop(CONNECTIONS, secs, async (w, n) => {
      const rc = await (c.mqtt[w] as RawMqtt).publish('v1/devices/me/telemetry', payload(n));
      if (rc !== 0) throw new Error(`PUBACK ${rc}`);
    });
  };
  const httpPhase = async (secs: number): Promise<Sample | undefined> => {
    if (!on('http')) return undefined;
    // opened each round: the server closes HTTP connections left idle meanwhile
    const httpConns = await Promise.all(Array.from({ length: CONNECTIONS }, () => RawHttpConnection.open(httpPort)));
    await c.settle();
    measuredPid = c.daemon.proc.pid as number;
    const f = await closedLoop(CONNECTIONS, secs, async (w, n) => {
      const res = await (httpConns[w] as RawHttpConnection).request(
        encodeRequest('POST', `/api/v1/bench-token-${w}/telemetry`, payload(n).toString()),
      );
      if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
    });
    for (const h of httpConns) h.close();
    return f;
  };
  measuredPid = 0;
  // Gateway API: each message 1,000 points (10 keys × 100 timestamps) of one sub-device, rotating
  const gwPhase = async (): Promise<number> => {
    if (!on('gw')) return NaN;
    await c.settle();
    return pointsPerSec(GATEWAY_WINDOW, secs, async () => {
      const seq = gwSeq++;
      const rc = await c.gw.publish(
        'v1/gateway/telemetry',
        Buffer.from(`{"sub-${seq % SUB_DEVICES}":[${batchRows(seq).join(',')}]}`),
      );
      if (rc !== 0) throw new Error(`gateway PUBACK ${rc}`);
    });
  };
  const httpBatchPhase = async (): Promise<number> => {
    if (!on('httpbatch')) return NaN;
    // the same batches over HTTP, 8 keep-alive connections, to the devices' own tokens
    // opened now: an idle HTTP connection is closed by the server meanwhile
    const conns = await Promise.all(Array.from({ length: GATEWAY_WINDOW }, () => RawHttpConnection.open(httpPort)));
    await c.settle();
    const pps = await pointsPerSec(GATEWAY_WINDOW, secs, async (w) => {
      const seq = gwSeq++;
      const res = await (conns[w] as RawHttpConnection).request(
        encodeRequest('POST', `/api/v1/bench-token-${seq % CONNECTIONS}/telemetry`, `[${batchRows(seq).join(',')}]`),
      );
      if (res.status !== 200) throw new Error(`HTTP batch ${res.status}`);
    });
    for (const h of conns) h.close();
    return pps;
  };
  let gwPointsPerSec: number;
  let httpBatchPointsPerSec: number;
  if (r % 2 === 0) {
    gwPointsPerSec = await gwPhase();
    httpBatchPointsPerSec = await httpBatchPhase();
  } else {
    httpBatchPointsPerSec = await httpBatchPhase();
    gwPointsPerSec = await gwPhase();
  }
  measuredPid = mosqPid;
  const mosqFig =
    mosq.length === 0 || ONLY !== undefined
      ? undefined
      : figures([
          await closedLoop(CONNECTIONS, secs, async (w, n) => {
            await (mosq[w] as RawMqtt).publish('v1/devices/me/telemetry', payload(n));
          }),
        ]);
  // the batches' background work (compaction of their fragments) out of the way of the telemetry phases
  await sleep(mosqFig === undefined ? secs * 1000 : 1000);
  // the telemetry right after the pause pays for the batches' background work: a quarter of the time of
  // each transport not counted first, then MQTT, HTTP, HTTP, MQTT (HTTP, MQTT, MQTT, HTTP in odd rounds),
  // half the time each, so neither transport has a slot the other has not
  await mqttPhase(secs / 4);
  await httpPhase(secs / 4);
  const [first, second] = r % 2 === 0 ? [mqttPhase, httpPhase] : [httpPhase, mqttPhase];
  const a1 = await first(secs / 2);
  const b1 = await second(secs / 2);
  const b2 = await second(secs / 2);
  const a2 = await first(secs / 2);
  const [m1, m2, h1, h2] = r % 2 === 0 ? [a1, a2, b1, b2] : [b1, b2, a1, a2];
  const mqtt = m1 === undefined || m2 === undefined ? none : figures([m1, m2]);
  const http = h1 === undefined || h2 === undefined ? none : figures([h1, h2]);
  return { mqtt, http, mosq: mosqFig, gwPointsPerSec, httpBatchPointsPerSec };
}

/** `window` workers each sending BATCH_POINTS-point batches back to back for `secs`: points/s. */
async function pointsPerSec(window: number, secs: number, send: (w: number) => Promise<void>): Promise<number> {
  const end = performance.now() + secs * 1000;
  const t0 = performance.now();
  let points = 0;
  await Promise.all(
    Array.from({ length: window }, async (_, w) => {
      while (performance.now() < end) {
        await send(w);
        points += BATCH_POINTS;
      }
    }),
  );
  return points / ((performance.now() - t0) / 1000);
}

function roundLine(label: string, r: Round): string {
  const f = (x: LoadFigures): string =>
    `${x.msgsPerSec.toFixed(0)}/s p99 ${x.p99Ms.toFixed(1)} ms ${x.cpuUsPerMsg.toFixed(0)} µs CPU`;
  return (
    `${label}: mqtt ${f(r.mqtt)}; http ${f(r.http)}${r.mosq ? `; mosquitto ${f(r.mosq)}` : ''}; ` +
    `gateway ${(r.gwPointsPerSec / 1e6).toFixed(2)} M points/s, same batches over HTTP ${(r.httpBatchPointsPerSec / 1e6).toFixed(2)} M`
  );
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-bench-mqtt-'));
  const procs: ChildProcess[] = [];
  try {
    // the default config first, on a daemon of its own: its write budget paces commits once the load has spent
    // the reserve, so its second round is what a deployed daemon answers under sustained flat-out load
    const first = await setUp(dir, MAIN, WITH_DEFAULT ? DEFAULT_CONFIG : BENCH_CONFIG);
    procs.push(first.proc);
    for (let i = 0; i < CONNECTIONS; i++) await first.mkDevice(`bench-${i}`, `bench-token-${i}`);
    await first.mkDevice('bench-gw', 'bench-gw-token', true);
    let defaultRound: Round | undefined;
    let daemon: Daemon = first;
    if (WITH_DEFAULT) {
      const c = await connectClients(first);
      await loadRound(c, [], 0, 0, 1);
      for (let r = 0; r < 2; r++) {
        defaultRound = await loadRound(c, [], 0, r);
        console.log(roundLine(`default config, round ${r + 1}`, defaultRound));
      }
      for (const m of [...c.mqtt, c.gw]) m.close();
      await stopDaemon(first);
      writeFileSync(join(dir, 'outpost.json'), JSON.stringify(BENCH_CONFIG));
      daemon = await serve(dir, MAIN, CPU_PROF);
      procs.push(daemon.proc);
    }

    let mosquittoPort = 0;
    let mosqPid = 0;
    try {
      execFileSync('sh', ['-c', 'command -v mosquitto'], { stdio: 'ignore' });
      mosquittoPort = await freePort();
      const mconf = join(dir, 'mosquitto.conf');
      mkdirp(join(dir, 'mosq'));
      writeFileSync(
        mconf,
        `listener ${mosquittoPort} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location ${join(dir, 'mosq')}/\nmax_inflight_messages 1\n`,
      );
      const m = await spawnUntil('mosquitto', ['-c', mconf, '-v'], /running|Opening ipv4 listen socket/);
      procs.push(m.proc);
      mosqPid = m.proc.pid as number;
      await sleep(300);
    } catch {
      mosquittoPort = 0;
      console.log('mosquitto not installed (Debian: apt-get install mosquitto): its column is left out');
    }
    const clients = await connectClients(daemon);
    const mosq =
      mosquittoPort === 0
        ? []
        : await Promise.all(
            Array.from({ length: CONNECTIONS }, (_, i) => RawMqtt.open(mosquittoPort, `m-${i}`, clientAddress(i))),
          );
    // a warm-up second of each phase, not counted: the first round would otherwise pay for compiling the
    // MQTT path (HTTP's shares most of its code with the setup's requests)
    await loadRound(clients, mosq, mosqPid, 0, 1);
    const rounds: Round[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      rounds.push(await loadRound(clients, mosq, mosqPid, r));
      console.log(roundLine(`round ${r + 1}`, rounds[r] as Round));
    }
    for (const c of [...clients.mqtt, ...mosq, clients.gw]) c.close();

    if (CPU_PROF !== undefined) await stopDaemon(daemon);

    // ---- idle connections ------------------------------------------------------------------------
    // on a daemon started afresh: after the load rounds the heap shrinks for a while, and would hide the
    // connections' memory (a negative figure); the devices are created now, after the default config's
    // rounds, whose budget's reserve their writes would spend first
    let idle: IdleFigures | undefined;
    if (WITH_IDLE) {
      measuredPid = 0;
      await stopDaemon(daemon);
      daemon = await serve(dir, MAIN);
      procs.push(daemon.proc);
      idle = await idlePhase(daemon, procs);
    }

    // ---- the table ---------------------------------------------------------------------------------
    const med = (f: (r: Round) => number): number => median(rounds.map(f));
    const mq = { r: med((r) => r.mqtt.msgsPerSec), p50: med((r) => r.mqtt.p50Ms), p99: med((r) => r.mqtt.p99Ms) };
    const ht = { r: med((r) => r.http.msgsPerSec), p50: med((r) => r.http.p50Ms), p99: med((r) => r.http.p99Ms) };
    const mo =
      mosq.length === 0
        ? undefined
        : {
            r: med((r) => r.mosq?.msgsPerSec ?? 0),
            p50: med((r) => r.mosq?.p50Ms ?? 0),
            p99: med((r) => r.mosq?.p99Ms ?? 0),
          };
    console.log(
      `\n${CONNECTIONS} connections, ${SECONDS} s × ${ROUNDS} rounds, medians; shared 2-core machine (other engineers' load), compare ratios.` +
        `\nThe daemon runs with store.commitDelayMs 0 (each commit at once, the write budget counts but does not pace),` +
        `\nso both transports measure their own cost; the last row is the default config (the budget paces commits).\n`,
    );
    console.log(
      '| measure | Outpost MQTT | Outpost HTTP keep-alive | mosquitto (persistence true, not durable per message) | MQTT / HTTP |',
    );
    console.log('|---|---|---|---|---|');
    console.log(
      `| QoS 1 telemetry msgs/s | ${mq.r.toFixed(0)} | ${ht.r.toFixed(0)} | ${mo ? mo.r.toFixed(0) : '-'} | ${(mq.r / ht.r).toFixed(2)}x |`,
    );
    const cpu = (f: (r: Round) => number): string => med(f).toFixed(0);
    console.log(
      `| daemon CPU per message (µs; robust to the shared machine) | ${cpu((r) => r.mqtt.cpuUsPerMsg)} | ${cpu((r) => r.http.cpuUsPerMsg)} | ${mo ? cpu((r) => r.mosq?.cpuUsPerMsg ?? NaN) : '-'} | ${(med((r) => r.mqtt.cpuUsPerMsg) / med((r) => r.http.cpuUsPerMsg)).toFixed(2)}x |`,
    );
    console.log(
      `| load generator CPU per message (µs; same cores) | ${cpu((r) => r.mqtt.clientUsPerMsg)} | ${cpu((r) => r.http.clientUsPerMsg)} | ${mo ? cpu((r) => r.mosq?.clientUsPerMsg ?? NaN) : '-'} | ${(med((r) => r.mqtt.clientUsPerMsg) / med((r) => r.http.clientUsPerMsg)).toFixed(2)}x |`,
    );
    console.log(
      `| msgs/s ratio, median of per-round ratios | - | - | - | ${median(rounds.map((r) => r.mqtt.msgsPerSec / r.http.msgsPerSec)).toFixed(2)}x |`,
    );
    console.log(
      `| PUBACK / 200 p50 (ms) | ${mq.p50.toFixed(2)} | ${ht.p50.toFixed(2)} | ${mo ? mo.p50.toFixed(2) : '-'} | ${(mq.p50 / ht.p50).toFixed(2)}x |`,
    );
    console.log(
      `| PUBACK / 200 p99 (ms) | ${mq.p99.toFixed(2)} | ${ht.p99.toFixed(2)} | ${mo ? mo.p99.toFixed(2) : '-'} | ${(mq.p99 / ht.p99).toFixed(2)}x |`,
    );
    const gwp = med((r) => r.gwPointsPerSec);
    const hbp = med((r) => r.httpBatchPointsPerSec);
    console.log(
      `| ${BATCH_POINTS}-point batches, ${GATEWAY_WINDOW} in flight (M points/s): Gateway API for ${SUB_DEVICES} sub-devices vs HTTP arrays | ${(gwp / 1e6).toFixed(2)} | ${(hbp / 1e6).toFixed(2)} | - | ${(gwp / hbp).toFixed(2)}x |`,
    );
    if (idle !== undefined) {
      console.log(
        `| ${IDLE} idle connections: RssAnon per connection (KB) | ${kb(idle.perConn)} | - | bare node:net server (reads the CONNECT, answers nothing): ${kb(idle.barePerConn)} | ${(idle.perConn / idle.barePerConn).toFixed(2)}x bare |`,
      );
      console.log(
        `| daemon RssAnon idle → with ${IDLE} connections (MB) | ${(idle.base / 2 ** 20).toFixed(1)} → ${(idle.open / 2 ** 20).toFixed(1)} | - | - | - |`,
      );
      console.log(
        `| HTTP ingest p99 (10 connections) without → with the idle connections (ms) | ${idle.p99Before.toFixed(2)} → ${idle.p99Open.toFixed(2)} | - | - | - |`,
      );
    }
    if (defaultRound !== undefined) {
      const d = defaultRound;
      console.log(
        `| default config (write budget, commitDelayMs -1), one round once the reserve is spent: msgs/s; p99 ms; gateway vs HTTP arrays M points/s | ${d.mqtt.msgsPerSec.toFixed(0)}; ${d.mqtt.p99Ms.toFixed(0)} ms; ${(d.gwPointsPerSec / 1e6).toFixed(2)} M | ${d.http.msgsPerSec.toFixed(0)}; ${d.http.p99Ms.toFixed(0)} ms; ${(d.httpBatchPointsPerSec / 1e6).toFixed(2)} M | - | ${(d.mqtt.msgsPerSec / d.http.msgsPerSec).toFixed(2)}x |`,
      );
    }
  } finally {
    for (const p of procs) p.kill('SIGTERM');
    await sleep(500);
    rmSync(dir, { recursive: true, force: true });
  }
}

async function idlePhase(daemon: Daemon, procs: ChildProcess[]): Promise<IdleFigures> {
  await createIdleDevices(await deviceMaker(daemon.httpPort));
  const bare = await spawnBare();
  procs.push(bare.proc);
  return idleRound(daemon.proc.pid as number, daemon.httpPort, daemon.mqttPort, bare);
}

/** A data dir with a tenant admin, and the daemon (`main`: a build's src/main.js) serving it. */
async function setUp(
  dir: string,
  main: string,
  config: object,
): Promise<Daemon & { mkDevice: (name: string, token: string, gateway?: boolean) => Promise<void> }> {
  const dataDir = join(dir, 'data');
  execFileSync(process.execPath, [
    main,
    'user',
    'add',
    '--data-dir',
    dataDir,
    '--email',
    'bench@example.com',
    '--password',
    'bench-pw-1',
    '--authority',
    'TENANT_ADMIN',
  ]);
  writeFileSync(join(dir, 'outpost.json'), JSON.stringify(config));
  const d = await serve(dir, main, config === BENCH_CONFIG ? CPU_PROF : undefined);
  return { ...d, mkDevice: await deviceMaker(d.httpPort) };
}

/** Creates devices through a daemon's REST API, logged in as the bench's tenant admin. */
async function deviceMaker(
  httpPort: number,
): Promise<(name: string, token: string, gateway?: boolean) => Promise<void>> {
  const { post } = await restClient(httpPort);
  return async (name, token, gateway = false) => {
    await post(`/api/device?accessToken=${token}`, { name, ...(gateway ? { additionalInfo: { gateway: true } } : {}) });
  };
}

/** GET and POST on a daemon's REST API as the bench's tenant admin; a status other than 200 throws. */
async function restClient(
  httpPort: number,
): Promise<{ get: (path: string) => Promise<unknown>; post: (path: string, body: object) => Promise<unknown> }> {
  const base = `http://127.0.0.1:${httpPort}`;
  const login = await fetch(`${base}/api/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'bench@example.com', password: 'bench-pw-1' }),
  });
  const headers = {
    'X-Authorization': `Bearer ${((await login.json()) as { token: string }).token}`,
    'content-type': 'application/json',
  };
  const call = async (method: string, path: string, body?: object): Promise<unknown> => {
    const r = await fetch(`${base}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (r.status !== 200) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
    return r.json();
  };
  return { get: (path) => call('GET', path), post: (path, body) => call('POST', path, body) };
}

interface Daemon {
  proc: ChildProcess;
  httpPort: number;
  mqttPort: number;
}

async function serve(dir: string, main: string, cpuProfDir?: string): Promise<Daemon> {
  const d = await spawnUntil(
    process.execPath,
    [
      ...(cpuProfDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${cpuProfDir}`]),
      main,
      'serve',
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--data-dir',
      join(dir, 'data'),
      '--config',
      join(dir, 'outpost.json'),
    ],
    /listening on http:\/\/127\.0\.0\.1:(\d+), mqtt:\/\/127\.0\.0\.1:(\d+)/,
  );
  return { proc: d.proc, httpPort: Number(d.m[1]), mqttPort: Number(d.m[2]) };
}

/** each idle connection is a device of its own (one session per token) */
async function createIdleDevices(mkDevice: (name: string, token: string) => Promise<void>): Promise<void> {
  for (let i = 0; i < IDLE; i += 200) {
    await Promise.all(
      Array.from({ length: Math.min(200, IDLE - i) }, (_, k) => mkDevice(`idle-${i + k}`, `idle-token-${i + k}`)),
    );
  }
}

interface IdleFigures {
  perConn: number;
  barePerConn: number;
  base: number;
  open: number;
  p99Before: number;
  p99Open: number;
}

/** IDLE idle MQTT connections on the daemon, then as many sockets on the bare server: RssAnon per connection. */
async function idleRound(
  pid: number,
  httpPort: number,
  mqttPort: number,
  bare: { proc: ChildProcess; m: RegExpExecArray },
): Promise<IdleFigures> {
  const ingestP99 = async (): Promise<number> => {
    const conns = await Promise.all(Array.from({ length: 10 }, () => RawHttpConnection.open(httpPort)));
    const f = await closedLoop(10, 3, async (w, n) => {
      await (conns[w] as RawHttpConnection).request(
        encodeRequest('POST', `/api/v1/bench-token-${w}/telemetry`, `{"temperature":${n % 100}}`),
      );
    });
    for (const c of conns) c.close();
    return figures([f]).p99Ms;
  };
  const hello = async (s: Socket, i: number): Promise<void> => {
    s.write(
      mqttPacket.generate({
        cmd: 'connect',
        clientId: `idle-${i}`,
        username: `idle-token-${i}`,
        keepalive: 0,
        protocolVersion: 4,
        clean: true,
      }),
    );
  };
  await sleep(2_000);
  const p99Before = await ingestP99();
  await sleep(2_000);
  const base = await settledRssAnon(pid);
  const held = await openIdle(IDLE, hello, mqttPort, true);
  await sleep(3_000);
  const open = await settledRssAnon(pid);
  const p99Open = await ingestP99();
  for (const s of held) s.destroy();

  const barePid = bare.proc.pid as number;
  const bareBefore = await settledRssAnon(barePid);
  // the same CONNECT bytes, read and dropped: a socket that has read once, as the daemon's have
  const bareHeld = await openIdle(IDLE, hello, Number(bare.m[1]), false);
  await sleep(3_000);
  const bareOpen = await settledRssAnon(barePid);
  for (const s of bareHeld) s.destroy();
  return { perConn: (open - base) / IDLE, barePerConn: (bareOpen - bareBefore) / IDLE, base, open, p99Before, p99Open };
}

/**
 * `--idle-only`: the idle-connection measure alone, `--rounds` times, each on a freshly started daemon (and a
 * fresh bare server) over one data dir; with `--baseline <other build's dist/src/main.js>`, that build's daemon
 * is measured in turn with this one, round by round, for a before/after in one run.
 */
async function idleOnly(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-bench-mqtt-'));
  const procs: ChildProcess[] = [];
  const stop = async (p: ChildProcess): Promise<void> => {
    if (p.exitCode !== null) return;
    const exited = new Promise((r) => p.once('exit', r));
    p.kill('SIGTERM');
    await exited;
  };
  try {
    const first = await setUp(dir, MAIN, BENCH_CONFIG);
    procs.push(first.proc);
    for (let i = 0; i < 10; i++) await first.mkDevice(`bench-${i}`, `bench-token-${i}`);
    await createIdleDevices(first.mkDevice);
    await stop(first.proc);
    const builds = [
      { label: 'this build', main: MAIN },
      ...(BASELINE === undefined ? [] : [{ label: `baseline ${BASELINE}`, main: BASELINE }]),
    ];
    const figures = new Map<string, IdleFigures[]>(builds.map((b) => [b.label, []]));
    for (let r = 0; r < ROUNDS; r++) {
      // alternate which build goes first: neither always gets the quieter half of a round
      for (const b of r % 2 === 0 ? builds : [...builds].reverse()) {
        const d = await serve(dir, b.main);
        procs.push(d.proc);
        const bare = await spawnBare();
        procs.push(bare.proc);
        const f = await idleRound(d.proc.pid as number, d.httpPort, d.mqttPort, bare);
        await stop(d.proc);
        await stop(bare.proc);
        figures.get(b.label)?.push(f);
        console.log(
          `round ${r + 1}, ${b.label}: ${kb(f.perConn)} KB per connection (bare node:net ${kb(f.barePerConn)} KB); RssAnon ${(f.base / 2 ** 20).toFixed(1)} → ${(f.open / 2 ** 20).toFixed(1)} MB; ingest p99 ${f.p99Before.toFixed(1)} → ${f.p99Open.toFixed(1)} ms`,
        );
      }
    }
    console.log(
      `\n${IDLE} idle connections, ${ROUNDS} rounds, medians; shared 2-core machine (other engineers' load), compare ratios\n`,
    );
    console.log(
      '| build | RssAnon per connection (KB) | bare node:net (KB) | / bare | daemon RssAnon idle → open (MB) | HTTP ingest p99 without → with (ms) |',
    );
    console.log('|---|---|---|---|---|---|');
    for (const [label, fs] of figures) {
      const m = (f: (x: IdleFigures) => number): number => median(fs.map(f));
      console.log(
        `| ${label} | ${kb(m((x) => x.perConn))} (${fs.map((x) => kb(x.perConn)).join(', ')}) | ${kb(m((x) => x.barePerConn))} | ${m((x) => x.perConn / x.barePerConn).toFixed(2)}x | ` +
          `${(m((x) => x.base) / 2 ** 20).toFixed(1)} → ${(m((x) => x.open) / 2 ** 20).toFixed(1)} | ${m((x) => x.p99Before).toFixed(1)} → ${m((x) => x.p99Open).toFixed(1)} |`,
      );
    }
  } finally {
    for (const p of procs) p.kill('SIGTERM');
    await sleep(500);
    rmSync(dir, { recursive: true, force: true });
  }
}

function mkdirp(p: string): void {
  execFileSync('mkdir', ['-p', p]);
}

if (argv.includes('--idle-only')) await idleOnly();
else await main();
