/**
 * MQTT CONNECT benchmark (docs/mqtt.md "Logging in"), side by side in one run: N clients each connecting,
 * waiting for the CONNACK, sending DISCONNECT and waiting for the close, over and over, with each kind of device
 * credentials:
 * - access token (plain TCP): the baseline of MQTT Basic;
 * - MQTT Basic, client id + user name + password (plain TCP);
 * - TLS with an access token (the daemon's certificate, no client certificate): the baseline of X.509;
 * - X.509: TLS with a client certificate (self-signed, ECDSA P-256, one per device), matched by its hash;
 * - the floor of both TLS rows: a bare node:tls server with the same options answering CONNACK 0 to anything,
 *   with and without the client certificates (what the TLS handshake itself costs, no MQTT, no store).
 * First, in this process, Outpost's own part of a login (login.ts on a store of 100 devices of each kind, the
 * record cache warm, as on a busy gateway): µs per login, median of rounds, against the access token's.
 * Reported: CONNECTs/s (all clients together), CONNACK latency p50/p99 from the socket's open, and the server's
 * CPU per CONNECT (/proc, all threads: the server's own cost, without the load generator's), medians over
 * rounds; each round runs the kinds in a rotated order. The load generator runs in this process on the same
 * cores as the servers (its TLS handshakes included), so rates and latencies carry both sides' cost. Loopback
 * only; the temp dir is removed at the end.
 *
 *   npm run bench:mqtt-connect [-- --clients 100 --seconds 3 --rounds 3]
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { type Socket, connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { X509Certificate } from 'node:crypto';
import { type ConnectionOptions, type SecureContext, createSecureContext, connect as tlsConnect } from 'node:tls';
import { request as httpsRequest } from 'node:https';
import { fileURLToPath } from 'node:url';
import mqttPacket, { type Packet } from 'mqtt-packet';
import { mqttLogin } from '../../src/device/login.js';
import { resolveCredentials } from '../../src/store/credentials.js';
import { EntityStore } from '../../src/store/entities.js';
import { openStoreEnv } from '../../src/store/env.js';
import { clientAddress, cpuMs, intArg, median, stopDaemon } from './lib.js';
import { spawnUntil } from './mqtt-procs.js';

const argv = process.argv.slice(2);
const CLIENTS = intArg(argv, 'clients', 100);
const SECONDS = intArg(argv, 'seconds', 3);
const ROUNDS = intArg(argv, 'rounds', 3);
const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));

type Kind = 'token' | 'basic' | 'tlsToken' | 'x509' | 'bareTls' | 'bareTlsCert';
const KINDS: readonly Kind[] = ['token', 'basic', 'tlsToken', 'x509', 'bareTls', 'bareTlsCert'];
const LABEL: Record<Kind, string> = {
  token: 'access token',
  basic: 'MQTT Basic',
  tlsToken: 'TLS + access token',
  x509: 'X.509 (TLS)',
  bareTls: 'bare node:tls, no client certificate',
  bareTlsCert: 'bare node:tls, client certificate',
};

/**
 * The floor of the TLS rows: a bare node:tls server with the daemon's TLS options that answers any CONNECT with
 * CONNACK 0 (no MQTT, no store): what a handshake with and without a client certificate costs by itself.
 */
function spawnBareTls(cert: string, key: string): Promise<{ proc: ChildProcess; port: number }> {
  const script = `const fs=require('fs');const s=require('tls').createServer({cert:fs.readFileSync(${JSON.stringify(cert)}),key:fs.readFileSync(${JSON.stringify(key)}),requestCert:true,rejectUnauthorized:false},(c)=>{c.on('error',()=>{});c.once('data',()=>{c.getPeerX509Certificate();c.write(Buffer.from([0x20,2,0,0]))});c.on('data',()=>{})});s.on('tlsClientError',()=>{});s.listen(0,'127.0.0.1',()=>console.log('port '+s.address().port))`;
  return spawnUntil(process.execPath, ['-e', script], /port (\d+)/).then(({ proc, m }) => ({
    proc,
    port: Number(m[1]),
  }));
}

interface Client {
  readonly connect: Record<string, unknown>;
  /**
   * TLS: made once per client (the CA, and its certificate and key for X.509), as a device keeps it: parsing
   * PEMs on every connect would be the load generator's cost, not the daemon's
   */
  readonly tls?: SecureContext | undefined;
}

