/**
 * The soak's checker (docs/design/soak.md): every acknowledged reading in the LAN store, the upstream Outpost and
 * the stand-in TB under its device with its ts and value; nothing stored that was never sent; every RPC answered
 * to its REST caller delivered once; memory and descriptors flat; no stack trace logged.
 */
import type { FakeTb } from '../../test/helpers/fake-tb.js';
import { type Daemon, offsetsDuring } from './soak-rig.js';
import type { FaultEntry, FaultKind } from './soak-run.js';

export type Via = 'http' | 'mqtt' | 'gateway' | 'coap';
const VIAS: readonly Via[] = ['http', 'mqtt', 'gateway', 'coap'];

export interface Reading {
  device: string;
  via: Via;
  /** `c`: stamped by the client (`ts` set); `s`: stamped by the server */
  key: 'c' | 's';
  /** unique in the run */
  value: number;
  ts: number | undefined;
  sentAt: number;
  /** HTTP 200, PUBACK or CoAP 2.01 */
  ackedAt?: number;
  /** CoAP: the last retransmission (the same message id) */
  lastSentAt?: number;
}

export interface RpcCall {
  n: number;
  device: string;
  sentAt: number;
  /** the REST answer's status; 0 not answered yet, -1 no answer */
  status: number;
  answeredAt?: number;
  reply?: string;
}

export interface Ledger {
  readings: Reading[];
  rpcs: RpcCall[];
  /** RPC nonce → the devices that received it, once per delivery */
  received: Map<number, string[]>;
}

export interface Sample {
  daemon: string;
  run: number;
  age: number;
  at: number;
  rssAnon: number;
  fds: number;
}

export interface CheckInput {
  seed: number;
  minutes: number;
  ledger: Ledger;
  faults: FaultEntry[];
  drained: boolean;
  lan: { daemon: Daemon; headers: Record<string, string> };
  upstream: { daemon: Daemon; headers: Record<string, string> };
  tb: FakeTb;
  devices: string[];
  samples: Sample[];
  slope: (xs: readonly number[], ys: readonly number[]) => number;
  /** the LAN clock's offsets by true time (the first 0), undefined when libfaketime was not there */
  clockSteps: ReadonlyArray<{ wall: number; offsetMs: number }> | undefined;
}

export interface SoakReport {
  seed: number;
  /** how the LAN synced into the upstream Outpost */
  transport?: string;
  minutes: number;
  acked: number;
  ackedBy: Record<Via, number>;
  sentNotAcked: number;
  lostLocal: number;
  lostUpstream: number;
  lostTb: number;
  duplicatesTb: number;
  phantoms: number;
  /** a value stored at two ts in the LAN or the upstream Outpost (a server-stamped reading processed twice) */
  storedTwice: number;
  /** ... where a CoAP retransmission went to a LAN restarted after the first copy (its duplicate memory is gone) */
  storedTwiceAfterCrash: number;
  /** server-stamped readings whose ts a later reading took under a stepped clock (last write wins per ts) */
  overwrittenByStep: number;
  /** false: libfaketime missing, the clock was not stepped */
  clockStepped: boolean;
  rpcAcked: number;
  rpcLost: number;
  rpcDuplicated: number;
  /** delivered twice where a LAN crash fell between delivery and reply: at least once, as docs/sync.md says */
  rpcRedeliveredAfterCrash: number;
  faults: Record<FaultKind, number>;
  worstDrainMs: number | undefined;
  undrained: number;
  rssAnonStartMiB: number | undefined;
  rssAnonEndMiB: number | undefined;
  fdsStart: number | undefined;
  fdsEnd: number | undefined;
  /** steepest slope within one daemon run of ≥ 3 min after its first minute: MiB/min and fds/min */
  rssSlope: number | undefined;
  fdSlope: number | undefined;
  stackTraces: number;
  failures: string[];
  faultLog: FaultEntry[];
  samples: Sample[];
}

interface Stored {
  device: string;
  key: string;
  ts: number;
  value: number;
}

