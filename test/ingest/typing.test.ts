/**
 * ThingsBoard value typing (docs/api.md) and Java double rendering (docs/api.md), table-driven with TB's
 * own fixtures (JsonConverterTest) plus the edge cases around 64-bit overflow and scale.
 */
import '../helpers/sandbox.js';
import t from 'tap';
import { OutpostError } from '../../src/errors.js';
import { parseJson } from '../../src/ingest/json.js';
import { MAX_PLAIN_NUMBER_LENGTH, typeJsonValue } from '../../src/ingest/typing.js';
import { type KvValue, javaDouble, kvToJson, kvToString } from '../../src/model/kv.js';

/** The JSON text of one value → its TB type and value (bigints written as strings with an `n`). */
const TYPING: Array<[json: string, type: KvValue['type'] | 'SKIP', value?: unknown]> = [
  ['1E+1', 'LONG', 10],
  ['101E-1', 'DOUBLE', 10.1],
  ['42.0', 'DOUBLE', 42],
  ['42.5', 'DOUBLE', 42.5],
  ['11', 'LONG', 11],
  ['-11', 'LONG', -11],
  ['0', 'LONG', 0],
  ['-0', 'LONG', 0],
  ['1.0E2', 'LONG', 100],
  ['1.5E1', 'LONG', 15],
  ['1.25E1', 'DOUBLE', 12.5],
  ['"17"', 'LONG', 17],
  ['"-1.5"', 'DOUBLE', -1.5],
  ['".5"', 'DOUBLE', 0.5],
  ['"0017"', 'LONG', 17],
  ['"abc"', 'STRING', 'abc'],
  ['""', 'STRING', ''],
  ['"1e5"', 'STRING', '1e5'],
  ['"+5"', 'STRING', '+5'],
  ['"5."', 'STRING', '5.'],
  ['" 5"', 'STRING', ' 5'],
  ['true', 'BOOLEAN', true],
  ['false', 'BOOLEAN', false],
  ['"true"', 'STRING', 'true'],
  ['null', 'SKIP'],
  // 64-bit bounds: Long.MAX/MIN stay longs (bigint beyond 2^53), one more becomes the plain digit string
  ['9007199254740993', 'LONG', '9007199254740993n'],
  ['9223372036854775807', 'LONG', '9223372036854775807n'],
  ['-9223372036854775808', 'LONG', '-9223372036854775808n'],
  ['9223372036854775808', 'STRING', '9223372036854775808'],
  ['12345678901234567890', 'STRING', '12345678901234567890'],
  ['"12345678901234567890"', 'STRING', '12345678901234567890'],
  ['1E19', 'STRING', '10000000000000000000'],
  ['9.9701010061400066E19', 'STRING', '99701010061400066000'],
  ['1E18', 'LONG', '1000000000000000000n'],
  // scale > 16 → STRING of the plain form; scale 16 still a double
  ['0.12345678901234567', 'STRING', '0.12345678901234567'],
  ['0.1234567890123456', 'DOUBLE', 0.1234567890123456],
  ['1E-17', 'STRING', '0.00000000000000001'],
  ['1.5E-5', 'DOUBLE', 1.5e-5],
  ['"0.12345678901234567"', 'STRING', '0.12345678901234567'],
  // objects and arrays: compact JSON text, number literals kept as written, nested nulls kept
  ['{"a":1.0,"b":[1E2,null,-0],"c":{"d":"x"}}', 'JSON', '{"a":1.0,"b":[1E2,null,-0],"c":{"d":"x"}}'],
  ['[ 1 , 2.50 ]', 'JSON', '[1,2.50]'],
  ['{}', 'JSON', '{}'],
  ['[]', 'JSON', '[]'],
];

const show = (v: unknown): unknown => (typeof v === 'bigint' ? `${v}n` : v);

t.test('TB value typing table', async (t) => {
  for (const [json, type, value] of TYPING) {
    const typed = typeJsonValue(parseJson(json));
    if (type === 'SKIP') {
      t.equal(typed, undefined, `${json} is skipped`);
      continue;
    }
    t.equal(typed?.type, type, `${json} → ${type}`);
    t.equal(show(typed?.v), value, `${json} → ${String(value)}`);
  }
});

t.test('a literal that would expand beyond the plain-digit cap is rejected, not expanded', async (t) => {
  for (const lit of ['1E500000000', '1E-500000000', '1E99999999999999999999', `1E${MAX_PLAIN_NUMBER_LENGTH + 1}`]) {
    let code: string | undefined;
    try {
      typeJsonValue(parseJson(lit));
    } catch (err) {
      code = err instanceof OutpostError ? err.code : String(err);
    }
    t.equal(code, 'BAD_PAYLOAD', lit);
  }
  // just under the cap is still TB's plain string
  const ok = typeJsonValue(parseJson(`1E${MAX_PLAIN_NUMBER_LENGTH - 1}`));
  t.equal(ok?.type, 'STRING');
  t.equal((ok?.v as string | undefined)?.length, MAX_PLAIN_NUMBER_LENGTH);
  t.equal(typeJsonValue(parseJson('0E999999999'))?.v, 0, 'zero with any exponent is 0');
});

t.test('Java Double.toString rendering', async (t) => {
  const cases: Array<[number, string]> = [
    [42, '42.0'],
    [1e10, '1.0E10'],
    [1.5e-5, '1.5E-5'],
    [0.001, '0.001'],
    [1234567.5, '1234567.5'],
    [-0, '-0.0'],
    [0, '0.0'],
    [1e7, '1.0E7'],
    [9999999, '9999999.0'],
    [1e-4, '1.0E-4'],
    [123456789.123, '1.23456789123E8'],
    [-2.5, '-2.5'],
    [1e21, '1.0E21'],
    [1e-7, '1.0E-7'],
    [0.1 + 0.2, '0.30000000000000004'],
    [Number.MAX_VALUE, '1.7976931348623157E308'],
    [NaN, 'NaN'],
    [Infinity, 'Infinity'],
  ];
  for (const [d, s] of cases) t.equal(javaDouble(d), s, `${String(d)} → ${s}`);
});

t.test('kvToString and kvToJson per type', async (t) => {
  const cases: Array<[string, string, string]> = [
    ['42.0', '42.0', '42.0'],
    ['11', '11', '11'],
    ['9223372036854775807', '9223372036854775807', '9223372036854775807'],
    ['true', 'true', 'true'],
    ['"abc"', 'abc', '"abc"'],
    ['1E19', '10000000000000000000', '"10000000000000000000"'],
    ['{"a":1.0}', '{"a":1.0}', '{"a":1.0}'],
    ['1E10', '10000000000', '10000000000'],
    ['1.5E-5', '1.5E-5', '1.5E-5'],
  ];
  for (const [json, asString, asJson] of cases) {
    const v = typeJsonValue(parseJson(json));
    if (v === undefined) {
      t.fail(`${json} typed as skip`);
      continue;
    }
    t.equal(kvToString(v), asString, `${json} as string`);
    t.equal(kvToJson(v), asJson, `${json} as JSON`);
  }
});
