/**
 * Telemetry on the wire to the upstream (docs/sync.md): `[{"ts":..,"values":{..}},..]` with every value keeping
 * its ThingsBoard type. TB types a number by its literal (a `.` makes a double, otherwise a long); Outpost as an
 * upstream (src/ingest/typing.ts) takes a `.` without exponent, or any literal with a fraction, as a double, but
 * `1.0E10` as a long, and more than 16 fraction digits as a string. So an integral double goes out in plain
 * notation (`42.0`, `10000000000.0`), a fraction as JS prints it (`0.25`), and a tiny one, which JS prints with
 * an exponent, in plain notation too (`0.00000015`) while that has at most 16 fraction digits, else the Java
 * way (`1.5E-17`): both readers take each double Outpost can store back as that very double.
 */
import { type KvValue, type TsKv, javaDouble } from '../../model/kv.js';

/** A finite double as a literal every TB-compatible reader types as a double. */
export function plainDouble(d: number): string {
  if (Number.isInteger(d)) {
    if (Object.is(d, -0)) return '-0.0';
    // up to 2^1024: BigInt gives every digit of an integral double exactly
    return `${Math.abs(d) < 1e21 ? String(d) : BigInt(d).toString()}.0`;
  }
  const s = String(d);
  const e = s.indexOf('e');
  if (e < 0) return s;
  // |d| < 1e-6: plain notation while it has at most 16 fraction digits (Outpost reads no more as a double),
  // else the Java form, which TB reads as a double all the same
  const neg = s.startsWith('-');
  const digits = s.slice(neg ? 1 : 0, e).replace('.', '');
  const exp = Number(s.slice(e + 1));
  const plain = `${neg ? '-' : ''}0.${'0'.repeat(-exp - 1)}${digits}`;
  return plain.length - plain.indexOf('.') - 1 <= 16 ? plain : javaDouble(d);
}

/** One value as a JSON fragment with its TB type kept. Non-finite doubles cannot be JSON numbers: sent as strings. */
export function wireValue(v: KvValue): string {
  switch (v.type) {
    case 'BOOLEAN':
      return v.v ? 'true' : 'false';
    case 'LONG':
      return String(v.v);
    case 'DOUBLE':
      return Number.isFinite(v.v) ? plainDouble(v.v) : JSON.stringify(String(v.v));
    case 'STRING':
      return JSON.stringify(v.v);
    case 'JSON':
      return v.v;
  }
}

/** A point of one key, ready to be grouped by ts. */
export interface WirePoint {
  readonly ts: number;
  /** the key as a JSON string literal */
  readonly key: string;
  readonly value: string;
}

export function wirePoints(
  keyJson: string,
  points: readonly TsKv[],
  keep: (ts: number) => boolean,
  out: WirePoint[],
): void {
  for (const p of points) if (keep(p.ts)) out.push({ ts: p.ts, key: keyJson, value: wireValue(p.value) });
}

/**
 * Groups points by ts (ascending; within a ts in the order given, so a later write of the same key wins
 * upstream) into `{"ts":..,"values":{..}}` elements, and cuts the elements into JSON arrays of at most
 * `maxBytes` (an element bigger than that alone goes alone). Each body comes with its point count.
 */
export function* wireBodies(
  points: WirePoint[],
  maxBytes: number,
  maxPoints: number,
): Generator<{ body: string; points: number; lastTs: number }> {
  points.sort((a, b) => a.ts - b.ts);
  let parts: string[] = [];
  let bytes = 2;
  let n = 0;
  let i = 0;
  let prevTs = 0;
  while (i < points.length) {
    const ts = (points[i] as WirePoint).ts;
    let el = `{"ts":${ts},"values":{`;
    let j = i;
    const seen = new Set<string>();
    const vals: string[] = [];
    // a key twice at one ts (two writes in the backlog): the later wins, as it would upstream
    for (; j < points.length && (points[j] as WirePoint).ts === ts; j++) {
      const p = points[j] as WirePoint;
      if (seen.has(p.key)) {
        const at = vals.findIndex((v) => v.startsWith(`${p.key}:`));
        vals[at] = `${p.key}:${p.value}`;
      } else {
        seen.add(p.key);
        vals.push(`${p.key}:${p.value}`);
      }
    }
    el += `${vals.join(',')}}}`;
    const elBytes = Buffer.byteLength(el) + 1;
    if (parts.length > 0 && (bytes + elBytes > maxBytes || n + vals.length > maxPoints)) {
      yield { body: `[${parts.join(',')}]`, points: n, lastTs: prevTs };
      parts = [];
      bytes = 2;
      n = 0;
    }
    parts.push(el);
    bytes += elBytes;
    n += vals.length;
    prevTs = ts;
    i = j;
  }
  if (parts.length > 0) yield { body: `[${parts.join(',')}]`, points: n, lastTs: prevTs };
}
