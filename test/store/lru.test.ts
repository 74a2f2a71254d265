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
