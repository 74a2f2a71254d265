/**
 * Batches set aside (the upstream refused them with 400, or they could not be read back: store/outbox.ts
 * `['x', seq, e]`): listed, put back in the queue (retried: after a fix upstream, or a bug fixed here), or
 * cleared (their points stay in the store; only the sync forgets them). Depth batches set aside (`['y', e, seq]`,
 * depth.ts) are listed after the telemetry ones and retried and cleared with them.
 */
import type { Dictionary } from '../store/encoding/dict.js';
import type { EntityStore } from '../store/entities.js';
import type { StoreEnv } from '../store/env.js';
import {
  COUNTERS_KEY,
  type FragmentRef,
  SET_ASIDE_RANGE as RANGE,
  decodeRefs,
  queueKey,
  refsMinTs,
  refsPoints,
} from '../store/outbox.js';
import type { SyncCounts } from './counts.js';
import type { DepthSync } from './depth.js';
import type { SetAsideAdmin, SetAsideBatch } from './status.js';

export type { SetAsideAdmin, SetAsideBatch } from './status.js';

interface Stored {
  refs: number[];
  status: number;
  error: string;
}

export interface SetAsideHost {
  readonly env: StoreEnv;
  readonly dict: Dictionary;
  readonly entities: EntityStore;
  readonly counts: SyncCounts;
  readonly depth: Pick<DepthSync, 'setAsideBatches' | 'retrySetAside' | 'clearSetAside'>;
  /** entries back in the queue: counted in the backlog, found by the backlog lane */
  requeued(items: ReadonlyArray<{ e: number; refs: readonly FragmentRef[] }>): void;
}

export class SetAside implements SetAsideAdmin {
  constructor(private readonly h: SetAsideHost) {}

  list(limit: number): { batches: SetAsideBatch[]; total: number } {
    const batches: SetAsideBatch[] = [];
    let total = 0;
    for (const { key, value } of this.h.env.outbox.getRange(RANGE)) {
      total++;
      if (batches.length >= limit) continue;
      const [, seq, e] = key as ['x', number, number];
      const v = value as Stored;
      const refs = decodeRefs(v.refs);
      batches.push({
        kind: 'telemetry',
        seq,
        ...this.device(e),
        points: refsPoints(refs),
        firstTs: refsMinTs(refs),
        lastTs: refs.reduce((m, r) => Math.max(m, r.lastTs), -Infinity),
        firstDs: null,
        lastDs: null,
        status: v.status,
        error: v.error,
      });
    }
    for (const d of this.h.depth.setAsideBatches()) {
      total++;
      if (batches.length >= limit) continue;
      batches.push({
        kind: 'depth',
        seq: d.seq,
        ...this.device(d.e),
        points: d.points,
        firstTs: null,
        lastTs: null,
        firstDs: d.minDs,
        lastDs: d.maxDs,
        status: d.status,
        error: d.error,
      });
    }
    return { batches, total };
  }

  private device(e: number): { deviceId: string | null; deviceName: string | null } {
    const id = this.h.dict.entityUuid(e) ?? null;
    const rec = id === null ? undefined : this.h.entities.device(id);
    return { deviceId: id, deviceName: rec?.name ?? null };
  }

  async retry(): Promise<number> {
    const moved: Array<{ key: ['x', number, number]; e: number; seq: number; v: Stored; refs: FragmentRef[] }> = [];
    for (const { key, value } of this.h.env.outbox.getRange(RANGE)) {
      const k = key as ['x', number, number];
      const v = value as Stored;
      moved.push({ key: k, seq: k[1], e: k[2], v, refs: decodeRefs(v.refs) });
    }
    const depth = await this.h.depth.retrySetAside();
    if (moved.length === 0) return depth;
    const points = moved.reduce((s, m) => s + refsPoints(m.refs), 0);
    const c = this.h.counts.counters;
    c.setAside = Math.max(0, c.setAside - points);
    await this.h.env.root.transaction(() => {
      for (const m of moved) {
        void this.h.env.outbox.remove(m.key);
        void this.h.env.outbox.put(queueKey(m.seq, m.e), m.v.refs);
      }
      void this.h.env.outbox.put(COUNTERS_KEY, this.h.counts.persisted());
    });
    this.h.requeued(moved.map((m) => ({ e: m.e, refs: m.refs })));
    return points + depth;
  }

  async clear(): Promise<number> {
    const keys: Array<['x', number, number]> = [];
    let points = 0;
    for (const { key, value } of this.h.env.outbox.getRange(RANGE)) {
      keys.push(key as ['x', number, number]);
      points += refsPoints(decodeRefs((value as Stored).refs));
    }
    const depth = await this.h.depth.clearSetAside();
    if (keys.length === 0) return depth;
    const c = this.h.counts.counters;
    c.setAside = Math.max(0, c.setAside - points);
    await this.h.env.root.transaction(() => {
      for (const k of keys) void this.h.env.outbox.remove(k);
      void this.h.env.outbox.put(COUNTERS_KEY, this.h.counts.persisted());
    });
    return points + depth;
  }
}
