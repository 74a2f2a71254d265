/**
 * A seeded randomized fault run, end to end (docs/design/soak.md): a LAN-side Outpost syncing over the MQTT
 * gateway session, through a proxy that can blackhole the link, into an upstream Outpost, which syncs over HTTP
 * into a stand-in ThingsBoard. Devices post over HTTP, MQTT QoS 1, a LAN gateway's Gateway API and CoAP while the
 * faults run, the LAN's wall clock among them (libfaketime); RPCs go down from the upstream's REST API. The checker then compares what was acknowledged with
 * what every store holds. Loopback only; every loop ends with the run.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type MqttClient, connectAsync } from 'mqtt';
import { FakeTb } from '../../test/helpers/fake-tb.js';
import { rng } from '../../test/helpers/prng.js';
import { cliJson } from '../../test/helpers/server.js';
import { SoakCoapDevice } from './soak-coap.js';
import { BlackholeProxy, Daemon, SmallDisk, SteppedClock, freeUdpPort, slope } from './soak-rig.js';
import { check, type Ledger, type Reading, type RpcCall, type SoakReport } from './soak-check.js';

export interface SoakOptions {
  minutes: number;
  seed: number;
  /** how the LAN syncs into the upstream Outpost: its MQTT gateway session (both ways) or TB's HTTP device API */
  transport?: 'mqtt' | 'http';
  /** progress lines (stderr in the benchmark) */
  log?: (line: string) => void;
  /** given every daemon log line at the end of the run (kept by the caller when the run fails) */
  daemonLogs?: (lines: string[]) => void;
}

export type FaultKind = 'kill9' | 'sigterm' | 'upstreamStop' | 'blackhole' | 'diskFull' | 'mqttDrop' | 'clockStep';
export const FAULT_KINDS: readonly FaultKind[] = [
  'kill9',
  'sigterm',
  'upstreamStop',
  'blackhole',
  'diskFull',
  'mqttDrop',
  'clockStep',
];

