/**
 * The host side of scripts/arm-smoke.sh: talks HTTP to a gateway running under qemu-user and checks its answers.
 * Runs on the build machine's own Node (fast), so the emulated daemon is the only thing being measured.
 *
 *   node dist/scripts/smoke/client.js write  <url> <deviceToken> <deviceId> <email> <password>
 *   node dist/scripts/smoke/client.js verify <url> <deviceId> <email> <password>
 *   node dist/scripts/smoke/client.js load   <url> <deviceToken> <seconds> <connections> <pid> guest32|-
 *   node dist/scripts/smoke/client.js rss    <pid> guest32|-
 * Each prints one JSON line; `write` and `verify` exit 1 when an answer is not what was posted.
 */
import { readFileSync } from 'node:fs';

/** One hour of 10-s points (360) of `t` = 0..359 from a fixed, hour-aligned start. */
const T0 = 1_700_000_000_000 - (1_700_000_000_000 % 3_600_000);
const N = 360;
const STEP = 10_000;

function fail(msg: string): never {
  process.stderr.write(`smoke: ${msg}\n`);
  process.exit(1);
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

async function verify(url: string, deviceId: string, email: string, password: string): Promise<void> {
  console.log(JSON.stringify(await readBack(url, await login(url, email, password), deviceId)));
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
const [a0 = '', a1 = '', a2 = '', a3 = '', a4 = ''] = a;
if (cmd === 'write' && a.length === 5) await write(a0, a1, a2, a3, a4);
else if (cmd === 'verify' && a.length === 4) await verify(a0, a1, a2, a3);
else if (cmd === 'rss' && a.length === 2) console.log(JSON.stringify(anonKb(Number(a[0]), a[1] === 'guest32')));
else if (cmd === 'load' && a.length === 6)
  await load(a0, a1, Number(a[2]), Number(a[3]), Number(a[4]), a[5] === 'guest32');
else fail('usage: client.js write|verify|load ... (see the header of scripts/smoke/client.ts)');
