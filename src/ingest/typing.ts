/**
 * ThingsBoard's value typing for device payloads (docs/api.md, TB JsonConverter):
 * - a number literal is read as a BigDecimal; integral after stripping trailing zeros and not a "simple
 *   decimal" (has '.' and no exponent) → LONG, or STRING of its plain digits beyond 64 bits;
 * - otherwise DOUBLE when its scale is ≤ 16, else STRING of its plain form;
 * - a string that NumberUtils.isParsable accepts ("42", "-1.5", ".5") is typed like a number literal;
 * - objects and arrays → JSON text; null → skipped.
 *
 * One deliberate difference: TB would expand `1E500000000` into a 500-million-digit string (or run out of
 * memory); a literal whose plain form exceeds MAX_PLAIN_NUMBER_LENGTH is rejected with BAD_PAYLOAD instead.
 */
import { OutpostError } from '../errors.js';
import { type KvValue, kvBool, kvDouble, kvJson, kvLong, kvString } from '../model/kv.js';
import { type JsonValue, NumLit, stringifyJson } from './json.js';

const LONG_MAX = 9223372036854775807n;
const LONG_MIN = -9223372036854775808n;
/** characters; the longest plain-digit string a number literal may expand to (`1E400` → 401 is fine). */
export const MAX_PLAIN_NUMBER_LENGTH = 4096;

interface Decimal {
  readonly negative: boolean;
  /** significant digits without leading zeros ("" for zero) */
  readonly digits: string;
  /** value = digits × 10^-scale */
  readonly scale: number;
}

function parseDecimal(lit: string): Decimal {
  let s = lit;
  let negative = false;
  if (s[0] === '-' || s[0] === '+') {
    negative = s[0] === '-';
    s = s.slice(1);
  }
  let exp = 0;
  const e = s.search(/[eE]/);
  if (e >= 0) {
    exp = Number(s.slice(e + 1));
    s = s.slice(0, e);
  }
  const dot = s.indexOf('.');
  let frac = '';
  if (dot >= 0) {
    frac = s.slice(dot + 1);
    s = s.slice(0, dot);
  }
  const digits = (s + frac).replace(/^0+/, '');
  return { negative, digits, scale: frac.length - exp };
}

function stripTrailingZeros(d: Decimal): Decimal {
  if (d.digits === '') return { ...d, scale: 0 };
  const m = /0+$/.exec(d.digits);
  const z = m ? m[0].length : 0;
  return { negative: d.negative, digits: d.digits.slice(0, d.digits.length - z), scale: d.scale - z };
}

/** BigDecimal.toPlainString of the decimal; BAD_PAYLOAD when that would exceed MAX_PLAIN_NUMBER_LENGTH. */
function toPlainString(d: Decimal): string {
  // digits plus the zeros an exponent adds on either side; Number(exp) may be huge or Infinity, both caught here
  const plainLength = Math.max(d.digits.length, d.scale) + Math.max(0, -d.scale);
  if (!(plainLength <= MAX_PLAIN_NUMBER_LENGTH)) {
    throw new OutpostError('BAD_PAYLOAD', `Number is out of range (more than ${MAX_PLAIN_NUMBER_LENGTH} digits)`);
  }
  let digits = d.digits === '' ? '0' : d.digits;
  let out: string;
  if (d.scale <= 0) {
    out = digits === '0' ? '0' : digits + '0'.repeat(-d.scale);
  } else {
    if (digits.length <= d.scale) digits = '0'.repeat(d.scale - digits.length + 1) + digits;
    out = `${digits.slice(0, digits.length - d.scale)}.${digits.slice(digits.length - d.scale)}`;
  }
  return d.negative && d.digits !== '' ? `-${out}` : out;
}

/**
 * The common case without building a Decimal: `-?digits.digits` (no exponent) is a "simple decimal", never a
 * LONG, and a DOUBLE when it has at most 16 fraction digits (its unstripped scale). undefined → general path.
 */
function simpleDecimalDouble(lit: string): KvValue | undefined {
  const n = lit.length;
  let i = lit.charCodeAt(0) === 45 ? 1 : 0;
  const intStart = i;
  while (i < n) {
    const c = lit.charCodeAt(i);
    if (c < 48 || c > 57) break;
    i++;
  }
  if (i === intStart || i === n || lit.charCodeAt(i) !== 46) return undefined;
  const dot = i++;
  while (i < n) {
    const c = lit.charCodeAt(i);
    if (c < 48 || c > 57) return undefined;
    i++;
  }
  const fracLen = n - dot - 1;
  return fracLen >= 1 && fracLen <= 16 ? kvDouble(Number(lit)) : undefined;
}

/** Types a number literal exactly as TB's buildNumericKeyValueProto does. */
export function typeNumberLiteral(lit: string): KvValue {
  const fast = simpleDecimalDouble(lit);
  if (fast !== undefined) return fast;
  const dec = parseDecimal(lit);
  const stripped = stripTrailingZeros(dec);
  const simpleDecimal = lit.includes('.') && !/[eE]/.test(lit);
  if (stripped.scale <= 0 && !simpleDecimal) {
    // Integral: digits × 10^(-scale). Guard the exponent before building a BigInt of it.
    const len = stripped.digits.length - stripped.scale;
    if (stripped.digits === '' || len <= 19) {
      const big =
        stripped.digits === '' ? 0n : BigInt(stripped.digits + '0'.repeat(-stripped.scale)) * (dec.negative ? -1n : 1n);
      if (big >= LONG_MIN && big <= LONG_MAX) return kvLong(big);
    }
    return kvString(toPlainString(stripped));
  }
  if (dec.scale <= 16) return kvDouble(Number(lit));
  return kvString(toPlainString(dec));
}

const PARSABLE = /^-?(?:\d+(?:\.\d+)?|\.\d+)$/;

/** NumberUtils.isParsable as TB uses it: a string typed like a number literal. */
export const isParsableNumber = (s: string): boolean => PARSABLE.test(s);

/** TB's value typing for one JSON value; undefined means "skip" (JSON null). */
export function typeJsonValue(v: JsonValue): KvValue | undefined {
  if (v === null) return undefined;
  switch (typeof v) {
    case 'boolean':
      return kvBool(v);
    case 'number':
      return kvLong(v);
    case 'string':
      return PARSABLE.test(v) ? typeNumberLiteral(v) : kvString(v);
    default:
      if (v instanceof NumLit) return typeNumberLiteral(v.text);
      return kvJson(stringifyJson(v));
  }
}
