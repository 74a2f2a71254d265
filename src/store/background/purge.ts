/**
 * The data of deleted entities (ThingsBoard 3.7+ does the same in its "housekeeper"): once a device, asset,
 * customer or user is deleted nothing can read its telemetry, rollups, attributes or depth series any more
 * (the entity answers 404), but they would keep their share of the SD card for good (so would a deleted user's
 * API keys, which no longer authenticate). The transaction that
 * deletes an entity also records it in meta (`queuePurge`); the downsampling engine then removes its keys in
 * bounded steps (`purgeStep`) and the record last, so a restart resumes where the last step ended.
 */
import { performance } from 'node:perf_hooks';
import { type EntityIdx, entityPrefix, prefixEnd } from '../encoding/codec.js';
import type { BinaryDb, StoreEnv } from '../env.js';
import { removeUserApiKeysTx } from '../api-keys.js';

const PREFIX = 'purge:';
/** the first string after every `purge:<uuid>` key */
const PREFIX_END = 'purge;';
/** keys removed between two looks at the clock */
const BATCH = 64;

/** Inside the transaction that deletes `entityId`: records that its data is to be removed. */
export function queuePurge(env: StoreEnv, entityId: string): void {
  void env.meta.put(`${PREFIX}${entityId}`, Date.now());
}

/** The UUID of an entity whose data is still to be removed, or undefined. */
export function nextPurge(env: StoreEnv): string | undefined {
  for (const key of env.meta.getKeys({ start: PREFIX, end: PREFIX_END, limit: 1 }))
    return (key as string).slice(PREFIX.length);
  return undefined;
}

/** [start, end) of the keys of entity `e` in a database keyed [entity u32]…, or [tier u8][entity u32]… */
function entityRange(e: EntityIdx, tier?: number): { start: Buffer; end: Buffer } {
  const start = tier === undefined ? entityPrefix(e) : Buffer.concat([Buffer.from([tier]), entityPrefix(e)]);
  return { start, end: prefixEnd(start) };
}

/**
 * Inside a transaction: removes keys of entity `e` (undefined: it never stored anything) until none is left,
 * then the purge record of `entityId`, or until `budgetMs` have passed since `t0`. Returns the number of keys
 * removed and whether the entity is done.
 */
export function purgeStep(
  env: StoreEnv,
  entityId: string,
  e: EntityIdx | undefined,
  tierCount: number,
  t0: number,
  budgetMs: number,
): { removed: number; done: boolean } {
  let removed = 0;
  if (e !== undefined) {
    const ranges: Array<{ db: BinaryDb; start: Buffer; end: Buffer }> = [];
    for (const db of [env.head, env.chunks, env.latest, env.attributes, env.depth])
      ranges.push({ db, ...entityRange(e) });
    for (let tier = 0; tier < tierCount; tier++) ranges.push({ db: env.rollups, ...entityRange(e, tier) });
    for (const { db, start, end } of ranges) {
      for (;;) {
        // read a batch, then remove it: a range read is not kept open across the removals
        const keys = [...db.getKeys({ start, end, limit: BATCH })] as Buffer[];
        if (keys.length === 0) break;
        for (const key of keys) void db.remove(key);
        removed += keys.length;
        if (performance.now() - t0 >= budgetMs) return { removed, done: false };
      }
    }
  }
  // a deleted user's API keys (they stopped authenticating with the user already)
  removeUserApiKeysTx(env, entityId);
  void env.meta.remove(`${PREFIX}${entityId}`);
  return { removed, done: true };
}
