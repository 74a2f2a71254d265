/**
 * Decoded values kept for readers, least recently used first, within a byte budget (sizes as `bytesOf`
 * estimates them): the store's read caches. One entry larger than the budget is still kept, alone, so the value
 * just read stays usable. A value that grows once held (a rollup block whose bucket objects a reader decoded
 * later) is measured again through `remeasure`.
 */
export class ByteLru<K, V> {
  /** each value with the bytes it was last accounted at */
  private readonly map = new Map<K, { v: V; bytes: number }>();
  private held = 0;

  constructor(
    readonly budget: number,
    private readonly bytesOf: (v: V) => number,
  ) {}

  /** The value under `k`, now the most recently used. */
  get(k: K): V | undefined {
    const hit = this.map.get(k);
    if (hit === undefined) return undefined;
    this.map.delete(k);
    this.map.set(k, hit);
    return hit.v;
  }

  /** Keeps `v` under `k` (not already held), evicting the least recently used entries past the budget. */
  add(k: K, v: V): void {
    const bytes = this.bytesOf(v);
    this.map.set(k, { v, bytes });
    this.held += bytes;
    this.evict();
  }

  /** Accounts `k`'s value at its present size (when still held), evicting past the budget. */
  remeasure(k: K): void {
    const e = this.map.get(k);
    if (e === undefined) return;
    const bytes = this.bytesOf(e.v);
    this.held += bytes - e.bytes;
    e.bytes = bytes;
    this.evict();
  }

  private evict(): void {
    while (this.held > this.budget && this.map.size > 1) {
      const [oldest, old] = this.map.entries().next().value as [K, { v: V; bytes: number }];
      this.map.delete(oldest);
      this.held -= old.bytes;
    }
  }

  clear(): void {
    this.map.clear();
    this.held = 0;
  }

  /** accounted bytes held */
  get bytes(): number {
    return this.held;
  }
}
