import '../helpers/sandbox.js';
import t from 'tap';
import { CsvBuffer, EOL, csvField, csvRecord } from '../../src/csv/rfc4180.js';
import { CHUNK_BYTES, csvAttachment } from '../../src/api/download/stream.js';
import { Column } from '../../src/csv/column.js';
import { wideCsvChunks } from '../../src/csv/wide.js';
import { parseCsv } from '../helpers/csv-parse.js';
import { rng } from '../helpers/prng.js';

t.test('csvField quotes exactly commas, quotes, CR and LF (RFC 4180)', async (t) => {
  const table: Array<[string, string]> = [
    ['plain', 'plain'],
    ['42.0', '42.0'],
    ['a,b', '"a,b"'],
    ['say "hi"', '"say ""hi"""'],
    ['line1\nline2', '"line1\nline2"'],
    ['cr\rhere', '"cr\rhere"'],
    ['crlf\r\n', '"crlf\r\n"'],
    ['{"tag":"value"}', '"{""tag"":""value""}"'],
    ['', '""'],
    [' spaced ', ' spaced '],
    ['żółw ☃ 𝄞', 'żółw ☃ 𝄞'],
  ];
  for (const [value, expected] of table) t.equal(csvField(value), expected, JSON.stringify(value));
  t.equal(csvRecord(['ts', 'a,b', 'c']), `ts,"a,b",c${EOL}`);
  const b = new CsvBuffer(4);
  for (const [value] of table) {
    b.field(value);
    b.comma();
  }
  b.eol();
  t.equal(
    b.view().toString('utf8'),
    `${table.map(([, e]) => `${e},`).join('')}\n`,
    'CsvBuffer writes the same bytes, growing as needed',
  );
});

/** A column over fixed cells, in small pages so page boundaries are crossed. */
const cells = (pairs: Array<[number, string]>): Column =>
  Column.of(pairs.map(([pos, text]) => ({ pos, text }))[Symbol.iterator](), 3);

/** All chunks of a wide CSV, each copied (the generator reuses its buffer), and the chunks themselves. */
function wideText(header: string[], columns: Column[], chunkBytes = 1 << 20): { text: string; chunks: Buffer[] } {
  const chunks: Buffer[] = [];
  for (const c of wideCsvChunks({ header, columns, formatPos: (p) => String(p) }, chunkBytes))
    chunks.push(Buffer.from(c));
  return { text: Buffer.concat(chunks).toString('utf8'), chunks };
}

t.test('wideCsvChunks merges sorted sources into one row per distinct position', async (t) => {
  const { text } = wideText(
    ['ts', 'a', 'b', 'c', 'd'],
    [
      cells([
        [1, 'a1'],
        [3, 'a3'],
        [7, 'a7'],
      ]),
      cells([
        [2, 'b2'],
        [3, 'b3'],
      ]),
      cells([]),
      cells([
        [-5, 'c-5'],
        [7, 'c7'],
      ]),
    ],
  );
  t.equal(text, ['ts,a,b,c,d\n', '-5,,,,c-5\n', '1,a1,,,\n', '2,,b2,,\n', '3,a3,b3,,\n', '7,a7,,,c7\n'].join(''));
  t.equal(wideText(['ts'], []).text, 'ts\n', 'no sources → header only');
  t.equal(
    wideText(
      ['ds', 'k,1'],
      [
        cells([
          [0.25, 'x,y'],
          [0.5, ''],
        ]),
      ],
    ).text,
    'ds,"k,1"\n0.25,"x,y"\n0.5,""\n',
    'header and cells quoted; empty string is ""',
  );
});

t.test('wideCsvChunks cuts chunks of at least chunkBytes, losing nothing', async (t) => {
  const pairs: Array<[number, string]> = Array.from({ length: 1000 }, (_, i) => [i, `value-${i}`]);
  const { text, chunks } = wideText(['ts', 'v'], [cells(pairs)], 1024);
  t.equal(text, `ts,v\n${pairs.map(([p, v]) => `${p},${v}\n`).join('')}`);
  for (const c of chunks.slice(0, -1)) t.ok(c.length >= 1024 && c.length < 1024 + 30, `chunk size ${c.length}`);
  t.ok(chunks.length > 5);
});

