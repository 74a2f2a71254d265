/**
 * The sync outbox (docs/sync.md): what is left to send upstream, recorded in the same LMDB transaction
 * as the write it concerns. It holds pointers, never a second copy of the points: per group-commit batch `seq`
 * and entity, the head fragments that batch wrote (key, firstTs, lastTs, count). The points are read back from
 * the store: the fragment itself while it exists (exactly that write's points), the chunk range after
 * compaction folded it in (a superset: duplicates are allowed, TB upserts on entity+key+ts), nothing once the
 * disk budget or retention dropped the window (counted as dropped).
 *
 * Keys of `env.outbox` (ordered-binary arrays):
 *   ['q', seq, e]       → number[] flat (k, firstTs, lastTs, n)*: pending telemetry of entity e from batch seq
 *                         (seq < 0: history for a new upstream, whole windows, src/upstream/uplink/backfill.ts)
 *   ['h', e, seq]       → { refs, above }: refs holding points stamped too far ahead (held: the clock rule of docs/sync.md)
 *   ['x', seq, e]       → { refs, status, error }: a batch the upstream refused with 400 (set aside, shown)
 *   ['a', uuid]         → n: the device's client attributes changed (n bumps on every change)
 *   ['t', uuid]         → { token, provisioned }: the device's upstream access token
 *   ['c']               → persisted counters (SyncCounters)
 *   ['d', e, seq]       → number[] flat (ds, n, k1..kn)*: the depth points one depth write of entity e stored,
 *                         pending upstream (seq: per entity, increasing); the values are read back from env.depth
 *   ['y', e, seq]       → { points, status, error }: depth points the upstream refused with 400 (set aside, shown)
 *   ['dc']              → persisted depth-sync counters (src/upstream/uplink/depth.ts)
 * The downlink over an MQTT gateway session (uppercase first elements), its keys built and read only by
 * src/upstream/downlink/state.ts:
 *   ['R', uuid, id]     → the upstream's RPC `id` to that device, its state and reply (upstream/downlink/rpc.ts)
 *   ['S', uuid]         → string[]: the device's shared-attribute keys the upstream sent (it owns them)
 *   ['D']               → persisted downlink counters
 *   ['L']               → the last device lifecycle events from the upstream (deleted, renamed)
 *
 * The sync sees none of this database: it reads and writes through the `Outbox` port below (and the downlink
 * through `DownlinkStore`), implemented over LMDB in outbox-lmdb.ts; test/helpers/outbox-port.ts is the suite any
 * implementation must pass.
 */
import type { TsKv } from '../model/kv.js';
import type { EntityIdx, KeyIdx } from './encoding/codec.js';
import { fragKey, rawHorizonOf, seriesPoints, windowStart } from './series/chunks.js';
import type { StoreEnv } from './env.js';
import { decodePoints } from './encoding/gorilla.js';
import type { SeriesColumn } from '../model/batch.js';
import type { KvValue } from '../model/kv.js';

/** One fragment a batch wrote: its series key, first and last ts and point count. */
export interface FragmentRef {
  readonly k: KeyIdx;
  readonly firstTs: number;
  readonly lastTs: number;
  readonly n: number;
}

// ---- key layouts: every key of env.outbox is built here (the layouts are listed at the top) --------------

export type QueueKey = ['q', number, number];
/** a position in the queue: an entry's key, or the start of a seq */
export type QueuePos = QueueKey | ['q', number];

export const queueKey = (seq: number, e: EntityIdx): QueueKey => ['q', seq, e];
/** the first queue key at or after `seq` (entity `e` and up when given) */
export const queueFrom = (seq: number, e?: EntityIdx): QueuePos => (e === undefined ? ['q', seq] : ['q', seq, e]);
export const QUEUE_END: ['q', number] = ['q', Number.MAX_SAFE_INTEGER];
/** the first queue position: history entries for a new upstream sit below every batch's seq (negative) */
export const QUEUE_START: ['q', number] = ['q', Number.MIN_SAFE_INTEGER];
/**
 * The seq of a history entry (src/upstream/uplink/backfill.ts) whose first window starts at `ts`: below 0, ordered by
 * window, so the backlog drains history oldest first across devices. It names no head fragment.
 */
