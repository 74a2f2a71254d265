/**
 * A group of outbox entries of one device, read back from the store and encoded as telemetry bodies: the CPU
 * part of sending the backlog. It needs only the refs' points (`RefSource`: the store's) and plain data, so the same
 * function runs in the sync thread (thread-worker.ts) and, as a fallback, in the main thread (thread.ts).
 */
import type { EntityIdx, KeyIdx } from '../../store/encoding/codec.js';
import type { FragmentRef, HeldRecord, RefSource } from '../../store/outbox.js';
import { MIN_SENDABLE_TS } from './clock.js';
import { type WirePoint, wireBodies, wirePoints } from './wire.js';

export interface GroupEntry {
  readonly seq: number;
  readonly refs: readonly FragmentRef[];
  /** only points at or after this ts are sent (a held entry released: the rest went before) */
  readonly fromTs: number;
}

export interface EncodeRequest {
  readonly e: EntityIdx;
  readonly entries: readonly GroupEntry[];
  /** key index → name, for every key of the refs that has one (a key without one counts as dropped) */
  readonly keyNames: ReadonlyMap<KeyIdx, string>;
  readonly windowMs: number;
  /** points stamped after this are held (the clock + MAX_AHEAD_MS) */
  readonly maxTs: number;
  readonly maxBodyBytes: number;
  readonly maxBodyPoints: number;
}

export interface EncodedBody {
  /** UTF-8 JSON: its own ArrayBuffer, so a thread can hand it over without a copy */
  readonly body: Uint8Array;
  readonly points: number;
  /** every point of the group up to this ts is in this body or an earlier one (bodies are cut between timestamps) */
  readonly lastTs: number;
}

export interface EncodedGroup {
  readonly bodies: EncodedBody[];
  /** points in the bodies */
  readonly points: number;
  readonly dropped: number;
  readonly droppedFrom: number;
  readonly droppedTo: number;
  /** per entry with points held for their timestamp */
  readonly held: Array<{ readonly seq: number; readonly value: HeldRecord }>;
}

const utf8 = new TextEncoder();

export function encodeGroup(refs: RefSource, req: EncodeRequest): EncodedGroup {
  // read in the snapshot the fragments and chunks are read in (not passed from the main thread, whose value
  // may be older than this snapshot: a chunk retention removed meanwhile would read as empty, not dropped)
  const horizonTs = refs.rawHorizonTs();
  const points: WirePoint[] = [];
  const held: Array<{ seq: number; value: HeldRecord }> = [];
  let dropped = 0;
  let droppedFrom = Infinity;
  let droppedTo = -Infinity;
  for (const entry of req.entries) {
    const heldRefs: number[] = [];
    let entryHeld = 0;
    let pre2000 = 0;
    let futureMin = Infinity;
    for (const r of entry.refs) {
      const keyName = req.keyNames.get(r.k);
      const got = keyName === undefined ? undefined : refs.read(req.e, entry.seq, r, req.windowMs, horizonTs);
      if (got === undefined || got.kind === 'dropped') {
        dropped += r.n;
        droppedFrom = Math.min(droppedFrom, r.firstTs);
        droppedTo = Math.max(droppedTo, r.lastTs);
        continue;
      }
      let refHeld = 0;
      const keep = (ts: number): boolean => {
        if (ts < entry.fromTs) return false;
        if (ts < MIN_SENDABLE_TS) {
          refHeld++;
          pre2000++;
          return false;
        }
        if (ts > req.maxTs) {
          refHeld++;
          futureMin = Math.min(futureMin, ts);
          return false;
        }
        return true;
      };
      wirePoints(JSON.stringify(keyName), got.points, keep, points);
      if (refHeld > 0) {
        heldRefs.push(r.k, r.firstTs, r.lastTs, r.n);
        entryHeld += refHeld;
      }
    }
    if (entryHeld > 0) {
      held.push({
        seq: entry.seq,
        value: {
          refs: heldRefs,
          above: req.maxTs,
          futureMin: Number.isFinite(futureMin) ? futureMin : null,
          held: entryHeld,
          pre2000,
        },
      });
    }
  }
  const bodies: EncodedBody[] = [];
  for (const b of wireBodies(points, req.maxBodyBytes, req.maxBodyPoints))
    bodies.push({ body: utf8.encode(b.body), points: b.points, lastTs: b.lastTs });
  return { bodies, points: points.length, dropped, droppedFrom, droppedTo, held };
}
