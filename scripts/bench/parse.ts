/**
 * Telemetry parsing benchmark: the time to turn one ThingsBoard array of 1,000 `{ts, values}`
 * records (2 keys, ~70 KB) into what the store writes, in process, rounds interleaved, medians:
 *   - the fast path (`parseTelemetryFast`: the body's bytes straight into per-key columns);
 *   - the general path (UTF-8 decode, literal-preserving `parseJson`, TB typing, records → columns), which every
 *     body the fast path declines takes;
 *   - the baseline: UTF-8 decode + `JSON.parse`, which builds plain objects and loses TB's typing (42 vs 42.0).
 *
 *   npm run build && npm run bench:parse [-- --rounds 15]
 */
import { parseTelemetryFast } from '../../src/ingest/fastpath.js';
import { parseBody, parseTelemetry } from '../../src/ingest/payload.js';
import { TelemetryBatch } from '../../src/model/batch.js';
import { argValue, median } from './lib.js';

const BODIES = 50;
const RECORDS = 1000;
const STEP_MS = 10_000;
const rounds = argValue('--rounds', 15);

// A random walk of 2-decimal temperatures and a counter, as bench:downsample posts them.
const bodies: Buffer[] = [];
let temp = 2150;
let counter = 1e6;
let seed = 42;
const rand = (): number => {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  return seed / 0x7fffffff;
};
for (let b = 0; b < BODIES; b++) {
  const rows: string[] = [];
  for (let i = 0; i < RECORDS; i++) {
    temp += Math.round((rand() - 0.5) * 20);
    counter += Math.floor(rand() * 4);
    rows.push(
      `{"ts":${1_700_000_000_000 + (b * RECORDS + i) * STEP_MS},"values":{"temperature":${(temp / 100).toFixed(2)},"counter":${counter}}}`,
    );
  }
  bodies.push(Buffer.from(`[${rows.join(',')}]`));
}

const variants: Array<[name: string, parse: (body: Buffer) => unknown]> = [
  [
    'fast path (bytes → columns)',
    (body) => {
      const batch = parseTelemetryFast(body, 0, false);
      if (batch === undefined) throw new Error('the fast path declined the benchmark body');
      return batch;
    },
  ],
  [
    'general path (parseJson → typing → columns)',
    (body) => TelemetryBatch.fromRecords(parseTelemetry(parseBody(body), 0, false)),
  ],
  ['baseline: toString + JSON.parse (untyped)', (body) => JSON.parse(body.toString('utf8')) as unknown],
];

const times = new Map<string, number[]>(variants.map(([name]) => [name, []]));
for (let r = 0; r < rounds + 2; r++) {
  for (const [name, parse] of variants) {
    const t0 = performance.now();
    for (const body of bodies) parse(body);
    // the first two rounds warm the JIT up
    if (r >= 2) times.get(name)?.push((performance.now() - t0) / BODIES);
  }
}

const baseline = median(times.get(variants[2]?.[0] ?? '') ?? []);
const bytes = bodies.reduce((n, b) => n + b.length, 0) / BODIES;
console.log(
  `parse bench: ${BODIES} bodies of ${RECORDS} records × 2 keys (${Math.round(bytes / 1024)} KiB each), ${rounds} interleaved rounds, medians; Node ${process.version}`,
);
console.log('| variant | ms / body | points / s | vs JSON.parse |');
console.log('|---|---:|---:|---:|');
for (const [name] of variants) {
  const ms = median(times.get(name) ?? []);
  console.log(
    `| ${name} | ${ms.toFixed(3)} | ${Math.round((2 * RECORDS) / (ms / 1000)).toLocaleString('en-US')} | ${(ms / baseline).toFixed(2)}× |`,
  );
}
