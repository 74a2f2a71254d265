/**
 * The downsampling engine's background work (docs/design/downsampling.md, docs/design/storage.md): head → chunk compaction (with rollup rebuild),
 * raw and per-tier retention, the disk budget and the removal of deleted entities' data (purge.ts), all in
 * small bounded steps.
 *
 * No stalls: every step is one LMDB transaction whose callback stops after about `stepBudgetMs`; between steps
 * the loop pauses as long again, waits for a gap in foreground writes (bounded, see QUIET_MS) and, when nothing
 * is due, sleeps `sweepIntervalMs`; every timer is unref'd. `stop()` waits for the step in progress, so the server can flush
 * and close LMDB after it.
 *
 * Retention: raw chunks of windows before the raw horizon are dropped; the horizon is the later of
 * `ref - rawRetentionMs` (ref = min(now, newest ts written), see LmdbTimeseriesStore.newestTs) and, when live
 * LMDB pages exceed 90% of `maxDiskBytes`, one window past the oldest chunk (the oldest raw data goes first;
 * rollups stay). The horizon is persisted (meta `rawHorizonTs`) before
 * chunks are removed, so queries switch to rollups for that range at once (planner/planner.ts). Tier blocks older than
 * their tier's retention are dropped the same way (meta `tierHorizonTs`).
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { describeError } from '../../errors.js';
import { prefixEnd, readOrderedI64 } from '../encoding/codec.js';
import { windowStart } from '../series/chunks.js';
import type { BinaryDb, StoreEnv } from '../env.js';
import { blockCount } from '../encoding/gorilla.js';
import { nextPurge, purgeStep } from './purge.js';
import type { CompactionCounters } from '../series/options.js';
import type { LmdbTimeseriesStore } from '../series/store.js';

export interface EngineOptions {
  /** ms; 0 keeps raw chunks */
  readonly rawRetentionMs: number;
  /** bytes; 0 = no budget */
  readonly maxDiskBytes: number;
  /** ms of CPU per step */
  readonly stepBudgetMs: number;
  /** ms between sweeps when idle */
  readonly sweepIntervalMs: number;
  /** data dir, for the file size in stats() */
  readonly dataDir: string;
}

/** Usage and what was dropped, for the status/metrics endpoints. Counters are since start. */
export interface DownsampleStats extends CompactionCounters {
  /** size of the LMDB file (its high-water mark: LMDB reuses freed pages but never shrinks the file) */
  fileBytes: number;
  /** pages in use by every database, in bytes (what the disk budget compares) */
  liveBytes: number;
  maxDiskBytes: number;
  headFragments: number;
  chunks: number;
  rollupBlocks: number;
  /** raw data before this ts was dropped (Number.MIN_SAFE_INTEGER = none) */
  rawHorizonTs: number;
  tierHorizonTs: number[];
  droppedRawChunks: number;
  droppedRawPoints: number;
  droppedRollupBlocks: number;
  /** deleted entities whose data has been removed (purge.ts), and the entries removed for them */
  purgedEntities: number;
  purgedEntries: number;
  /**
   * longest background step so far: wall ms inside one transaction callback (= its event-loop block). Wall,
   * not CPU: process.cpuUsage (getrusage over every thread) took 0.5–5 ms per call under ingest load here,
   * inside the very callback it was timing.
   */
  maxStepMs: number;
  /** steps whose callback blocked the event loop for more than 20 ms (wall) */
  stepsOver20Ms: number;
  steps: number;
  /** wall ms of the engine's steps (callbacks and commits) since start: its share of the time */
  backgroundMs: number;
}

/** ms without a foreground write before a background step starts … */
const QUIET_MS = 5;
/**
 * … unless this long has passed since the previous step. Writes that leave no 5 ms gap are a saturating
 * burst (a backfill after an outage): a step then runs at most every 200 ms, a few % of the time, since each
 * step's transaction and fsync also hold up the acknowledgements queued behind it. At 50 ms, bench:downsample
 * ingested 1.2–1.4 M points/s; at 200 ms, 1.5–1.8 M. Light traffic leaves gaps and gets BUSY_SHARE.
 */
const MAX_DEFER_MS = 200;
/**
 * While foreground writes keep arriving (one in the last ACTIVE_MS), background steps take at most this share
 * of wall time, so a burst (a device replaying a day of buffered data) is acknowledged at nearly full speed and
 * the compaction it causes catches up afterwards; when writes stop, steps take about half of the time.
 */
const BUSY_SHARE = 0.1;
const ACTIVE_MS = 100;

