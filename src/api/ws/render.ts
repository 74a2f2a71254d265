/**
 * The one reply shape (docs/api.md, TB `TelemetrySubscriptionUpdate`):
 * `{"subscriptionId":<cmdId>,"errorCode":0,"errorMsg":null,"data":{"k":[[ts,"v"],..]},"latestValues":{"k":ts}}`.
 * `data` keys sorted, values strings (or null for a key without data), `latestValues[k]` = ts of the last
 * entry of `data[k]`. Replies are split into a per-subscriber prefix (only the subscriptionId differs) and a
 * shared tail, so a fan-out serialises each distinct update once.
 */

/** TB `SubscriptionErrorCode` */
export const WS_ERROR = { NO_ERROR: 0, INTERNAL: 1, BAD_REQUEST: 2, UNAUTHORIZED: 3 } as const;

export const MSG_FETCH_DATA = 'Failed to fetch data!';
export const MSG_FETCH_ATTRIBUTES = 'Failed to fetch attributes!';

/** The exact frame TB answers an unparsable command frame with (thingsboard#10595). */
export const PARSE_ERROR_FRAME =
  '{"subscriptionId":1,"errorCode":2,"errorMsg":"Failed to parse the payload","data":null,"latestValues":{}}';

/** One rendered point: its ts, and `[ts,"v"]` as JSON text. */
export interface RenderedPoint {
  readonly ts: number;
  readonly json: string;
}

export function renderPoint(ts: number, value: string | null): RenderedPoint {
  return { ts, json: `[${ts},${value === null ? 'null' : JSON.stringify(value)}]` };
}

/** `[0,""]`: a deleted attribute or latest value. */
export const DELETED_POINT: RenderedPoint = { ts: 0, json: '[0,""]' };

/**
 * The shared tail `{...data...},"latestValues":{...}}` for `entries`, which the caller gives already sorted
 * by key; each key's points in the order they are to be listed.
 */
export function renderTail(entries: ReadonlyArray<readonly [string, readonly RenderedPoint[]]>): string {
  let data = '';
  let latest = '';
  for (const [key, points] of entries) {
    const last = points[points.length - 1];
    if (last === undefined) continue;
    const k = JSON.stringify(key);
    let list = '';
    for (const p of points) list += list === '' ? p.json : `,${p.json}`;
    data += `${data === '' ? '' : ','}${k}:[${list}]`;
    latest += `${latest === '' ? '' : ','}${k}:${last.ts}`;
  }
  return `{${data}},"latestValues":{${latest}}}`;
}

export function renderPrefix(cmdId: number): string {
  return `{"subscriptionId":${cmdId},"errorCode":0,"errorMsg":null,"data":`;
}

export function renderData(cmdId: number, entries: ReadonlyArray<readonly [string, readonly RenderedPoint[]]>): string {
  return renderPrefix(cmdId) + renderTail(entries);
}

export function renderError(cmdId: number, errorCode: number, errorMsg: string): string {
  return `{"subscriptionId":${cmdId},"errorCode":${errorCode},"errorMsg":${JSON.stringify(errorMsg)},"data":null,"latestValues":{}}`;
}

/** Sorts by key in UTF-16 code unit order, as Java's TreeMap<String> does. */
export function byKey<T>(a: readonly [string, T], b: readonly [string, T]): number {
  return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0;
}
