/**
 * The telemetry fast path (src/ingest/fastpath.ts) against the general path (parseJson → parseTelemetry),
 * Whenever the fast path answers, its columns equal those of the general path's records exactly
 * (key order, point order, value types, -0, bigints); when the general path refuses a body, the fast path must not answer. Table-driven for
 * the rarities, then seeded random bodies and mutations of them.
 */
import '../helpers/sandbox.js';
import t, { type Test } from 'tap';
import type { KvValue } from '../../src/model/kv.js';
import { parseTelemetryFast } from '../../src/ingest/fastpath.js';
import { parseBody, parseTelemetry } from '../../src/ingest/payload.js';
import { TelemetryBatch } from '../../src/model/batch.js';
import { rng } from '../helpers/prng.js';

const NOW = 1_700_000_000_000;

const show = (v: KvValue): string => `${v.type}:${typeof v.v}:${Object.is(v.v, -0) ? '-0' : String(v.v)}`;
/** key by key (in order of first appearance), each point's ts and typed value */
const render = (b: TelemetryBatch): string =>
  JSON.stringify([...b.series].map(([k, col]) => [k, col.ts, col.ts.map((_ts, i) => show(col.value(i)))]));

function general(text: string, rejectNull: boolean): { ok: true; out: string } | { ok: false; err: string } {
  try {
    return { ok: true, out: render(TelemetryBatch.fromRecords(parseTelemetry(parseBody(text), NOW, rejectNull))) };
  } catch (err) {
    return { ok: false, err: String(err) };
  }
}

/** Checks one body both ways; true when the fast path answered. */
function agree(t: Test, text: string, rejectNull = false): boolean {
  const fast = parseTelemetryFast(Buffer.from(text), NOW, rejectNull);
  const g = general(text, rejectNull);
  if (fast === undefined) return false;
  if (!g.ok) {
    t.fail(`fast path answered a body the general path refuses (${g.err}): ${text.slice(0, 200)}`);
  } else if (render(fast) !== g.out) {
    t.equal(render(fast), g.out, text.slice(0, 200));
  }
  return true;
}

t.test('table: rarities agree or hand over', async (t) => {
  const cases: Array<[body: string, fast: boolean]> = [
    ['{"temperature":21.5,"humidity":40,"pressure":1013.25}', true],
    ['[{"ts":1700000000000,"values":{"a":1.0,"b":2}},{"ts":1700000010000,"values":{"a":"x"}}]', true],
    [
      '{"a":-0,"b":-0.0,"c":0,"d":1E+1,"e":101E-1,"f":12345678901234567890,"g":9007199254740993,"h":0.12345678901234567}',
      true,
    ],
    ['{"a":"42","b":"-1.5","c":".5","d":"1e5","e":"","f":true,"g":false,"h":null}', true],
    ['{"ts":5,"a":1}', true],
    // a flat object with a device key named "ts": it keeps its place among the other keys
    ['{"a":1,"ts":5,"b":2}', true],
    ['{"a":1,"b":2,"ts":5}', true],
    ['{"a":1,"ts":null,"b":2}', true],
    ['{"ts":"x","a":1}', true],
    ['{"ts":"5","values":{"a":1}}', false],
    ['{"ts":1.5,"values":{"a":1}}', false],
    ['{"ts":5,"values":7}', false],
    ['{"values":{"a":1}}', false],
    ['{"ts":5,"values":{"a":1},"extra":1E999999999}', false],
    ['{"a":1,"a":2}', false],
    ['{"2":1,"1":2}', false],
    ['{"__proto__":1}', false],
    ['{"a\\n":1}', false],
    ['{"a":"\\u0041"}', false],
    ['{"a":{"b":1}}', false],
    ['{"a":[1]}', false],
    ['{" ":1}', false],
    ['{"":1}', false],
    [`{"${'x'.repeat(256)}":1}`, false],
    ['{"a":1E999999999}', false],
    ['{"a":01}', false],
    ['{"a":1.}', false],
    ['{"a":1,}', false],
    ['[{"a":1},2]', false],
    ['[]', true],
    ['{}', true],
    [' \n{ "a" : 1 } \t', true],
    ['{"a":1} x', false],
    ['"text"', false],
    // the fast path reads ASCII only; the general path decodes UTF-8
    ['{"é":1}', false],
    ['{"a":"21 °C"}', false],
    ['[{"ts":1,"values":{"a":1}},{"ts":2,"values":{"a":"é"}}]', false],
  ];
  for (const [body, fast] of cases)
    t.equal(agree(t, body), fast, `fast path ${fast ? 'answers' : 'hands over'}: ${body.slice(0, 60)}`);
  t.equal(agree(t, '{"a":null}', true), false, 'null under rejectNull hands over');
  t.equal(
    parseTelemetryFast(Buffer.from([0x7b, 0x22, 0x61, 0xff, 0x22, 0x3a, 0x31, 0x7d]), NOW, false),
    undefined,
    'invalid UTF-8 hands over',
  );
  t.equal(agree(t, '{"a":1}', true), true, 'rejectNull without nulls');
});

