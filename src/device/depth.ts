/**
 * Depth series payloads (docs/api.md `/depth/telemetry`, MQTT `v1/devices/me/depth/telemetry` as Tempus):
 * `{"ds":<double>,"values":{..}}` or an array of those; both fields required; values typed as telemetry.
 */
import { OutpostError } from '../errors.js';
import { type JsonValue, NumLit, isJsonObject } from '../ingest/json.js';
import { parseKvObject } from '../ingest/payload.js';
import type { Depth, DsRecord } from '../store/depth.js';

const NUMERIC = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

function parseDs(v: JsonValue, where: string): Depth {
  let n = NaN;
  if (typeof v === 'number') n = v;
  else if (v instanceof NumLit) n = Number(v.text);
  else if (typeof v === 'string' && NUMERIC.test(v.trim())) n = Number(v.trim());
  if (!Number.isFinite(n)) {
    throw new OutpostError(
      'BAD_PAYLOAD',
      `${where}"ds" must be a finite number, got ${JSON.stringify(v instanceof NumLit ? v.text : v)}`,
    );
  }
  return n;
}

function parseDepthObject(obj: { [key: string]: JsonValue }, where: string): DsRecord {
  if (!('ds' in obj) || !('values' in obj))
    throw new OutpostError('BAD_PAYLOAD', `${where}depth telemetry needs both "ds" and "values"`);
  const values = obj['values'] as JsonValue;
  if (!isJsonObject(values)) throw new OutpostError('BAD_PAYLOAD', `${where}"values" must be a JSON object`);
  return { ds: parseDs(obj['ds'] as JsonValue, where), values: parseKvObject(values) };
}

/** `{"ds","values"}` or an array of them → records; throws BAD_PAYLOAD (nothing stored) on any problem. */
export function parseDepthTelemetry(json: JsonValue): DsRecord[] {
  if (isJsonObject(json)) return [parseDepthObject(json, '')];
  if (Array.isArray(json)) {
    return json.map((el, idx) => {
      if (!isJsonObject(el)) throw new OutpostError('BAD_PAYLOAD', `array element ${idx} is not a JSON object`);
      return parseDepthObject(el, `array element ${idx}: `);
    });
  }
  throw new OutpostError('BAD_PAYLOAD', 'Depth telemetry must be a JSON object or an array of objects');
}
