/**
 * A JSON parser that keeps the literal text of numbers, because ThingsBoard types a value by its literal:
 * `42.0` is a double, `42` a long, `1E+1` a long, `12345678901234567890` a string (docs/api.md). JSON.parse
 * cannot tell `42.0` from `42`.
 *
 * Plain integer literals within the safe range come back as JS numbers (the common case, no allocation);
 * every other number comes back as a NumLit holding its literal.
 */
export class NumLit {
  constructor(readonly text: string) {}
}

export type JsonValue = null | boolean | number | string | NumLit | JsonValue[] | { [key: string]: JsonValue };

export class JsonSyntaxError extends Error {
  override name = 'JsonSyntaxError';
}

const MAX_DEPTH = 64;

export function parseJson(text: string): JsonValue {
  let i = 0;
  const n = text.length;

  const fail = (what: string): never => {
    throw new JsonSyntaxError(`${what} at position ${i}`);
  };
  const ws = (): void => {
    while (i < n) {
      const c = text.charCodeAt(i);
      if (c === 32 || c === 10 || c === 13 || c === 9) i++;
      else break;
    }
  };

  const parseString = (): string => {
    // precondition: text[i] === '"'
    const start = ++i;
    while (i < n) {
      const c = text.charCodeAt(i);
      if (c === 34) {
        const s = text.slice(start, i);
        i++;
        return s;
      }
      if (c === 92) break; // escape: take the slow path
      if (c < 32) fail('Unescaped control character in string');
      i++;
    }
    let out = text.slice(start, i);
    while (i < n) {
      const c = text.charCodeAt(i);
      if (c === 34) {
        i++;
        return out;
      }
      if (c < 32) fail('Unescaped control character in string');
      if (c === 92) {
        const e = text.charCodeAt(i + 1);
        switch (e) {
          case 34:
            out += '"';
            break;
          case 92:
            out += '\\';
            break;
          case 47:
            out += '/';
            break;
          case 98:
            out += '\b';
            break;
          case 102:
            out += '\f';
            break;
          case 110:
            out += '\n';
            break;
          case 114:
            out += '\r';
            break;
          case 116:
            out += '\t';
            break;
          case 117: {
            const hex = text.slice(i + 2, i + 6);
            if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail('Bad unicode escape');
            out += String.fromCharCode(parseInt(hex, 16));
            i += 4;
            break;
          }
          default:
            fail('Bad escape');
        }
        i += 2;
      } else {
        out += text[i];
        i++;
      }
    }
    return fail('Unterminated string');
  };

  const parseNumber = (): number | NumLit => {
    const start = i;
    let simple = true;
    if (text.charCodeAt(i) === 45) i++;
    const intStart = i;
    let c = text.charCodeAt(i);
    /** the integer part's value while it has at most 15 digits (exact in a double) */
    let acc = 0;
    if (c === 48) {
      i++;
    } else if (c >= 49 && c <= 57) {
      while (i < n && (c = text.charCodeAt(i)) >= 48 && c <= 57) {
        acc = acc * 10 + (c - 48);
        i++;
      }
    } else {
      fail('Bad number');
    }
    const intLen = i - intStart;
    c = text.charCodeAt(i);
    // plain integer of at most 15 digits, not "-0": its value without slicing the literal
    if (intLen <= 15 && c !== 46 && c !== 101 && c !== 69 && !(acc === 0 && start !== intStart)) {
      return start !== intStart ? -acc : acc;
    }
    if (text.charCodeAt(i) === 46) {
      simple = false;
      i++;
      const f = i;
      while (i < n && (c = text.charCodeAt(i)) >= 48 && c <= 57) i++;
      if (i === f) fail('Bad number');
    }
    c = text.charCodeAt(i);
    if (c === 101 || c === 69) {
      simple = false;
      i++;
      c = text.charCodeAt(i);
      if (c === 43 || c === 45) i++;
      const e = i;
      while (i < n && (c = text.charCodeAt(i)) >= 48 && c <= 57) i++;
      if (i === e) fail('Bad number');
    }
    const lit = text.slice(start, i);
    // "-0" is kept as a literal so that re-serialising it gives "-0", not "0".
    if (simple && intLen <= 15 && lit !== '-0') return Number(lit);
    if (simple) {
      const v = Number(lit);
      if (Number.isSafeInteger(v) && lit !== '-0') return v;
    }
    return new NumLit(lit);
  };

  const parseValue = (depth: number): JsonValue => {
    ws();
    if (i >= n) fail('Unexpected end of input');
    const c = text.charCodeAt(i);
    if (c === 123) {
      if (depth >= MAX_DEPTH) fail('Nesting too deep');
      i++;
      const obj: { [key: string]: JsonValue } = {};
      ws();
      if (text.charCodeAt(i) === 125) {
        i++;
        return obj;
      }
      for (;;) {
        ws();
        if (text.charCodeAt(i) !== 34) fail('Expected a property name');
        const key = parseString();
        ws();
        if (text.charCodeAt(i) !== 58) fail("Expected ':'");
        i++;
        const v = parseValue(depth + 1);
        // __proto__ as a key must be data, not a prototype change.
        if (key === '__proto__')
          Object.defineProperty(obj, key, { value: v, enumerable: true, configurable: true, writable: true });
        else obj[key] = v;
        ws();
        const d = text.charCodeAt(i);
        if (d === 44) {
          i++;
          continue;
        }
        if (d === 125) {
          i++;
          return obj;
        }
        fail("Expected ',' or '}'");
      }
    }
    if (c === 91) {
      if (depth >= MAX_DEPTH) fail('Nesting too deep');
      i++;
      const arr: JsonValue[] = [];
      ws();
      if (text.charCodeAt(i) === 93) {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(parseValue(depth + 1));
        ws();
        const d = text.charCodeAt(i);
        if (d === 44) {
          i++;
          continue;
        }
        if (d === 93) {
          i++;
          return arr;
        }
        fail("Expected ',' or ']'");
      }
    }
    if (c === 34) return parseString();
    if (c === 116) {
      if (text.startsWith('true', i)) {
        i += 4;
        return true;
      }
      fail('Unexpected token');
    }
    if (c === 102) {
      if (text.startsWith('false', i)) {
        i += 5;
        return false;
      }
      fail('Unexpected token');
    }
    if (c === 110) {
      if (text.startsWith('null', i)) {
        i += 4;
        return null;
      }
      fail('Unexpected token');
    }
    if (c === 45 || (c >= 48 && c <= 57)) return parseNumber();
    return fail('Unexpected token');
  };

  const v = parseValue(0);
  ws();
  if (i !== n) fail('Unexpected data after JSON value');
  return v;
}

/** Compact JSON text of a parsed value, numbers written as their original literals (Gson keeps them too). */
export function stringifyJson(v: JsonValue): string {
  if (v === null) return 'null';
  if (typeof v === 'boolean' || typeof v === 'number') return String(v);
  if (typeof v === 'string') return JSON.stringify(v);
  if (v instanceof NumLit) return v.text;
  if (Array.isArray(v)) return `[${v.map(stringifyJson).join(',')}]`;
  let out = '{';
  let first = true;
  for (const [k, x] of Object.entries(v)) {
    out += `${first ? '' : ','}${JSON.stringify(k)}:${stringifyJson(x)}`;
    first = false;
  }
  return `${out}}`;
}

export function isJsonObject(v: JsonValue): v is { [key: string]: JsonValue } {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof NumLit);
}
