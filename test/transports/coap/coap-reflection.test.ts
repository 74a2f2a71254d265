/**
 * CoAP and spoofed sources (docs/coap.md "Answers and errors"): a datagram that proves nothing (no known device
 * token, no good provisioning key and secret) is never answered with more bytes than it carried, on every path
 * that answers one: unknown tokens on each resource, wrong methods and paths, bad provisioning (bad JSON, an
 * empty body, a wrong key, a rate-limit refusal), block-wise provisioning errors. Answers to proven requests keep
 * their whole body. Real datagrams, raw sizes compared.
 */
import { type Socket, createSocket } from 'node:dgram';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type ParsedPacket, parse } from 'coap-packet';
import t from 'tap';
import { CoapTestClient, type ReqOpts, coapPort } from '../../helpers/coap.js';
import { addDevice, startGateway, tempDir } from '../../helpers/server.js';
import { waitFor } from '../../helpers/wait.js';

const dir = tempDir(t);
writeFileSync(join(dir, 'c.json'), JSON.stringify({ provision: { key: 'pk', secret: 'ps' } }));
const gw = await startGateway(t, { args: ['--config', join(dir, 'c.json')] });
const port = coapPort(gw);
const dev = await addDevice(gw.dataDir, 'refl-dev');
const builder = await CoapTestClient.open(t, port);

/** One socket of our own: every datagram it receives, raw, to compare sizes. */
const sock: Socket = createSocket('udp4');
await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
t.teardown(() => sock.close());
const inbox: Buffer[] = [];
let wake: (() => void) | undefined;
sock.on('message', (b) => {
  inbox.push(b);
  wake?.();
});

/** Sends `o` and resolves with its answer's raw datagram (every datagram carrying its token, summed). */
async function exchange(o: ReqOpts): Promise<{ sent: number; got: number; answer: ParsedPacket }> {
  const { buf, token } = builder.build(o);
  const from = inbox.length;
  sock.send(buf, port, '127.0.0.1');
  return waitFor(
    () => {
      const mine = inbox.slice(from).filter((b) => {
        const p = parse(b);
        return p.token.equals(token) || (p.code === '0.00' && p.messageId === parse(buf).messageId);
      });
      const answer = mine.map((b) => parse(b)).find((p) => p.code !== '0.00');
      return answer !== undefined && { sent: buf.length, got: mine.reduce((n, b) => n + b.length, 0), answer };
    },
    {
      timeout: 10_000,
      message: "an answer carrying the request's token",
      wake: (check) => {
        wake = check;
        return () => {
          wake = undefined;
        };
      },
    },
  );
}

const provision = (payload: string, extra?: ReqOpts['extra']): ReqOpts => ({
  method: 'POST',
  path: 'api/v1/provision',
  payload,
  ...(extra === undefined ? {} : { extra }),
});

t.test('bad provisioning requests are answered with no more bytes than they carried', async (t) => {
  const cases: Array<[string, ReqOpts, string]> = [
    ['bad JSON', provision('{'), '4.00'],
    ['an empty body', provision(''), '4.00'],
    ['not an object', provision('[]'), '4.00'],
    ['a wrong key', provision('{"provisionDeviceKey":"x"}'), '4.00'],
    ['a wrong secret', provision('{"deviceName":"a","provisionDeviceKey":"pk","provisionDeviceSecret":"no"}'), '4.00'],
    ['GET provision', { path: 'api/v1/provision' }, '4.05'],
    ['a bad Block1 option', provision('{', [{ name: 'Block1', value: Buffer.from([0x0f]) }]), '4.02'],
    ['a Block1 block out of order', provision('{', [{ name: 'Block1', value: Buffer.from([0x28]) }]), '4.08'],
  ];
  for (const [what, o, code] of cases) {
    for (const confirmable of [true, false]) {
      const r = await exchange({ ...o, confirmable });
      t.equal(r.answer.code, code, `${what} (${confirmable ? 'CON' : 'NON'}): ${code}`);
      t.ok(r.got <= r.sent, `${what} (${confirmable ? 'CON' : 'NON'}): ${r.got} bytes back for ${r.sent}`);
    }
  }
});

t.test('unknown tokens, paths and methods: never more bytes back', async (t) => {
  const cases: ReqOpts[] = [
    { path: 'api/v1/nope/attributes', observe: 0 },
    { path: 'api/v1/nope/rpc', observe: 0 },
    { path: 'api/v1/nope/attributes', query: ['sharedKeys=a'] },
    { method: 'POST', path: 'api/v1/nope/telemetry', payload: '{"a":1}' },
    { method: 'POST', path: 'api/v1/nope/rpc', payload: '{"method":"x"}' },
    { path: 'a' },
    { method: 'PUT', path: 'api/v1/x' },
    { path: 'api/v1' },
  ];
  for (const o of cases) {
    const r = await exchange({ ...o, token: Buffer.alloc(0) });
    t.ok(r.got <= r.sent, `${o.method ?? 'GET'} ${o.path}: ${r.answer.code}, ${r.got} bytes back for ${r.sent}`);
  }
});

t.test('a rate-limited provisioning request gets no more than it carried', async (t) => {
  // this file's requests so far count against the address's 300 a minute (the default); the rest are short ones
  let last: { sent: number; got: number; answer: ParsedPacket } | undefined;
  for (let i = 0; i < 310; i++) last = await exchange(provision('{"provisionDeviceKey":"x"}'));
  t.equal(last?.answer.code, '4.00');
  t.ok((last?.got ?? Infinity) <= (last?.sent ?? 0), `${last?.got} bytes back for ${last?.sent}`);
});

t.test('proven requests keep their whole answers', async (t) => {
  const r = await exchange({ path: `api/v1/${dev.token}/attributes`, observe: 0 });
  t.equal(r.answer.code, '2.05');
  const big = await exchange({ method: 'POST', path: `api/v1/${dev.token}/bogus` });
  t.equal(big.answer.code, '4.00');
  t.match(big.answer.payload.toString(), /unknown resource bogus/, 'the diagnostic whole, for a known device');
});