export const backfillSeq = (ts: number, windowMs: number): number => Math.floor(ts / windowMs) - 2 ** 52;

export type HeldKey = ['h', number, number];
export const heldKey = (e: EntityIdx, seq: number): HeldKey => ['h', e, seq];
/** every held record: env.outbox.getRange(HELD_RANGE) */
export const HELD_RANGE: { readonly start: ['h']; readonly end: ['h', number] } = {
  start: ['h'],
  end: ['h', Number.MAX_SAFE_INTEGER],
};

export type SetAsideKey = ['x', number, number];
/** where the queue entry `key` goes once set aside (refused with 400, or unreadable) */
export const setAsideKey = (key: QueueKey): SetAsideKey => ['x', key[1], key[2]];
export const SET_ASIDE_RANGE: { readonly start: ['x']; readonly end: ['x', number] } = {
  start: ['x'],
  end: ['x', Number.MAX_SAFE_INTEGER],
};

export type AttributeMarkKey = ['a', string];
/** a device's client attributes changed: the value is rewritten on every change */
export const attributeMarkKey = (deviceId: string): AttributeMarkKey => ['a', deviceId];
export const ATTRIBUTE_MARKS: { readonly start: ['a']; readonly end: [string] } = { start: ['a'], end: ['a\u0000'] };

/** the persisted sync counters */
export const COUNTERS_KEY: ['c'] = ['c'];
export const DEPTH_COUNTERS_KEY: ['dc'] = ['dc'];

/** A device's upstream access token: set with the CLI, or provisioned by the sync service. */
export interface TokenRecord {
  readonly token: string;
  readonly provisioned: boolean;
}
export const tokenKey = (deviceId: string): ['t', string] => ['t', deviceId];

export function encodeRefs(refs: readonly FragmentRef[]): number[] {
  const out: number[] = [];
  for (const r of refs) out.push(r.k, r.firstTs, r.lastTs, r.n);
  return out;
}

export function decodeRefs(flat: readonly number[]): FragmentRef[] {
  const out: FragmentRef[] = [];
  for (let i = 0; i + 3 < flat.length; i += 4) {
    out.push({
      k: flat[i] as number,
      firstTs: flat[i + 1] as number,
      lastTs: flat[i + 2] as number,
      n: flat[i + 3] as number,
    });
  }
  return out;
}

// ---- entry codecs: the one reading and writing of each value format ---------------------------------------

/**
 * A queue entry's value is its refs flat, (k, firstTs, lastTs, n)*, after an optional first number: the ts from
 * which the entry's points are sent (an entry released from held keeps only the points at or above it).
 */
export interface QueueEntryValue {
  /** Number.MIN_SAFE_INTEGER when every point of the refs is sent */
  readonly fromTs: number;
  readonly refs: FragmentRef[];
}

/** where the refs start in a queue entry's flat value: after its `fromTs` when it has one */
const refsStart = (flat: readonly number[]): number => flat.length % 4;

export function decodeQueueEntry(value: unknown): QueueEntryValue {
  const flat = value as number[];
  const at = refsStart(flat);
  return {
    fromTs: at === 1 ? (flat[0] as number) : Number.MIN_SAFE_INTEGER,
    refs: decodeRefs(at === 0 ? flat : flat.slice(at)),
  };
}

/** `refs` flat (encodeRefs), sent from `fromTs` on (Number.MIN_SAFE_INTEGER: all of them). */
export function encodeQueueEntry(fromTs: number, refs: readonly number[]): number[] {
  return fromTs > Number.MIN_SAFE_INTEGER ? [fromTs, ...refs] : [...refs];
}

