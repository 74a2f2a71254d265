/**
 * MQTT benchmark (docs/mqtt.md), side by side in one run, medians over rounds:
 * 1. QoS 1 telemetry from N connections, each waiting for its PUBACK before the next publish: msgs/s and
 *    PUBACK p50/p99, against the same devices posting over HTTP keep-alive, and against Debian's `mosquitto`
 *    broker (`persistence true`, which saves on an interval, not per message: it acknowledges before anything
 *    is durable) as the anchor.
 * 2. Gateway API: one gateway publishing 1,000-point batches for 100 sub-devices (8 in flight): points/s.
 * 3. 10,000 idle MQTT connections: RssAnon per connection on top of the idle daemon, against a bare node:net
 *    server holding as many idle sockets, and HTTP ingest p99 before and while they are open.
 * The load generator is lean (mqtt-packet on raw sockets, raw HTTP/1.1) so its CPU cost stays small on the
 * shared cores. Loopback only; temp dirs removed at the end.
 *
 *   npm run bench:mqtt [-- --connections 100 --seconds 5 --rounds 3 --idle 10000]
 *   npm run bench:mqtt -- --idle-only [--rounds 3 --idle 10000 --baseline <another build's dist/src/main.js>]
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { type Socket, connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import mqttPacket, { type Packet } from 'mqtt-packet';
import { RawHttpConnection, encodeRequest, intArg, median, rssAnonBytes } from './lib.js';

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

/** One MQTT connection over mqtt-packet: CONNECT, then QoS 1 publishes resolved on their PUBACK. */
class RawMqtt {
  private readonly acks = new Map<number, (rc: number) => void>();
  private nextId = 0;
  private connack: ((rc: number) => void) | undefined;

  private constructor(readonly socket: Socket) {
    const parser = mqttPacket.parser();
    parser.on('packet', (p: Packet) => {
      if (p.cmd === 'connack') this.connack?.(p.returnCode ?? p.reasonCode ?? 0);
      else if (p.cmd === 'puback') {
        const done = this.acks.get(p.messageId ?? 0);
        this.acks.delete(p.messageId ?? 0);
        done?.(p.reasonCode ?? 0);
      }
    });
    socket.on('data', (b: Buffer) => parser.parse(b));
    socket.on('error', () => undefined);
    socket.setNoDelay(true);
  }

  static open(port: number, username: string): Promise<RawMqtt> {
    return new Promise((resolve, reject) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('error', reject);
      socket.once('connect', () => {
        const c = new RawMqtt(socket);
        c.connack = (rc) => (rc === 0 ? resolve(c) : reject(new Error(`CONNACK ${rc}`)));
        socket.write(
          mqttPacket.generate({
            cmd: 'connect',
            clientId: `b-${username}-${Math.random()}`,
            username,
            keepalive: 0,
            protocolVersion: 4,
            clean: true,
          }),
        );
      });
    });
  }

  publish(topic: string, payload: Buffer): Promise<number> {
    this.nextId = this.nextId >= 65_535 ? 1 : this.nextId + 1;
    const messageId = this.nextId;
    return new Promise((resolve) => {
      this.acks.set(messageId, resolve);
      this.socket.write(
        mqttPacket.generate({ cmd: 'publish', topic, payload, qos: 1, messageId, dup: false, retain: false }),
      );
    });
  }

  close(): void {
    this.socket.destroy();
  }
}

interface LoadFigures {
  msgsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  cpuUsPerMsg: number;
}

/** CPU time (user + system) a process has used, in µs (Linux /proc, clock ticks of 10 ms). */
function cpuUs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return (Number(f[11]) + Number(f[12])) * 10_000;
}

/** the process whose CPU the load phases measure (the daemon, or mosquitto) */
let measuredPid = 0;

function percentile(sorted: readonly number[], p: number): number {
  return sorted.length === 0
    ? NaN
    : (sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number);
}

