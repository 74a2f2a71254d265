/**
 * The Gateway API telemetry splitter (src/ingest/split.ts): whenever it cuts a body, the cut equals what a
 * JSON parser reads (names and each array), escapes and brackets inside strings included; anything it does
 * not take whole it leaves to the general path (undefined). The one-device shortcut (telemetryParts in
 * src/transports/mqtt/gateway-topics.ts) answers what the split does, for one device and for several.
 */
import '../helpers/sandbox.js';
import t from 'tap';
import { parseTelemetryBody } from '../../src/ingest/fastpath.js';
import { splitDeviceArrays } from '../../src/ingest/split.js';
import { TelemetryBatch } from '../../src/model/batch.js';
import type { TsRecord } from '../../src/model/record.js';
import { telemetryParts } from '../../src/device/gateway.js';
import { rng } from '../helpers/prng.js';

const next = rng(20_261_126);
const int = (n: number): number => Math.floor(next() * n);
const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)] as T;

const NAMES = ['A', 'Meter "1"', 'x\\y', 'é€', '[', '{}', 'a]b', ' ', 'n\u0001'];
const VALUES = ['1', '"s"', '"]"', '"\\"]"', '{"a":[1,{"b":"}"}]}', '[]', 'null', '"[{"', 'true'];

function body(): string {
  const n = 1 + int(4);
  const members = Array.from({ length: n }, () => {
    const arr = `[${Array.from({ length: int(3) }, () => pick(VALUES)).join(',')}]`;
    const v = int(8) === 0 ? pick(['{"k":1}', '1', '"str"']) : arr;
    return `${pick(['', ' ', '\n'])}${JSON.stringify(pick(NAMES))}${pick(['', ' '])}:${pick(['', ' '])}${v}`;
  });
  let text = `{${members.join(',')}}${pick(['', ' ', '\n'])}`;
  if (int(6) === 0) text = text.slice(0, int(text.length));
  return text;
}

t.test('the cut equals JSON.parse, or the general path decides', async (t) => {
  let cut = 0;
  let left = 0;
  for (let i = 0; i < 3000; i++) {
    const text = body();
    const got = splitDeviceArrays(Buffer.from(text));
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    if (got === undefined) {
      left++;
      continue;
    }
    cut++;
    if (parsed === undefined || typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      t.fail(`cut a body JSON refuses: ${text}`);
      continue;
    }
    const obj = parsed as Record<string, unknown>;
    const names = got.map(([n]) => n);
    if (JSON.stringify(names) !== JSON.stringify(Object.keys(obj)) && new Set(names).size === Object.keys(obj).length) {
      // JSON objects order integer-like keys first; compare as sets then
      t.same([...names].sort(), Object.keys(obj).sort(), text);
    } else {
      t.same(names.length, Object.keys(obj).length, `names of ${text}`);
    }
    for (const [name, arr] of got) t.same(JSON.parse(arr.toString()), obj[name], `${name} in ${text}`);
  }
  t.ok(cut > 500 && left > 200, `${cut} cut, ${left} left to the general path`);
});

t.test('duplicates, non-arrays, empty objects and trailing bytes go to the general path', async (t) => {
  for (const text of [
    '{"a":[1],"a":[2]}',
    '{"a":{"k":1}}',
    '{}',
    '{"a":[1]} x',
    '[{"a":1}]',
    '{"a":[1]',
    '{"a":[1,"]}',
    '',
  ]) {
    t.equal(splitDeviceArrays(Buffer.from(text)), undefined, text);
  }
});

/** A device's points as plain data, whichever form the parser gave them in. */
function plain(points: TelemetryBatch | TsRecord[]): unknown {
  const batch = points instanceof TelemetryBatch ? points : TelemetryBatch.fromRecords(points);
  return [...batch.series].map(([key, col]) => [key, col.toPoints()]);
}

t.test('the one-device shortcut answers what the split does, for one device and for several', async (t) => {
  const RECORDS = [
    '{"k":1}',
    '{"ts":1700000000000,"values":{"k":2,"s":"]}"}}',
    '{"a":"[\\"x","b":true}',
    '{"k":{"n":1}}',
  ];
  const now = 1_700_000_000_000;
  let one = 0;
  let several = 0;
  for (let i = 0; i < 2000; i++) {
    const n = 1 + int(3);
    const names = new Set(Array.from({ length: n }, () => pick(NAMES)));
    const members = [...names].map(
      (name) =>
        `${pick(['', ' ', '\n'])}${JSON.stringify(name)}${pick(['', ' '])}:${pick(['', ' '])}[${Array.from({ length: int(3) }, () => pick(RECORDS)).join(pick([',', ' , ']))}]`,
    );
    const body = Buffer.from(`{${members.join(',')}}${pick(['', ' ', '\n'])}`);
    const split = splitDeviceArrays(body);
    if (split === undefined) {
      t.fail(`not split: ${body.toString()}`);
      continue;
    }
    const want = split
      .filter(([name]) => name.trim() !== '')
      .map(([name, arr]) => {
        try {
          return [name, plain(parseTelemetryBody(arr, now))];
        } catch (err) {
          return [name, (err as Error).message];
        }
      });
    let got: unknown;
    try {
      got = telemetryParts(body, now).map(([name, points]) => [name, plain(points)]);
    } catch (err) {
      // a refused body: the split's answer names the same refusal for one of its devices
      got = (err as Error).message;
    }
    if (typeof got === 'string') t.ok(JSON.stringify(want).includes(JSON.stringify(got)), body.toString());
    else t.same(got, want, body.toString());
    if (names.size === 1) one++;
    else several++;
  }
  t.ok(one > 300 && several > 300, `${one} bodies of one device, ${several} of several`);
});