interface RoundResult {
  readonly rate: number;
  readonly p50: number;
  readonly p99: number;
  /** the server's CPU (all its threads, TLS included) per CONNECT, µs: its own cost, without the load generator's */
  readonly cpuUs: number;
}

const openssl = (args: string[]): void => {
  execFileSync('openssl', args, { stdio: 'ignore' });
};

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
}

/** Starts the daemon on ephemeral ports: HTTP, MQTT and MQTT over TLS. */
function serve(
  dir: string,
  config: string,
): Promise<{ proc: ChildProcess; port: number; mqtt: number; mqtts: number }> {
  const proc = spawn(
    process.execPath,
    [MAIN, 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', join(dir, 'data'), '--config', config],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  return new Promise((resolve, reject) => {
    let buf = '';
    const onData = (c: Buffer): void => {
      buf += c.toString();
      const line = /listening on .*\n/.exec(buf)?.[0] ?? '';
      const port = (scheme: string): number => Number(new RegExp(`${scheme}://[^:]+:(\\d+)`).exec(line)?.[1] ?? 0);
      if (line !== '') resolve({ proc, port: port('http') || port('https'), mqtt: port('mqtt'), mqtts: port('mqtts') });
    };
    proc.stderr?.on('data', onData);
    proc.stdout?.on('data', onData);
    proc.once('exit', (code) => reject(new Error(`outpost exited with ${code}: ${buf}`)));
  });
}

/** tls.connect passes `localAddress` on to its TCP connect; its options type does not name it. */
function tlsOptions(port: number, secureContext: SecureContext, localAddress: string): ConnectionOptions {
  const o = { port, host: '127.0.0.1', secureContext, servername: 'localhost', localAddress };
  return o;
}

/** One CONNECT → CONNACK → DISCONNECT → close; the CONNACK's latency in ms (throws on a refusal). */
function connectOnce(port: number, c: Client, localAddress: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let latency = -1;
    const parser = mqttPacket.parser();
    const socket: Socket =
      c.tls !== undefined
        ? tlsConnect(tlsOptions(port, c.tls, localAddress))
        : netConnect({ port, host: '127.0.0.1', localAddress });
    const send = (): void => {
      socket.setNoDelay(true);
      socket.write(
        mqttPacket.generate({ cmd: 'connect', protocolVersion: 4, clean: true, keepalive: 0, ...c.connect } as Packet),
      );
    };
    socket.once(c.tls !== undefined ? 'secureConnect' : 'connect', send);
    parser.on('packet', (p: Packet) => {
      if (p.cmd !== 'connack') return;
      if ((p.returnCode ?? 0) !== 0) {
        socket.destroy();
        reject(new Error(`CONNACK ${p.returnCode}`));
        return;
      }
      latency = performance.now() - t0;
      socket.end(mqttPacket.generate({ cmd: 'disconnect' }));
    });
    socket.on('data', (b: Buffer) => parser.parse(b));
    // a reset after the CONNACK (the daemon closing on DISCONNECT while TLS says goodbye) is no failure
    socket.once('error', (err) => (latency >= 0 ? resolve(latency) : reject(err)));
    socket.once('close', () => (latency >= 0 ? resolve(latency) : reject(new Error('closed before CONNACK'))));
  });
}

