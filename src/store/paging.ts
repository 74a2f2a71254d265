/** ThingsBoard's paging of list endpoints (`PageLink` in, `PageData` out), over records held in memory. */

/** What a TB list endpoint asks for (`PageLink`): `page` is 0-based, `pageSize` ≥ 1. */
export interface PageQuery {
  readonly pageSize: number;
  readonly page: number;
  /** case-insensitive substring of the name (title for customers); empty or absent → no filter */
  readonly textSearch?: string | undefined;
  readonly sortProperty?: SortProperty | undefined;
  readonly sortOrder?: 'ASC' | 'DESC' | undefined;
}
export const SORT_PROPERTIES = ['createdTime', 'name', 'title', 'type', 'label'] as const;
export type SortProperty = (typeof SORT_PROPERTIES)[number];

/** TB's `PageData`: `totalPages` = ceil(totalElements / pageSize); `hasNext` when a later page has items. */
export interface Page<T> {
  readonly data: T[];
  readonly totalPages: number;
  readonly totalElements: number;
  readonly hasNext: boolean;
}

type Named = {
  readonly createdTime: number;
  readonly id: string;
  readonly name?: string;
  readonly title?: string;
  readonly type?: string;
  readonly label?: string | null;
};

const displayName = (r: Named): string => r.name ?? r.title ?? '';

/**
 * Filters, sorts and slices `items` as TB's PageLink does. Items that tie on the sort property keep creation
 * order (then id), so pages never overlap or skip an item between two identical requests.
 */
export function pageOf<T extends Named>(items: readonly T[], q: PageQuery): Page<T> {
  const needle = q.textSearch?.toLowerCase() ?? '';
  const matching = needle === '' ? [...items] : items.filter((r) => displayName(r).toLowerCase().includes(needle));
  const prop = q.sortProperty ?? 'createdTime';
  const sign = q.sortOrder === 'DESC' ? -1 : 1;
  const value = (r: T): string | number =>
    prop === 'createdTime' ? r.createdTime : prop === 'name' || prop === 'title' ? displayName(r) : (r[prop] ?? '');
  matching.sort((a, b) => {
    const va = value(a);
    const vb = value(b);
    const primary = va < vb ? -1 : va > vb ? 1 : 0;
    return sign * primary || a.createdTime - b.createdTime || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
  });
  const total = matching.length;
  const start = q.page * q.pageSize;
  return {
    data: matching.slice(start, start + q.pageSize),
    totalPages: Math.ceil(total / q.pageSize),
    totalElements: total,
    hasNext: start + q.pageSize < total,
  };
}
