/**
 * Device and REST payload shapes (docs/api.md): telemetry as `{k:v}`, `{"ts":ms,"values":{..}}` or an array
 * mixing both; attributes as a flat object. Parsing is all-or-nothing: any problem throws BAD_PAYLOAD before
 * anything is stored.
 */
import { OutpostError } from '../errors.js';
import type { KvEntry, TsRecord } from '../model/record.js';
import type { EpochMs } from '../types.js';
import { type JsonValue, JsonSyntaxError, NumLit, isJsonObject, parseJson } from './json.js';
import { typeJsonValue } from './typing.js';

/** TB rejects blank keys and keys longer than 255 characters (KvUtils). */
export const MAX_KEY_LENGTH = 255;

export function parseBody(body: Buffer | string): JsonValue {
  const text = typeof body === 'string' ? body : body.toString('utf8');
  try {
    return parseJson(text);
  } catch (err) {
    if (err instanceof JsonSyntaxError) throw new OutpostError('BAD_JSON', `Invalid JSON: ${err.message}`);
    throw err;
  }
}

export function checkKey(key: string): void {
  const c0 = key.charCodeAt(0);
  // a printable ASCII first character means "not blank" without trim()'s copy
  if (c0 > 32 && c0 < 127 && key.length <= MAX_KEY_LENGTH) return;
  if (key.trim() === '') throw new OutpostError('BAD_PAYLOAD', 'Key cannot be blank');
  if (key.length > MAX_KEY_LENGTH)
    throw new OutpostError('BAD_PAYLOAD', `Key is longer than ${MAX_KEY_LENGTH} characters: "${key.slice(0, 32)}…"`);
}

/** Flat `{k:v}` → typed entries; nulls skipped (device API), or rejected when `rejectNull` (REST). */
export function parseKvObject(obj: { [key: string]: JsonValue }, rejectNull = false): KvEntry[] {
  const out: KvEntry[] = [];
  for (const key in obj) {
    checkKey(key);
    const raw = obj[key] as JsonValue;
    const v = typeJsonValue(raw);
    if (v === undefined) {
      if (rejectNull) throw new OutpostError('BAD_PAYLOAD', `Can't parse value: null (key "${key}")`);
      continue;
    }
    out.push([key, v]);
  }
  return out;
}

function parseTs(v: JsonValue): EpochMs {
  let n: number;
  if (typeof v === 'number') n = v;
  else if (v instanceof NumLit) n = Number(v.text);
  else if (typeof v === 'string' && /^-?\d+$/.test(v)) n = Number(v);
  else
    throw new OutpostError(
      'BAD_PAYLOAD',
      `"ts" must be a number of milliseconds, got ${JSON.stringify(v instanceof NumLit ? v.text : v)}`,
    );
  n = Math.trunc(n);
  if (!Number.isSafeInteger(n)) throw new OutpostError('BAD_PAYLOAD', `"ts" is out of range`);
  return n;
}

function parseTelemetryObject(obj: { [key: string]: JsonValue }, now: EpochMs, rejectNull: boolean): TsRecord {
  // TB: only an object with both "ts" and "values" is the timestamped form; otherwise "ts" is a plain key.
  if ('ts' in obj && 'values' in obj) {
    const values = obj['values'] as JsonValue;
    if (!isJsonObject(values)) throw new OutpostError('BAD_PAYLOAD', '"values" must be a JSON object');
    return { ts: parseTs(obj['ts'] as JsonValue), values: parseKvObject(values, rejectNull) };
  }
  return { ts: now, values: parseKvObject(obj, rejectNull) };
}

/** Any of the three telemetry shapes → records. `now` stamps the records without their own ts. */
export function parseTelemetry(json: JsonValue, now: EpochMs, rejectNull = false): TsRecord[] {
  if (isJsonObject(json)) return [parseTelemetryObject(json, now, rejectNull)];
  if (Array.isArray(json)) {
    const out: TsRecord[] = [];
    for (let idx = 0; idx < json.length; idx++) {
      const el = json[idx] as JsonValue;
      if (!isJsonObject(el))
        throw new OutpostError('BAD_PAYLOAD', `Can't parse value: array element ${idx} is not a JSON object`);
      out.push(parseTelemetryObject(el, now, rejectNull));
    }
    return out;
  }
  throw new OutpostError('BAD_PAYLOAD', 'Telemetry must be a JSON object or an array of objects');
}

/** A flat attribute object. */
export function parseAttributes(json: JsonValue, rejectNull = false): KvEntry[] {
  if (!isJsonObject(json)) throw new OutpostError('BAD_PAYLOAD', 'Attributes must be a flat JSON object');
  return parseKvObject(json, rejectNull);
}

export function countPoints(records: readonly TsRecord[]): number {
  let n = 0;
  for (const r of records) n += r.values.length;
  return n;
}
