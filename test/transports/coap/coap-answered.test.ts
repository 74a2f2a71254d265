/** The CoAP answered-exchange cache duplicates are answered from: bounded, oldest forgotten first, aged out. */
import '../../helpers/sandbox.js';
import t from 'tap';
import { AnsweredCache } from '../../../src/transports/coap/answered.js';

const b = (s: string): Buffer => Buffer.from(s);
const P = '10.0.0.1:5683';
const text = (x: Buffer | undefined): string | undefined => x?.toString();

t.test('full: the oldest answer is forgotten first, the newest kept', async (t) => {
  const c = new AnsweredCache(3);
  c.set(P, 1, b('A'), 1);
  c.set(P, 2, b('B'), 2);
  c.set(P, 3, b('C'), 3);
  t.equal(c.size, 3);
  c.set(P, 4, b('D'), 4);
  t.equal(c.size, 3, 'never more than its capacity');
  t.equal(c.get(P, 1), undefined, 'the oldest went');
  t.same([c.get(P, 2), c.get(P, 3), c.get(P, 4)].map(text), ['B', 'C', 'D']);
  for (let i = 0; i < 10_000; i++) c.set(`10.0.${i >> 8}.${i & 255}:${i}`, i & 0xffff, b(`${i}`), 5 + i);
  t.equal(c.size, 3, 'round and round the ring, over thousands of peers: still bounded');
  t.same(
    [9997, 9998, 9999].map((i) => text(c.get(`10.0.${i >> 8}.${i & 255}:${i}`, i))),
    ['9997', '9998', '9999'],
  );
  t.equal(c.get('10.0.39.12:9996', 9996), undefined);
});

t.test('the same message id from two peers is two exchanges', async (t) => {
  const c = new AnsweredCache(10);
  c.set('10.0.0.1:5683', 7, b('one'), 1);
  c.set('10.0.0.2:5683', 7, b('two'), 1);
  c.set('10.0.0.1:5684', 7, b('three'), 1);
  t.same(
    ['10.0.0.1:5683', '10.0.0.2:5683', '10.0.0.1:5684'].map((p) => text(c.get(p, 7))),
    ['one', 'two', 'three'],
  );
  t.equal(c.get('10.0.0.1:5683', 8), undefined);
  t.equal(c.get('10.0.0.3:5683', 7), undefined);
});

t.test('answers with a payload are kept whole; what get hands out is a copy', async (t) => {
  const c = new AnsweredCache(2);
  const big = Buffer.alloc(300, 7);
  const small = Buffer.from([0x60, 0x41, 0x12, 0x34, 1, 2, 3, 4]);
  c.set(P, 1, big, 1);
  c.set(P, 2, small, 1);
  t.same(c.get(P, 1), big);
  const got = c.get(P, 2) as Buffer;
  t.same(got, small);
  got[0] = 0;
  t.same(c.get(P, 2), small, 'changing the copy changes nothing kept');
  small[1] = 0;
  t.equal(c.get(P, 2)?.[1], 0x41, 'nor does changing the buffer given');
  c.set(P, 3, Buffer.from([0x60, 0x44, 0, 3]), 2);
  t.equal(c.get(P, 1), undefined, 'the large one went first, as the oldest');
  t.same(c.get(P, 3), Buffer.from([0x60, 0x44, 0, 3]), 'and its slot took a small one');
});

t.test('expire: answers older than the lifetime go, younger ones stay', async (t) => {
  const c = new AnsweredCache(10);
  for (let i = 0; i < 6; i++) c.set(P, i, b(`${i}`), 100 + i);
  c.expire(103);
  t.equal(c.size, 3);
  t.same(
    [0, 1, 2].map((i) => c.get(P, i)),
    [undefined, undefined, undefined],
  );
  t.equal(text(c.get(P, 3)), '3');
  c.expire(1_000);
  t.equal(c.size, 0);
  c.set(P, 9, b('x'), 1_001);
  t.equal(text(c.get(P, 9)), 'x', 'usable after emptying');
});

t.test('an exchange answered twice (an empty ACK, then its answer) keeps the newer, within the bound', async (t) => {
  const c = new AnsweredCache(2);
  c.set(P, 1, b('ack'), 1);
  c.set(P, 1, b('answer'), 2);
  t.equal(text(c.get(P, 1)), 'answer');
  t.equal(c.size, 1);
  c.set(P, 2, b('B'), 3);
  t.equal(text(c.get(P, 1)), 'answer', 'the blank left by the first answer made room, not the exchange itself');
  t.equal(text(c.get(P, 2)), 'B');
  c.set(P, 3, b('C'), 4);
  t.equal(c.get(P, 1), undefined);
  t.same([text(c.get(P, 2)), text(c.get(P, 3))], ['B', 'C']);
  c.expire(4);
  t.same([c.get(P, 2), text(c.get(P, 3))], [undefined, 'C']);
  c.clear();
  t.equal(c.size, 0);
  t.equal(c.get(P, 3), undefined);
  c.set(P, 4, b('D'), 5);
  t.equal(text(c.get(P, 4)), 'D', 'usable after clear');
});

t.test('capacity 0 remembers nothing', async (t) => {
  const c = new AnsweredCache(0);
  c.set(P, 1, b('A'), 1);
  t.equal(c.get(P, 1), undefined);
  t.equal(c.size, 0);
});

t.test('the arena grows past its first slots and keeps every answer', async (t) => {
  const c = new AnsweredCache(5_000);
  for (let i = 0; i < 5_000; i++) c.set(P, i, Buffer.from([0x60, 0x41, i >> 8, i & 255]), i);
  t.equal(c.size, 5_000);
  let ok = 0;
  for (let i = 0; i < 5_000; i++) if (c.get(P, i)?.equals(Buffer.from([0x60, 0x41, i >> 8, i & 255]))) ok++;
  t.equal(ok, 5_000);
});