/** A queue entry's points and least first ts, summed from the flat value (no ref objects: backlogs of millions). */
export function queueEntryTotals(value: unknown): { readonly points: number; readonly minTs: number } {
  const flat = value as number[];
  let points = 0;
  let minTs = Infinity;
  for (let i = refsStart(flat); i + 3 < flat.length; i += 4) {
    points += flat[i + 3] as number;
    minTs = Math.min(minTs, flat[i + 1] as number);
  }
  return { points, minTs };
}

/** Whether the head fragment a ref of batch `seq` of entity e points at is still there (not compacted nor dropped). */
export const hasFragment = (env: StoreEnv, e: EntityIdx, seq: number, r: FragmentRef): boolean =>
  env.head.getBinary(fragKey(e, r.k, r.firstTs, seq)) !== undefined;

export const refsPoints = (refs: readonly FragmentRef[]): number => refs.reduce((s, r) => s + r.n, 0);
export const refsMinTs = (refs: readonly FragmentRef[]): number =>
  refs.reduce((m, r) => Math.min(m, r.firstTs), Infinity);

export type DepthQueueKey = ['d', number, number];
export const depthQueueKey = (e: EntityIdx, seq: number): DepthQueueKey => ['d', e, seq];
/** every depth entry of entity e (every entity's without one) */
export const depthQueueRange = (
  e?: EntityIdx,
): { readonly start: ['d', number, number?]; readonly end: ['d', number, number?] } =>
  e === undefined
    ? { start: ['d', 0], end: ['d', Number.MAX_SAFE_INTEGER] }
    : { start: ['d', e, 0], end: ['d', e, Number.MAX_SAFE_INTEGER] };
export type DepthSetAsideKey = ['y', number, number];
export const depthSetAsideKey = (e: EntityIdx, seq: number): DepthSetAsideKey => ['y', e, seq];
export const DEPTH_SET_ASIDE_RANGE: { readonly start: ['y']; readonly end: ['y', number] } = {
  start: ['y'],
  end: ['y', Number.MAX_SAFE_INTEGER],
};

/** Points in a depth entry's flat (ds, n, k1..kn)* list. */
export function depthEntryPoints(flat: readonly number[]): number {
  let n = 0;
  for (let i = 0; i + 1 < flat.length; i += 2 + (flat[i + 1] as number)) n += flat[i + 1] as number;
  return n;
}

/** `${lsn}:${entityUuid}`: one device's points in one record of the write-ahead log */
export const loggedKey = (lsn: number, entityId: string): string => `${lsn}:${entityId}`;

/** What the recorder tells the upstream sync (given at construction: src/upstream/uplink/relay.ts). */
export interface OutboxListener {
  /**
   * In each batch's turn before its records are put: writes issued here share the batch's transaction. Returns
   * what is told each entity's recorded points once the batch has committed (undefined: nobody listens), asked
   * here so that a batch put before the sync was listening is never told after it (the sync counts what it
   * finds stored at start).
   */
  committing(): ((seq: number, e: EntityIdx, refs: FragmentRef[]) => void) | undefined;
  /** each record of the write-ahead log once it is on disk (the points are the store's: read only) */
  logged(lsn: number, points: ReadonlyMap<string, ReadonlyMap<string, readonly SeriesColumn[]>>): void;
  /** the records up to an LSN are in LMDB (what was left of them to send is recorded now) */
  applied(lsn: number): void;
  /**
   * Inside an apply's transaction when records sent from the log are in it: writes the sync's counters there
   * (`sentPointsUnapplied` has left them out already) and returns true. False (the sync not running yet): the
   * recorder raises the stored count by their points itself.
   */
  sentApplied(): boolean;
}

