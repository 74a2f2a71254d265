/**
 * GET /api/download/deviceAttributesData?deviceId= (docs/api.md): every attribute of the device, all three
 * scopes merged, as a wide CSV: first column `last_update_ts`, then one column per attribute key (sorted), one
 * row per distinct lastUpdateTs ascending, empty cells elsewhere (Tempus' layout, rows and columns sorted).
 * When one key exists in several scopes, each scope's value sits in the row of its own lastUpdateTs; if two
 * scopes also share the timestamp, SERVER_SCOPE wins over SHARED_SCOPE over CLIENT_SCOPE.
 * A device has at most thousands of attributes, so they are read at once; the CSV is still streamed.
 */
import type { Services } from '../../context.js';
import { type Cell, Column } from '../../csv/column.js';
import type { HttpContext, StreamReply } from '../../uws/adapter.js';
import { kvToString } from '../../model/kv.js';
import { principalOf } from '../principal.js';
import { readDeviceAttributes } from './attribute-source.js';
import { required } from './params.js';
import { formatTs } from './sources.js';
import { csvAttachment } from './stream.js';

export function downloadAttributes(s: Services) {
  return (ctx: HttpContext): StreamReply => {
    const principal = principalOf(s, ctx);
    const deviceId = required(ctx, 'deviceId');
    s.auth.checkAccess(principal, 'DEVICE', deviceId, 'read');
    // key → (lastUpdateTs → [priority, cell text])
    const byKey = new Map<string, Map<number, readonly [number, string]>>();
    for (const a of readDeviceAttributes(s, deviceId)) {
      let col = byKey.get(a.key);
      if (col === undefined) byKey.set(a.key, (col = new Map()));
      const prev = col.get(a.lastUpdateTs);
      if (prev === undefined || prev[0] < a.priority) col.set(a.lastUpdateTs, [a.priority, kvToString(a.value)]);
    }
    const named = [...byKey.keys()].sort().map((k) => {
      const cells: Cell[] = [...(byKey.get(k) as Map<number, readonly [number, string]>)]
        .map(([pos, [, text]]) => ({ pos, text }))
        .sort((a, b) => a.pos - b.pos);
      return [k, Column.of(cells[Symbol.iterator]())] as const;
    });
    return csvAttachment('device_attributes_data.csv', {
      positionColumn: 'last_update_ts',
      named,
      formatPos: formatTs,
    });
  };
}
