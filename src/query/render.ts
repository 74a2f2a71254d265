/**
 * JSON text of telemetry answers, built directly (no intermediate objects): `{"k":[{"ts":..,"value":..}]}`.
 * Values are strings as TB renders them (`kvToString`: "42", "42.0", "1.0E10", "true", JSON text) unless
 * `strict` (useStrictDataTypes=true), then native JSON (`kvToJson`). A missing latest value is `null`.
 */
import { type KvValue, type TsKv, javaDouble, kvToJson, kvToString } from '../model/kv.js';
import type { KeySeries, LatestPoint } from './history.js';
import type { AttributeKv } from '../store/attributes.js';

export function renderValue(v: KvValue | null, strict: boolean): string {
  if (v === null) return 'null';
  if (strict) return kvToJson(v);
  switch (v.type) {
    // digits, '.', 'E', '-', "NaN", "Infinity": nothing to escape, so no second JSON.stringify per value
    case 'DOUBLE':
      return `"${javaDouble(v.v)}"`;
    case 'LONG':
      return `"${String(v.v)}"`;
    default:
      return JSON.stringify(kvToString(v));
  }
}

export function renderPoint(p: TsKv | LatestPoint, strict: boolean): string {
  return `{"ts":${p.ts},"value":${renderValue(p.value, strict)}}`;
}

/** `{"k":[{"ts":..,"value":..}],…}` — one point per key. */
export function renderLatest(entries: ReadonlyArray<readonly [string, LatestPoint]>, strict: boolean): string {
  let out = '{';
  let sep = '';
  for (const [key, p] of entries) {
    out += `${sep}${JSON.stringify(key)}:[${renderPoint(p, strict)}]`;
    sep = ',';
  }
  return `${out}}`;
}

/**
 * The history answer as text pieces of roughly `chunkChars` characters (the last one may be shorter), lazily:
 * pulling one piece reads only the points it holds. Stopping early (`return()`) releases the series.
 */
export function* renderHistoryChunks(
  series: Iterable<KeySeries>,
  strict: boolean,
  chunkChars = 64 * 1024,
): IterableIterator<string> {
  let buf = '{';
  let keySep = '';
  for (const s of series) {
    buf += `${keySep}${JSON.stringify(s.key)}:[`;
    keySep = ',';
    let sep = '';
    for (const p of s.points) {
      buf += sep + renderPoint(p, strict);
      sep = ',';
      if (buf.length >= chunkChars) {
        yield buf;
        buf = '';
      }
    }
    buf += ']';
  }
  yield `${buf}}`;
}

/** `values/attributes` (docs/api.md): `[{"lastUpdateTs","key","value"}]`, values typed. */
export function renderAttributeValues(attrs: readonly AttributeKv[]): string {
  return `[${attrs.map((a) => `{"lastUpdateTs":${a.lastUpdateTs},"key":${JSON.stringify(a.key)},"value":${kvToJson(a.value)}}`).join(',')}]`;
}