/**
 * Called by HeadWriter.putPoints (series/head.ts) for every head fragment it puts, then once with the batch's seq,
 * all inside the batch's synchronous turn (so in its transaction). With the write-ahead log's replay going
 * through the same path, replayed writes are recorded too.
 *
 * With the log, the sync service sends a device's points of a record straight from memory as soon as the
 * record is on disk (OutboxListener.logged), before any LMDB commit: an LMDB commit per send would cost the SD card more
 * than the log saves (BENCHMARKS.md, SD-card wear; docs/design/write-path.md). What it sent is noted here (and in the log itself, see
 * LmdbTimeseriesStore.noteSent), so the apply that later puts the record into LMDB records nothing left to send
 * for it. A send still under way when its record is applied is recorded as usual, and its seq kept: the
 * service removes that entry itself once the send succeeds.
 */
export class OutboxRecorder {
  private readonly byEntity = new Map<EntityIdx, number[]>();
  /** the highest seq recorded by this process (the live/backlog boundary of the sync service) */
  lastSeq = 0;
  /** the log's (record, device) pairs sent upstream and not applied yet → the record's LSN and its points */
  private readonly sentLogged = new Map<string, { readonly lsn: number; readonly points: number }>();
  /** points of `sentLogged`: sent, and counted in the sync's `sent` once their record's apply commits */
  private sentLoggedPoints = 0;
  /** points of `sentLogged` the apply under way puts into LMDB (its transaction counts them) */
  private applyingSentPoints = 0;
  /** the log's (record, device) pairs being sent → the outbox entry their apply recorded (null: not applied) */
  private readonly sendingLogged = new Map<string, { readonly seq: number; readonly e: EntityIdx } | null>();
  /** `${seq}:${e}` of outbox entries an apply recorded while their points were being sent from the log */
  readonly sendingEntries = new Set<string>();
  /** every record of the log up to this LSN is in LMDB */
  private appliedLsn = 0;

  /** `listener`: upstream sync's side (undefined: nobody sends, the recorder keeps the stored count itself) */
  constructor(
    private readonly env: StoreEnv,
    private readonly listener?: OutboxListener,
  ) {}

  /** A record of the write-ahead log is on disk (the points are the store's: read only). */
  logged(lsn: number, points: ReadonlyMap<string, ReadonlyMap<string, readonly SeriesColumn[]>>): void {
    this.listener?.logged(lsn, points);
  }

  /** Whether the apply of record `lsn` records the device's points as left to send (false: sent already). */
  recordsLogged(lsn: number | undefined, entityId: string): boolean {
    return lsn === undefined || !this.sentLogged.has(loggedKey(lsn, entityId));
  }

  /** Whether a device's points of a record are being sent from memory (its apply must record them alone). */
  isSendingLogged(lsn: number, entityId: string): boolean {
    return this.sendingLogged.has(loggedKey(lsn, entityId));
  }

  /** Marks a device's points of a record as being sent from memory. False when that record is applied. */
  sendingFromLog(lsn: number, entityId: string): boolean {
    if (lsn <= this.appliedLsn) return false;
    this.sendingLogged.set(loggedKey(lsn, entityId), null);
    return true;
  }

  /**
   * The send of a device's points of a record ended. Returns the outbox entry its apply recorded when the
   * record was applied meanwhile (that entry is the caller's to remove), else undefined.
   */
  sentFromLog(
    lsn: number,
    entityId: string,
    ok: boolean,
    points = 0,
  ): { readonly seq: number; readonly e: EntityIdx } | undefined {
    const key = loggedKey(lsn, entityId);
    const entry = this.sendingLogged.get(key) ?? undefined;
    this.sendingLogged.delete(key);
    if (entry !== undefined) this.sendingEntries.delete(`${entry.seq}:${entry.e}`);
    else if (ok) this.markSent(key, lsn, points);
    return entry;
  }

  private markSent(key: string, lsn: number, points: number): void {
    const had = this.sentLogged.get(key);
    if (had !== undefined) this.sentLoggedPoints -= had.points;
    this.sentLogged.set(key, { lsn, points });
    this.sentLoggedPoints += points;
  }

  /** Sent marks read back from the log at start (records not applied before the stop), with their points. */
  replaySent(lsn: number, entityId: string, points: number): void {
    this.markSent(loggedKey(lsn, entityId), lsn, points);
  }

