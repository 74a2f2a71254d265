/**
 * Binary codecs for LMDB keys and values. Keys are big-endian so that LMDB's byte order is numeric order:
 * a raw point's key is [entity u32][key u32][ts i64], so one series is one contiguous, ts-ordered range and
 * all series of an entity are one contiguous range too.
 */
import type { KvValue } from '../../model/kv.js';
import { kvBool, kvDouble, kvJson, kvLong, kvString } from '../../model/kv.js';

/** Interned entity index (small integer standing for an entity UUID). */
export type EntityIdx = number;
/** Interned key-name index. */
export type KeyIdx = number;

const TWO32 = 4294967296;
const SIGN = 0x80000000;

/** Writes a signed 53-bit integer as an order-preserving 8-byte big-endian value at `off`. */
export function writeOrderedI64(buf: Buffer, v: number, off: number): void {
  const hi = Math.floor(v / TWO32);
  buf.writeUInt32BE((hi + SIGN) >>> 0, off);
  buf.writeUInt32BE(v - hi * TWO32, off + 4);
}

/** writeOrderedI64 through a DataView, whose setters are builtins where Buffer's writeUInt32BE is JavaScript. */
export function setOrderedI64(view: DataView, v: number, off: number): void {
  const hi = Math.floor(v / TWO32);
  view.setUint32(off, (hi + SIGN) >>> 0);
  view.setUint32(off + 4, v - hi * TWO32);
}

export function readOrderedI64(buf: Uint8Array, off: number): number {
  const b = buf as Buffer;
  return (b.readUInt32BE(off) - SIGN) * TWO32 + b.readUInt32BE(off + 4);
}

/** [entity u32][key u32] — the prefix of a series, also the key of its latest value. */
export function seriesKey(e: EntityIdx, k: KeyIdx): Buffer {
  const b = Buffer.allocUnsafe(8);
  b.writeUInt32BE(e, 0);
  b.writeUInt32BE(k, 4);
  return b;
}

/** [entity u32][key u32][ts i64] */
export function pointKey(e: EntityIdx, k: KeyIdx, ts: number): Buffer {
  const b = Buffer.allocUnsafe(16);
  b.writeUInt32BE(e, 0);
  b.writeUInt32BE(k, 4);
  writeOrderedI64(b, ts, 8);
  return b;
}

/** [entity u32] — prefix of every series of an entity. */
export function entityPrefix(e: EntityIdx): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(e, 0);
  return b;
}

/** The smallest key greater than every key starting with `prefix`. */
export function prefixEnd(prefix: Buffer): Buffer {
  const b = Buffer.from(prefix);
  for (let i = b.length - 1; i >= 0; i--) {
    if (b[i] !== 0xff) {
      b[i] = (b[i] as number) + 1;
      return b.subarray(0, i + 1);
    }
  }
  return Buffer.concat([b, Buffer.from([0xff])]);
}

export function decodePointKey(key: Uint8Array): { e: EntityIdx; k: KeyIdx; ts: number } {
  const b = key as Buffer;
  return { e: b.readUInt32BE(0), k: b.readUInt32BE(4), ts: readOrderedI64(b, 8) };
}

// Value tags. One byte of type, then the payload; strings and JSON are UTF-8 to the end of the buffer.
const T_FALSE = 0;
const T_TRUE = 1;
const T_I32 = 2;
const T_I64 = 3;
const T_F64 = 4;
const T_STR = 5;
const T_JSON = 6;

export function encodeValue(v: KvValue): Buffer {
  switch (v.type) {
    case 'BOOLEAN':
      return Buffer.from([v.v ? T_TRUE : T_FALSE]);
    case 'LONG': {
      const n = v.v;
      if (typeof n === 'number' && n >= -2147483648 && n <= 2147483647) {
        const b = Buffer.allocUnsafe(5);
        b[0] = T_I32;
        b.writeInt32BE(n, 1);
        return b;
      }
      const b = Buffer.allocUnsafe(9);
      b[0] = T_I64;
      b.writeBigInt64BE(BigInt(n), 1);
      return b;
    }
    case 'DOUBLE': {
      const b = Buffer.allocUnsafe(9);
      b[0] = T_F64;
      b.writeDoubleBE(v.v, 1);
      return b;
    }
    case 'STRING':
    case 'JSON': {
      const len = Buffer.byteLength(v.v, 'utf8');
      const b = Buffer.allocUnsafe(1 + len);
      b[0] = v.type === 'STRING' ? T_STR : T_JSON;
      b.write(v.v, 1, 'utf8');
      return b;
    }
  }
}

/** Decodes a value starting at `off` and running to `end` (exclusive). */
export function decodeValue(buf: Uint8Array, off = 0, end = buf.length): KvValue {
  const b = buf as Buffer;
  switch (b[off]) {
    case T_FALSE:
      return kvBool(false);
    case T_TRUE:
      return kvBool(true);
    case T_I32:
      return kvLong(b.readInt32BE(off + 1));
    case T_I64:
      return kvLong(b.readBigInt64BE(off + 1));
    case T_F64:
      return kvDouble(b.readDoubleBE(off + 1));
    case T_STR:
      return kvString(b.toString('utf8', off + 1, end));
    case T_JSON:
      return kvJson(b.toString('utf8', off + 1, end));
    default:
      throw new Error(`corrupt value: unknown tag ${String(b[off])}`);
  }
}

/** [ts i64][value] — a latest value or an attribute: the value together with its timestamp. */
export function encodeStamped(ts: number, v: KvValue): Buffer {
  const val = encodeValue(v);
  const b = Buffer.allocUnsafe(8 + val.length);
  writeOrderedI64(b, ts, 0);
  val.copy(b, 8);
  return b;
}

export function decodeStamped(buf: Uint8Array): { ts: number; value: KvValue } {
  return { ts: readOrderedI64(buf, 0), value: decodeValue(buf, 8) };
}