/** Live bytes of the environment: branch, leaf and overflow pages of every database. */
export function liveBytes(env: StoreEnv): number {
  const dbs = [
    env.root,
    env.meta,
    env.entities,
    env.names,
    env.tokens,
    env.users,
    env.relations,
    env.dict,
    env.head,
    env.latest,
    env.attributes,
    env.depth,
    env.rollups,
    env.chunks,
    env.outbox,
  ];
  let pages = 0;
  let pageSize = 4096;
  for (const db of dbs) {
    // a read-only open of a store older than the relations database has none (store/env.ts)
    if ((db as object | undefined) === undefined) continue;
    // lmdb-js returns MDB_stat fields for the database (typed loosely as `unknown` here).
    const s = db.getStats() as {
      pageSize: number;
      treeBranchPageCount: number;
      treeLeafPageCount: number;
      overflowPages: number;
    };
    pageSize = s.pageSize;
    pages += s.treeBranchPageCount + s.treeLeafPageCount + s.overflowPages;
  }
  return pages * pageSize;
}

/** the longest pause between two attempts after failed steps */
const MAX_RETRY_MS = 60_000;

/** O(1): the database's entry count from its MDB_stat. */
function entryCount(db: BinaryDb): number {
  return (db.getStats() as { entryCount: number }).entryCount;
}

function fileBytes(dataDir: string): number {
  try {
    const p = join(dataDir, 'outpost.mdb');
    const st = statSync(p);
    return st.isDirectory() ? statSync(join(p, 'data.mdb')).size : st.size;
  } catch {
    return 0;
  }
}

/** A sweep over one database that removes, per series, every key whose ts lies before a horizon. */
interface DropSweep {
  readonly db: BinaryDb;
  /** keys of this sweep lie in [from, to) */
  readonly from: Buffer;
  readonly to: Buffer;
  /** length of the series prefix; the ts (ordered i64) follows it */
  readonly prefixLen: number;
  readonly horizon: number;
  cursor: Buffer;
  readonly onDrop: (value: Buffer) => void;
  /** the smallest ts kept (at or after the horizon) over every series visited so far */
  oldestKept: number;
}

export class DownsampleEngine {
  private readonly counters = {
    droppedRawChunks: 0,
    droppedRawPoints: 0,
    droppedRollupBlocks: 0,
    purgedEntities: 0,
    purgedEntries: 0,
    maxStepMs: 0,
    stepsOver20Ms: 0,
    steps: 0,
    backgroundMs: 0,
  };
  private stopped = true;
  private loop: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private wake: (() => void) | undefined;
  private sweeps: DropSweep[] = [];
  /**
   * The horizons this engine has queued sweeps up to. A sweep takes many steps and its progress lives in
   * memory only, so a stop or a crash in the middle of one leaves keys below a persisted horizon. Starting
   * from "none" makes the first plan after a start sweep up to the persisted horizons again (a seek per
   * series when nothing is left): otherwise, under the disk budget, the oldest chunk stays below the horizon,
   * the horizon never moves again, and the budget is no longer enforced.
   */
  private sweptRaw = Number.MIN_SAFE_INTEGER;
  private readonly sweptTiers: number[] = [];
  /**
   * The oldest chunk window as the last raw sweep found it (undefined: not known, or that sweep found no
   * chunk, which compaction may have made since). Finding it takes a seek per series (8 ms for 2,000 series
   * here, 40+ for 10,000), so the disk budget takes it from the sweeps, which visit every series anyway in
   * bounded steps, instead of scanning in one block at each plan. Deletes can only make it older than the
   * truth: the horizon then moves less than a window's worth, and that sweep finds the real one.
   */
  private oldestChunk: number | undefined;
  /** store.counters.compactedWindows when a raw sweep last found no chunk: no new sweep for it until that moves */
  private noChunkAt: number | undefined;