  /**
   * Points sent from the log whose records are not in LMDB (as of the transaction being written): the sync's
   * stored `sent` leaves them out. After a kill -9 the replay brings back the marks the log kept (counted here
   * again) and the points whose marks it had not written yet are sent, and counted, again: the stored count plus
   * this one is exact across a crash.
   */
  get sentPointsUnapplied(): number {
    return this.sentLoggedPoints - this.applyingSentPoints;
  }

  /** Inside an apply's transaction, after its points: the marks of records up to `lsn` are counted there. */
  applyingThrough(lsn: number): void {
    let points = 0;
    for (const m of this.sentLogged.values()) if (m.lsn <= lsn) points += m.points;
    if (points === 0) return;
    this.applyingSentPoints = points;
    if (this.listener?.sentApplied() === true) return;
    const stored = this.env.outbox.get(COUNTERS_KEY) as { sent?: number } | undefined;
    void this.env.outbox.put(COUNTERS_KEY, { ...stored, sent: (stored?.sent ?? 0) + points });
  }

  /** Records up to `lsn` are applied: their marks are of no further use. */
  appliedThrough(lsn: number): void {
    if (lsn > this.appliedLsn) this.appliedLsn = lsn;
    this.listener?.applied(lsn);
    for (const [key, m] of this.sentLogged) {
      if (m.lsn > lsn) continue;
      this.sentLogged.delete(key);
      this.sentLoggedPoints -= m.points;
    }
    this.applyingSentPoints = 0;
  }

  /** Called by putPoints for each entity of a logged record it records (see sendingFromLog). */
  recordedLogged(lsn: number | undefined, entityId: string, e: EntityIdx, seq: number): void {
    if (lsn === undefined || this.sendingLogged.size === 0) return;
    const key = loggedKey(lsn, entityId);
    if (!this.sendingLogged.has(key)) return;
    this.sendingLogged.set(key, { seq, e });
    this.sendingEntries.add(`${seq}:${e}`);
  }

  fragment(e: EntityIdx, k: KeyIdx, firstTs: number, lastTs: number, n: number): void {
    let flat = this.byEntity.get(e);
    if (flat === undefined) this.byEntity.set(e, (flat = []));
    flat.push(k, firstTs, lastTs, n);
  }

  /** Puts this batch's records; returns the last put's promise (undefined when nothing was recorded). */
  commit(seq: number): Promise<boolean> | undefined {
    const queued = this.listener?.committing();
    let last: Promise<boolean> | undefined;
    for (const [e, flat] of this.byEntity) {
      last = this.env.outbox.put(queueKey(seq, e), flat);
      if (queued !== undefined)
        last.then(
          () => queued(seq, e, decodeRefs(flat)),
          () => undefined,
        );
    }
    this.byEntity.clear();
    if (seq > this.lastSeq) this.lastSeq = seq;
    return last;
  }

  /** A batch that threw before commit: what was noted goes (its transaction never happened). */
  discard(): void {
    this.byEntity.clear();
    this.applyingSentPoints = 0;
  }
}

/** Where a ref's points were found. */
export type RefRead = { readonly kind: 'fragment' | 'chunk'; readonly points: TsKv[] } | { readonly kind: 'dropped' };

/** What encoding a group of entries reads back (upstream/uplink/encode.ts), all in one snapshot. */
export interface RefSource {
  /** the raw horizon of the snapshot the refs are read in (a window below it is gone) */
  rawHorizonTs(): number;
  /**
   * The points of one ref of batch `seq` for entity e: the fragment if still in the head, else the chunk range
   * [firstTs, lastTs] when its window is still kept, else dropped (retention or the disk budget took it).
   */
  read(e: EntityIdx, seq: number, r: FragmentRef, windowMs: number, rawHorizonTs: number): RefRead;
}

