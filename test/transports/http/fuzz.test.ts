/**
 * Fuzz the telemetry endpoint (docs/api.md), seeded and bounded: random bytes, random JSON, valid payloads
 * and mutations/truncations of them. The daemon must answer every request with 200, 400 or 413 (never a 500,
 * never a crash), still answer afterwards, and a rejected request must store nothing: after each non-200,
 * the device's points, latest values and the dictionary are exactly as before (read from another process
 * while the daemon runs, as LMDB allows).
 */
import { createHash } from 'node:crypto';
import t from 'tap';
import { kvToString } from '../../../src/model/kv.js';
import { LmdbTimeseriesStore } from '../../../src/store/series/store.js';
import { addDevice, http, startGateway } from '../../helpers/server.js';
import { openDaemonEnv } from '../../helpers/store.js';
import { adminToken } from '../../helpers/users.js';
import { rng } from '../../helpers/prng.js';

const SEED = Number(process.env['OUTPOST_FUZZ_SEED'] ?? 20_260_521);
const REQUESTS = 2000;
/** ms; the whole run stops early rather than exceed this (the test stays bounded on a slow machine) */
const BUDGET_MS = 25_000;

class Gen {
  constructor(readonly next: () => number) {}
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)] as T;
  }
  chance(p: number): boolean {
    return this.next() < p;
  }

  /** a small key pool, so the latest database stays small enough to fingerprint after every request */
  key(): string {
    return this.chance(0.95)
      ? `k${this.int(12)}`
      : this.pick([
          '',
          ' ',
          'ts',
          'values',
          '__proto__',
          'constructor',
          'é€😀',
          'x'.repeat(255),
          'y'.repeat(256),
          'a\u0000b',
          '\ud800',
        ]);
  }

  numberLiteral(): string {
    return this.pick([
      '0',
      '-0',
      '1',
      '-1',
      '42',
      '42.0',
      '1E+1',
      '101E-1',
      '1e400',
      '-1e400',
      '1E-400',
      '1E19',
      '9223372036854775807',
      '9223372036854775808',
      '-9223372036854775809',
      '0.12345678901234567',
      '1E999999999',
      '1e-999999999',
      '3.14159',
      '1.0E10',
      String(this.int(1_000_000)),
      `${this.int(1000)}.${this.int(1000)}`,
      `${this.int(10)}E${this.int(40) - 20}`,
    ]);
  }

  stringLiteral(): string {
    return this.pick([
      '""',
      '"abc"',
      '"17"',
      '"-1.5"',
      '".5"',
      '"1e5"',
      '"\\u0000"',
      '"\\ud83d\\ude00"',
      '"\\ud800"',
      '"tab\\tnl\\n"',
      '"é€"',
      JSON.stringify('s'.repeat(this.int(2000))),
      '"\\"quoted\\""',
    ]);
  }

  /** any JSON value; depth-limited, sometimes beyond the parser's 64-level cap */
  value(depth: number): string {
    const r = this.int(depth > 3 ? 4 : 7);
    switch (r) {
      case 0:
        return this.numberLiteral();
      case 1:
        return this.stringLiteral();
      case 2:
        return this.pick(['true', 'false', 'null']);
      case 3:
        return this.chance(0.5) ? this.numberLiteral() : this.stringLiteral();
      case 4:
        return this.object(depth + 1);
      case 5:
        return `[${Array.from({ length: this.int(4) }, () => this.value(depth + 1)).join(',')}]`;
      default:
        return this.chance(0.05) ? `${'['.repeat(60 + this.int(20))}1${']'.repeat(60 + this.int(20))}` : 'null';
    }
  }

  object(depth: number): string {
    const n = this.int(5);
    const parts = Array.from({ length: n }, () => `${JSON.stringify(this.key())}:${this.value(depth)}`);
    return `{${parts.join(',')}}`;
  }

  ts(): string {
    return this.pick([
      String(1_600_000_000_000 + this.int(1_000_000_000)),
      '0',
      '-1',
      '"1700000000000"',
      '1.5',
      '1e400',
      '"abc"',
      'null',
      '{}',
    ]);
  }

  /** mostly-valid telemetry: one of the three shapes, sometimes with a bad part */
  telemetry(): string {
    const one = (): string =>
      this.chance(0.5)
        ? this.object(1)
        : `{"ts":${this.ts()},"values":${this.chance(0.9) ? this.object(1) : this.value(2)}}`;
    if (this.chance(0.6)) return one();
    const els = Array.from({ length: 1 + this.int(4) }, () => (this.chance(0.9) ? one() : this.value(2)));
    return `[${els.join(',')}]`;
  }

  randomBytes(): Buffer {
    const b = Buffer.alloc(this.int(1500));
    for (let i = 0; i < b.length; i++) b[i] = this.int(256);
    if (b.length > 0 && this.chance(0.5)) b[0] = this.pick([0x7b, 0x5b]); // '{' or '['
    return b;
  }

  mutate(text: string): Buffer {
    const b = Buffer.from(text);
    const edits = 1 + this.int(4);
    let out = b;
    for (let e = 0; e < edits && out.length > 0; e++) {
      const at = this.int(out.length);
      const kind = this.int(3);
      if (kind === 0)
        out[at] = this.pick([
          0x22,
          0x7b,
          0x7d,
          0x5b,
          0x5d,
          0x2c,
          0x3a,
          0x5c,
          0x30,
          0x2d,
          0x65,
          0x00,
          0xff,
          this.int(256),
        ]);
      else if (kind === 1) out = Buffer.concat([out.subarray(0, at), out.subarray(at + 1)]);
      else out = Buffer.concat([out.subarray(0, at), Buffer.from([this.int(256)]), out.subarray(at)]);
    }
    return out;
  }

  payload(): Buffer {
    const r = this.next();
    if (r < 0.25) return this.randomBytes();
    if (r < 0.45) return Buffer.from(this.value(0));
    if (r < 0.65) return Buffer.from(this.telemetry());
    if (r < 0.9) return this.mutate(this.telemetry());
    const text = this.telemetry();
    return Buffer.from(text.slice(0, this.int(text.length)));
  }
}