  constructor(
    private readonly store: LmdbTimeseriesStore,
    private readonly opts: EngineOptions,
    private readonly now: () => number,
    private readonly onError: (msg: string) => void = () => undefined,
  ) {}

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.loop = this.run();
  }

  /** Stops after the step in progress; resolves once no transaction of the engine is pending. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.wake?.();
    await this.loop;
    this.loop = undefined;
  }

  private pause(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      this.wake = resolve;
      this.timer = setTimeout(resolve, ms);
      this.timer.unref();
    }).then(() => {
      this.wake = undefined;
    });
  }

  private async run(): Promise<void> {
    let lastStepAt = 0;
    let failures = 0;
    while (!this.stopped) {
      // Foreground first: while writes keep arriving, a step waits for a quiet moment (no write for QUIET_MS),
      // but never longer than MAX_DEFER_MS after the previous step, so a backlog still drains under load.
      const sinceWrite = performance.now() - this.store.lastWriteAt;
      const sinceStep = performance.now() - lastStepAt;
      if (sinceWrite < QUIET_MS && sinceStep < MAX_DEFER_MS) {
        await this.pause(Math.min(QUIET_MS - sinceWrite, MAX_DEFER_MS - sinceStep) + 0.5);
        continue;
      }
      let more = false;
      let failed = false;
      const stepStart = performance.now();
      try {
        more = await this.step();
        failures = 0;
      } catch (err) {
        // A full disk fails every step until space is freed: retry ever later (up to a minute) and say so at
        // the 1st, 2nd, 4th, 8th, ... failure in a row, not once a second into logs that share the disk.
        failed = true;
        failures++;
        if ((failures & (failures - 1)) === 0)
          this.onError(`downsampling step failed (${failures} in a row): ${describeError(err)}`);
      }
      lastStepAt = performance.now();
      if (this.stopped) break;
      if (failed) {
        await this.pause(Math.min(this.opts.sweepIntervalMs * 2 ** Math.min(failures, 16), MAX_RETRY_MS));
        continue;
      }
      // Duty cycle while a backlog drains: under foreground writes a step's wall time (callback and commit) is
      // at most BUSY_SHARE of the time; otherwise pause about as long as the step took. When nothing is due,
      // sleep until the next sweep.
      const took = lastStepAt - stepStart;
      this.counters.backgroundMs += took;
      const active = lastStepAt - this.store.lastWriteAt < ACTIVE_MS;
      await this.pause(
        !more
          ? this.opts.sweepIntervalMs
          : active
            ? took * (1 / BUSY_SHARE - 1)
            : Math.max(this.opts.stepBudgetMs, took),
      );
    }
  }

  /**
   * One bounded step of whatever is due (retention first, then the data of deleted entities, then compaction).
   * Resolves true when more is due.
   */
  async step(): Promise<boolean> {
    const now = this.now();
    if (this.sweeps.length === 0) await this.planRetention(now);
    if (this.sweeps.length > 0) return this.sweepStep();
    const purge = nextPurge(this.store.env);
    if (purge !== undefined) return this.purgeStep(purge);
    const r = await this.store.compactStep(now, this.opts.stepBudgetMs);
    this.noteStep(r.wallMs);
    return r.more;
  }

  private noteStep(wallMs: number): void {
    this.counters.steps++;
    this.counters.maxStepMs = Math.max(this.counters.maxStepMs, wallMs);
    if (wallMs > 20) this.counters.stepsOver20Ms++;
  }

  /**
   * Moves horizons forward when due (persisted first) and queues the sweeps that drop what lies before them;
   * the first plan after a start also sweeps up to the persisted horizons (see sweptRaw).
   */
  private async planRetention(wallNow: number): Promise<void> {
    const { store } = this;
    const now = Math.min(wallNow, store.newestTs());
    const env = store.env;
    const W = store.windowMs;
    let raw = store.rawHorizonTs;
    if (this.opts.rawRetentionMs > 0) raw = Math.max(raw, windowStart(now - this.opts.rawRetentionMs, W));
    // Over the budget with the oldest chunk not known yet: a sweep at the present horizon finds it (and drops
    // nothing new); the next plan moves the horizon past it.
    let measure = false;
    if (this.opts.maxDiskBytes > 0 && liveBytes(env) > 0.9 * this.opts.maxDiskBytes) {
      if (this.oldestChunk === undefined) measure = this.noChunkAt !== store.counters.compactedWindows;
      else raw = Math.max(raw, windowStart(this.oldestChunk, W) + W);
    }
    const tiers = store.tiers.map((t) => {
      const cur = store.tierHorizonTs(t.index);
      return t.retentionMs > 0 ? Math.max(cur, windowStart(now - t.retentionMs, t.blockMs)) : cur;
    });
    const oldTiers = store.tiers.map((t) => store.tierHorizonTs(t.index));
    const rawMoved = raw > store.rawHorizonTs;
    const tierMoved = tiers.some((h, i) => h > (oldTiers[i] as number));
    if (rawMoved || tierMoved) {
      await env.root.transaction(() => {
        if (rawMoved) void env.meta.put('rawHorizonTs', raw);
        if (tierMoved) void env.meta.put('tierHorizonTs', tiers);
      });
    }
    if (raw > this.sweptRaw || measure) {
      this.sweptRaw = raw;
      this.sweeps.push({
        db: env.chunks,
        from: Buffer.alloc(0),
        to: Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff]),
        prefixLen: 8,
        horizon: raw,
        cursor: Buffer.alloc(0),
        onDrop: (v) => {
          this.counters.droppedRawChunks++;
          this.counters.droppedRawPoints += blockCount(v);
        },
        oldestKept: Infinity,
      });
    }
    store.tiers.forEach((t, i) => {
      const horizon = tiers[i] as number;
      if (horizon <= (this.sweptTiers[i] ?? Number.MIN_SAFE_INTEGER)) return;
      this.sweptTiers[i] = horizon;
      const from = Buffer.from([t.index]);
      this.sweeps.push({
        db: env.rollups,
        from,
        to: Buffer.from([t.index + 1]),
        prefixLen: 9,
        horizon,
        cursor: from,
        onDrop: () => {
          this.counters.droppedRollupBlocks++;
        },
        oldestKept: Infinity,
      });
    });
  }

  /** Removes keys before the horizon of the first queued sweep, within the step budget. */
  private async sweepStep(): Promise<boolean> {
    const sweep = this.sweeps[0] as DropSweep;
    let done = false;
    let wallMs = 0;
    await this.store.writeChunks(() => {
      const t0 = performance.now();
      try {
        this.sweepInTxn(sweep, t0, () => {
          done = true;
        });
      } finally {
        wallMs = performance.now() - t0;
      }
    });
    this.noteStep(wallMs);
    if (done) {
      this.sweeps.shift();
      if (sweep.db === this.store.env.chunks) {
        const found = Number.isFinite(sweep.oldestKept);
        this.oldestChunk = found ? sweep.oldestKept : undefined;
        this.noChunkAt = found ? undefined : this.store.counters.compactedWindows;
      }
    }
    return true;
  }

  /** Removes data of deleted entity `entityId` within the step budget (purge.ts). */
  private async purgeStep(entityId: string): Promise<boolean> {
    const { store } = this;
    // points of the entity still only in the write-ahead log go in first, so they go with the rest
    store.applyLogged();
    const e = store.entityIdx(entityId);
    let wallMs = 0;
    const r = await store.writeChunks(() => {
      const t0 = performance.now();
      try {
        store.clearReadCaches();
        return purgeStep(store.env, entityId, e, store.tiers.length, t0, this.opts.stepBudgetMs);
      } finally {
        wallMs = performance.now() - t0;
      }
    });
    this.noteStep(wallMs);
    this.counters.purgedEntries += r.removed;
    if (r.done) {
      this.counters.purgedEntities++;
      if (e !== undefined) store.forgetEntity(e);
    }
    return true;
  }

  /** Inside the transaction: removes keys of `sweep` before its horizon until done or out of budget. */
  private sweepInTxn(sweep: DropSweep, t0: number, finished: () => void): void {
    for (;;) {
      let found: { key: Buffer; value: Buffer } | undefined;
      for (const { key, value } of sweep.db.getRange({ start: sweep.cursor, end: sweep.to, limit: 1 }))
        found = { key: key as Buffer, value };
      if (found === undefined) {
        finished();
        return;
      }
      const ts = readOrderedI64(found.key, sweep.prefixLen);
      if (ts < sweep.horizon) {
        this.store.clearReadCaches();
        void sweep.db.remove(found.key);
        sweep.onDrop(found.value);
        sweep.cursor = found.key;
      } else {
        sweep.oldestKept = Math.min(sweep.oldestKept, ts);
        sweep.cursor = prefixEnd(found.key.subarray(0, sweep.prefixLen));
      }
      if (performance.now() - t0 >= this.opts.stepBudgetMs) return;
    }
  }

  stats(): DownsampleStats {
    const { env } = this.store;
    return {
      ...this.store.counters,
      ...this.counters,
      fileBytes: fileBytes(this.opts.dataDir),
      liveBytes: liveBytes(env),
      maxDiskBytes: this.opts.maxDiskBytes,
      headFragments: entryCount(env.head),
      chunks: entryCount(env.chunks),
      rollupBlocks: entryCount(env.rollups),
      rawHorizonTs: this.store.rawHorizonTs,
      tierHorizonTs: this.store.tiers.map((t) => this.store.tierHorizonTs(t.index)),
    };
  }
}
