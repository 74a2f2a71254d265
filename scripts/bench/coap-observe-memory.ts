/**
 * What one CoAP observation costs the daemon (docs/coap.md "Observe"), measured in one process: the daemon
 * (startServer) and a client socket, N devices (default 20,000) each observed by a NON GET with Observe 0 from
 * that ONE socket (the shape of a flood). Heap used after a full GC (`node --expose-gc`) and RssAnon
 * (/proc/self/status, median of 5 samples) before the registrations, with them, and after cancelling them all
 * (GET with Observe 1). "with − before" is what the registrations left, the answered-exchange cache included
 * (every registration's answer is kept `coap.exchangeLifetimeMs` for duplicates, up to `coap.maxExchanges`);
 * "with − cancelled" is the observations alone: the cancels' answers take the registrations' places in that
 * cache, which holds as many either way.
 *
 *   node --expose-gc dist/scripts/bench/coap-observe-memory.js [--observers 20000]
 */
import { createSocket } from 'node:dgram';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generate, parse } from 'coap-packet';
import { loadConfig } from '../../src/config/index.js';
import { makeLogger } from '../../src/log.js';
import { startServer } from '../../src/server.js';
import { NULL_UUID } from '../../src/types.js';
import { intArg, median } from './lib.js';

const N = intArg(process.argv.slice(2), 'observers', 20_000);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const gc = (globalThis as { gc?: () => void }).gc;

function rssAnon(): number {
  const m = /RssAnon:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) * 1024 : Number.NaN;
}

async function measure(): Promise<{ heap: number; rss: number }> {
  const heaps: number[] = [];
  const rss: number[] = [];
  for (let i = 0; i < 5; i++) {
    await sleep(300);
    gc?.();
    heaps.push(process.memoryUsage().heapUsed);
    rss.push(rssAnon());
  }
  return { heap: median(heaps), rss: median(rss) };
}

async function main(): Promise<void> {
  if (gc === undefined) throw new Error('run with node --expose-gc');
  const dir = mkdtempSync(join(tmpdir(), 'outpost-observe-mem-'));
  const config = loadConfig(
    { dataDir: join(dir, 'data'), host: '127.0.0.1', port: 0 },
    {},
    {
      logLevel: 'silent',
      store: { commitDelayMs: 0 },
      mqtt: { port: 0 },
      coap: { port: -1, maxObservations: N + 100, maxObservationsPerAddress: 0 },
    },
  );
  const server = await startServer(config, makeLogger('silent'));
  const s = server.services;
  const coapPort = s.metrics?.coap.port ?? 0;
  const sock = createSocket('udp4');
  try {
    for (let i = 0; i < N; i += 500) {
      await Promise.all(
        Array.from({ length: Math.min(500, N - i) }, (_, k) =>
          s.entities.createDevice({ name: `mem-${i + k}`, token: `mem-${i + k}`, customerId: NULL_UUID }),
        ),
      );
    }
    await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
    const waiting = new Map<number, () => void>();
    sock.on('message', (buf) => {
      const p = parse(buf);
      waiting.get(p.token.readUInt32BE(0))?.();
    });
    let mid = 0;
    /** every device's attributes, Observe `observe`, NON, 200 in flight */
    const all = async (observe: number): Promise<void> => {
      for (let i = 0; i < N; i += 200) {
        await Promise.all(
          Array.from({ length: Math.min(200, N - i) }, (_, k) => {
            const n = i + k;
            const tok = Buffer.alloc(4);
            tok.writeUInt32BE(n);
            const options = [
              { name: 'Uri-Path', value: Buffer.from('api') },
              { name: 'Uri-Path', value: Buffer.from('v1') },
              { name: 'Uri-Path', value: Buffer.from(`mem-${n}`) },
              { name: 'Uri-Path', value: Buffer.from('attributes') },
              { name: 'Observe', value: observe === 0 ? Buffer.alloc(0) : Buffer.from([observe]) },
            ];
            mid = (mid + 1) & 0xffff;
            const buf = generate({
              code: 'GET',
              messageId: mid,
              token: tok,
              confirmable: false,
              options: options as never,
            });
            return new Promise<void>((r) => {
              waiting.set(n, () => {
                waiting.delete(n);
                r();
              });
              sock.send(buf, coapPort, '127.0.0.1');
            });
          }),
        );
      }
    };
    const before = await measure();
    await all(0);
    const open = s.metrics?.coap.observations;
    const registered = await measure();
    await all(1);
    const cancelled = await measure();
    const kb = (x: number): string => `${(x / N / 1024).toFixed(2)} KB`;
    console.log(`${N} NON observations from one socket (${open} open), per observation (medians of 5 samples):`);
    console.log('| | heap used after GC | RssAnon |');
    console.log('|---|---|---|');
    console.log(`| with − before | ${kb(registered.heap - before.heap)} | ${kb(registered.rss - before.rss)} |`);
    console.log(
      `| with − cancelled | ${kb(registered.heap - cancelled.heap)} | ${kb(registered.rss - cancelled.rss)} |`,
    );
  } finally {
    sock.close();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
