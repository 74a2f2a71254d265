/**
 * Fuzz the CoAP listener (docs/coap.md), seeded and bounded. Wire: random bytes, truncated and bit-flipped
 * requests, hostile options (huge Block numbers, reserved SZX, long tokens); the daemon never crashes and keeps
 * serving. Payloads: random, truncated or mutated JSON on telemetry and attributes; an upload not answered
 * 2.01 stores nothing: every key carries its message's number, and after the run no key of a refused message
 * is found. Message format errors (a reserved token length, an option cut short, a payload marker with no
 * payload) get an RST when they are CON and nothing otherwise. A flood of distinct requests is bounded by coap.maxPending (5.03), not by memory.
 */
import { generate } from 'coap-packet';
import t from 'tap';
import { CoapTestClient, coapPort, sleep, uint } from '../../helpers/coap.js';
import { adminHeaders, latest } from '../../helpers/mqtt.js';
import { rng } from '../../helpers/prng.js';
import { addDevice, http, startGateway } from '../../helpers/server.js';
import { waitFor } from '../../helpers/wait.js';

const SEED = Number(process.env['OUTPOST_FUZZ_SEED'] ?? 20_261_128);
const WIRE_DATAGRAMS = 3000;
const MESSAGES = 400;
const BUDGET_MS = 20_000;

const next = rng(SEED);
const int = (n: number): number => Math.floor(next() * n);
const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)] as T;

const gw = await startGateway(t);
const port = coapPort(gw);
const dev = await addDevice(gw.dataDir, 'cfuzz-dev');
const admin = await adminHeaders(gw);

async function alive(c: CoapTestClient): Promise<boolean> {
  // right after a flood the daemon may still be working through it and refuse (5.03) or drop what comes next; a
  // CoAP client sends its CON again (RFC 7252 section 4.2), so this does too, until a 2.01; a daemon that died or
  // hung still fails it
  const posted = await waitFor(
    async () => {
      const r = await c
        .request({ method: 'POST', path: `api/v1/${dev.token}/telemetry`, payload: '{"alive":1}' }, 5_000)
        .catch(() => undefined);
      return r?.code === '2.01';
    },
    { timeout: 60_000, interval: 0, message: 'a 2.01 to a telemetry POST' },
  );
  return posted && gw.proc.exitCode === null;
}

t.test('wire: garbage, truncated, bit-flipped and hostile datagrams', async (t) => {
  const c = await CoapTestClient.open(t, port);
  const valid = (): Buffer =>
    c.build({
      method: pick(['GET', 'POST', 'PUT', 'DELETE'] as const),
      path: pick([
        `api/v1/${dev.token}/telemetry`,
        `api/v1/${dev.token}/attributes`,
        `api/v1/${dev.token}/rpc`,
        'api/v1/provision',
        'x',
      ]),
      payload: pick(['{"w":1}', '', '{', '[1]']),
      confirmable: int(2) === 0,
      ...(int(3) === 0 ? { observe: pick([0, 1, 7]) } : {}),
      extra:
        int(3) === 0 ? [{ name: pick(['Block1', 'Block2']), value: Buffer.from([int(256), int(256), int(256)]) }] : [],
    }).buf;
  const t0 = Date.now();
  for (let i = 0; i < WIRE_DATAGRAMS && Date.now() - t0 < BUDGET_MS; i++) {
    let buf: Buffer;
    const m = int(5);
    if (m === 0) buf = Buffer.from(Array.from({ length: int(64) }, () => int(256)));
    else if (m === 1) {
      const v = valid();
      buf = v.subarray(0, int(v.length));
    } else if (m === 2) {
      buf = Buffer.from(valid());
      for (let k = 0; k < 1 + int(3); k++) {
        const at = int(buf.length);
        buf[at] = (buf[at] as number) ^ (1 << int(8));
      }
    } else if (m === 3)
      buf = Buffer.concat([Buffer.from([0x48 | int(8), 1, int(256), int(256)]), Buffer.alloc(int(40), 0xff)]);
    else buf = valid();
    c.sendRaw(buf);
    if (i % 200 === 0) await sleep(5);
  }
  await sleep(300);
  t.ok(await alive(c), 'still serving CoAP');
  t.equal((await http('GET', `${gw.url}/api/v1/${dev.token}/attributes`)).status, 200, 'still serving HTTP');
});

