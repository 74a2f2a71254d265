/**
 * The CoAP block-wise layer (src/transports/coap/blockwise.ts) without a socket: Block1 reassembly and its
 * refusals, Block2 pieces of a large answer and their follow-ups, the bounds on transfers held and their sweep.
 */
import '../../helpers/sandbox.js';
import { type NamedOption, generate, parse } from 'coap-packet';
import t from 'tap';
import {
  type BlockRequest,
  BlockTransfers,
  type Blocks,
  type Incoming,
} from '../../../src/transports/coap/blockwise.js';
import {
  type Answer,
  type Message,
  blockOption,
  option,
  readBlock,
  readUint,
} from '../../../src/transports/coap/codec.js';
import { CoapCounters } from '../../../src/status/metrics.js';

/** A request as it comes off the wire: encoded and parsed by coap-packet. */
function request(code: '0.01' | '0.02', options: NamedOption[], payload = ''): Message {
  return parse(
    generate({
      code,
      messageId: 1,
      token: Buffer.from([1, 2]),
      confirmable: true,
      options: [{ name: 'Uri-Path', value: Buffer.from('api') }, ...options],
      payload: Buffer.from(payload),
    }),
  );
}

const block1 = (num: number, more: boolean, size: number): NamedOption => ({
  name: 'Block1',
  value: blockOption(num, more, size),
});
const block2 = (num: number, size: number): NamedOption => ({ name: 'Block2', value: blockOption(num, false, size) });

const DEVICE = (): { readonly device: unknown } => ({ device: { id: 'd1' } });

function setup(maxTransfers = 8, maxBodyBytes = 4096) {
  const counters = new CoapCounters();
  return { counters, blocks: new BlockTransfers({ maxTransfers, maxBodyBytes }, counters) };
}

const now = (i: Incoming): Answer => {
  if (!('now' in i)) throw new Error('expected an answer now, the request went on');
  return i.now;
};
const onward = (i: Incoming): Blocks => {
  if ('now' in i) throw new Error(`expected the request to go on, answered ${i.now.code}`);
  return i;
};
const optionOf = (a: Answer, name: string): Buffer | undefined => a.options?.find((o) => o.name === name)?.value;

t.test('a three-block upload is reassembled; the last answer carries the last Block1', async (t) => {
  const { blocks } = setup();
  const req: BlockRequest = { peerUri: '10.0.0.1:5683 api/v1/T/telemetry?', payload: Buffer.alloc(0) };
  for (const [num, part] of [
    [0, 'a'.repeat(16)],
    [1, 'b'.repeat(16)],
  ] as const) {
    const msg = request('0.02', [block1(num, true, 16)], part);
    req.payload = msg.payload;
    const a = now(blocks.incoming(msg, req, DEVICE));
    t.equal(a.code, '2.31', `block ${num}: continue`);
    t.same(readBlock(optionOf(a, 'Block1')), { num, more: true, size: 16 });
  }
  const last = request('0.02', [block1(2, false, 16)], 'cc');
  req.payload = last.payload;
  const step = onward(blocks.incoming(last, req, DEVICE));
  t.equal(req.payload.toString(), `${'a'.repeat(16)}${'b'.repeat(16)}cc`, 'the whole body replaces the last block');
  const out = blocks.outgoing({ code: '2.01' }, req, step);
  t.equal(out.code, '2.01');
  t.same(readBlock(optionOf(out, 'Block1')), { num: 2, more: false, size: 16 });
});