t.test('seeded random bodies: the fast path never disagrees', async (t) => {
  const next = rng(20_261_121);
  const int = (n: number): number => Math.floor(next() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)] as T;
  const key = (): string =>
    pick(['a', 'b', 'c', 'ts', 'values', 'k1', '1', '', ' ', '__proto__', 'é', 'a"b', 'x'.repeat(255)]);
  const num = (): string =>
    pick([
      '0',
      '-0',
      '1',
      '-1',
      '42',
      '42.0',
      '1E+1',
      '101E-1',
      '1e400',
      '1E19',
      '9223372036854775807',
      '9223372036854775808',
      '0.12345678901234567',
      '1E999999999',
      '3.14159',
      '1.0E10',
      '123456789012345',
      '1234567890123456',
      '9007199254740993',
      String(int(1e9)),
      `${int(1000)}.${int(1000)}`,
      `-${int(10)}.${int(100)}0`,
    ]);
  const scalar = (): string =>
    pick([num(), num(), '"abc"', '"17"', '"-1.5"', '".5"', '"1e5"', '"\\n"', 'true', 'false', 'null', '{}', '[1]']);
  const obj = (): string =>
    `{${Array.from({ length: int(5) }, () => `${JSON.stringify(key())}:${scalar()}`).join(',')}}`;
  const ts = (): string => pick([String(1_600_000_000_000 + int(1e9)), '0', '-1', '"17"', '1.5', 'null', '{}']);
  const one = (): string =>
    next() < 0.5
      ? obj()
      : `{"ts":${ts()},"values":${next() < 0.9 ? obj() : scalar()}${next() < 0.1 ? `,"z":${scalar()}` : ''}}`;
  const body = (): string => (next() < 0.5 ? one() : `[${Array.from({ length: 1 + int(4) }, one).join(',')}]`);
  const mutate = (s: string): string => {
    const i = int(s.length + 1);
    return pick([
      s.slice(0, i),
      s.slice(0, i) + s.slice(i + 1),
      s.slice(0, i) + pick(['"', ',', '}', ']', ' ', '0', '.', 'e', '-']) + s.slice(i),
    ]);
  };
  let answered = 0;
  const N = 20_000;
  for (let i = 0; i < N; i++) {
    const b = next() < 0.8 ? body() : mutate(body());
    if (agree(t, b, next() < 0.2)) answered++;
  }
  t.ok(answered > N / 20, `the fast path answered ${answered} of ${N}`);
});

