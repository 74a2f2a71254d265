/**
 * The alarm list endpoints' query (docs/api.md "Alarms"), as ThingsBoard's AlarmController reads it: status
 * filters (`searchStatus`, `status`, v2's `statusList`), `severityList`, `typeList`, `assigneeId`, the creation
 * time window, and TB's PageLink with the alarm sort properties. Bad values → 400 with TB's messages.
 */
import { OutpostError } from '../../errors.js';
import {
  ALARM_SEVERITIES,
  ALARM_STATUSES,
  type AlarmRecord,
  type AlarmSeverity,
  alarmStatus,
  severityRank,
} from '../../store/alarms.js';
import type { Page } from '../../store/paging.js';
import { parseUuid, requiredInt } from './params.js';

const SEARCH_STATUSES = ['ANY', 'ACTIVE', 'CLEARED', 'ACK', 'UNACK'] as const;
type SearchStatus = (typeof SEARCH_STATUSES)[number];
const SORT_PROPERTIES = ['createdTime', 'startTs', 'endTs', 'type', 'ackTs', 'clearTs', 'severity', 'status'] as const;
type SortProperty = (typeof SORT_PROPERTIES)[number];

const PKG = 'org.thingsboard.server.common.data';

/** Java's Enum.valueOf: TB answers its IllegalArgumentException's message as a 400. */
function enumOf<T extends string>(values: readonly T[], raw: string, javaClass: string): T {
  if ((values as readonly string[]).includes(raw)) return raw as T;
  throw new OutpostError('BAD_PARAM', `No enum constant ${PKG}.${javaClass}.${raw}`);
}

const list = (raw: string | null): string[] =>
  raw === null
    ? []
    : raw
        .split(',')
        .map((x) => x.trim())
        .filter((x) => x !== '');

export interface AlarmFilter {
  /** true: cleared only; false: uncleared only */
  readonly cleared?: boolean | undefined;
  readonly acknowledged?: boolean | undefined;
  readonly severities?: ReadonlySet<AlarmSeverity> | undefined;
  readonly types?: ReadonlySet<string> | undefined;
  readonly assigneeId?: string | undefined;
  readonly startTime?: number | undefined;
  readonly endTime?: number | undefined;
}

export interface AlarmPageQuery {
  readonly pageSize: number;
  readonly page: number;
  readonly textSearch: string;
  readonly sortProperty: SortProperty;
  readonly sortOrder: 'ASC' | 'DESC';
}

/** TB's AlarmStatusFilter over search statuses: ACTIVE and CLEARED together filter nothing, nor do ACK and UNACK. */
function fromSearchStatuses(ss: readonly SearchStatus[]): Pick<AlarmFilter, 'cleared' | 'acknowledged'> {
  const has = (x: SearchStatus) => ss.includes(x);
  if (has('ANY')) return {};
  return {
    cleared: has('ACTIVE') === has('CLEARED') ? undefined : has('CLEARED'),
    acknowledged: has('ACK') === has('UNACK') ? undefined : has('ACK'),
  };
}

function long(q: URLSearchParams, name: string): number | undefined {
  const raw = q.get(name);
  if (raw === null || raw === '') return undefined;
  if (!/^-?\d{1,16}$/.test(raw))
    throw new OutpostError('BAD_PARAM', `Parameter '${name}' must be an integer, got '${raw}'`);
  return Number(raw);
}

function common(q: URLSearchParams): Pick<AlarmFilter, 'assigneeId' | 'startTime' | 'endTime'> {
  const a = q.get('assigneeId');
  return {
    assigneeId: a === null || a === '' ? undefined : parseUuid(a, 'assigneeId'),
    startTime: long(q, 'startTime'),
    endTime: long(q, 'endTime'),
  };
}

/** `/api/alarm/{type}/{id}`, `/api/alarms`, `highestSeverity`: `searchStatus` or `status`, not both. */
export function v1Filter(q: URLSearchParams): AlarmFilter {
  const ss = q.get('searchStatus') || null;
  const st = q.get('status') || null;
  if (ss !== null && st !== null)
    throw new OutpostError(
      'BAD_PARAM',
      "Invalid alarms search query: Both parameters 'searchStatus' and 'status' can't be specified at the same time!",
    );
  let flags: Pick<AlarmFilter, 'cleared' | 'acknowledged'> = {};
  if (ss !== null) flags = fromSearchStatuses([enumOf(SEARCH_STATUSES, ss, 'alarm.AlarmSearchStatus')]);
  if (st !== null) {
    const s = enumOf(ALARM_STATUSES, st, 'alarm.AlarmStatus');
    flags = { cleared: s.startsWith('CLEARED'), acknowledged: s.endsWith('_ACK') };
  }
  return { ...flags, ...common(q) };
}