/** N workers, each sending one message and waiting for its answer before the next, for `seconds`. */
async function closedLoop(
  workers: number,
  seconds: number,
  send: (w: number, n: number) => Promise<void>,
): Promise<LoadFigures> {
  const lat: number[] = [];
  const cpu0 = measuredPid === 0 ? 0 : cpuUs(measuredPid);
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
  lat.sort((a, b) => a - b);
  const cpu = measuredPid === 0 ? NaN : cpuUs(measuredPid) - cpu0;
  return {
    msgsPerSec: lat.length / secs,
    p50Ms: percentile(lat, 50),
    p99Ms: percentile(lat, 99),
    cpuUsPerMsg: cpu / lat.length,
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

/** Spawns a process and resolves with the regex groups of the first output line matching `re`. */
function spawnUntil(cmd: string, args: string[], re: RegExp): Promise<{ proc: ChildProcess; m: RegExpExecArray }> {
  const proc = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let buf = '';
    const on = (b: Buffer): void => {
      buf += b.toString();
      const m = re.exec(buf);
      if (m) resolve({ proc, m });
    };
    proc.stdout?.on('data', on);
    proc.stderr?.on('data', on);
    proc.once('exit', (code) => reject(new Error(`${cmd} exited with ${code}: ${buf}`)));
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

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-bench-mqtt-'));
  const procs: ChildProcess[] = [];
  try {
    const { proc: daemon, httpPort, mqttPort, mkDevice } = await setUp(dir, MAIN);
    procs.push(daemon);
    for (let i = 0; i < CONNECTIONS; i++) await mkDevice(`bench-${i}`, `bench-token-${i}`);
    await mkDevice('bench-gw', 'bench-gw-token', true);

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

    const payload = (n: number): Buffer => Buffer.from(`{"temperature":${20 + (n % 100) / 10},"seq":${n}}`);
    const outpostMqtt = await Promise.all(
      Array.from({ length: CONNECTIONS }, (_, i) => RawMqtt.open(mqttPort, `bench-token-${i}`)),
    );
    const mosq =
      mosquittoPort === 0
        ? []
        : await Promise.all(Array.from({ length: CONNECTIONS }, (_, i) => RawMqtt.open(mosquittoPort, `m-${i}`)));

    const rounds: Array<{
      mqtt: LoadFigures;
      http: LoadFigures;
      mosq: LoadFigures | undefined;
      gwPointsPerSec: number;
      httpBatchPointsPerSec: number;
    }> = [];
    /** 1,000 points: 10 keys × 100 timestamps */
    const batchRows = (seq: number): string[] => {
      const ts0 = 1_700_000_000_000 + seq * 100;
      return Array.from(
        { length: BATCH_POINTS / 10 },
        (_, k) =>
          `{"ts":${ts0 + k},"values":{${Array.from({ length: 10 }, (_, j) => `"k${j}":${(seq + k + j) % 1000}`).join(',')}}}`,
      );
    };
    let gwSeq = 0;
    const gw = await RawMqtt.open(mqttPort, 'bench-gw-token');
    for (let s = 0; s < SUB_DEVICES; s++) await gw.publish('v1/gateway/connect', Buffer.from(`{"device":"sub-${s}"}`));
    for (let r = 0; r < ROUNDS; r++) {
      measuredPid = daemon.pid as number;
      const mqtt = await closedLoop(CONNECTIONS, SECONDS, async (w, n) => {
        const rc = await (outpostMqtt[w] as RawMqtt).publish('v1/devices/me/telemetry', payload(n));
        if (rc !== 0) throw new Error(`PUBACK ${rc}`);
      });
      // opened each round: the server closes HTTP connections left idle meanwhile
      const httpConns = await Promise.all(Array.from({ length: CONNECTIONS }, () => RawHttpConnection.open(httpPort)));
      const http = await closedLoop(CONNECTIONS, SECONDS, async (w, n) => {
        const res = await (httpConns[w] as RawHttpConnection).request(
          encodeRequest('POST', `/api/v1/bench-token-${w}/telemetry`, payload(n).toString()),
        );
        if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
      });
      for (const c of httpConns) c.close();
      measuredPid = mosqPid;
      const mosqFig =
        mosq.length === 0
          ? undefined
          : await closedLoop(CONNECTIONS, SECONDS, async (w, n) => {
              await (mosq[w] as RawMqtt).publish('v1/devices/me/telemetry', payload(n));
            });
      // Gateway API: each message 1,000 points (10 keys × 100 timestamps) of one sub-device, rotating
      measuredPid = 0;
      const gwEnd = performance.now() + SECONDS * 1000;
      const g0 = performance.now();
      let points = 0;
      await Promise.all(
        Array.from({ length: GATEWAY_WINDOW }, async () => {
          while (performance.now() < gwEnd) {
            const seq = gwSeq++;
            const rc = await gw.publish(
              'v1/gateway/telemetry',
              Buffer.from(`{"sub-${seq % SUB_DEVICES}":[${batchRows(seq).join(',')}]}`),
            );
            if (rc !== 0) throw new Error(`gateway PUBACK ${rc}`);
            points += BATCH_POINTS;
          }
        }),
      );
      const gwPointsPerSec = points / ((performance.now() - g0) / 1000);
      // the same batches over HTTP, 8 keep-alive connections, to the devices' own tokens
      // opened now: an idle HTTP connection is closed by the server meanwhile
      const batchConns = await Promise.all(
        Array.from({ length: GATEWAY_WINDOW }, () => RawHttpConnection.open(httpPort)),
      );
      const hEnd = performance.now() + SECONDS * 1000;
      const h0 = performance.now();
      let hPoints = 0;
      await Promise.all(
        batchConns.map(async (conn) => {
          while (performance.now() < hEnd) {
            const seq = gwSeq++;
            const res = await conn.request(
              encodeRequest(
                'POST',
                `/api/v1/bench-token-${seq % CONNECTIONS}/telemetry`,
                `[${batchRows(seq).join(',')}]`,
              ),
            );
            if (res.status !== 200) throw new Error(`HTTP batch ${res.status}`);
            hPoints += BATCH_POINTS;
          }
        }),
      );
      const httpBatchPointsPerSec = hPoints / ((performance.now() - h0) / 1000);
      for (const c of batchConns) c.close();
      rounds.push({ mqtt, http, mosq: mosqFig, gwPointsPerSec, httpBatchPointsPerSec });
      console.log(
        `round ${r + 1}: mqtt ${mqtt.msgsPerSec.toFixed(0)}/s p99 ${mqtt.p99Ms.toFixed(1)} ms; http ${http.msgsPerSec.toFixed(0)}/s p99 ${http.p99Ms.toFixed(1)} ms` +
          `${mosqFig ? `; mosquitto ${mosqFig.msgsPerSec.toFixed(0)}/s p99 ${mosqFig.p99Ms.toFixed(1)} ms` : ''}; gateway ${(gwPointsPerSec / 1e6).toFixed(2)} M points/s, same batches over HTTP ${(httpBatchPointsPerSec / 1e6).toFixed(2)} M`,
      );
    }
    for (const c of [...outpostMqtt, ...mosq, gw]) c.close();

    // ---- idle connections ------------------------------------------------------------------------
    await createIdleDevices(mkDevice);
    const bare = await spawnBare();
    procs.push(bare.proc);
    const idle = await idleRound(daemon.pid as number, httpPort, mqttPort, bare);

    // ---- the table ---------------------------------------------------------------------------------
    const med = (f: (r: (typeof rounds)[number]) => number): number => median(rounds.map(f));
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
      `\n${CONNECTIONS} connections, ${SECONDS} s × ${ROUNDS} rounds, medians; shared 2-core machine (other engineers' load), compare ratios\n`,
    );
    console.log(
      '| measure | Outpost MQTT | Outpost HTTP keep-alive | mosquitto (persistence true, not durable per message) | MQTT / HTTP |',
    );
    console.log('|---|---|---|---|---|');
    console.log(
      `| QoS 1 telemetry msgs/s | ${mq.r.toFixed(0)} | ${ht.r.toFixed(0)} | ${mo ? mo.r.toFixed(0) : '-'} | ${(mq.r / ht.r).toFixed(2)}x |`,
    );
    const cpu = (f: (r: (typeof rounds)[number]) => number): string => med(f).toFixed(0);
    console.log(
      `| daemon CPU per message (µs; robust to the shared machine) | ${cpu((r) => r.mqtt.cpuUsPerMsg)} | ${cpu((r) => r.http.cpuUsPerMsg)} | ${mo ? cpu((r) => r.mosq?.cpuUsPerMsg ?? NaN) : '-'} | ${(med((r) => r.mqtt.cpuUsPerMsg) / med((r) => r.http.cpuUsPerMsg)).toFixed(2)}x |`,
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
    console.log(
      `| ${IDLE} idle connections: RssAnon per connection (KB) | ${kb(idle.perConn)} | - | bare node:net server (reads the CONNECT, answers nothing): ${kb(idle.barePerConn)} | ${(idle.perConn / idle.barePerConn).toFixed(2)}x bare |`,
    );
    console.log(
      `| daemon RssAnon idle → with ${IDLE} connections (MB) | ${(idle.base / 2 ** 20).toFixed(1)} → ${(idle.open / 2 ** 20).toFixed(1)} | - | - | - |`,
    );
    console.log(
      `| HTTP ingest p99 (10 connections) without → with the idle connections (ms) | ${idle.p99Before.toFixed(2)} → ${idle.p99Open.toFixed(2)} | - | - | - |`,
    );
  } finally {
    for (const p of procs) p.kill('SIGTERM');
    await sleep(500);
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A data dir with a tenant admin, and the daemon (`main`: a build's src/main.js) serving it. */
async function setUp(
  dir: string,
  main: string,
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
  writeFileSync(join(dir, 'outpost.json'), JSON.stringify({ mqtt: { maxConnections: IDLE + 1000 } }));
  const d = await serve(dir, main);
  const base = `http://127.0.0.1:${d.httpPort}`;
  const login = await fetch(`${base}/api/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'bench@example.com', password: 'bench-pw-1' }),
  });
  const auth = {
    'X-Authorization': `Bearer ${((await login.json()) as { token: string }).token}`,
    'content-type': 'application/json',
  };
  const mkDevice = async (name: string, token: string, gateway = false): Promise<void> => {
    const r = await fetch(`${base}/api/device?accessToken=${token}`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ name, ...(gateway ? { additionalInfo: { gateway: true } } : {}) }),
    });
    if (r.status !== 200) throw new Error(`creating ${name}: ${r.status} ${await r.text()}`);
  };
  return { ...d, mkDevice };
}

interface Daemon {
  proc: ChildProcess;
  httpPort: number;
  mqttPort: number;
}

async function serve(dir: string, main: string): Promise<Daemon> {
  const d = await spawnUntil(
    process.execPath,
    [
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

function spawnBare(): Promise<{ proc: ChildProcess; m: RegExpExecArray }> {
  return spawnUntil(
    process.execPath,
    [
      '-e',
      `const s=require('net').createServer((c)=>{c.on('error',()=>{});c.on('data',()=>{})});s.listen(0,'127.0.0.1',()=>console.log('port '+s.address().port))`,
    ],
    /port (\d+)/,
  );
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
    return f.p99Ms;
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
    const first = await setUp(dir, MAIN);
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

/** Opens `n` sockets (200 at a time), runs `hello` on each; with `waitConnack`, waits for a CONNACK 0 on each. */
async function openIdle(
  n: number,
  hello: (s: Socket, i: number) => Promise<void>,
  port: number,
  waitConnack: boolean,
): Promise<Socket[]> {
  const out: Socket[] = [];
  for (let i = 0; i < n; i += 200) {
    out.push(
      ...(await Promise.all(
        Array.from(
          { length: Math.min(200, n - i) },
          (_, k) =>
            new Promise<Socket>((resolve, reject) => {
              const s = connect(port, '127.0.0.1');
              s.on('error', () => undefined);
              s.once('connect', () => {
                void hello(s, i + k);
                if (!waitConnack) {
                  resolve(s);
                  return;
                }
                s.once('data', (b: Buffer) =>
                  b[0] === 0x20 && b[3] === 0 ? resolve(s) : reject(new Error(`CONNACK refused for idle-${i + k}`)),
                );
              });
            }),
        ),
      )),
    );
  }
  return out;
}

if (argv.includes('--idle-only')) await idleOnly();
else await main();
