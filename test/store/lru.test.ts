/** The store's read-cache container: least recently used first, within a byte budget. */
import '../helpers/sandbox.js';
import t from 'tap';
import { ByteLru } from '../../src/store/lru.js';

t.test('ByteLru evicts the least recently used entries past its budget', async (t) => {
  const lru = new ByteLru<string, number[]>(10, (v) => v.length);
  lru.add('a', [1, 2, 3]);
  lru.add('b', [1, 2, 3]);
  lru.add('c', [1, 2, 3]);
  t.equal(lru.bytes, 9);
  t.ok(lru.get('a'), 'a read: now the most recently used');
  lru.add('d', [1, 2]);
  t.equal(lru.get('b'), undefined, 'b, the least recently used, went first');
  t.ok(lru.get('a') && lru.get('c') && lru.get('d'), 'the others stay');
  t.equal(lru.bytes, 8);
  lru.add(
    'big',
    Array.from({ length: 25 }, () => 0),
  );
  t.same(
    [lru.get('a'), lru.get('c'), lru.get('d')],
    [undefined, undefined, undefined],
    'an entry over the budget pushes out all others',
  );
  t.equal(lru.get('big')?.length, 25, 'and is kept, alone');
  t.equal(lru.bytes, 25);
  lru.clear();
  t.equal(lru.bytes, 0);
  t.equal(lru.get('big'), undefined);
});

t.test('ByteLru accounts a held value again once it has grown, evicting past its budget', async (t) => {
  const lru = new ByteLru<string, number[]>(10, (v) => v.length);
  const a = [1, 2];
  lru.add('a', a);
  lru.add('b', [1, 2, 3]);
  t.equal(lru.bytes, 5);
  a.push(3, 4);
  t.equal(lru.bytes, 5, 'a grown in place: not seen until measured again');
  lru.remeasure('a');
  t.equal(lru.bytes, 7, 'measured again: its new size');
  a.push(5, 6, 7, 8);
  lru.remeasure('a');
  t.equal(lru.get('a'), undefined, 'past the budget: a, the least recently used, went');
  t.equal(lru.bytes, 3, 'what it was accounted at is no longer counted');
  lru.remeasure('a');
  t.equal(lru.bytes, 3, 'a value no longer held is not accounted again');
});