t.test('refusals: out of order, too large, no device; a request without blocks goes on untouched', async (t) => {
  const { blocks, counters } = setup(8, 40);
  const req: BlockRequest = { peerUri: 'p u', payload: Buffer.alloc(0) };
  t.equal(now(blocks.incoming(request('0.02', [block1(1, true, 16)], 'x'.repeat(16)), req, DEVICE)).code, '4.08');
  t.equal(counters.refused.blocks, 1, 'counted');
  now(blocks.incoming(request('0.02', [block1(0, true, 16)], 'x'.repeat(16)), req, DEVICE));
  now(blocks.incoming(request('0.02', [block1(1, true, 16)], 'x'.repeat(16)), req, DEVICE));
  const big = now(blocks.incoming(request('0.02', [block1(2, true, 16)], 'x'.repeat(16)), req, DEVICE));
  t.equal(big.code, '4.13', 'over coap.maxBodyBytes');
  t.equal(readUint(optionOf(big, 'Size1') as Buffer), 40, 'Size1 says the limit');
  t.equal(
    now(blocks.incoming(request('0.02', [block1(3, false, 16)], 'x'), req, DEVICE)).code,
    '4.08',
    'the assembly was dropped',
  );
  const noDevice = now(
    blocks.incoming(request('0.02', [block1(0, true, 16)], 'x'.repeat(16)), req, () => ({
      refused: { code: '4.01', unproven: true },
    })),
  );
  t.equal(noDevice.code, '4.01', "the path's refusal, before anything is kept");
  t.equal(now(blocks.incoming(request('0.02', [], 'y'.repeat(41)), req, DEVICE)).code, '4.13', 'whole body too large');
  const plain = request('0.02', [], '{"t":1}');
  t.same(onward(blocks.incoming(plain, req, DEVICE)), { b1: undefined, b2: undefined });
  t.equal(blocks.outgoing({ code: '2.01' }, req, { b1: undefined, b2: undefined }).options, undefined);
});

t.test('a large answer goes out in Block2 pieces; follow-ups are answered from it', async (t) => {
  const { blocks } = setup();
  const req = { peerUri: '10.0.0.2:5683 api/v1/T/attributes?', payload: Buffer.alloc(0) };
  const body = Buffer.from('z'.repeat(2500));
  const first = blocks.outgoing({ code: '2.05', payload: body }, req, { b1: undefined, b2: undefined });
  t.equal(first.payload?.length, 1024);
  t.same(readBlock(optionOf(first, 'Block2')), { num: 0, more: true, size: 1024 });
  t.equal(readUint(optionOf(first, 'Size2') as Buffer), 2500);
  const get = (num: number): Answer => now(blocks.incoming(request('0.01', [block2(num, 1024)]), req, DEVICE));
  t.equal(get(1).payload?.length, 1024);
  const last = get(2);
  t.equal(last.payload?.length, 2500 - 2048);
  t.same(readBlock(optionOf(last, 'Block2')), { num: 2, more: false, size: 1024 });
  t.equal(get(5).code, '4.02', 'past the end');
  const small = blocks.outgoing({ code: '2.05', payload: Buffer.from('{}') }, req, { b1: undefined, b2: undefined });
  t.equal(optionOf(small, 'Block2'), undefined, 'a small answer is not cut');
  t.equal(option(request('0.01', []), 'Block2'), undefined);
});

t.test('transfers held are bounded in number (oldest forgotten) and swept by age', async (t) => {
  const { blocks, counters } = setup(2);
  const start = (peer: string): Answer =>
    now(
      blocks.incoming(
        request('0.02', [block1(0, true, 16)], 'x'.repeat(16)),
        { peerUri: peer, payload: Buffer.alloc(0) },
        DEVICE,
      ),
    );
  for (const p of ['a', 'b', 'c']) t.equal(start(p).code, '2.31');
  const next = (peer: string): string =>
    now(
      blocks.incoming(
        request('0.02', [block1(1, true, 16)], 'x'.repeat(16)),
        { peerUri: peer, payload: Buffer.alloc(0) },
        DEVICE,
      ),
    ).code;
  t.equal(next('a'), '4.08', 'the oldest went at the third');
  t.equal(next('c'), '2.31', 'the newest kept');
  blocks.sweep(Date.now() - 60_000);
  t.equal(counters.blockTransfers, 2, 'young ones stay');
  blocks.sweep(Date.now() + 1);
  t.equal(counters.blockTransfers, 0, 'older than the threshold: dropped');
  t.equal(next('c'), '4.08');
});