/** `/api/v2/alarm/{type}/{id}`, `/api/v2/alarms`: comma lists. */
export function v2Filter(q: URLSearchParams): AlarmFilter {
  const statuses = list(q.get('statusList')).map((s) => enumOf(SEARCH_STATUSES, s, 'alarm.AlarmSearchStatus'));
  const severities = list(q.get('severityList')).map((s) => enumOf(ALARM_SEVERITIES, s, 'alarm.AlarmSeverity'));
  const types = list(q.get('typeList'));
  return {
    ...fromSearchStatuses(statuses),
    severities: severities.length === 0 ? undefined : new Set(severities),
    types: types.length === 0 ? undefined : new Set(types),
    ...common(q),
  };
}

/** TB's PageLink for alarms; without `sortProperty`, newest first (what TB's UI asks for). */
export function alarmPageQuery(q: URLSearchParams): AlarmPageQuery {
  const pageSize = requiredInt(q, 'pageSize', 1);
  const page = requiredInt(q, 'page', 0);
  const sp = q.get('sortProperty') || null;
  if (sp !== null && !(SORT_PROPERTIES as readonly string[]).includes(sp))
    throw new OutpostError('BAD_PARAM', `Unsupported sortProperty '${sp}' (one of ${SORT_PROPERTIES.join(', ')})`);
  const so = (q.get('sortOrder') || (sp === null ? 'DESC' : 'ASC')).toUpperCase();
  if (so !== 'ASC' && so !== 'DESC') throw new OutpostError('BAD_PARAM', `sortOrder must be ASC or DESC, got '${so}'`);
  return {
    pageSize,
    page,
    textSearch: (q.get('textSearch') ?? '').toLowerCase(),
    sortProperty: (sp ?? 'createdTime') as SortProperty,
    sortOrder: so,
  };
}

export function matches(a: AlarmRecord, f: AlarmFilter): boolean {
  return (
    (f.cleared === undefined || a.cleared === f.cleared) &&
    (f.acknowledged === undefined || a.acknowledged === f.acknowledged) &&
    (f.severities === undefined || f.severities.has(a.severity)) &&
    (f.types === undefined || f.types.has(a.type)) &&
    (f.assigneeId === undefined || a.assigneeId === f.assigneeId) &&
    (f.startTime === undefined || a.createdTime >= f.startTime) &&
    (f.endTime === undefined || a.createdTime <= f.endTime)
  );
}

/** `textSearch` (a substring of type, severity or status), sort, slice; ties keep creation order, then id. */
export function alarmPage(items: readonly AlarmRecord[], q: AlarmPageQuery): Page<AlarmRecord> {
  const t = q.textSearch;
  const found =
    t === ''
      ? [...items]
      : items.filter(
          (a) =>
            a.type.toLowerCase().includes(t) ||
            a.severity.toLowerCase().includes(t) ||
            alarmStatus(a).toLowerCase().includes(t),
        );
  const value = (a: AlarmRecord): string | number =>
    q.sortProperty === 'severity'
      ? -severityRank(a.severity) // DESC: CRITICAL first
      : q.sortProperty === 'status'
        ? ALARM_STATUSES.indexOf(alarmStatus(a))
        : a[q.sortProperty];
  const sign = q.sortOrder === 'DESC' ? -1 : 1;
  found.sort((a, b) => {
    const va = value(a);
    const vb = value(b);
    const primary = va < vb ? -1 : va > vb ? 1 : 0;
    return sign * primary || a.createdTime - b.createdTime || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
  });
  const start = q.page * q.pageSize;
  return {
    data: found.slice(start, start + q.pageSize),
    totalPages: Math.ceil(found.length / q.pageSize),
    totalElements: found.length,
    hasNext: start + q.pageSize < found.length,
  };
}