t.test('batches that repeat a record shape (the record template) agree with the general path', async (t) => {
  // The fast path reuses the text between the numbers of a `{"ts":..,"values":{..}}` record for the records
  // that follow. Each body here repeats one shape with fresh numbers, and some records deviate from it.
  const next = rng(11_212_026);
  const int = (n: number): number => Math.floor(next() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)] as T;
  const plain = (): string =>
    pick([String(int(1e6)), `-${int(1000)}`, `${int(100)}.${int(100)}`, `-${int(10)}.${1 + int(9)}`, '0', '42.0']);
  const exotic = (): string =>
    pick([
      '-0',
      '1E+1',
      '101E-1',
      '1e400',
      '9223372036854775808',
      '0.12345678901234567',
      '1234567890123456',
      '"17"',
      '"x"',
      'null',
      'true',
      '{}',
      '[1]',
      '01',
      '1.',
      '-',
      '1E999999999',
    ]);
  const keyPool = ['temperature', 'counter', 'a', 'ts', 'values', 'k1', 'é'];
  let bodies = 0;
  for (let b = 0; b < 3000; b++) {
    const keys = [...new Set(Array.from({ length: 1 + int(3) }, () => pick(keyPool)))];
    const spaced = next() < 0.2;
    const rec = (ts: string, values: string[], ks = keys): string => {
      const inner = ks.map((k, j) => `${JSON.stringify(k)}:${spaced ? ' ' : ''}${values[j] ?? plain()}`).join(',');
      return `{"ts":${ts},"values":{${inner}}}`;
    };
    let ts = 1_600_000_000_000 + int(1e9);
    const records: string[] = [];
    for (let r = 0, n = 2 + int(7); r < n; r++) {
      ts += 1 + int(20_000);
      const values = keys.map(() => plain());
      const variant = next();
      if (variant < 0.7) records.push(rec(String(ts), values));
      else if (variant < 0.78)
        records.push(
          rec(
            String(ts),
            values.map((v) => (next() < 0.5 ? exotic() : v)),
          ),
        );
      else if (variant < 0.82)
        records.push(rec(pick(['"17"', '1.5', '-0', 'null', '12345678901234567', '-5']), values));
      else if (variant < 0.86) records.push(rec(String(ts), values, [...keys].reverse()));
      else if (variant < 0.9) records.push(rec(String(ts), [...values, plain()], [...keys, keys[0] as string]));
      else if (variant < 0.93) records.push(rec(String(ts), values).replace('}}', `},"z":${plain()}}`));
      else if (variant < 0.96) records.push(rec(String(ts), values).replace(':', ' : '));
      else
        records.push(
          `{"values":{${keys.map((k, j) => `${JSON.stringify(k)}:${values[j] as string}`).join(',')}},"ts":${ts}}`,
        );
    }
    if (agree(t, `[${records.join(',')}]`, next() < 0.1)) bodies++;
  }
  t.ok(bodies > 1000, `the fast path answered ${bodies} of 3000 bodies`);
});

t.test('decimals typed without the string: the same double as Number(literal)', async (t) => {
  const next = rng(7_031_953);
  const digits = (n: number): string => Array.from({ length: n }, () => String(Math.floor(next() * 10))).join('');
  let checked = 0;
  for (let i = 0; i < 50_000; i++) {
    const intLen = 1 + Math.floor(next() * 10);
    const int = intLen === 1 ? digits(1) : String(1 + Math.floor(next() * 9)) + digits(intLen - 1);
    const lit = `${next() < 0.3 ? '-' : ''}${int}.${digits(1 + Math.floor(next() * 17))}`;
    const fast = parseTelemetryFast(Buffer.from(`{"v":${lit}}`), NOW, false);
    const want = parseTelemetry(parseBody(`{"v":${lit}}`), NOW, false);
    const got = fast?.series.get('v')?.value(0);
    const exp = want[0]?.values[0]?.[1];
    if (got === undefined || exp === undefined || show(got) !== show(exp)) {
      t.equal(got && show(got), exp && show(exp), lit);
      break;
    }
    checked++;
  }
  t.equal(checked, 50_000, 'every literal agreed');
});
