/**
 * Query parameters of the CSV downloads (docs/api.md). Missing or unparsable → 400 BAD_PARAM; nothing is
 * read before every parameter is valid.
 */
import { OutpostError } from '../../errors.js';
import type { HttpContext } from '../../uws/adapter.js';

export type SeriesType = 'ts' | 'ds';

export interface SeriesParams {
  readonly deviceId: string;
  readonly type: SeriesType;
  /** inclusive; epoch ms for ts, a depth for ds */
  readonly start: number;
  /** inclusive */
  readonly end: number;
  /** `keys=a,b`: only these columns, in this order (absent: every key) */
  readonly keys?: readonly string[] | undefined;
}

const LONG_MAX = 9223372036854775807n;
const LONG_MIN = -9223372036854775808n;
const INTEGER = /^[+-]?\d+$/;
const DECIMAL = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
const INFINITY = /^[+-]?Infinity$/;

export function required(ctx: HttpContext, name: string): string {
  const v = ctx.query.get(name);
  if (v === null || v.trim() === '')
    throw new OutpostError('BAD_PARAM', `Required request parameter '${name}' is not present`);
  return v.trim();
}

/**
 * A Java long (Tempus: Long.parseLong). Values beyond ±(2^53-1) are clamped there: no stored timestamp lies
 * outside that range, so clamping never changes which points a range holds.
 */
export function parseLongBound(name: string, text: string): number {
  if (!INTEGER.test(text))
    throw new OutpostError('BAD_PARAM', `Incorrect ${name} value supplied: '${text}' is not a long`);
  const big = BigInt(text);
  if (big > LONG_MAX || big < LONG_MIN)
    throw new OutpostError('BAD_PARAM', `Incorrect ${name} value supplied: '${text}' is out of the long range`);
  if (big > BigInt(Number.MAX_SAFE_INTEGER)) return Number.MAX_SAFE_INTEGER;
  if (big < BigInt(Number.MIN_SAFE_INTEGER)) return Number.MIN_SAFE_INTEGER;
  return Number(big);
}

/** A double (Tempus: Double.parseDouble): decimal or exponent form, or ±Infinity as an open bound; NaN → 400. */
export function parseDoubleBound(name: string, text: string): number {
  if (INFINITY.test(text)) return text.startsWith('-') ? -Infinity : Infinity;
  if (!DECIMAL.test(text))
    throw new OutpostError('BAD_PARAM', `Incorrect ${name} value supplied: '${text}' is not a number`);
  const v = Number(text);
  if (Number.isNaN(v))
    throw new OutpostError('BAD_PARAM', `Incorrect ${name} value supplied: '${text}' is not a number`);
  return v;
}

export function seriesParams(ctx: HttpContext): SeriesParams {
  const deviceId = required(ctx, 'deviceId');
  const type = required(ctx, 'type');
  if (type !== 'ts' && type !== 'ds')
    throw new OutpostError('BAD_PARAM', `Unsupported Data Set Type Supplied: '${type}' (expected ts or ds)`);
  const startText = required(ctx, 'startValue');
  const endText = required(ctx, 'endValue');
  const parse = type === 'ts' ? parseLongBound : parseDoubleBound;
  const keysText = ctx.query.get('keys');
  const keys =
    keysText === null
      ? undefined
      : keysText
          .split(',')
          .map((k) => k.trim())
          .filter((k) => k !== '');
  return { deviceId, type, start: parse('startValue', startText), end: parse('endValue', endText), keys };
}
