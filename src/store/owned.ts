/**
 * What goes with an entity when it is deleted, in the entity store's write transaction that deletes it: the
 * relations from and to it (relations.ts) and the alarms it originated (alarms.ts).
 */
import { deleteOriginatorAlarmsTx } from './alarms.js';
import type { StoreEnv } from './env.js';
import { deleteEntityRelationsTx } from './relations.js';

export function deleteOwnedTx(env: StoreEnv, id: string): void {
  deleteEntityRelationsTx(env, id);
  deleteOriginatorAlarmsTx(env, id);
}
