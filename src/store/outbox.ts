/**
 * The sync outbox (CONTRACT §9, issue 16): what is left to send upstream, recorded in the same LMDB transaction
 * as the write it concerns. It holds pointers, never a second copy of the points: per group-commit batch `seq`
 * and entity, the head fragments that batch wrote (key, firstTs, lastTs, count). The points are read back from
 * the store: the fragment itself while it exists (exactly that write's points), the chunk range after
 * compaction folded it in (a superset: duplicates are allowed, TB upserts on entity+key+ts), nothing once the
 * disk budget or retention dropped the window (counted as dropped).
 *
 * Keys of `env.outbox` (ordered-binary arrays):
 *   ['q', seq, e]       → number[] flat (k, firstTs, lastTs, n)*: pending telemetry of entity e from batch seq
 *   ['h', e, seq]       → { refs, above }: refs holding points stamped too far ahead (held; CONTRACT §9 clock)
 *   ['x', seq, e]       → { refs, status, error }: a batch the upstream refused with 400 (set aside, shown)
 *   ['a', uuid]         → n: the device's client attributes changed (n bumps on every change)
 *   ['t', uuid]         → { token, provisioned }: the device's upstream access token
 *   ['c']               → persisted counters (SyncCounters)
 */
import type { TsKv } from '../model/kv.js';
import type { EntityIdx, KeyIdx } from './codec.js';
import { fragKey, windowStart } from './chunks.js';
import type { StoreEnv } from './env.js';
import { decodePoints } from './gorilla.js';

/** One fragment a batch wrote: its series key, first and last ts and point count. */
export interface FragmentRef {
  readonly k: KeyIdx;
  readonly firstTs: number;
  readonly lastTs: number;
  readonly n: number;
}

export type QueueKey = ['q', number, number];

export const queueKey = (seq: number, e: EntityIdx): QueueKey => ['q', seq, e];
export const QUEUE_END: ['q', number] = ['q', Number.MAX_SAFE_INTEGER];

export function encodeRefs(refs: readonly FragmentRef[]): number[] {
  const out: number[] = [];
  for (const r of refs) out.push(r.k, r.firstTs, r.lastTs, r.n);
  return out;
}

export function decodeRefs(flat: readonly number[]): FragmentRef[] {
  const out: FragmentRef[] = [];
  for (let i = 0; i + 3 < flat.length; i += 4) {
    out.push({ k: flat[i] as number, firstTs: flat[i + 1] as number, lastTs: flat[i + 2] as number, n: flat[i + 3] as number });
  }
  return out;
}

export const refsPoints = (refs: readonly FragmentRef[]): number => refs.reduce((s, r) => s + r.n, 0);
export const refsMinTs = (refs: readonly FragmentRef[]): number => refs.reduce((m, r) => Math.min(m, r.firstTs), Infinity);

/**
 * Called by LmdbTimeseriesStore.flushPending for every head fragment it puts, then once with the batch's seq,
 * all inside the batch's synchronous turn (so in its transaction). With the write-ahead log's replay going
 * through the same path, replayed writes are recorded too.
 */
export class OutboxRecorder {
  private readonly byEntity = new Map<EntityIdx, number[]>();
  /** the highest seq recorded by this process (the live/backlog boundary of the sync service) */
  lastSeq = 0;

  /** called in each batch's turn before its records are put: writes issued here share the batch's transaction */
  beforeCommit: (() => void) | undefined;

  /** told of each entity's recorded points once its batch has committed */
  onQueued: ((seq: number, e: EntityIdx, refs: FragmentRef[]) => void) | undefined;

  constructor(private readonly env: StoreEnv) {}

  fragment(e: EntityIdx, k: KeyIdx, firstTs: number, lastTs: number, n: number): void {
    let flat = this.byEntity.get(e);
    if (flat === undefined) this.byEntity.set(e, (flat = []));
    flat.push(k, firstTs, lastTs, n);
  }

  /** Puts this batch's records; returns the last put's promise (undefined when nothing was recorded). */
  commit(seq: number): Promise<boolean> | undefined {
    this.beforeCommit?.();
    let last: Promise<boolean> | undefined;
    const notify = this.onQueued;
    for (const [e, flat] of this.byEntity) {
      last = this.env.outbox.put(queueKey(seq, e), flat);
      if (notify !== undefined) last.then(() => notify(seq, e, decodeRefs(flat)), () => undefined);
    }
    this.byEntity.clear();
    if (seq > this.lastSeq) this.lastSeq = seq;
    return last;
  }

  /** A batch that threw before commit: what was noted goes (its transaction never happened). */
  discard(): void {
    this.byEntity.clear();
  }
}

/** Where a ref's points were found. */
export type RefRead =
  | { readonly kind: 'fragment' | 'chunk'; readonly points: TsKv[] }
  | { readonly kind: 'dropped' };

/**
 * The points of one ref of batch `seq` for entity e: the fragment if still in the head, else the chunk range
 * [firstTs, lastTs] when its window is still kept, else dropped (retention or the disk budget took it).
 */
export function readRef(
  env: StoreEnv, e: EntityIdx, seq: number, r: FragmentRef, windowMs: number, rawHorizonTs: number,
  range: (e: EntityIdx, k: KeyIdx, from: number, to: number) => Iterable<TsKv>,
): RefRead {
  const frag = env.head.getBinary(fragKey(e, r.k, r.firstTs, seq));
  if (frag !== undefined) return { kind: 'fragment', points: decodePoints(frag) };
  if (windowStart(r.lastTs, windowMs) < rawHorizonTs) return { kind: 'dropped' };
  return { kind: 'chunk', points: [...range(e, r.k, r.firstTs, r.lastTs + 1)] };
}