t.test('message format errors: an RST for each CON, nothing else, nothing stored, each counted', async (t) => {
  const c = await CoapTestClient.open(t, port);
  const d = await addDevice(gw.dataDir, 'cfuzz-format');
  const malformed = async (): Promise<number> => {
    const text = (await http('GET', `${gw.url}/metrics`)).text;
    return Number(/outpost_coap_refused_total\{reason="malformed"\} (\d+)/.exec(text)?.[1] ?? Number.NaN);
  };
  const before = await malformed();
  const from = c.received.length;
  const conIds = new Set<number>();
  const N = 300;
  for (let i = 0; i < N; i++) {
    const confirmable = int(2) === 0;
    const token = Buffer.from(Array.from({ length: int(9) }, () => int(256)));
    const kind = int(3);
    let buf: Buffer;
    if (kind === 0) {
      // a well-formed upload but for its token length: 9 to 15 are reserved
      buf = Buffer.from(
        c.build({ method: 'POST', path: `api/v1/${d.token}/telemetry`, payload: `{"fz_m${i}":1}`, token, confirmable })
          .buf,
      );
      buf[0] = ((buf[0] as number) & 0xf0) | (9 + int(7));
    } else if (kind === 1) {
      // the last option (Uri-Query) cut short: its header claims more bytes than are left
      const q = `clientKeys=fz_m${i}`;
      const whole = c.build({ path: `api/v1/${d.token}/attributes`, query: [q], token, confirmable }).buf;
      buf = whole.subarray(0, whole.length - 1 - int(q.length));
    } else {
      // a payload marker with no payload after it
      const empty = c.build({ method: 'POST', path: `api/v1/${d.token}/telemetry`, token, confirmable }).buf;
      buf = Buffer.concat([empty, Buffer.from([0xff])]);
    }
    if (confirmable) conIds.add(buf.readUInt16BE(2));
    c.sendRaw(buf);
    if (i % 50 === 0) await sleep(2);
  }
  await waitFor(() => c.received.length - from >= conIds.size, { message: 'an answer to every CON' });
  // the listener handles one client's datagrams in order: the ping's RST (the last datagram) comes after any other
  await c.ping();
  const back = c.received.slice(from, -1);
  t.equal(back.length, conIds.size, `one datagram back per CON (${conIds.size}), none for a NON`);
  t.ok(
    back.every((p) => p.reset && p.code === '0.00' && conIds.has(p.messageId)),
    'each an RST with the message id of a CON sent',
  );
  t.equal(await malformed(), before + N, 'each counted as malformed');
  t.same(Object.keys(await latest(gw, admin, d.id)), [], 'nothing stored');
  t.ok(await alive(c));
});

function payload(i: number): string {
  const key = (): string => `k${int(5)}_m${i}`;
  const value = (): string => pick(['1', '42.0', '"s"', 'true', 'null', '{"o":1}', '[1]', '1e400', '"42"', '-0']);
  const obj = (): string => `{${Array.from({ length: 1 + int(3) }, () => `"${key()}":${value()}`).join(',')}}`;
  let text = pick([obj(), `{"ts":${1700000000000 + int(1e6)},"values":${obj()}}`, `[${obj()}]`]);
  const m = int(5);
  if (m === 0) text = text.slice(0, int(text.length));
  else if (m === 1) {
    const at = int(text.length);
    text = text.slice(0, at) + pick(['"', '{', '}', ',', ':', 'x', '\\', ']']) + text.slice(at + 1);
  } else if (m === 2) text = pick(['', 'null', '[]', '"str"', '{"ts":1}', '{"values":1,"ts":1}', '\u0000']);
  return text;
}

t.test('payloads: an upload not answered 2.01 stores nothing', async (t) => {
  const c = await CoapTestClient.open(t, port);
  const refused = new Set<number>();
  let accepted = 0;
  const t0 = Date.now();
  for (let i = 0; i < MESSAGES && Date.now() - t0 < BUDGET_MS; i++) {
    const feature = pick(['telemetry', 'attributes']);
    const r = await c.request({
      method: 'POST',
      path: `api/v1/${dev.token}/${feature}`,
      payload: payload(i),
      confirmable: int(2) === 0,
    });
    if (r.code === '2.01') accepted++;
    else refused.add(i);
  }
  t.ok(accepted > 20 && refused.size > 20, `${accepted} accepted, ${refused.size} refused`);
  const stored = Object.keys(await latest(gw, admin, dev.id));
  const attrs = await http('GET', `${gw.url}/api/v1/${dev.token}/attributes`);
  stored.push(...Object.keys(attrs.json<{ client?: Record<string, unknown> }>().client ?? {}));
  const leaked = stored.filter((k) => refused.has(Number(/_m(\d+)$/.exec(k)?.[1] ?? -1)));
  t.same(leaked, [], 'no key of a refused message stored');
});

t.test('a flood of distinct CON requests: answered or refused 5.03, memory bounded, still serving', async (t) => {
  const c = await CoapTestClient.open(t, port);
  const before = c.received.length;
  for (let i = 0; i < 5000; i++) {
    c.sendRaw(
      generate({
        code: 'POST',
        messageId: i,
        token: Buffer.from([i & 255, i >> 8]),
        confirmable: true,
        options: [
          { name: 'Uri-Path', value: Buffer.from('api') },
          { name: 'Uri-Path', value: Buffer.from('v1') },
          { name: 'Uri-Path', value: Buffer.from(dev.token) },
          { name: 'Uri-Path', value: Buffer.from('telemetry') },
          { name: 'Observe', value: uint(0) },
        ],
        payload: Buffer.from(`{"flood":${i}}`),
      }),
    );
    if (i % 500 === 0) await sleep(1);
  }
  await waitFor(() => c.received.length > before, { message: 'answers to the flood' });
  t.ok(c.received.length > before, 'answers came back');
  t.ok(await alive(c));
  const st = (await http('GET', `${gw.url}/api/outpost/status`, undefined, admin)).json<{
    coap: { observations: number };
  }>();
  // the wire phase's GETs with Observe 0 registered some; one per device and resource at most
  t.ok(st.coap.observations <= 2, `one observation per device and resource (${st.coap.observations})`);
});
