/**
 * ThingsBoard's key-value model: five value types and their rendering rules (docs/api.md).
 * A long is a JS number while it is a safe integer and a bigint beyond that, so no 64-bit value loses digits.
 */
export type KvValue =
  | { readonly type: 'BOOLEAN'; readonly v: boolean }
  | { readonly type: 'LONG'; readonly v: number | bigint }
  | { readonly type: 'DOUBLE'; readonly v: number }
  | { readonly type: 'STRING'; readonly v: string }
  | { readonly type: 'JSON'; readonly v: string };

export type KvType = KvValue['type'];

/** One stored point: a key's value at a time. */
export interface TsKv {
  readonly ts: number;
  readonly value: KvValue;
}

export const kvBool = (v: boolean): KvValue => ({ type: 'BOOLEAN', v });
export const kvLong = (v: number | bigint): KvValue => {
  if (typeof v === 'bigint' && v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER)) {
    return { type: 'LONG', v: Number(v) };
  }
  return { type: 'LONG', v };
};
export const kvDouble = (v: number): KvValue => ({ type: 'DOUBLE', v });
export const kvString = (v: string): KvValue => ({ type: 'STRING', v });
export const kvJson = (v: string): KvValue => ({ type: 'JSON', v });

/**
 * Java's Double.toString: plain notation for 1e-3 <= |d| < 1e7 with at least one fraction digit ("42.0"),
 * computerized scientific notation otherwise ("1.0E10", "1.5E-5"). Digits are the shortest round-trip ones,
 * which JS and Java (JDK 19+) agree on.
 */
export function javaDouble(d: number): string {
  if (Number.isNaN(d)) return 'NaN';
  if (d === Infinity) return 'Infinity';
  if (d === -Infinity) return '-Infinity';
  if (d === 0) return Object.is(d, -0) ? '-0.0' : '0.0';
  const abs = Math.abs(d);
  if (abs >= 1e-3 && abs < 1e7) {
    // JSON.stringify gives String(d)'s digits without V8's number-string cache, which otherwise keeps one
    // string per distinct double alive in old space during a million-row CSV download (BENCHMARKS: CSV).
    const s = JSON.stringify(d);
    return s.includes('.') ? s : `${s}.0`;
  }
  const [mant = '', exp = '0'] = d.toExponential().split('e');
  const m = mant.includes('.') ? mant : `${mant}.0`;
  return `${m}E${exp.startsWith('+') ? exp.slice(1) : exp}`;
}

/** The value as TB renders it when `useStrictDataTypes` is false: always a string. */
export function kvToString(v: KvValue): string {
  switch (v.type) {
    case 'BOOLEAN':
      return v.v ? 'true' : 'false';
    case 'LONG':
      return String(v.v);
    case 'DOUBLE':
      return javaDouble(v.v);
    case 'STRING':
      return v.v;
    case 'JSON':
      return v.v;
  }
}

/** The value as a JSON fragment with native types (`useStrictDataTypes=true`, attribute reads). */
export function kvToJson(v: KvValue): string {
  switch (v.type) {
    case 'BOOLEAN':
      return v.v ? 'true' : 'false';
    case 'LONG':
      return String(v.v);
    case 'DOUBLE': {
      if (!Number.isFinite(v.v)) return JSON.stringify(javaDouble(v.v));
      const s = javaDouble(v.v);
      // JSON has no "1.0E10" trouble: it is a valid number literal.
      return s;
    }
    case 'STRING':
      return JSON.stringify(v.v);
    case 'JSON':
      return v.v;
  }
}

/** The value as a plain JS value (for callers that build objects rather than JSON text). */
export function kvToNative(v: KvValue): unknown {
  switch (v.type) {
    case 'LONG':
      return typeof v.v === 'bigint' ? v.v.toString() : v.v;
    case 'JSON': {
      try {
        return JSON.parse(v.v);
      } catch {
        return v.v;
      }
    }
    default:
      return v.v;
  }
}

export function kvEquals(a: KvValue, b: KvValue): boolean {
  return a.type === b.type && a.v === b.v;
}
