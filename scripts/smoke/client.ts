/**
 * The host side of scripts/arm-smoke.sh: talks HTTP, MQTT and CoAP to a gateway running under qemu-user and checks
 * its answers. Runs on the build machine's own Node (fast), so the emulated daemon is the only thing being measured.
 *
 *   node dist/scripts/smoke/client.js write      <url> <deviceToken> <deviceId> <email> <password>
 *   node dist/scripts/smoke/client.js transports <url> <mqttPort> <coapPort> <deviceToken> <deviceId> <email> <password>
 *   node dist/scripts/smoke/client.js verify     <url> <deviceId> <email> <password> [transports]
 *   node dist/scripts/smoke/client.js load       <url> <deviceToken> <seconds> <connections> <pid> guest32|-
 *   node dist/scripts/smoke/client.js rss        <pid> guest32|-
 * Each prints one JSON line; `write`, `transports` and `verify` exit 1 when an answer is not what was posted.
 * `verify ... transports` also reads back the readings `transports` sent.
 */
import { randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { readFileSync } from 'node:fs';
import { type ParsedPacket, generate, parse } from 'coap-packet';
import { connectAsync } from 'mqtt';

/** One hour of 10-s points (360) of `t` = 0..359 from a fixed, hour-aligned start. */
const T0 = 1_700_000_000_000 - (1_700_000_000_000 % 3_600_000);
const N = 360;
const STEP = 10_000;

function fail(msg: string): never {
  process.stderr.write(`smoke: ${msg}\n`);
  process.exit(1);
}

/** `promise`, or a failure naming `what` once `ms` have passed without its answer. */
async function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  const timer = setTimeout(() => fail(`${what}: no answer within ${ms / 1000} s`), ms);
  try {
    return await promise;
  } finally {
    clearTimeout(timer);
  }
}

