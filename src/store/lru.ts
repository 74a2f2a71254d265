/**
 * Decoded values kept for readers, least recently used first, within a byte budget (sizes as `bytesOf`
 * estimates them): the store's read caches. One entry larger than the budget is still kept, alone, so the value
 * just read stays usable.
 */
export class ByteLru<K, V> {
  private readonly map = new Map<K, V>();
  private held = 0;

  constructor(
    readonly budget: number,
    private readonly bytesOf: (v: V) => number,
  ) {}

  /** The value under `k`, now the most recently used. */
  get(k: K): V | undefined {
    const hit = this.map.get(k);
    if (hit !== undefined) {
      this.map.delete(k);
      this.map.set(k, hit);
    }
    return hit;
  }

  /** Keeps `v` under `k` (not already held), evicting the least recently used entries past the budget. */
  add(k: K, v: V): void {
    this.map.set(k, v);
    this.held += this.bytesOf(v);
    while (this.held > this.budget && this.map.size > 1) {
      const [oldest, old] = this.map.entries().next().value as [K, V];
      this.map.delete(oldest);
      this.held -= this.bytesOf(old);
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
