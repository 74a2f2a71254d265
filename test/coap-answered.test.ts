/** The CoAP answered-exchange cache duplicates are answered from: bounded, oldest forgotten first, aged out. */
import t from 'tap';
import { AnsweredCache } from '../src/transports/coap/answered.js';

const b = (s: string): Buffer => Buffer.from(s);

t.test('full: the oldest answer is forgotten first, the newest kept', async (t) => {
  const c = new AnsweredCache(3);
  c.set('a', b('A'), 1);
  c.set('b', b('B'), 2);
  c.set('c', b('C'), 3);
  t.equal(c.size, 3);
  c.set('d', b('D'), 4);
  t.equal(c.size, 3, 'never more than its capacity');
  t.equal(c.get('a'), undefined, 'the oldest went');
  t.same([c.get('b'), c.get('c'), c.get('d')].map(String), ['B', 'C', 'D']);
  for (let i = 0; i < 10_000; i++) c.set(`k${i}`, b(`${i}`), 5 + i);
  t.equal(c.size, 3, 'round and round the ring: still bounded');
  t.same([c.get('k9997'), c.get('k9998'), c.get('k9999')].map(String), ['9997', '9998', '9999']);
  t.equal(c.get('k9996'), undefined);
});

t.test('expire: answers older than the lifetime go, younger ones stay', async (t) => {
  const c = new AnsweredCache(10);
  for (let i = 0; i < 6; i++) c.set(`k${i}`, b(`${i}`), 100 + i);
  c.expire(103);
  t.equal(c.size, 3);
  t.same(
    ['k0', 'k1', 'k2'].map((k) => c.get(k)),
    [undefined, undefined, undefined],
  );
  t.equal(String(c.get('k3')), '3');
  c.expire(1_000);
  t.equal(c.size, 0);
  c.set('again', b('x'), 1_001);
  t.equal(String(c.get('again')), 'x', 'usable after emptying');
});

t.test('a key answered twice (an empty ACK, then its answer) keeps the newer, within the bound', async (t) => {
  const c = new AnsweredCache(2);
  c.set('a', b('ack'), 1);
  c.set('a', b('answer'), 2);
  t.equal(String(c.get('a')), 'answer');
  t.equal(c.size, 1);
  c.set('b', b('B'), 3);
  t.equal(String(c.get('a')), 'answer', 'the blank left by the first answer made room, not the key itself');
  t.equal(String(c.get('b')), 'B');
  c.set('c', b('C'), 4);
  t.equal(c.get('a'), undefined);
  t.same([String(c.get('b')), String(c.get('c'))], ['B', 'C']);
  c.expire(4);
  t.same([c.get('b') === undefined, String(c.get('c'))], [true, 'C']);
  c.clear();
  t.equal(c.size, 0);
  t.equal(c.get('c'), undefined);
});

t.test('capacity 0 remembers nothing', async (t) => {
  const c = new AnsweredCache(0);
  c.set('a', b('A'), 1);
  t.equal(c.get('a'), undefined);
  t.equal(c.size, 0);
});