/** The refs of `env` as the encoder reads them (the main thread's environment, or the sync thread's own). */
export function refSourceOf(env: StoreEnv): RefSource {
  return {
    rawHorizonTs: () => rawHorizonOf(env),
    read(e, seq, r, windowMs, rawHorizonTs) {
      const frag = env.head.getBinary(fragKey(e, r.k, r.firstTs, seq));
      if (frag !== undefined) return { kind: 'fragment', points: decodePoints(frag) };
      if (windowStart(r.lastTs, windowMs) < rawHorizonTs) return { kind: 'dropped' };
      return { kind: 'chunk', points: [...seriesPoints(env, e, r.k, r.firstTs, r.lastTs + 1, windowMs, false)] };
    },
  };
}

// ---- the ports: what the sync sees of this database -----------------------------------------------------

/** An outbox entry's record of points held for their timestamp: `['h', e, seq]` (docs/sync.md, the clock). */
export interface HeldRecord {
  refs: number[];
  /** future-held points have ts >= this (the clock + 1 day when held) */
  above: number;
  /** the smallest future-held ts; null: only points before 2000 are held */
  futureMin: number | null;
  /** held points in all (future and before 2000) */
  held: number;
  /** of them, before 2000 */
  pre2000: number;
}

/** A batch set aside as stored (`['x', seq, e]`): its refs flat, and the upstream's answer. */
export interface SetAsideRecord {
  refs: number[];
  status: number;
  error: string;
}

/** A depth batch set aside as stored (`['y', e, seq]`): its points as a depth entry's flat list. */
export interface DepthSetAsideRecord {
  points: number[];
  status: number;
  error: string | null;
}

/** The sync's persisted counters (`['c']`), written with every acknowledgement (upstream/uplink/counts.ts). */
export interface SyncCounters {
  sent: number;
  dropped: number;
  droppedFrom: number | null;
  droppedTo: number | null;
  setAside: number;
  notSynced: number;
  lastSuccessTs: number | null;
  lastError: string | null;
  /** when lastError happened (absent in counters written before it was kept) */
  lastErrorTs?: number | null;
  /** the upstream these counters last spoke to: an error of another one is not shown */
  url?: string;
  /** depth points counted as not synced before depth series were sent (read once, by the depth sender) */
  depthNotSynced?: number;
}

/** The depth sender's persisted counters (`['dc']`, upstream/uplink/depth.ts). */
export interface DepthCounters {
  sent: number;
  setAside: number;
  dropped: number;
  notSynced: number;
}

/** A range of one table's keys, end excluded; a range reaching past the table ends with the table. */
export interface OutboxRange {
  readonly start: readonly (string | number | undefined)[];
  readonly end: readonly (string | number | undefined)[];
  readonly limit?: number;
  readonly reverse?: boolean;
}

/** One table of the outbox, read: its records in key order. */
export interface OutboxTable<K, V> {
  get(key: K): V | undefined;
  /** keys only: no value is decoded (a scan that skips most of what it reads) */
  keys(range: OutboxRange): Iterable<K>;
  entries(range: OutboxRange): Iterable<{ readonly key: K; readonly value: V }>;
}

/** A put, or (value null) a removal. */
export interface Change<K, V> {
  readonly key: K;
  readonly value: V | null;
}

/** What one write changes, table by table, each in the order given. */
export interface OutboxChanges {
  readonly queue?: ReadonlyArray<Change<QueueKey, number[]>>;
  readonly held?: ReadonlyArray<Change<HeldKey, HeldRecord>>;
  readonly setAside?: ReadonlyArray<Change<SetAsideKey, SetAsideRecord>>;
  readonly depth?: ReadonlyArray<Change<DepthQueueKey, number[]>>;
  readonly depthSetAside?: ReadonlyArray<Change<DepthSetAsideKey, DepthSetAsideRecord>>;
  readonly counters?: SyncCounters;
  readonly depthCounters?: DepthCounters;
}