async function getJson<T>(url: string, headers: Record<string, string>): Promise<T> {
  const res = await fetch(url, { headers, signal: AbortSignal.timeout(30_000) });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${url}: ${res.status} ${text}`);
  return JSON.parse(text) as T;
}

/** Every `c`/`s` point of `devices` in an Outpost's store, read over REST. */
async function outpostPoints(d: Daemon, headers: Record<string, string>, devices: string[]): Promise<Stored[]> {
  const out: Stored[] = [];
  for (const name of devices) {
    let id: string;
    try {
      id = (await getJson<{ id: { id: string } }>(`${d.url}/api/tenant/devices?deviceName=${name}`, headers)).id.id;
    } catch {
      continue; // never arrived: every acknowledged reading of it counts as lost
    }
    const series = await getJson<Record<string, Array<{ ts: number; value: string | number }>>>(
      `${d.url}/api/plugins/telemetry/DEVICE/${id}/values/timeseries?keys=c,s&startTs=0&endTs=${Date.now() + 86_400_000}&limit=10000000`,
      headers,
    );
    for (const [key, points] of Object.entries(series))
      for (const p of points) out.push({ device: name, key, ts: p.ts, value: Number(p.value) });
  }
  return out;
}

export async function check(i: CheckInput): Promise<SoakReport> {
  const failures: string[] = [];
  const { readings } = i.ledger;
  const byValue = new Map<number, Reading>();
  for (const r of readings) byValue.set(r.value, r);
  const lanPoints = await outpostPoints(i.lan.daemon, i.lan.headers, i.devices);
  const upPoints = await outpostPoints(i.upstream.daemon, i.upstream.headers, i.devices);
  const tbPoints: Stored[] = i.tb.points
    .filter((p) => p.token.startsWith('up-soak-') && (p.key === 'c' || p.key === 's'))
    .map((p) => ({ device: p.token.slice(3), key: p.key, ts: p.ts, value: Number(p.value) }));

  /** a store's points by value; phantoms: a value never sent, or under another device, key or ts */
  const index = (
    label: string,
    points: Stored[],
  ): { byVal: Map<number, Stored>; tsOf: Map<number, Set<number>>; phantoms: number } => {
    const byVal = new Map<number, Stored>();
    const tsOf = new Map<number, Set<number>>();
    let phantoms = 0;
    for (const p of points) {
      const r = byValue.get(p.value);
      const wrong =
        r === undefined
          ? 'never sent'
          : r.device !== p.device || r.key !== p.key
            ? `sent as ${r.device}/${r.key}`
            : r.ts !== undefined && r.ts !== p.ts
              ? `sent with ts ${r.ts}`
              : undefined;
      if (wrong !== undefined) {
        phantoms++;
        if (phantoms <= 5) failures.push(`${label}: ${p.device}/${p.key} ts ${p.ts} value ${p.value}: ${wrong}`);
      }
      byVal.set(p.value, p);
      tsOf.set(p.value, (tsOf.get(p.value) ?? new Set()).add(p.ts));
    }
    return { byVal, tsOf, phantoms };
  };
  const lanIx = index('LAN', lanPoints);
  const upIx = index('upstream', upPoints);
  const tbIx = index('TB', tbPoints);

  const seenTb = new Map<string, number>();
  for (const p of tbPoints)
    seenTb.set(`${p.device}|${p.key}|${p.ts}`, (seenTb.get(`${p.device}|${p.key}|${p.ts}`) ?? 0) + 1);
  let duplicatesTb = 0;
  for (const n of seenTb.values()) duplicatesTb += n - 1;

  const crashes = i.faults.filter((f) => f.kind === 'kill9' || f.kind === 'sigterm');
  /** what may hand an RPC over twice: a crash, or a device's MQTT connection cut before its PUBACK (QoS 1) */
  const redeliveries = i.faults.filter((f) => f.kind === 'kill9' || f.kind === 'sigterm' || f.kind === 'mqttDrop');
  /** s since the run began, as the fault log counts */
  const t0 = i.faults[0] === undefined ? 0 : i.faults[0].wall - i.faults[0].at * 1000;
  const rel = (wall: number): string => ((wall - t0) / 1000).toFixed(1);
  const steps = i.clockSteps ?? [];

  // each value once in each Outpost: only a CoAP retransmission that reached a restarted LAN may store it twice
  let storedTwice = 0;
  let storedTwiceAfterCrash = 0;
  for (const [label, { tsOf }] of [
    ['LAN', lanIx],
    ['upstream', upIx],
  ] as const) {
    for (const [value, tss] of tsOf) {
      if (tss.size < 2) continue;
      const r = byValue.get(value);
      const lastTx = r?.lastSentAt ?? r?.sentAt ?? 0;
      if (r?.via === 'coap' && crashes.some((f) => f.wall >= r.sentAt && f.wall <= lastTx)) {
        storedTwiceAfterCrash++;
        continue;
      }
      storedTwice++;
      if (storedTwice <= 5)
        failures.push(`${label}: ${r?.via} reading ${r?.device}/${r?.key}=${value} stored at ${[...tss].join(', ')}`);
    }
  }

  /**
   * A server-stamped reading missing from a store is excused when, under a stepped clock, a later reading of its
   * device took a ts its own stamp could have had: the store keeps the last write per (device, key, ts).
   */
  const overwritten = new Set<number>();
  const takenByStep = (r: Reading, points: Map<number, Stored>, inRequest: (ts: number) => boolean): boolean => {
    if (r.ts !== undefined || r.ackedAt === undefined) return false;
    for (const q of points.values()) {
      if (q.device !== r.device || q.key !== 's' || !inRequest(q.ts)) continue;
      const r2 = byValue.get(q.value);
      if (r2 === undefined || r2 === r || r2.sentAt <= r.sentAt) continue;
      const by = r2.ackedAt ?? r2.sentAt + 20_000;
      if (steps.some((st, k) => k > 0 && st.wall > r.sentAt && st.wall < by)) return true;
    }
    return false;
  };

  let acked = 0;
  const ackedBy: Record<Via, number> = { http: 0, mqtt: 0, gateway: 0, coap: 0 };
  const lost = { LAN: 0, upstream: 0, TB: 0 };
  for (const r of readings) {
    if (r.ackedAt === undefined) continue;
    acked++;
    ackedBy[r.via]++;
    // a server stamp: the LAN's (two of them when stored twice), each between the send and its acknowledgement
    // on the LAN's clock
    const expectTs = r.ts !== undefined ? [r.ts] : [...(lanIx.tsOf.get(r.value) ?? [])];
    const offsets = offsetsDuring(steps, r.sentAt, r.ackedAt);
    const { sentAt, ackedAt } = r;
    const inRequest = (ts: number): boolean => offsets.some((o) => ts >= sentAt + o - 5 && ts <= ackedAt + o + 5);
    for (const ts of r.ts === undefined ? expectTs : [])
      if (!inRequest(ts))
        failures.push(
          `LAN: ${r.device}/s value ${r.value} stamped ${ts}, outside its request [${r.sentAt}, ${r.ackedAt}] on the LAN's clock (offsets ${offsets.join(', ')} ms)`,
        );
    for (const [label, ix] of [
      ['LAN', lanIx],
      ['upstream', upIx],
      ['TB', tbIx],
    ] as const) {
      const have = ix.tsOf.get(r.value);
      if (have === undefined && takenByStep(r, ix.byVal, inRequest)) {
        overwritten.add(r.value);
        continue;
      }
      if (have === undefined || (expectTs.length > 0 && !expectTs.some((ts) => have.has(ts)))) {
        lost[label]++;
        if (lost[label] <= 5)
          failures.push(
            `${label}: acknowledged ${r.via} reading ${r.device}/${r.key}=${r.value} ts ${expectTs.join(' or ') || '?'} (sent at ${rel(r.sentAt)} s) ${have === undefined ? 'missing' : `stored with ts ${[...have].join(', ')}`}`,
          );
      }
    }
  }
  if (lost.LAN + lost.upstream + lost.TB > 15) failures.push(`lost in all: ${JSON.stringify(lost)}`);

  // RPC: each one answered 200 to its caller reached its device once, and the answer is the device's
  let rpcAcked = 0;
  let rpcLost = 0;
  let rpcDuplicated = 0;
  let rpcRedelivered = 0;
  for (const c of i.ledger.rpcs) {
    if (c.status !== 200) continue;
    rpcAcked++;
    const receivers = i.ledger.received.get(c.n) ?? [];
    const times = receivers.length;
    if (receivers.some((d) => d !== c.device)) failures.push(`RPC ${c.n} to ${c.device}: received by ${receivers}`);
    if (JSON.parse(c.reply ?? 'null')?.n !== c.n) failures.push(`RPC ${c.n} to ${c.device}: answered ${c.reply}`);
    if (times === 0) {
      rpcLost++;
      failures.push(`RPC ${c.n} to ${c.device}: answered 200 but its device never received it`);
    } else if (times > 1) {
      // a crash after the RPC was handed over re-delivers it (at least once, docs/sync.md "RPC down"), and so does
      // a connection cut between an MQTT publish and its PUBACK (QoS 1: docs/mqtt.md)
      const end = (c.answeredAt ?? c.sentAt) + 5_000;
      const crashed = redeliveries.some((f) => f.wall >= c.sentAt && f.wall <= end);
      if (crashed) rpcRedelivered++;
      else {
        rpcDuplicated++;
        failures.push(
          `RPC ${c.n} to ${c.device}: received ${times} times (called at ${rel(c.sentAt)} s, answered at ${c.answeredAt === undefined ? '?' : rel(c.answeredAt)} s)`,
        );
      }
    }
  }

  // memory and descriptors
  const lanSamples = i.samples.filter((s) => s.daemon === 'lan' && s.age >= 20_000);
  const first = lanSamples[0];
  const last = lanSamples[lanSamples.length - 1];
  let rssSlope: number | undefined;
  let fdSlope: number | undefined;
  const runs = new Map<string, Sample[]>();
  // V8's heap grows for its first minute or two whatever the load; a leak shows as growth after that
  for (const s of i.samples.filter((x) => x.age >= 60_000)) {
    const k = `${s.daemon}#${s.run}`;
    runs.set(k, [...(runs.get(k) ?? []), s]);
  }
  for (const [k, ss] of runs) {
    if (ss.length < 3 || (ss[ss.length - 1] as Sample).at - (ss[0] as Sample).at < 180_000) continue;
    const xs = ss.map((s) => s.at / 60_000);
    const rs = i.slope(
      xs,
      ss.map((s) => s.rssAnon / 2 ** 20),
    );
    const fs = i.slope(
      xs,
      ss.map((s) => s.fds),
    );
    rssSlope = Math.max(rssSlope ?? rs, rs);
    fdSlope = Math.max(fdSlope ?? fs, fs);
    const mib = ss.map((s) => s.rssAnon / 2 ** 20);
    const growth = (mib[mib.length - 1] as number) - Math.min(...mib);
    if (rs > 2 && growth > 16)
      failures.push(
        `${k}: RssAnon grew ${rs.toFixed(2)} MiB/min (+${growth.toFixed(1)} MiB) over ${ss.length} samples`,
      );
    if (fs > 2) failures.push(`${k}: open descriptors grew ${fs.toFixed(2)}/min over ${ss.length} samples`);
  }
  if (first !== undefined && last !== undefined && last.fds > first.fds + 64)
    failures.push(`LAN: open descriptors ${first.fds} → ${last.fds}`);

  const stack = [...i.lan.daemon.stackTraceLines(), ...i.upstream.daemon.stackTraceLines()];
  if (stack.length > 0) failures.push(`stack traces logged:\n${stack.slice(0, 20).join('\n')}`);
  if (!i.drained) failures.push('the backlogs did not drain within the bound after the load ended');

  const faults = { kill9: 0, sigterm: 0, upstreamStop: 0, blackhole: 0, diskFull: 0, mqttDrop: 0, clockStep: 0 };
  for (const f of i.faults) faults[f.kind]++;
  const drains = i.faults.filter((f) => f.kind !== 'mqttDrop' && f.kind !== 'clockStep');
  const measured = drains.map((f) => f.drainMs).filter((x): x is number => x !== undefined);
  const report: SoakReport = {
    seed: i.seed,
    minutes: i.minutes,
    acked,
    ackedBy,
    sentNotAcked: readings.length - acked,
    lostLocal: lost.LAN,
    lostUpstream: lost.upstream,
    lostTb: lost.TB,
    duplicatesTb,
    phantoms: lanIx.phantoms + upIx.phantoms + tbIx.phantoms,
    storedTwice,
    storedTwiceAfterCrash,
    overwrittenByStep: overwritten.size,
    clockStepped: i.clockSteps !== undefined,
    rpcAcked,
    rpcLost,
    rpcDuplicated,
    rpcRedeliveredAfterCrash: rpcRedelivered,
    faults,
    worstDrainMs: measured.length > 0 ? Math.max(...measured) : undefined,
    undrained: drains.length - measured.length,
    rssAnonStartMiB: first === undefined ? undefined : first.rssAnon / 2 ** 20,
    rssAnonEndMiB: last === undefined ? undefined : last.rssAnon / 2 ** 20,
    fdsStart: first?.fds,
    fdsEnd: last?.fds,
    rssSlope,
    fdSlope,
    stackTraces: stack.length,
    failures,
    faultLog: i.faults,
    samples: i.samples,
  };
  return report;
}

