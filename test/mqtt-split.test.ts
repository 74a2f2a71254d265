/**
 * The Gateway API telemetry splitter (src/ingest/split.ts): whenever it cuts a body, the cut equals what a
 * JSON parser reads (names and each array), escapes and brackets inside strings included; anything it does
 * not take whole it leaves to the general path (undefined).
 */
import t from 'tap';
import { splitDeviceArrays } from '../src/ingest/split.js';
import { rng } from './helpers/prng.js';

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