/** Payloads that broke parsers elsewhere; sent first, every run. */
const NASTY: Buffer[] = [
  Buffer.from(`${'['.repeat(100_000)}${']'.repeat(100_000)}`),
  Buffer.from(`${'{"a":'.repeat(50_000)}1${'}'.repeat(50_000)}`),
  Buffer.from('{"a":1E999999999}'),
  Buffer.from('{"a":1E-999999999}'),
  Buffer.from('\ufeff{"a":1}'),
  Buffer.from('{"__proto__":{"polluted":1}}'),
  Buffer.from('{"constructor":{"prototype":{"polluted":1}}}'),
  Buffer.from([0x7b, 0x22, 0xc3, 0x28, 0x22, 0x3a, 0x31, 0x7d]), // {"<invalid UTF-8>":1}
  Buffer.from('{"a":"\\uZZZZ"}'),
  Buffer.from('{"ts":9007199254740993,"values":{"a":1}}'),
  Buffer.from('{"ts":-9007199254740993,"values":{"a":1}}'),
  Buffer.alloc(0),
  Buffer.from('\u0000'),
  Buffer.from(`[${'{},'.repeat(20_000)}{}]`),
];

t.test(`fuzz the telemetry endpoint (seed ${SEED})`, async (t) => {
  const gw = await startGateway(t);
  const dev = await addDevice(gw.dataDir, 'fuzz');
  const url = `${gw.url}/api/v1/${dev.token}/telemetry`;

  const { env, dict } = openDaemonEnv(t, gw.dataDir);
  const store = new LmdbTimeseriesStore(env, dict);
  /**
   * What a rejected request must not change: every point and latest value of the device as the store's read
   * interface returns them (the physical layout may change in the background: compaction), and the number of
   * interned names (a rejected request interns nothing).
   */
  const jwt = await adminToken(gw, 'admin@fuzz.test', 'secret');
  const fingerprint = async (): Promise<string> => {
    // a REST read puts what the daemon's write-ahead log holds into LMDB first (acknowledged points are
    // otherwise visible to this process only once the daemon applies its log)
    const read = await http('GET', `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/values/timeseries`, undefined, {
      'x-authorization': `Bearer ${jwt}`,
    });
    if (read.status !== 200) throw new Error(`read: ${read.status}`);
    env.root.resetReadTxn(); // see the daemon's latest commit, not this process's cached snapshot
    const h = createHash('sha1');
    for (const [key, p] of store.latest(dev.id))
      h.update(`L${key}\u0000${p.ts}\u0000${p.value.type}\u0000${kvToString(p.value)}\u0000`);
    for (const key of store.keys(dev.id)) {
      for (const p of store.range(dev.id, key, {
        startTs: Number.MIN_SAFE_INTEGER,
        endTs: Number.MAX_SAFE_INTEGER,
        order: 'ASC',
      })) {
        h.update(`P${key}\u0000${p.ts}\u0000${p.value.type}\u0000${kvToString(p.value)}\u0000`);
      }
    }
    // lmdb-js types getStats() as {}; it returns LMDB's mdb_stat, entryCount included
    const dictEntries = (env.dict.getStats() as { entryCount: number }).entryCount;
    return `${dictEntries}/${h.digest('hex')}`;
  };

  const gen = new Gen(rng(SEED));
  const statuses = new Map<number, number>();
  const violations: string[] = [];
  const started = Date.now();
  let sent = 0;
  let before = await fingerprint();
  for (let i = 0; i < NASTY.length + REQUESTS; i++) {
    if (Date.now() - started > BUDGET_MS) break;
    const body = i < NASTY.length ? (NASTY[i] as Buffer) : gen.payload();
    const res = await fetch(url, {
      method: 'POST',
      body: new Uint8Array(body),
      headers: { 'content-type': 'application/json' },
    });
    const text = await res.text();
    sent++;
    statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    const after = await fingerprint();
    const sample = body.subarray(0, 80).toString('utf8');
    if (![200, 400, 413].includes(res.status))
      violations.push(`#${i} answered ${res.status} ${text.slice(0, 120)} to ${JSON.stringify(sample)}`);
    if (res.status !== 200) {
      if (after !== before)
        violations.push(
          `#${i} was rejected (${res.status}) but changed the store ${before} → ${after}: ${JSON.stringify(sample)}`,
        );
      const err = JSON.parse(text) as { status: number; errorCode: number; message: string };
      if (err.status !== res.status || typeof err.message !== 'string')
        violations.push(`#${i}: bad error JSON ${text.slice(0, 120)}`);
    } else if (text !== '') {
      violations.push(`#${i}: 200 with a body`);
    }
    before = after;
    if (violations.length > 10) break;
  }
  t.same(violations, [], 'no 5xx, no bad error JSON, no store change from a rejected request');
  t.ok(sent >= 500, `a meaningful number of requests ran within the budget (${sent})`);
  t.ok(
    (statuses.get(200) ?? 0) > 20 && (statuses.get(400) ?? 0) > 100,
    `both accepted and rejected requests were exercised: ${JSON.stringify([...statuses])}`,
  );

  t.equal(gw.proc.exitCode, null, 'the daemon is still running');
  const ok = await fetch(url, { method: 'POST', body: '{"ts":1,"values":{"alive":true}}' });
  t.equal(ok.status, 200, 'and still answers');
  t.equal(({} as { polluted?: unknown }).polluted, undefined);
  t.equal(await gw.stop('SIGTERM'), 0, 'and shuts down cleanly');
});