/** One table, a row per run. */
export function table(reports: readonly SoakReport[]): string {
  const f1 = (x: number | undefined, d = 1): string => (x === undefined ? 'n/a' : x.toFixed(d));
  const head = [
    'seed (LAN → upstream)',
    'minutes',
    'readings acked',
    'acked HTTP / MQTT / gateway / CoAP',
    'lost LAN / upstream / TB',
    'phantoms',
    'stored twice (CoAP after a crash)',
    'overwritten under a stepped clock',
    'duplicates at TB',
    'RPC acked / lost / twice (after a crash or an MQTT drop)',
    'faults: kill9 / TERM / upstream stop / blackhole / disk full / MQTT drop / clock step',
    'worst drain s (undrained)',
    'LAN RssAnon MiB start → end',
    'LAN fds start → end',
    'steepest slope MiB/min, fds/min',
    'stack traces',
    'result',
  ];
  const rows = reports.map((r) => [
    `${r.seed}${r.transport === undefined ? '' : ` (${r.transport})`}`,
    f1(r.minutes),
    `${r.acked} (+${r.sentNotAcked} unacked)`,
    VIAS.map((v) => r.ackedBy[v]).join(' / '),
    `${r.lostLocal} / ${r.lostUpstream} / ${r.lostTb}`,
    String(r.phantoms),
    `${r.storedTwice} (${r.storedTwiceAfterCrash})`,
    String(r.overwrittenByStep),
    String(r.duplicatesTb),
    `${r.rpcAcked} / ${r.rpcLost} / ${r.rpcDuplicated} (${r.rpcRedeliveredAfterCrash})`,
    `${r.faults.kill9} / ${r.faults.sigterm} / ${r.faults.upstreamStop} / ${r.faults.blackhole} / ${r.faults.diskFull} / ${r.faults.mqttDrop} / ${r.clockStepped ? r.faults.clockStep : 'skipped (no libfaketime)'}`,
    `${r.worstDrainMs === undefined ? 'n/a' : (r.worstDrainMs / 1000).toFixed(1)} (${r.undrained})`,
    `${f1(r.rssAnonStartMiB)} → ${f1(r.rssAnonEndMiB)}`,
    `${r.fdsStart ?? 'n/a'} → ${r.fdsEnd ?? 'n/a'}`,
    `${f1(r.rssSlope, 2)}, ${f1(r.fdSlope, 2)}`,
    String(r.stackTraces),
    r.failures.length === 0 ? 'clean' : `FAILED (${r.failures.length})`,
  ]);
  const line = (cells: string[]): string => `| ${cells.join(' | ')} |`;
  return [line(head), line(head.map(() => '---')), ...rows.map(line)].join('\n');
}
