/**
 * The answered exchanges a duplicate is answered from (RFC 7252 section 4.5): (peer, message id) → the datagram
 * it got, at most `capacity` of them, forgotten oldest first when full or once past the exchange lifetime.
 *
 * The entries sit in a ring in the order they were answered, which is their age order, so forgetting the oldest
 * is one step at the ring's head. (A Map used as the queue, `keys().next()` then `delete`, is not: V8 leaves a
 * deleted entry's slot in the table until the next rehash and its iterator steps over each of them, so with the
 * cache full every answer walked thousands of dead slots, about 15 µs per answer at 20,000 entries.)
 *
 * An entry lives for minutes, long enough for V8 to move whatever it holds to the old generation, and the cache
 * turns over thousands of entries a second under load; so an entry holds no object of its own: a peer's
 * message ids map to ring slots as numbers, in one Map per peer (made on its first entry, dropped with its
 * last), and an answer of up to SLOT_BYTES (a header and token: every upload's 2.01) is copied into one arena.
 * Larger answers (a payload) are kept as they are.
 */

/** bytes of the arena per slot: a 4-byte header and a token of up to 8 bytes, with room to spare */
const SLOT_BYTES = 16;
/** slots the arena starts with; it doubles as the ring grows, up to `capacity` */
const FIRST_SLOTS = 1024;

/** One peer's answered message ids → ring slots. */
class PeerAnswers {
  readonly slots = new Map<number, number>();
  constructor(readonly peer: string) {}
}

export class AnsweredCache {
  private readonly peers = new Map<string, PeerAnswers>();
  /** the ring, grown one slot at a time up to `capacity`, so an idle daemon holds next to nothing */
  private readonly owners: Array<PeerAnswers | undefined> = [];
  private readonly mids: number[] = [];
  private readonly times: number[] = [];
  /** bytes in the arena, or -1 when the answer is in `large` */
  private readonly lengths: number[] = [];
  private arena = Buffer.alloc(0);
  private readonly large = new Map<number, Buffer>();
  /** the oldest entry's slot */
  private head = 0;
  private count = 0;
  private entries = 0;

  constructor(private readonly capacity: number) {}

  get size(): number {
    return this.entries;
  }

  /** The answer `peer` got to `mid`: a copy, so a later answer in the same slot cannot change it. */
  get(peer: string, mid: number): Buffer | undefined {
    const slot = this.peers.get(peer)?.slots.get(mid);
    if (slot === undefined) return undefined;
    const n = this.lengths[slot] as number;
    if (n < 0) return this.large.get(slot);
    return Buffer.from(this.arena.subarray(slot * SLOT_BYTES, slot * SLOT_BYTES + n));
  }

  /** Remembers `buf` as the answer `peer` got to `mid`, the newest entry; the oldest is forgotten when full. */
  set(peer: string, mid: number, buf: Buffer, now: number): void {
    if (this.capacity <= 0) return;
    let owner = this.peers.get(peer);
    const old = owner?.slots.get(mid);
    if (old !== undefined) {
      // answered again (an empty ACK, then the answer): the older slot stays in the ring as a blank
      this.blank(old);
      this.entries--;
    }
    if (this.count === this.capacity) this.dropOldest();
    if (owner === undefined || this.peers.get(peer) !== owner) {
      // (dropping the oldest may have dropped this peer's last entry, and with it its map)
      owner = this.peers.get(peer) ?? new PeerAnswers(peer);
      this.peers.set(peer, owner);
    }
    const slot = (this.head + this.count) % this.capacity;
    if (slot === this.owners.length) {
      this.owners.push(owner);
      this.mids.push(mid);
      this.times.push(now);
      this.lengths.push(0);
    } else {
      this.owners[slot] = owner;
      this.mids[slot] = mid;
      this.times[slot] = now;
    }
    if (buf.length <= SLOT_BYTES) {
      if ((slot + 1) * SLOT_BYTES > this.arena.length) this.growArena();
      buf.copy(this.arena, slot * SLOT_BYTES);
      this.lengths[slot] = buf.length;
    } else {
      this.lengths[slot] = -1;
      this.large.set(slot, buf);
    }
    owner.slots.set(mid, slot);
    this.count++;
    this.entries++;
  }

  /** Forgets every entry remembered before `oldest`. */
  expire(oldest: number): void {
    while (this.count > 0 && (this.times[this.head] as number) < oldest) this.dropOldest();
  }

  clear(): void {
    this.peers.clear();
    this.owners.length = 0;
    this.mids.length = 0;
    this.times.length = 0;
    this.lengths.length = 0;
    this.large.clear();
    this.arena = Buffer.alloc(0);
    this.head = 0;
    this.count = 0;
    this.entries = 0;
  }

  private dropOldest(): void {
    const slot = this.head;
    if (this.owners[slot] !== undefined) {
      this.blank(slot);
      this.entries--;
    }
    this.head = (this.head + 1) % this.capacity;
    this.count--;
  }

  /** Takes the entry in `slot` out of its peer's map (and the peer out, with its last entry). */
  private blank(slot: number): void {
    const owner = this.owners[slot];
    if (owner === undefined) return;
    owner.slots.delete(this.mids[slot] as number);
    if (owner.slots.size === 0) this.peers.delete(owner.peer);
    this.owners[slot] = undefined;
    if ((this.lengths[slot] as number) < 0) this.large.delete(slot);
  }

  private growArena(): void {
    const slots = Math.min(this.capacity, Math.max(FIRST_SLOTS, (this.arena.length / SLOT_BYTES) * 2));
    const bigger = Buffer.alloc(slots * SLOT_BYTES);
    this.arena.copy(bigger);
    this.arena = bigger;
  }
}
