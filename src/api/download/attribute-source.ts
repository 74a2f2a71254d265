/**
 * Every attribute of a device for the attributes CSV, read through the attribute store (all scopes), with
 * the tie-break priority of its scope.
 */
import type { Services } from '../../context.js';
import type { KvValue } from '../../model/kv.js';
import type { AttributeScope } from '../../store/attributes.js';

export interface AttributeRow {
  readonly key: string;
  readonly lastUpdateTs: number;
  readonly value: KvValue;
  /** which scope wins a (key, lastUpdateTs) tie: higher wins */
  readonly priority: number;
}

/** SERVER_SCOPE (set by the platform) over SHARED_SCOPE (pushed to the device) over CLIENT_SCOPE (reported). */
const PRIORITY: Record<AttributeScope, number> = { CLIENT_SCOPE: 1, SHARED_SCOPE: 2, SERVER_SCOPE: 3 };

export function readDeviceAttributes(s: Services, deviceId: string): AttributeRow[] {
  return s.attributes
    .get(deviceId)
    .map((a) => ({ key: a.key, lastUpdateTs: a.lastUpdateTs, value: a.value, priority: PRIORITY[a.scope] }));
}
