/**
 * Batches set aside (the upstream refused them with 400, or they could not be read back: store/outbox.ts
 * `['x', seq, e]`): listed, put back in the queue (retried: after a fix upstream, or a bug fixed here), or
 * cleared (their points stay in the store; only the sync forgets them). Depth batches set aside (`['y', e, seq]`,
 * depth.ts) are listed after the telemetry ones and retried and cleared with them.
 */
import type { Dictionary } from '../../store/encoding/dict.js';
import type { EntityStore } from '../../store/entities.js';
import {
  type FragmentRef,
  type Outbox,
  SET_ASIDE_RANGE as RANGE,
  type SetAsideKey,
  decodeRefs,
  queueKey,
  refsMinTs,
  refsPoints,
} from '../../store/outbox.js';
import type { SyncCounts } from './counts.js';
import type { DepthSync } from './depth.js';
import type { SetAsideAdmin, SetAsideBatch } from './status.js';

export type { SetAsideAdmin, SetAsideBatch } from './status.js';

export interface SetAsideHost {
  readonly outbox: Outbox;
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
    for (const { key, value: v } of this.h.outbox.setAside.entries(RANGE)) {
      total++;
      if (batches.length >= limit) continue;
      const [, seq, e] = key;
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
    const moved: Array<{ key: SetAsideKey; e: number; seq: number; flat: number[]; refs: FragmentRef[] }> = [];
    for (const { key, value: v } of this.h.outbox.setAside.entries(RANGE)) {
      moved.push({ key, seq: key[1], e: key[2], flat: v.refs, refs: decodeRefs(v.refs) });
    }
    const depth = await this.h.depth.retrySetAside();
    if (moved.length === 0) return depth;
    const points = moved.reduce((s, m) => s + refsPoints(m.refs), 0);
    const c = this.h.counts.counters;
    c.setAside = Math.max(0, c.setAside - points);
    await this.h.outbox.commit(() => ({
      setAside: moved.map((m) => ({ key: m.key, value: null })),
      queue: moved.map((m) => ({ key: queueKey(m.seq, m.e), value: m.flat })),
      counters: this.h.counts.persisted(),
    }));
    this.h.requeued(moved.map((m) => ({ e: m.e, refs: m.refs })));
    return points + depth;
  }

  async clear(): Promise<number> {
    const keys: SetAsideKey[] = [];
    let points = 0;
    for (const { key, value } of this.h.outbox.setAside.entries(RANGE)) {
      keys.push(key);
      points += refsPoints(decodeRefs(value.refs));
    }
    const depth = await this.h.depth.clearSetAside();
    if (keys.length === 0) return depth;
    const c = this.h.counts.counters;
    c.setAside = Math.max(0, c.setAside - points);
    await this.h.outbox.commit(() => ({
      setAside: keys.map((key) => ({ key, value: null })),
      counters: this.h.counts.persisted(),
    }));
    return points + depth;
  }
}