async function login(url: string, email: string, password: string): Promise<string> {
  const r = await fetch(`${url}/api/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: email, password }),
  });
  if (r.status !== 200) fail(`login: ${r.status} ${await r.text()}`);
  return ((await r.json()) as { token: string }).token;
}

type Series = Record<string, { ts: number; value: string }[]>;

async function query(url: string, jwt: string, deviceId: string, params: string): Promise<Series> {
  const r = await fetch(`${url}/api/plugins/telemetry/DEVICE/${deviceId}/values/timeseries?${params}`, {
    headers: { 'x-authorization': `Bearer ${jwt}` },
  });
  if (r.status !== 200) fail(`query ${params}: ${r.status} ${await r.text()}`);
  return (await r.json()) as Series;
}

/** Raw points back in order, and the hourly AVG (0..359 → 179.5), with their wall times. */
async function readBack(url: string, jwt: string, deviceId: string): Promise<Record<string, number>> {
  const range = `keys=t&startTs=${T0}&endTs=${T0 + N * STEP}`;
  let t = performance.now();
  const raw = (await query(url, jwt, deviceId, `${range}&limit=1000&orderBy=ASC`))['t'] ?? [];
  const rawMs = performance.now() - t;
  if (raw.length !== N) fail(`raw query: ${raw.length} points, want ${N}`);
  raw.forEach((p, i) => {
    if (p.ts !== T0 + i * STEP || Number(p.value) !== i) fail(`raw point ${i}: ${JSON.stringify(p)}`);
  });
  t = performance.now();
  const agg = (await query(url, jwt, deviceId, `${range}&agg=AVG&interval=3600000`))['t'] ?? [];
  const aggMs = performance.now() - t;
  const avg = Number(agg[0]?.value);
  if (agg.length !== 1 || avg !== 179.5) fail(`AVG query: ${JSON.stringify(agg)}`);
  return { rawPoints: raw.length, rawQueryMs: Math.round(rawMs), avg, aggQueryMs: Math.round(aggMs) };
}

async function write(url: string, token: string, deviceId: string, email: string, password: string): Promise<void> {
  const t = performance.now();
  // Six posts of 60 records: the array form devices use when they flush a buffer.
  for (let b = 0; b < N / 60; b++) {
    const body = Array.from({ length: 60 }, (_, j) => ({ ts: T0 + (b * 60 + j) * STEP, values: { t: b * 60 + j } }));
    const r = await fetch(`${url}/api/v1/${token}/telemetry`, { method: 'POST', body: JSON.stringify(body) });
    if (r.status !== 200) fail(`post ${b}: ${r.status} ${await r.text()}`);
  }
  const postMs = performance.now() - t;
  const jwt = await login(url, email, password);
  console.log(JSON.stringify({ posted: N, postMs: Math.round(postMs), ...(await readBack(url, jwt, deviceId)) }));
}

/** One reading per transport, each under its own key at a known ts (outside the `t` hour, so readBack is unchanged). */
const VIA_MQTT = { key: 'viaMqtt', ts: T0 - 2 * STEP, value: 21.5 };
const VIA_COAP = { key: 'viaCoap', ts: T0 - STEP, value: 22.75 };

/** The MQTT and CoAP readings back through the REST query API, one query for both keys. */
async function readBackTransports(url: string, jwt: string, deviceId: string): Promise<Record<string, number>> {
  const t = performance.now();
  const params = `keys=${VIA_MQTT.key},${VIA_COAP.key}&startTs=${VIA_MQTT.ts}&endTs=${VIA_COAP.ts + 1}&limit=10`;
  const got = await query(url, jwt, deviceId, params);
  const ms = performance.now() - t;
  for (const want of [VIA_MQTT, VIA_COAP]) {
    const points = got[want.key] ?? [];
    if (points.length !== 1 || points[0]?.ts !== want.ts || Number(points[0]?.value) !== want.value)
      fail(`${want.key}: ${JSON.stringify(points)}, want [{"ts":${want.ts},"value":${want.value}}]`);
  }
  return { transportsQueryMs: Math.round(ms) };
}

async function verify(
  url: string,
  deviceId: string,
  email: string,
  password: string,
  withTransports: boolean,
): Promise<void> {
  const jwt = await login(url, email, password);
  const raw = await readBack(url, jwt, deviceId);
  console.log(JSON.stringify(withTransports ? { ...raw, ...(await readBackTransports(url, jwt, deviceId)) } : raw));
}

/** A QoS 1 publish to the device API with the access token as user name; resolves at its PUBACK. */
async function viaMqtt(port: number, token: string): Promise<Record<string, number>> {
  let t = performance.now();
  const client = await connectAsync({
    host: '127.0.0.1',
    port,
    username: token,
    protocolVersion: 4,
    reconnectPeriod: 0,
    connectTimeout: 60_000,
  });
  const connackMs = performance.now() - t;
  t = performance.now();
  // publishAsync resolves with the publish once its PUBACK is in; the PUBACK itself is checked from the wire.
  const pubacks: number[] = [];
  client.on('packetreceive', (p) => {
    if (p.cmd === 'puback' && p.messageId !== undefined) pubacks.push(p.messageId);
  });
  const body = JSON.stringify({ ts: VIA_MQTT.ts, values: { [VIA_MQTT.key]: VIA_MQTT.value } });
  const sent = await client.publishAsync('v1/devices/me/telemetry', body, { qos: 1 });
  const pubackMs = performance.now() - t;
  await client.endAsync();
  if (sent?.cmd !== 'publish' || sent.messageId === undefined || !pubacks.includes(sent.messageId))
    fail(`MQTT publish ${JSON.stringify(sent)}: no PUBACK (got ${JSON.stringify(pubacks)})`);
  return { mqttConnackMs: Math.round(connackMs), mqttPubackMs: Math.round(pubackMs) };
}

/**
 * A CON POST of one reading to /api/v1/{token}/telemetry; resolves at its 2.01, piggybacked or separate (after an
 * empty ACK, as the daemon answers a commit slower than coap.piggybackMs: docs/coap.md). Retransmits as RFC 7252
 * says (2 s, doubling, 4 times) until the request is acknowledged.
 */
async function viaCoap(port: number, token: string): Promise<Record<string, number | boolean>> {
  const socket = createSocket('udp4');
  await new Promise<void>((r) => socket.bind(0, '127.0.0.1', () => r()));
  const messageId = Math.floor(Math.random() * 0x10000);
  const requestToken = randomBytes(4);
  const body = JSON.stringify({ ts: VIA_COAP.ts, values: { [VIA_COAP.key]: VIA_COAP.value } });
  const request = generate({
    code: 'POST',
    messageId,
    token: requestToken,
    confirmable: true,
    options: [
      ...['api', 'v1', token, 'telemetry'].map((seg) => ({ name: 'Uri-Path' as const, value: Buffer.from(seg) })),
      { name: 'Content-Format', value: Buffer.from([50]) },
    ],
    payload: Buffer.from(body),
  });
  const t = performance.now();
  let acked = false;
  let separate = false;
  let timer: NodeJS.Timeout | undefined;
  try {
    const answer = await new Promise<ParsedPacket>((resolve) => {
      socket.on('message', (buf) => {
        let p: ParsedPacket;
        try {
          p = parse(buf);
        } catch {
          return;
        }
        if (p.ack && p.messageId === messageId) acked = true;
        if (p.code === '0.00') return;
        if (!p.token.equals(requestToken)) return;
        if (p.confirmable) {
          separate = true;
          socket.send(generate({ code: '0.00', messageId: p.messageId, ack: true }), port, '127.0.0.1');
        }
        resolve(p);
      });
      let wait = 2000;
      let sends = 0;
      const send = (): void => {
        if (acked) return;
        if (sends > 4) fail('CoAP POST: no ACK after 4 retransmissions');
        sends++;
        socket.send(request, port, '127.0.0.1');
        timer = setTimeout(send, wait);
        wait *= 2;
      };
      send();
    });
    const ms = performance.now() - t;
    if (answer.code !== '2.01') fail(`CoAP POST: ${answer.code} ${answer.payload.toString()}`);
    return { coapCreatedMs: Math.round(ms), coapSeparate: separate };
  } finally {
    clearTimeout(timer);
    socket.close();
  }
}

/** The MQTT reading, then the CoAP one, then both read back through REST. */
async function transports(
  url: string,
  mqttPort: number,
  coapPort: number,
  token: string,
  deviceId: string,
  email: string,
  password: string,
): Promise<void> {
  if (!(mqttPort > 0) || !(coapPort > 0)) fail(`no MQTT (${mqttPort}) or CoAP (${coapPort}) port`);
  const m = await within(60_000, 'MQTT CONNECT and QoS 1 PUBLISH', viaMqtt(mqttPort, token));
  const c = await within(60_000, 'CoAP CON POST', viaCoap(coapPort, token));
  const jwt = await login(url, email, password);
  console.log(JSON.stringify({ ...m, ...c, ...(await readBackTransports(url, jwt, deviceId)) }));
}

/**
 * Anonymous resident memory of the daemon's process, in kB: `total` is RssAnon (under qemu-user: the emulator's
 * process, guest and qemu's own translated-code buffer and heap together: an upper bound). `guest` is given for a
 * 32-bit guest only: qemu-user maps all of its memory below 4 GiB (guest_base 0 here), apart from qemu's own
 * mappings (at 0x5555... and 0x7f...), so the sum below 4 GiB is the program's own figure. A 64-bit guest's V8
 * places its heap at random 47-bit addresses among qemu's mappings: no such split there (null).
 */
export function anonKb(pid: number, guest32 = false): { total: number; guest: number | null } {
  const m = /RssAnon:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  let guest = 0;
  let low = false;
  if (guest32) {
    for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
      const range = /^([0-9a-f]+)-[0-9a-f]+ /.exec(line);
      if (range) low = parseInt(range[1] ?? '', 16) < 2 ** 32;
      else if (low && line.startsWith('Anonymous:')) guest += Number(line.slice(10).trim().split(' ')[0]);
    }
  }
  return { total: m ? Number(m[1]) : 0, guest: guest32 ? guest : null };
}

function rssAnonKb(pid: number): number {
  return anonKb(pid).total;
}

/** `connections` loops posting a 10-key body for `seconds`; samples the daemon's RssAnon every 200 ms. */
async function load(
  url: string,
  token: string,
  seconds: number,
  connections: number,
  pid: number,
  guest32: boolean,
): Promise<void> {
  const end = performance.now() + seconds * 1000;
  let posts = 0;
  let maxRss = rssAnonKb(pid);
  let maxGuest: number | null = null;
  const sample = (): void => {
    const a = anonKb(pid, guest32);
    maxRss = Math.max(maxRss, a.total);
    if (a.guest !== null) maxGuest = Math.max(maxGuest ?? 0, a.guest);
  };
  const sampler = setInterval(sample, 200);
  const worker = async (c: number): Promise<void> => {
    while (performance.now() < end) {
      const values: Record<string, number> = {};
      for (let k = 0; k < 10; k++) values[`k${k}`] = c * 1000 + k + Math.random();
      const r = await fetch(`${url}/api/v1/${token}/telemetry`, { method: 'POST', body: JSON.stringify(values) });
      if (r.status !== 200) fail(`load post: ${r.status} ${await r.text()}`);
      await r.arrayBuffer();
      posts++;
    }
  };
  await Promise.all(Array.from({ length: connections }, (_, c) => worker(c)));
  clearInterval(sampler);
  sample();
  console.log(
    JSON.stringify({
      posts,
      postsPerSec: Math.round(posts / seconds),
      points: posts * 10,
      maxRssAnonKb: maxRss,
      maxGuestAnonKb: maxGuest,
    }),
  );
}

const [cmd, ...a] = process.argv.slice(2);
const [a0 = '', a1 = '', a2 = '', a3 = '', a4 = '', a5 = '', a6 = ''] = a;
if (cmd === 'write' && a.length === 5) await write(a0, a1, a2, a3, a4);
else if (cmd === 'transports' && a.length === 7) await transports(a0, Number(a1), Number(a2), a3, a4, a5, a6);
else if (cmd === 'verify' && (a.length === 4 || (a.length === 5 && a4 === 'transports')))
  await verify(a0, a1, a2, a3, a.length === 5);
else if (cmd === 'rss' && a.length === 2) console.log(JSON.stringify(anonKb(Number(a[0]), a[1] === 'guest32')));
else if (cmd === 'load' && a.length === 6)
  await load(a0, a1, Number(a[2]), Number(a[3]), Number(a[4]), a[5] === 'guest32');
else fail('usage: client.js write|transports|verify|load|rss ... (see the header of scripts/smoke/client.ts)');
