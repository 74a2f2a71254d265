/**
 * The head's writer: `putPoints` is the one place points become head fragments and latest values (the log
 * apply and the bulk path of group commit both go through it). It owns what a put must know: the head seq and
 * its reservation, the newest ts per series and overall, and the points put since start.
 */
import { SeriesColumn } from '../../model/batch.js';
import type { EntityIdx, KeyIdx } from '../encoding/codec.js';
import { decodeStamped, encodeStamped, readOrderedI64, seriesKey } from '../encoding/codec.js';
import type { Dictionary } from '../encoding/dict.js';
import { encodeColumn } from '../encoding/gorilla.js';
import type { StoreEnv } from '../env.js';
import type { OutboxRecorder } from '../outbox.js';
import type { PendingPoints } from '../wal.js';
import { fragKey, windowStart } from './chunks.js';

/** Head sequence numbers are reserved in blocks so a restart never reuses one (meta key `headSeq`). */
const SEQ_RESERVATION = 1_000_000;

export class HeadWriter {
  private seq: number;
  private seqReserved: number;
  /** latest ts per series, so concurrent writes in one batch never let an older point win */
  private readonly latestTs = new Map<EntityIdx, Map<KeyIdx, number>>();
  /** the newest ts of any point written (lazily loaded from `latest`), the reference for retention */
  private newest: number | undefined;
  /** points put into LMDB since start (applied from the log, or written directly) */
  private pointsPut = 0;

  constructor(
    private readonly env: StoreEnv,
    private readonly dict: Dictionary,
    private readonly windowMs: number,
    private readonly outbox: OutboxRecorder | undefined,
    /** told the firstTs of every head fragment put (the compactor's due series) */
    private readonly noteHeadFragment: (e: EntityIdx, k: KeyIdx, firstTs: number) => void,
  ) {
    this.seq = (env.meta.get('headSeq') as number | undefined) ?? 1;
    this.seqReserved = this.seq;
  }

  /** points put into LMDB since start */
  get pointsPutSinceStart(): number {
    return this.pointsPut;
  }

  /**
   * The newest ts ever written to any series (from `latest`; deletes do not lower it). Retention counts back
   * from min(now, this), as Prometheus counts from its newest block, so data with old timestamps (replays,
   * tests at ts 1000) is not dropped just for being old, and one far-future point cannot drop everything.
   */
  newestTs(): number {
    if (this.newest === undefined) {
      let newest = Number.MIN_SAFE_INTEGER;
      for (const { value } of this.env.latest.getRange({})) newest = Math.max(newest, readOrderedI64(value, 0));
      this.newest = newest;
    }
    return this.newest;
  }

  /**
   * Puts a group commit's points (or an apply's group of them, see applyGroups in apply.ts) in the current
   * transaction (the turn's lmdb-js batch, or a synchronous transaction around it), merged per series under one
   * head seq. `lsn`: the one log record they come from, whose sends from the log the outbox follows; `record`
   * false: sync already sent them all. Returns the last put's promise.
   */
  putPoints(batch: PendingPoints, lsn?: number, record = true): Promise<boolean> | undefined {
    let last: Promise<boolean> | undefined;
    const seq = this.nextSeq();
    const outbox = this.outbox;
    for (const [entityId, bySeries] of batch) {
      const e = this.dict.internEntity(entityId);
      // what sync already sent from the log is not left to send
      // biome-ignore lint/complexity/useOptionalChain: `recorded` is a boolean that narrows `outbox` where it is read below
      const recorded = record && outbox !== undefined && outbox.recordsLogged(lsn, entityId);
      if (recorded) outbox.recordedLogged(lsn, entityId, e, seq);
      for (const [key, cols] of bySeries) {
        const k = this.dict.internKey(key);
        // one column per request that wrote this series in this turn, in call order (the later one wins)
        let col = cols[0] as SeriesColumn;
        if (cols.length > 1) {
          col = new SeriesColumn();
          for (const c of cols) col.append(c);
        }
        this.pointsPut += col.length;
        col = col.sortedDistinct();
        const ts = col.ts;
        const n = ts.length;
        let from = 0;
        while (from < n) {
          const w = windowStart(ts[from] as number, this.windowMs);
          let to = from + 1;
          while (to < n && (ts[to] as number) < w + this.windowMs) to++;
          last = this.env.head.put(fragKey(e, k, ts[from] as number, seq), encodeColumn(col, from, to));
          this.noteHeadFragment(e, k, ts[from] as number);
          if (recorded) outbox.fragment(e, k, ts[from] as number, ts[to - 1] as number, to - from);
          from = to;
        }
        const newestTs = ts[n - 1] as number;
        if (this.newest !== undefined && newestTs > this.newest) this.newest = newestTs;
        if (newestTs >= this.cachedLatestTs(e, k)) {
          this.setLatestTs(e, k, newestTs);
          last = this.env.latest.put(seriesKey(e, k), encodeStamped(newestTs, col.value(n - 1)));
        }
      }
    }
    // sync's "what is left to send" (outbox.ts) in the same transaction: replaying the log regenerates it too
    return outbox?.commit(seq) ?? last;
  }

  private nextSeq(): number {
    const s = this.seq++;
    if (this.seq > this.seqReserved) {
      // Queued before this write's puts, so it commits in the same or an earlier transaction.
      this.seqReserved = this.seq + SEQ_RESERVATION;
      void this.env.meta.put('headSeq', this.seqReserved);
    }
    return s;
  }

  /**
   * After a batch failed to commit (a full disk): what this store believed of it in memory goes. The newest ts
   * per series and overall are read again from `latest`, and the next batch reserves seqs again, since the
   * failed one may have held the reservation that the seqs handed out since rely on.
   */
  forgetUncommitted(): void {
    this.latestTs.clear();
    this.newest = undefined;
    this.seqReserved = this.seq;
  }

  /** Forgets the latest ts kept of entity `e` (its data has been purged). */
  forgetEntity(e: EntityIdx): void {
    this.latestTs.delete(e);
  }

  /** Forgets the latest ts kept of series (e, k) (its latest value was deleted). */
  forgetLatestTs(e: EntityIdx, k: KeyIdx): void {
    this.latestTs.get(e)?.delete(k);
  }

  setLatestTs(e: EntityIdx, k: KeyIdx, ts: number): void {
    let m = this.latestTs.get(e);
    if (m === undefined) this.latestTs.set(e, (m = new Map()));
    m.set(k, ts);
  }

  private cachedLatestTs(e: EntityIdx, k: KeyIdx): number {
    const m = this.latestTs.get(e);
    const cached = m?.get(k);
    if (cached !== undefined) return cached;
    const raw = this.env.latest.get(seriesKey(e, k));
    const ts = raw === undefined ? -Infinity : decodeStamped(raw).ts;
    if (raw !== undefined) this.setLatestTs(e, k, ts);
    return ts;
  }
}