t.test('seeded round trip through an independent RFC 4180 parser', async (t) => {
  const rnd = rng(20261121);
  const alphabet = ['a', 'Z', '0', ',', '"', '\n', '\r', ' ', 'ä', '☃', '𝄞', '{', '}', ':', ';', '\t'];
  const randomText = (): string => {
    const n = Math.floor(rnd() * 12);
    let s = '';
    for (let i = 0; i < n; i++) s += alphabet[Math.floor(rnd() * alphabet.length)];
    return s;
  };
  const K = 5;
  const expected = new Map<number, string[]>();
  const series: Array<Array<[number, string]>> = Array.from({ length: K }, () => []);
  for (let pos = 0; pos < 400; pos++) {
    const row: string[] = [];
    let any = false;
    for (let k = 0; k < K; k++) {
      if (rnd() < 0.5) {
        row.push('');
        continue;
      }
      let v = randomText();
      if (v === '') v = 'x';
      series[k]?.push([pos, v]);
      row.push(v);
      any = true;
    }
    if (any) expected.set(pos, row);
  }
  const { text } = wideText(
    ['ts', 'k0', 'k1', 'k2', 'k3', 'k4'],
    series.map((s) => cells(s)),
    4096,
  );
  const parsed = parseCsv(text);
  t.same(parsed[0], ['ts', 'k0', 'k1', 'k2', 'k3', 'k4']);
  t.equal(parsed.length - 1, expected.size, 'one row per distinct position');
  let mismatches = 0;
  for (const r of parsed.slice(1)) {
    const want = expected.get(Number(r[0]));
    if (JSON.stringify(r.slice(1)) !== JSON.stringify(want)) mismatches++;
  }
  t.equal(mismatches, 0, 'every cell reads back exactly');
  t.same(parseCsv('a,""\n'), [['a', '']], 'the parser reads an empty quoted field');
  t.throws(() => parseCsv('a,b"c\n'), 'the parser rejects a stray quote');
});

t.test('CsvBuffer.integer writes the same digits as String(n)', async (t) => {
  const values = [
    0,
    7,
    10,
    99,
    100,
    -1,
    -10,
    1700000000000,
    -1700000000123,
    Number.MAX_SAFE_INTEGER,
    Number.MIN_SAFE_INTEGER,
    2 ** 53 + 2,
    1e21,
  ];
  for (const n of values) {
    const b = new CsvBuffer(1);
    b.integer(n);
    t.equal(b.view().toString('latin1'), String(n), String(n));
  }
});

t.test('csvAttachment: waits for backpressure, stops reading when the client goes away', async (t) => {
  let pagesLoaded = 0;
  // An endless column: without backpressure and abort handling this would never finish.
  let next = 0;
  const endless = new Column((page) => {
    pagesLoaded++;
    for (let i = 0; i < 100; i++, next++) page.add(next, `value-${next}`);
  });
  const reply = csvAttachment('x.csv', { positionColumn: 'ts', named: [['v', endless]], formatPos: 'integer' });
  t.equal(reply.contentType, 'text/csv');
  t.same(reply.headers, { 'Content-Disposition': 'attachment; filename="x.csv"' });

  let aborted = false;
  let writes = 0;
  let bytes = 0;
  let release: (() => void) | undefined;
  const sink = {
    get aborted() {
      return aborted;
    },
    write(chunk: string | Buffer): Promise<void> {
      writes++;
      bytes += chunk.length;
      // the second write blocks until released: a slow client
      if (writes === 2)
        return new Promise<void>((resolve) => {
          release = resolve;
        });
      return Promise.resolve();
    },
  };
  const done = reply.produce(sink);
  await new Promise((r) => setImmediate(r));
  t.equal(writes, 2, 'nothing more is written while the socket is backpressured');
  const loadedWhileBlocked = pagesLoaded;
  t.ok(bytes < 3 * (CHUNK_BYTES + 4096), `at most ~2 chunks produced while blocked (${bytes} bytes)`);
  await new Promise((r) => setImmediate(r));
  t.equal(pagesLoaded, loadedWhileBlocked, 'no page is read while blocked');
  aborted = true;
  release?.();
  await done;
  t.equal(writes, 2, 'the client went away: no further writes');
  t.equal(pagesLoaded, loadedWhileBlocked, 'and no further reads');
});