/**
 * The outbox as the uplink sees it: what is left to send (the queue, per batch and device, and depth entries),
 * what is held or set aside, client-attribute marks, upstream tokens, the counters; and what the sync reads of the
 * store beside it (fragments still in the head, the windows a new upstream gets, depth values, the refs' points).
 * Every write of several records is one atomic `write` or `commit`: the uplink opens no transaction.
 */
export interface Outbox {
  readonly queue: OutboxTable<QueueKey, number[]>;
  readonly held: OutboxTable<HeldKey, HeldRecord>;
  readonly setAside: OutboxTable<SetAsideKey, SetAsideRecord>;
  readonly depth: OutboxTable<DepthQueueKey, number[]>;
  readonly depthSetAside: OutboxTable<DepthSetAsideKey, DepthSetAsideRecord>;
  /** a device's client attributes changed: the value is rewritten on every change */
  readonly marks: OutboxTable<AttributeMarkKey, number>;
  counters(): Partial<SyncCounters> | undefined;
  depthCounters(): Partial<DepthCounters> | undefined;
  /**
   * Writes `changes` in this event-loop turn: they share the transaction open in it (an ingest batch's, when
   * called while it commits) or go with the next commit. Resolves once committed.
   */
  write(changes: OutboxChanges): Promise<void>;
  /**
   * Writes `changes` in one transaction of their own; given as a function, it is called in the transaction (what
   * it reads, the counters, is as of the commit). Resolves once committed.
   */
  commit(changes: OutboxChanges | (() => OutboxChanges)): Promise<void>;
  /** Marks a device's client attributes as changed (in the turn of the attribute write: its transaction). */
  mark(deviceId: string): Promise<boolean>;
  /** Removes a device's mark; with `ifValue`, only when no change rewrote it since (checked in the transaction). */
  unmark(deviceId: string, ifValue?: number): Promise<void>;
  token(deviceId: string): TokenRecord | undefined;
  /** Stores a device's upstream token, on disk when it resolves (a token is stored before it is used). */
  setToken(deviceId: string, rec: TokenRecord): Promise<void>;
  removeToken(deviceId: string): Promise<void>;
  /** Resolves once every write issued before is on disk. */
  flushed(): Promise<void>;
  /** The seq the store's next batch takes: every entry recorded so far is below it. */
  nextSeq(): number;
  /** Whether the head fragment a ref of batch `seq` of entity e points at is still there (not compacted nor dropped). */
  hasFragment(e: EntityIdx, seq: number, r: FragmentRef): boolean;
  /** The least entity index at or after `e` holding telemetry (chunks or head fragments), or undefined. */
  nextStoredEntity(e: EntityIdx): EntityIdx | undefined;
  /**
   * Per chunk window of entity e: its keys and their point counts (chunk + fragments), ascending by window, read
   * in one snapshot. Fragments of seq `boundary` and up are left out (their own entries carry them).
   */
  storedWindows(e: EntityIdx, windowMs: number, boundary: number): Map<number, Map<KeyIdx, number>>;
  /** The stored value of a depth point, or undefined when it is gone. */
  depthValue(e: EntityIdx, k: KeyIdx, ds: number): KvValue | undefined;
  /** The refs' points, read in the main thread (the sync thread opens its own: openRefSource). */
  readonly refs: RefSource;
}

/** A key of the downlink's: its first element is uppercase (upstream/downlink/state.ts builds them all). */
export type DownlinkKey = readonly [string, ...(string | number)[]];

/**
 * The downlink's persisted state over the same database (upstream/downlink/): its records, under keys of its own,
 * written one at a time (no write of the downlink spans several records).
 */
export interface DownlinkStore {
  get(key: DownlinkKey): unknown;
  /** with the next commit: `flushed()` when it must be on disk */
  put(key: DownlinkKey, value: unknown): Promise<boolean>;
  remove(key: DownlinkKey): Promise<boolean>;
  entries(range: OutboxRange): Iterable<{ readonly key: DownlinkKey; readonly value: unknown }>;
  flushed(): Promise<void>;
}
