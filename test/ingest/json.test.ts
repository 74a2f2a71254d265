/**
 * The literal-preserving JSON parser (src/ingest/json.ts): agrees with JSON.parse on valid input, keeps
 * number literals, rejects what JSON.parse rejects, bounds nesting, and never lets `__proto__` change a
 * prototype.
 */
import '../helpers/sandbox.js';
import t from 'tap';
import {
  JsonSyntaxError,
  type JsonValue,
  NumLit,
  isJsonObject,
  parseJson,
  stringifyJson,
} from '../../src/ingest/json.js';

/** Replaces NumLits by their numeric value so a result can be compared with JSON.parse's. */
function plain(v: JsonValue): unknown {
  if (v instanceof NumLit) return Number(v.text);
  if (Array.isArray(v)) return v.map(plain);
  if (isJsonObject(v)) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v))
      Object.defineProperty(out, k, { value: plain(x), enumerable: true, writable: true, configurable: true });
    return out;
  }
  return v;
}

t.test('valid documents agree with JSON.parse', async (t) => {
  const docs = [
    '0',
    '-1',
    '1.5',
    '1e3',
    '-1E-3',
    '"x"',
    'true',
    'false',
    'null',
    '[]',
    '{}',
    ' \t\r\n{ "a" : [ 1 , { "b" : null } ] , "c" : "d" } \n',
    '"\\"\\\\\\/\\b\\f\\n\\r\\t"',
    '"\\u0041\\u00e9\\u20AC\\ud83d\\ude00"',
    '"plain ünïcödé 😀 text"',
    '{"a":1,"a":2}',
    '[9007199254740991,-9007199254740991]',
  ];
  for (const d of docs) t.same(plain(parseJson(d)), JSON.parse(d), d);
});

t.test('number literals: safe integers are numbers, everything else keeps its text', async (t) => {
  t.equal(parseJson('42'), 42);
  t.equal(parseJson('-7'), -7);
  t.equal(parseJson('9007199254740991'), 9007199254740991);
  const cases = ['42.0', '1E+1', '101E-1', '-0', '9007199254740993', '12345678901234567890', '0.10'];
  for (const lit of cases) {
    const v = parseJson(lit);
    t.ok(v instanceof NumLit, `${lit} is a NumLit`);
    t.equal((v as NumLit).text, lit);
  }
  t.equal(
    stringifyJson(parseJson('{"a":[1.0,2E5,-0,{"b":"\\n"}],"c":true,"d":null}')),
    '{"a":[1.0,2E5,-0,{"b":"\\n"}],"c":true,"d":null}',
  );
});

t.test('invalid documents are rejected with JsonSyntaxError', async (t) => {
  const bad = [
    '',
    ' ',
    '{',
    '}',
    '[',
    '[1,]',
    '{"a":1,}',
    '{a:1}',
    "{'a':1}",
    '{"a" 1}',
    '{"a":}',
    '01',
    '1.',
    '.5',
    '+1',
    '-',
    '1e',
    '1e+',
    'tru',
    'nul',
    'NaN',
    'Infinity',
    '"abc',
    '"a\\x"',
    '"\\u12"',
    '"\\u12G4"',
    '"tab\there"',
    '"nl\nhere"',
    '{"a":1} x',
    '[1] [2]',
    '{"a":1}}',
    'true false',
    '"a" "b"',
    '\u00a0{}',
    '[1 2]',
    '{"a":1 "b":2}',
    '/* c */ 1',
  ];
  for (const d of bad) {
    t.throws(() => parseJson(d), JsonSyntaxError, JSON.stringify(d));
    t.throws(() => JSON.parse(d), SyntaxError, `JSON.parse agrees on ${JSON.stringify(d)}`);
  }
  try {
    parseJson('{"a":1} x');
    t.fail('trailing garbage accepted');
  } catch (err) {
    t.match((err as Error).message, /after JSON value at position 8/);
  }
});

t.test('nesting is bounded at 64 levels', async (t) => {
  const nest = (n: number, open: string, close: string): string => open.repeat(n) + close.repeat(n);
  t.doesNotThrow(() => parseJson(nest(64, '[', ']')), '64 arrays deep is fine');
  t.doesNotThrow(() => parseJson(`${'{"a":'.repeat(64)}1${'}'.repeat(64)}`), '64 objects deep is fine');
  t.throws(() => parseJson(nest(65, '[', ']')), /Nesting too deep/);
  t.throws(() => parseJson(nest(100_000, '[', ']')), /Nesting too deep/, 'deep input fails cleanly, no stack overflow');
  t.throws(() => parseJson(`${'{"a":'.repeat(65)}1${'}'.repeat(65)}`), /Nesting too deep/);
});

t.test('__proto__ and constructor keys are plain data', async (t) => {
  const v = parseJson('{"__proto__":{"polluted":1},"constructor":2}');
  t.ok(isJsonObject(v));
  const obj = v as Record<string, JsonValue>;
  t.equal(Object.getPrototypeOf(obj), Object.prototype, 'prototype unchanged');
  t.equal((obj as { polluted?: unknown }).polluted, undefined, 'nothing inherited from the payload');
  t.same(Object.keys(obj), ['__proto__', 'constructor']);
  // biome-ignore lint/suspicious/noProto: the subject is an own `__proto__` key parsed from JSON, which must stay plain data
  t.same(plain(obj['__proto__'] as JsonValue), { polluted: 1 });
  t.equal(({} as { polluted?: unknown }).polluted, undefined, 'Object.prototype untouched');
  t.equal(stringifyJson(v), '{"__proto__":{"polluted":1},"constructor":2}');
});

t.test('strings: escapes and unicode survive a round trip', async (t) => {
  const s = 'quote " backslash \\ slash / ctl \u0001 bmp é€ astral 😀 lone \ud800';
  t.equal(parseJson(JSON.stringify(s)), s);
  t.equal(stringifyJson(parseJson(JSON.stringify(s))), JSON.stringify(s));
  t.equal(parseJson('"\\u0000"'), '\u0000');
});