export interface FaultEntry {
  /** s since the run began */
  at: number;
  /** Date.now() when it began */
  wall: number;
  kind: FaultKind;
  detail: string;
  /** ms the LAN's backlog took to drain after this fault healed; undefined when not measured or not drained */
  drainMs?: number;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const HTTP_DEVICES = 3;
const MQTT_DEVICES = 3;
const SUB_DEVICES = 3;
const COAP_DEVICES = 2;

async function req(
  method: string,
  url: string,
  body?: string,
  headers: Record<string, string> = {},
  timeoutMs = 5_000,
): Promise<{ status: number; text: string }> {
  const res = await fetch(url, {
    method,
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
    body,
    signal: AbortSignal.timeout(timeoutMs),
  });
  return { status: res.status, text: await res.text() };
}

async function adminJwt(d: Daemon, email: string): Promise<Record<string, string>> {
  await cliJson([
    'user',
    'add',
    '--data-dir',
    d.dataDir,
    '--email',
    email,
    '--password',
    'soak-pass-1',
    '--authority',
    'TENANT_ADMIN',
  ]);
  const r = await req('POST', `${d.url}/api/auth/login`, JSON.stringify({ username: email, password: 'soak-pass-1' }));
  return { 'X-Authorization': `Bearer ${(JSON.parse(r.text) as { token: string }).token}` };
}

export async function runSoak(o: SoakOptions): Promise<SoakReport> {
  const log = o.log ?? (() => undefined);
  // two streams: the load's pauses, drawn as its requests finish, must not shift the schedule of faults
  const random = rng(o.seed);
  const loadRandom = rng(o.seed ^ 0x5eed5eed);
  const runMs = o.minutes * 60_000;
  /** short runs get short faults, so that each kind fits in a minute */
  const scale = o.minutes >= 5 ? 1 : 0.25;
  const between = (lo: number, hi: number): number => Math.round((lo + random() * (hi - lo)) * scale);
  const base = join(tmpdir(), `outpost-soak-${process.pid}-${Date.now()}`);
  const disk = new SmallDisk(96);
  mkdirSync(base, { recursive: true });
  const clock = new SteppedClock(base);
  const tb = await FakeTb.start();
  const cleanups: Array<() => Promise<void> | void> = [() => tb.close(), () => disk.remove()];
  const ledger: Ledger = { readings: [], rpcs: [], received: new Map() };
  const faults: FaultEntry[] = [];
  const samples: Array<{ daemon: string; run: number; age: number; at: number; rssAnon: number; fds: number }> = [];
  let stopping = false;
  /** HTTP answers other than 200 to device posts, by status: a fault that bites shows here */
  const refusals = new Map<number, number>();
  /** CoAP posts not answered 2.01, by their answer ('timeout' when given up) */
  const coapRefusals = new Map<string, number>();
  const t0 = Date.now();

  try {
    // the upstream Outpost: devices arrive through the LAN's gateway session; it provisions them in the stand-in TB
    const upDir = join(base, 'up');
    mkdirSync(upDir, { recursive: true });
    const upCfg = join(upDir, 'config.json');
    writeFileSync(
      upCfg,
      JSON.stringify({
        mqtt: { port: -1, tlsPort: 0 },
        provision: { key: 'soak-pk', secret: 'soak-ps' },
        sync: { url: tb.url, provisionKey: 'pk', provisionSecret: 'ps', retryBaseMs: 100, retryMaxMs: 2_000 },
      }),
    );
    const up = new Daemon('upstream', join(upDir, 'data'), upCfg);
    cleanups.unshift(() => up.stop('SIGKILL'));
    await up.start();
    const upHeaders = await adminJwt(up, 'soak@upstream.test');
    const gwDev = await cliJson(['device', 'add', '--data-dir', up.dataDir, '--name', 'soak-site', '--gateway']);
    const overMqtt = (o.transport ?? 'mqtt') === 'mqtt';
    const proxy = new BlackholeProxy(() => (overMqtt ? up.mqttPort : up.port));
    await proxy.start();
    cleanups.unshift(() => proxy.close());

    // the LAN-side Outpost, its data dir on the small disk
    const lanCfgDir = join(base, 'lan');
    mkdirSync(lanCfgDir, { recursive: true });
    const lanCfg = join(lanCfgDir, 'config.json');
    // a fixed CoAP port: a device keeps its target across the daemon's restarts, as a sensor in the field does
    const coapPort = await freeUdpPort();
    writeFileSync(
      lanCfg,
      JSON.stringify({
        mqtt: { port: -1, tlsPort: 0 },
        coap: { port: coapPort },
        sync: overMqtt
          ? {
              url: `mqtt://127.0.0.1:${proxy.port}`,
              gatewayToken: (gwDev as { token: string }).token,
              retryBaseMs: 100,
              retryMaxMs: 2_000,
              announceMs: 5_000,
            }
          : {
              // each device provisioned in the upstream Outpost under its name (its default profile's key)
              url: `http://127.0.0.1:${proxy.port}`,
              provisionKey: 'soak-pk',
              provisionSecret: 'soak-ps',
              retryBaseMs: 100,
              retryMaxMs: 2_000,
            },
      }),
    );
    const lan = new Daemon('lan', disk.sub('lan-data'), lanCfg, clock.env);
    cleanups.unshift(() => lan.stop('SIGKILL'));
    await lan.start();
    const lanHeaders = await adminJwt(lan, 'soak@lan.test');
    const tokens = new Map<string, string>();
    const add = async (name: string, extra: string[] = []): Promise<void> => {
      const d = await cliJson<{ token: string }>([
        'device',
        'add',
        '--data-dir',
        lan.dataDir,
        '--name',
        name,
        ...extra,
      ]);
      tokens.set(name, d.token);
    };
    for (let i = 0; i < HTTP_DEVICES; i++) await add(`soak-h${i}`);
    for (let i = 0; i < MQTT_DEVICES; i++) await add(`soak-m${i}`);
    for (let i = 0; i < COAP_DEVICES; i++) await add(`soak-c${i}`);
    await add('soak-lan-gw', ['--gateway']);
    const subNames = Array.from({ length: SUB_DEVICES }, (_, i) => `soak-g${i}`);
    log(
      `seed ${o.seed}: ${o.minutes} min over ${overMqtt ? 'MQTT' : 'HTTP'}; LAN ${lan.url} coap ${lan.coapPort} (disk ${disk.mounted ? 'tmpfs 96 MiB' : 'plain'}; clock ${clock.available ? `stepped through ${clock.library}` : 'not stepped: libfaketime not installed (Debian package faketime)'}), upstream ${up.url}, TB ${tb.url}`,
    );

    const loadEnd = t0 + runMs;
    let seq = 0;
    const nextValue = (): number => ++seq;
    let lastClientTs = 0;
    /** client stamps unique per run: a device never posts two readings of one ts */
    const clientTs = (): number => {
      lastClientTs = Math.max(Date.now(), lastClientTs + 1);
      return lastClientTs;
    };
    const record = (device: string, via: Reading['via'], key: 'c' | 's', value: number, ts?: number): Reading => {
      const r: Reading = { device, via, key, value, ts, sentAt: Date.now() };
      ledger.readings.push(r);
      return r;
    };

    // HTTP devices: one request at a time, every 150-400 ms, a client stamp on every other reading
    const httpLoop = async (name: string): Promise<void> => {
      const token = tokens.get(name) as string;
      for (let i = 0; Date.now() < loadEnd && !stopping && i < 1_000_000; i++) {
        const stamped = i % 2 === 0;
        const r = record(name, 'http', stamped ? 'c' : 's', nextValue(), stamped ? clientTs() : undefined);
        const body = stamped ? `{"ts":${r.ts},"values":{"c":${r.value}}}` : `{"s":${r.value}}`;
        try {
          const a = await req('POST', `${lan.url}/api/v1/${token}/telemetry`, body);
          if (a.status === 200) r.ackedAt = Date.now();
          else refusals.set(a.status, (refusals.get(a.status) ?? 0) + 1);
        } catch {
          // refused or timed out: sent, not acknowledged
        }
        await sleep(150 + Math.floor(loadRandom() * 250));
      }
    };

    // MQTT clients: a session per connection (no reconnects of MQTT.js), opened again whenever it is lost
    const mqttClients = new Set<MqttClient>();
    const openMqtt = async (token: string): Promise<MqttClient | undefined> => {
      try {
        const c = await connectAsync(`mqtt://127.0.0.1:${lan.mqttPort}`, {
          username: token,
          reconnectPeriod: 0,
          connectTimeout: 3_000,
          keepalive: 10,
          protocolVersion: 4,
        });
        c.on('error', () => undefined);
        mqttClients.add(c);
        c.once('close', () => mqttClients.delete(c));
        return c;
      } catch {
        return undefined;
      }
    };
    const publish = (c: MqttClient, topic: string, payload: string, r: Reading): Promise<boolean> =>
      new Promise((resolve) => {
        const timer = setTimeout(() => resolve(false), 5_000);
        c.publish(topic, payload, { qos: 1 }, (err) => {
          clearTimeout(timer);
          if (err === undefined || err === null) r.ackedAt ??= Date.now();
          resolve(err === undefined || err === null);
        });
      });

    const mqttLoop = async (name: string, rpcTarget: boolean): Promise<void> => {
      const token = tokens.get(name) as string;
      let c: MqttClient | undefined;
      for (let i = 0; Date.now() < loadEnd && !stopping && i < 1_000_000; i++) {
        if (c === undefined || !c.connected) {
          c?.end(true);
          c = await openMqtt(token);
          if (c === undefined) {
            await sleep(300);
            continue;
          }
          if (rpcTarget) {
            const client = c;
            client.on('message', (topic, payload) => {
              if (!topic.startsWith('v1/devices/me/rpc/request/')) return;
              const n = (JSON.parse(payload.toString()) as { params?: { n?: number } }).params?.n;
              if (typeof n === 'number') ledger.received.set(n, [...(ledger.received.get(n) ?? []), name]);
              client.publish(topic.replace('request', 'response'), JSON.stringify({ n }), { qos: 1 });
            });
            await c.subscribeAsync('v1/devices/me/rpc/request/+', { qos: 1 }).catch(() => undefined);
          }
        }
        const stamped = i % 2 === 0;
        const r = record(name, 'mqtt', stamped ? 'c' : 's', nextValue(), stamped ? clientTs() : undefined);
        const body = stamped ? `{"ts":${r.ts},"values":{"c":${r.value}}}` : `{"s":${r.value}}`;
        if (!(await publish(c, 'v1/devices/me/telemetry', body, r))) c.end(true);
        await sleep(150 + Math.floor(loadRandom() * 250));
      }
      c?.end(true);
    };

    const gatewayLoop = async (): Promise<void> => {
      const token = tokens.get('soak-lan-gw') as string;
      let c: MqttClient | undefined;
      for (let i = 0; Date.now() < loadEnd && !stopping && i < 1_000_000; i++) {
        if (c === undefined || !c.connected) {
          c?.end(true);
          c = await openMqtt(token);
          if (c === undefined) {
            await sleep(300);
            continue;
          }
        }
        const name = subNames[i % subNames.length] as string;
        const stamped = Math.floor(i / subNames.length) % 2 === 0;
        const r = record(name, 'gateway', stamped ? 'c' : 's', nextValue(), stamped ? clientTs() : undefined);
        const entry = stamped ? `{"ts":${r.ts},"values":{"c":${r.value}}}` : `{"s":${r.value}}`;
        if (!(await publish(c, 'v1/gateway/telemetry', `{${JSON.stringify(name)}:[${entry}]}`, r))) c.end(true);
        await sleep(60 + Math.floor(loadRandom() * 100));
      }
      c?.end(true);
    };

    // CoAP devices: CON posts one at a time, every 150-400 ms, acknowledged only by their 2.01 (soak-coap.ts)
    const coapLoop = async (name: string): Promise<void> => {
      const token = tokens.get(name) as string;
      const dev = await SoakCoapDevice.open(() => (lan.up ? lan.coapPort : coapPort), loadRandom);
      try {
        for (let i = 0; Date.now() < loadEnd && !stopping && i < 1_000_000; i++) {
          const stamped = i % 2 === 0;
          const r = record(name, 'coap', stamped ? 'c' : 's', nextValue(), stamped ? clientTs() : undefined);
          const body = stamped ? `{"ts":${r.ts},"values":{"c":${r.value}}}` : `{"s":${r.value}}`;
          const a = await dev.post(`api/v1/${token}/telemetry`, body);
          r.lastSentAt = a.lastSentAt;
          if (a.created) r.ackedAt = Date.now();
          else coapRefusals.set(a.code, (coapRefusals.get(a.code) ?? 0) + 1);
          await sleep(150 + Math.floor(loadRandom() * 250));
        }
      } finally {
        dev.close();
      }
    };

    // the HTTP RPC target long-polls; the MQTT one answers in mqttLoop
    const rpcPollLoop = async (name: string): Promise<void> => {
      const token = tokens.get(name) as string;
      for (let i = 0; Date.now() < loadEnd + 30_000 && !stopping && i < 1_000_000; i++) {
        try {
          const a = await req('GET', `${lan.url}/api/v1/${token}/rpc?timeout=3000`, undefined, {}, 6_000);
          if (a.status !== 200) {
            if (a.status !== 408) await sleep(200);
            continue;
          }
          const call = JSON.parse(a.text) as { id: number; params?: { n?: number } };
          const n = call.params?.n;
          if (typeof n === 'number') ledger.received.set(n, [...(ledger.received.get(n) ?? []), name]);
          await req('POST', `${lan.url}/api/v1/${token}/rpc/${call.id}`, JSON.stringify({ n }));
        } catch {
          await sleep(200);
        }
      }
    };

    const upIds = new Map<string, string>();
    const upstreamId = async (name: string): Promise<string | undefined> => {
      if (upIds.has(name)) return upIds.get(name);
      const a = await req('GET', `${up.url}/api/tenant/devices?deviceName=${name}`, undefined, upHeaders);
      if (a.status !== 200) return undefined;
      const id = (JSON.parse(a.text) as { id: { id: string } }).id.id;
      upIds.set(name, id);
      return id;
    };
    let rpcSeq = 0;
    const rpcLoop = async (): Promise<void> => {
      const targets = ['soak-h0', 'soak-m0'];
      // over HTTP nothing comes down (docs/sync.md): no RPC to check
      for (let i = 0; overMqtt && Date.now() < loadEnd && !stopping && i < 100_000; i++) {
        await sleep(800 + Math.floor(loadRandom() * 1_200));
        const target = targets[i % targets.length] as string;
        let id: string | undefined;
        try {
          id = up.up ? await upstreamId(target) : undefined;
        } catch {
          id = undefined;
        }
        if (id === undefined) continue;
        const n = 1_000_000 + ++rpcSeq;
        const call: RpcCall = { n, device: target, sentAt: Date.now(), status: 0 };
        ledger.rpcs.push(call);
        try {
          const a = await req(
            'POST',
            `${up.url}/api/plugins/rpc/twoway/${id}`,
            JSON.stringify({ method: 'soak', params: { n }, timeout: 8_000 }),
            upHeaders,
            12_000,
          );
          call.status = a.status;
          call.answeredAt = Date.now();
          if (a.status === 200) call.reply = a.text;
        } catch {
          call.status = -1;
        }
      }
    };

    // samples of both daemons every 5 s
    const sampler = async (): Promise<void> => {
      for (let i = 0; !stopping && i < 100_000; i++) {
        for (const d of [lan, up]) {
          const s = d.sample();
          if (s !== undefined)
            samples.push({ daemon: d.name, run: d.runs, age: Date.now() - d.startedAt, at: Date.now(), ...s });
        }
        await sleep(5_000);
      }
    };

    // the LAN's drain after each outage: until nothing older than the heal is pending
    const lanSync = async (): Promise<{ backlogPoints: number; oldestPendingTs: number | null } | undefined> => {
      if (!lan.up) return undefined;
      try {
        const a = await req('GET', `${lan.url}/api/outpost/sync`, undefined, lanHeaders, 3_000);
        return a.status === 200
          ? (JSON.parse(a.text) as { backlogPoints: number; oldestPendingTs: number | null })
          : undefined;
      } catch {
        return undefined;
      }
    };
    const watchDrain = async (f: FaultEntry, healedAt: number): Promise<void> => {
      for (let i = 0; i < 2_000 && Date.now() - healedAt < 180_000 && !stopping; i++) {
        const s = await lanSync();
        if (s !== undefined && (s.oldestPendingTs === null || s.oldestPendingTs >= healedAt)) {
          f.drainMs = Date.now() - healedAt;
          return;
        }
        await sleep(250);
      }
    };

    // the fault schedule: every kind once in a seeded order, then a seeded pick, a kill -9 about every minute
    const kinds = FAULT_KINDS.filter(
      (k) => (k !== 'diskFull' || disk.mounted) && (k !== 'clockStep' || clock.available),
    );
    const order = [...kinds];
    for (let k = order.length - 1; k > 0; k--) {
      const j = Math.floor(random() * (k + 1));
      [order[k], order[j]] = [order[j] as FaultKind, order[k] as FaultKind];
    }
    let lastKill = Date.now();
    const faultLoop = async (): Promise<void> => {
      await sleep(between(8_000, 12_000));
      for (let i = 0; Date.now() < loadEnd - 8_000 * scale && !stopping && i < 10_000; i++) {
        const killAfter = 50_000 + random() * 20_000;
        const pick = kinds[Math.floor(random() * kinds.length)] as FaultKind;
        let kind: FaultKind;
        if (i < order.length) kind = order[i] as FaultKind;
        else if (Date.now() - lastKill > killAfter) kind = 'kill9';
        else kind = pick;
        const f: FaultEntry = { at: Math.round((Date.now() - t0) / 1000), wall: Date.now(), kind, detail: '' };
        faults.push(f);
        let drains = true;
        switch (kind) {
          case 'kill9': {
            await lan.stop('SIGKILL');
            const down = between(500, 4_000);
            f.detail = `LAN kill -9, down ${down} ms`;
            lastKill = Date.now();
            await sleep(down);
            await lan.start();
            break;
          }
          case 'sigterm': {
            await lan.stop('SIGTERM');
            const down = between(500, 4_000);
            f.detail = `LAN SIGTERM, down ${down} ms`;
            await sleep(down);
            await lan.start();
            break;
          }
          case 'upstreamStop': {
            const frozen = between(10_000, 40_000);
            const dead = between(1_000, 10_000);
            f.detail = `upstream SIGSTOP ${frozen} ms, then kill -9, down ${dead} ms`;
            up.freeze(true);
            await sleep(frozen);
            await up.stop('SIGKILL');
            await sleep(dead);
            await up.start();
            break;
          }
          case 'blackhole': {
            const ms = between(10_000, 45_000);
            f.detail = `link blackholed ${ms} ms`;
            proxy.blackhole(true);
            await sleep(ms);
            const s = await lanSync();
            f.detail += ` (LAN backlog ${s?.backlogPoints ?? '?'} points at the end)`;
            proxy.blackhole(false);
            break;
          }
          case 'diskFull': {
            const ms = between(8_000, 25_000);
            const before = refusals.get(507) ?? 0;
            disk.fill();
            await sleep(ms);
            disk.empty();
            f.detail = `LAN disk full ${ms} ms (${(refusals.get(507) ?? 0) - before} posts answered 507)`;
            break;
          }
          case 'clockStep': {
            // back by tens of seconds to minutes, then ahead, then true time again (offsets are not scaled)
            const back = -Math.round(20 + random() * 160);
            const ahead = Math.round(20 + random() * 160);
            const heldBack = between(5_000, 20_000);
            const heldAhead = between(5_000, 20_000);
            f.detail = `LAN clock ${back} s for ${heldBack} ms, then +${ahead} s for ${heldAhead} ms, then true`;
            clock.set(back * 1000);
            await sleep(heldBack);
            clock.set(ahead * 1000);
            await sleep(heldAhead);
            clock.set(0);
            drains = false;
            break;
          }
          case 'mqttDrop': {
            f.detail = `${mqttClients.size} MQTT clients' sockets destroyed`;
            for (const c of mqttClients) c.stream.destroy();
            drains = false;
            break;
          }
        }
        log(`${f.at} s: ${f.detail}`);
        if (drains) void watchDrain(f, Date.now());
        await sleep(between(6_000, 20_000));
      }
    };

    const loops = [
      ...Array.from({ length: HTTP_DEVICES }, (_, i) => httpLoop(`soak-h${i}`)),
      ...Array.from({ length: MQTT_DEVICES }, (_, i) => mqttLoop(`soak-m${i}`, i === 0)),
      ...Array.from({ length: COAP_DEVICES }, (_, i) => coapLoop(`soak-c${i}`)),
      gatewayLoop(),
      rpcPollLoop('soak-h0'),
      rpcLoop(),
      faultLoop(),
    ];
    const sampling = sampler();
    const devicesLoops = HTTP_DEVICES + MQTT_DEVICES + COAP_DEVICES + 1;
    await Promise.all(loops.slice(0, devicesLoops).concat(loops.slice(-2)));
    log(`${((Date.now() - t0) / 1000).toFixed(0)} s: load ended; waiting for both backlogs to drain`);

    // heal everything, wait (bounded) for the LAN and the upstream to send all they hold
    proxy.blackhole(false);
    disk.empty();
    clock.set(0);
    if (!lan.up) await lan.start();
    if (!up.up) await up.start();
    const drainEnd = Date.now() + Math.max(60_000, 120_000 * scale * 4);
    let drained = false;
    for (let i = 0; i < 10_000 && Date.now() < drainEnd; i++) {
      const l = await lanSync();
      let u: { backlogPoints: number } | undefined;
      try {
        const a = await req('GET', `${up.url}/api/outpost/sync`, undefined, upHeaders, 3_000);
        u = a.status === 200 ? (JSON.parse(a.text) as { backlogPoints: number }) : undefined;
      } catch {
        u = undefined;
      }
      if (l?.backlogPoints === 0 && u?.backlogPoints === 0) {
        drained = true;
        break;
      }
      await sleep(500);
    }
    stopping = true;
    await Promise.all([loops[devicesLoops], sampling]);
    for (const c of mqttClients) c.end(true);

    o.daemonLogs?.([...lan.logs, ...up.logs]);
    const report = await check({
      seed: o.seed,
      minutes: (Date.now() - t0) / 60_000,
      ledger,
      faults,
      drained,
      lan: { daemon: lan, headers: lanHeaders },
      upstream: { daemon: up, headers: upHeaders },
      tb,
      devices: [...tokens.keys()].filter((n) => n !== 'soak-lan-gw').concat(subNames),
      samples,
      slope,
      clockSteps: clock.available ? clock.steps : undefined,
    });
    if (coapRefusals.size > 0) log(`CoAP posts not answered 2.01: ${JSON.stringify(Object.fromEntries(coapRefusals))}`);
    return { ...report, transport: overMqtt ? 'MQTT' : 'HTTP' };
  } finally {
    stopping = true;
    for (const c of cleanups) await c();
    rmSync(base, { recursive: true, force: true });
  }
}
