/**
 * What a one-point column costs while it waits for its log apply (docs/design/memory-budget.md): most device
 * posts carry one point per key, and a flood holds up to store.applyMaxPoints of them.
 */
import '../helpers/sandbox.js';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import t from 'tap';
import { SeriesColumn, TelemetryBatch } from '../../src/model/batch.js';
import { parseTelemetryBody } from '../../src/ingest/fastpath.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

function heapPerItem(make: (i: number) => unknown, n = 20_000): number {
  gc();
  gc();
  const before = process.memoryUsage().heapUsed;
  const held: unknown[] = new Array(n);
  for (let i = 0; i < n; i++) held[i] = make(i);
  gc();
  gc();
  const after = process.memoryUsage().heapUsed;
  if (held[n - 1] === undefined) throw new Error('nothing held');
  return (after - before) / n;
}

t.test('a column of one point holds one-element arrays', async (t) => {
  const perDouble = heapPerItem((i) => {
    const c = new SeriesColumn();
    c.pushDouble(1_700_000_000_000 + i, 21.5);
    return c;
  });
  const perBoxed = heapPerItem((i) => {
    const c = new SeriesColumn();
    c.push(1_700_000_000_000 + i, { type: 'STRING', v: 'on' });
    return c;
  });
  // an empty array's first push reserves 17 elements: ~465 bytes for a DOUBLE point, ~505 for a boxed one
  t.ok(perDouble < 300, `a DOUBLE point: ${perDouble.toFixed(0)} bytes`);
  t.ok(perBoxed < 300, `a boxed point: ${perBoxed.toFixed(0)} bytes`);
  const c = new SeriesColumn();
  c.pushLong(1, 5);
  c.pushLong(2, 6);
  c.pushDouble(3, 7.5);
  t.same([c.kind, c.ts, c.boxed.map((v) => v.v)], ['BOXED', [1, 2, 3], [5, 6, 7.5]], 'later points still append');
});

t.test("a device post's points, as parsed, cost what their columns hold", async (t) => {
  const body = Buffer.from('{"temperature":21.5,"humidity":40,"pressure":1013.25}');
  const per = heapPerItem((i) => parseTelemetryBody(body, 1_700_000_000_000 + i)) / 3;
  // with the batch's own map: ~300 bytes a point; ~560 with 17-element arrays
  t.ok(per < 400, `a point of a 3-key post: ${per.toFixed(0)} bytes`);
  t.ok(parseTelemetryBody(body, 1) instanceof TelemetryBatch);
});