/** One HTTPS POST to the daemon (its REST is on TLS too once it has a certificate). */
function httpsPost(
  port: number,
  ca: Buffer,
  path: string,
  body: string,
  headers: Record<string, string>,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        ca,
        servername: 'localhost',
        headers: { 'content-type': 'application/json', ...headers },
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => {
          text += c.toString();
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

async function runKind(port: number, clients: readonly Client[], pid: number): Promise<RoundResult> {
  const latencies: number[] = [];
  const cpu0 = cpuMs(pid).all;
  const start = performance.now();
  const end = start + SECONDS * 1000;
  await Promise.all(
    clients.map(async (c, i) => {
      while (performance.now() < end) latencies.push(await connectOnce(port, c, clientAddress(i)));
    }),
  );
  const seconds = (performance.now() - start) / 1000;
  const cpuUs = ((cpuMs(pid).all - cpu0) * 1000) / latencies.length;
  return { rate: latencies.length / seconds, p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99), cpuUs };
}

/** µs per call of `op` (which must return true), median of ROUNDS rounds of ~300 ms. */
function microUs(op: () => boolean): number {
  const perRound: number[] = [];
  for (let r = 0; r < ROUNDS + 1; r++) {
    let n = 0;
    const t0 = performance.now();
    while (performance.now() - t0 < 300) {
      for (let i = 0; i < 100; i++) if (!op()) throw new Error('login refused');
      n += 100;
    }
    if (r > 0) perRound.push(((performance.now() - t0) * 1000) / n);
  }
  return median(perRound);
}

/** Outpost's own work per login of each kind, in-process: no network, no TLS handshake. */
async function loginCost(dir: string, certs: ReadonlyArray<{ pem: string }>): Promise<void> {
  const env = openStoreEnv({ dataDir: join(dir, 'micro'), mapSizeBytes: 256 * 1024 * 1024 });
  try {
    const entities = new EntityStore(env);
    await entities.ensureTenant();
    for (let i = 0; i < certs.length; i++) {
      await entities.createDevice({ name: `t-${i}`, token: `micro-token-${i}` });
      const value = JSON.stringify({ clientId: `c-${i}`, userName: `u-${i}`, password: `p-${i}` });
      await entities.createDevice({
        name: `b-${i}`,
        credentials: resolveCredentials({ credentialsType: 'MQTT_BASIC', credentialsValue: value }),
      });
      const pem = (certs[i] as { pem: string }).pem;
      await entities.createDevice({
        name: `x-${i}`,
        credentials: resolveCredentials({ credentialsType: 'X509_CERTIFICATE', credentialsValue: pem }),
      });
    }
    const x509 = certs.map((c) => new X509Certificate(c.pem));
    const ok = (r: object): boolean => 'entityType' in r;
    let i = 0;
    const next = (): number => {
      i = (i + 1) % certs.length;
      return i;
    };
    const token = microUs(() =>
      ok(
        mqttLogin(entities, {
          clientId: 'x',
          username: `micro-token-${next()}`,
          password: undefined,
          certificate: undefined,
        }),
      ),
    );
    const basic = microUs(() => {
      const k = next();
      return ok(
        mqttLogin(entities, {
          clientId: `c-${k}`,
          username: `u-${k}`,
          password: Buffer.from(`p-${k}`),
          certificate: undefined,
        }),
      );
    });
    const cert = microUs(() =>
      ok(mqttLogin(entities, { clientId: '', username: undefined, password: undefined, certificate: x509[next()] })),
    );
    console.log(
      `\nOutpost's own part of a login (login.ts, in-process, ${certs.length} devices of each kind, median of ${ROUNDS} rounds)\n`,
    );
    console.log('| credentials | µs per login | vs access token |');
    console.log('|---|---|---|');
    console.log(`| access token | ${token.toFixed(2)} | — |`);
    console.log(`| MQTT Basic | ${basic.toFixed(2)} | ${(basic / token).toFixed(2)}x |`);
    console.log(
      `| X.509 (the certificate already parsed by the TLS layer) | ${cert.toFixed(2)} | ${(cert / token).toFixed(2)}x |`,
    );
  } finally {
    await env.close();
  }
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-bench-connect-'));
  let daemon: { proc: ChildProcess } | undefined;
  let bareProc: ChildProcess | undefined;
  try {
    const serverCert = join(dir, 'server.pem');
    const serverKey = join(dir, 'server.key');
    openssl([
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      serverKey,
      '-out',
      serverCert,
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=IP:127.0.0.1,DNS:localhost',
    ]);
    const config = join(dir, 'config.json');
    writeFileSync(
      config,
      JSON.stringify({ tls: { cert: serverCert, key: serverKey }, mqtt: { maxConnections: CLIENTS * 8 } }),
    );
    execFileSync(
      process.execPath,
      [
        MAIN,
        'user',
        'add',
        '--data-dir',
        join(dir, 'data'),
        '--email',
        'bench@connect',
        '--password',
        'secret',
        '--authority',
        'TENANT_ADMIN',
      ],
      { stdio: 'ignore' },
    );
    const d = await serve(dir, config);
    daemon = d;
    const ca = readFileSync(serverCert);
    const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
      httpsPost(d.port, ca, path, JSON.stringify(body), headers);
    const login = await post('/api/auth/login', { username: 'bench@connect', password: 'secret' });
    const auth = { 'X-Authorization': `Bearer ${(JSON.parse(login.text) as { token: string }).token}` };
    const create = async (name: string, credentials: Record<string, unknown>): Promise<void> => {
      const r = await post('/api/device-with-credentials', { device: { name }, credentials }, auth);
      if (r.status !== 200) throw new Error(`${name}: ${r.status} ${r.text}`);
    };
    const pems: Array<{ pem: string }> = [];
    const clients: Record<Kind, Client[]> = {
      token: [],
      basic: [],
      tlsToken: [],
      x509: [],
      bareTls: [],
      bareTlsCert: [],
    };
    for (let i = 0; i < CLIENTS; i++) {
      const token = `bench-token-${String(i).padStart(4, '0')}`;
      await create(`tok-${i}`, { credentialsType: 'ACCESS_TOKEN', credentialsId: token });
      clients.token.push({ connect: { clientId: `t-${i}`, username: token } });
      clients.tlsToken.push({ connect: { clientId: `tt-${i}`, username: token }, tls: createSecureContext({ ca }) });
      const basic = { clientId: `basic-${i}`, userName: `user-${i}`, password: `password-${i}` };
      await create(`basic-${i}`, { credentialsType: 'MQTT_BASIC', credentialsValue: JSON.stringify(basic) });
      clients.basic.push({
        connect: { clientId: basic.clientId, username: basic.userName, password: Buffer.from(basic.password) },
      });
      const certFile = join(dir, `dev-${i}.pem`);
      const pem = (f: string): string => {
        const text = readFileSync(f, 'utf8');
        pems.push({ pem: text });
        return text;
      };
      const keyFile = join(dir, `dev-${i}.key`);
      openssl([
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        keyFile,
        '-out',
        certFile,
        '-days',
        '1',
        '-subj',
        `/CN=dev-${i}`,
      ]);
      await create(`x509-${i}`, {
        credentialsType: 'X509_CERTIFICATE',
        credentialsValue: pem(certFile),
      });
      clients.x509.push({
        connect: { clientId: `x-${i}` },
        tls: createSecureContext({ ca, cert: readFileSync(certFile), key: readFileSync(keyFile) }),
      });
    }
    clients.bareTls = clients.tlsToken;
    clients.bareTlsCert = clients.x509;
    const bare = await spawnBareTls(serverCert, serverKey);
    bareProc = bare.proc;
    await loginCost(dir, pems);
    const run = (k: Kind): Promise<RoundResult> =>
      k === 'bareTls' || k === 'bareTlsCert'
        ? runKind(bare.port, clients[k], bare.proc.pid as number)
        : runKind(k === 'tlsToken' || k === 'x509' ? d.mqtts : d.mqtt, clients[k], d.proc.pid as number);
    // warm-up, not counted
    for (const k of KINDS) await run(k);
    const results: Record<Kind, RoundResult[]> = {
      token: [],
      basic: [],
      tlsToken: [],
      x509: [],
      bareTls: [],
      bareTlsCert: [],
    };
    for (let r = 0; r < ROUNDS; r++) {
      const order = KINDS.map((_, i) => KINDS[(i + r) % KINDS.length] as Kind);
      for (const k of order) results[k].push(await run(k));
    }
    const med = (k: Kind, f: keyof RoundResult): number => median(results[k].map((x) => x[f]));
    const row = (k: Kind, base?: Kind): string => {
      const ratio =
        base === undefined
          ? '— | — | —'
          : [
              (med(base, 'rate') / med(k, 'rate')).toFixed(2),
              (med(k, 'p50') / med(base, 'p50')).toFixed(2),
              (med(k, 'cpuUs') / med(base, 'cpuUs')).toFixed(2),
            ]
              .map((x) => `${x}x`)
              .join(' | ');
      const figures = [
        med(k, 'rate').toFixed(0),
        med(k, 'p50').toFixed(2),
        med(k, 'p99').toFixed(2),
        med(k, 'cpuUs').toFixed(0),
      ];
      return `| ${LABEL[k]} | ${figures.join(' | ')} | ${ratio} |`;
    };
    console.log(
      `\nMQTT CONNECT, ${CLIENTS} clients, ${SECONDS} s per kind, median of ${ROUNDS} rounds (node ${process.version})\n`,
    );
    console.log(
      '| credentials | CONNECTs/s | CONNACK p50 ms | p99 ms | server CPU µs/CONNECT | time per CONNECT vs baseline | p50 vs baseline | CPU vs baseline |',
    );
    console.log('|---|---|---|---|---|---|---|---|');
    console.log(row('token'));
    console.log(row('basic', 'token'));
    console.log(row('tlsToken'));
    console.log(row('x509', 'tlsToken'));
    console.log(row('bareTls'));
    console.log(row('bareTlsCert', 'bareTls'));
  } finally {
    if (daemon !== undefined) await stopDaemon(daemon);
    bareProc?.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
