/**
 * The answered exchanges a duplicate is answered from (RFC 7252 section 4.5): key → the datagram it got, at most
 * `capacity` of them, forgotten oldest first when full or once past the exchange lifetime.
 *
 * The entries sit in a ring in the order they were answered, which is their age order, and a Map finds a key's
 * slot, so forgetting the oldest is one step at the ring's head. A Map alone used as the queue (`keys().next()`,
 * then `delete`) is not: V8 leaves a deleted entry's slot in the table until the next rehash and its iterator
 * steps over each of them, so with the cache full, every answer walked thousands of dead slots (about 15 µs per
 * answer at 20,000 entries).
 */
export class AnsweredCache {
  private readonly slots = new Map<string, number>();
  /** the ring; grown one slot at a time up to `capacity`, so an idle daemon holds nothing */
  private readonly keys: Array<string | undefined> = [];
  private readonly bufs: Array<Buffer | undefined> = [];
  private readonly times: number[] = [];
  /** the oldest entry's slot */
  private head = 0;
  private count = 0;

  constructor(private readonly capacity: number) {}

  get size(): number {
    return this.slots.size;
  }

  get(key: string): Buffer | undefined {
    const slot = this.slots.get(key);
    return slot === undefined ? undefined : this.bufs[slot];
  }

  /** Remembers `buf` as the answer to `key`, the newest entry; the oldest is forgotten when full. */
  set(key: string, buf: Buffer, now: number): void {
    if (this.capacity <= 0) return;
    const old = this.slots.get(key);
    if (old !== undefined) {
      // answered again (an empty ACK, then the answer): the older slot stays in the ring as a blank
      this.keys[old] = undefined;
      this.bufs[old] = undefined;
    }
    if (this.count === this.capacity) this.dropOldest();
    const slot = (this.head + this.count) % this.capacity;
    if (slot === this.keys.length) {
      this.keys.push(key);
      this.bufs.push(buf);
      this.times.push(now);
    } else {
      this.keys[slot] = key;
      this.bufs[slot] = buf;
      this.times[slot] = now;
    }
    this.count++;
    this.slots.set(key, slot);
  }

  /** Forgets every entry remembered before `oldest`. */
  expire(oldest: number): void {
    while (this.count > 0 && (this.times[this.head] as number) < oldest) this.dropOldest();
  }

  clear(): void {
    this.slots.clear();
    this.keys.length = 0;
    this.bufs.length = 0;
    this.times.length = 0;
    this.head = 0;
    this.count = 0;
  }

  private dropOldest(): void {
    const key = this.keys[this.head];
    if (key !== undefined && this.slots.get(key) === this.head) this.slots.delete(key);
    this.keys[this.head] = undefined;
    this.bufs[this.head] = undefined;
    this.head = (this.head + 1) % this.capacity;
    this.count--;
  }
}
