/**
 * Loaded with `node --expose-gc --import` into the process bench:idle measures (a daemon, or a bare node): after
 * OUTPOST_IDLE_SETTLE_MS of rest it collects garbage twice, waits for the heap to settle, and prints one line,
 * `idle-probe {json}`, on stderr: RssAnon, V8's heap used and reserved, memory outside the heap. The process is
 * then stopped by the bench.
 */
import { readFileSync } from 'node:fs';

const settleMs = Number(process.env['OUTPOST_IDLE_SETTLE_MS'] ?? '8000');
const gc = (globalThis as { gc?: () => void }).gc;

setTimeout(() => {
  gc?.();
  gc?.();
  // V8 gives pages back to the OS after a collection, not in it
  setTimeout(() => {
    const m = /RssAnon:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
    const mem = process.memoryUsage();
    const reading = {
      rssAnon: Number(m?.[1] ?? NaN) * 1024,
      heapUsed: mem.heapUsed,
      heapTotal: mem.heapTotal,
      external: mem.external,
      collected: gc !== undefined,
    };
    process.stderr.write(`idle-probe ${JSON.stringify(reading)}\n`);
  }, 500);
}, settleMs).unref();
