/**
 * What the two backends of the technician's commands (local.ts, remote.ts) share with the commands and with
 * each other: the Backend interface and its argument and row types. A module of its own, so that backend.ts,
 * which picks and loads a backend, and the backends do not import each other.
 */
import type { StatusJson } from '../status/index.js';
import type { AggParam } from '../query/history.js';
import type { EpochMs } from '../types.js';

/** `outpost devices --json`, docs/cli.md */
export interface DeviceRow {
  readonly id: string;
  readonly name: string;
  readonly type: string;
  /** its device profile's name */
  readonly profile: string;
  readonly customer: string | null;
  /** when the device was last heard from (its SERVER_SCOPE `lastActivityTime`, src/device/state.ts) */
  readonly lastActivityTs: EpochMs | null;
  /** its SERVER_SCOPE `active` (null: not recorded yet) */
  readonly active: boolean | null;
  /** since when it is active or inactive: when `active` was last written */
  readonly activeSinceTs: EpochMs | null;
}

export interface DeviceRef {
  readonly id: string;
  readonly name: string;
}

export interface HistoryQuery {
  readonly startTs: EpochMs;
  readonly endTs: EpochMs;
  readonly agg: AggParam;
  readonly interval: number;
  readonly limit?: number | undefined;
  /** raw points' order (REST orderBy), ASC unless given; the newest `limit` of a range come with DESC */
  readonly order?: 'ASC' | 'DESC' | undefined;
}

export interface TailPoint {
  readonly ts: EpochMs;
  readonly key: string;
  readonly value: string;
}

export type AttributeScopeArg = 'client' | 'shared' | 'server';

export interface Backend {
  readonly mode: 'local' | 'remote';
  /** what the command talks to, for its error line: "gateway URL" or "data dir DIR" */
  readonly where: string;
  /** remote: the line naming the gateway and user every answer is headed with (docs/cli.md) */
  readonly header?: string;
  /** every device the user may see, by name */
  deviceRefs(): Promise<DeviceRef[]>;
  devices(): Promise<DeviceRow[]>;
  /** REST `values/timeseries?keys=` (latest) text */
  latest(deviceId: string, keys: readonly string[] | undefined): Promise<string>;
  /** REST `values/timeseries` history text, orderBy ASC */
  history(deviceId: string, keys: readonly string[], q: HistoryQuery): Promise<string>;
  /** REST `/api/download/deviceSeriesData` bytes, chunk by chunk; `write` is awaited */
  exportCsv(
    deviceId: string,
    type: 'ts' | 'ds',
    start: number,
    end: number,
    keys: readonly string[] | undefined,
    write: (chunk: Buffer) => Promise<void>,
  ): Promise<void>;
  /** REST `values/attributes[/{scope}]` text */
  attributes(deviceId: string, scope: AttributeScopeArg | undefined): Promise<string>;
  /** REST `GET /api/device/{id}/credentials` text */
  credentials(deviceId: string): Promise<string>;
  /** the device's reply (two-way) or '' (one-way) */
  rpc(
    deviceId: string,
    method: string,
    paramsJson: string,
    oneway: boolean,
    timeoutMs: number | undefined,
  ): Promise<string>;
  /** calls `onPoint` for each point stored from now on, until `signal` aborts; `onReady` once it is watching */
  tail(
    deviceId: string,
    keys: readonly string[] | undefined,
    onPoint: (p: TailPoint) => void,
    signal: AbortSignal,
    onReady?: () => void,
  ): Promise<void>;
  status(): Promise<StatusJson>;
  /**
   * REST `GET /api/alarm/DEVICE/{id}?query` (or `/api/alarms?query` without a device): a PageData of AlarmInfo
   * as text; `query` is the REST query string (docs/api.md "Alarms")
   */
  alarms(deviceId: string | undefined, query: string): Promise<string>;
  close(): Promise<void>;
}

export const SCOPE_PARAM: Readonly<Record<AttributeScopeArg, string>> = {
  client: 'CLIENT_SCOPE',
  shared: 'SHARED_SCOPE',
  server: 'SERVER_SCOPE',
};

/** both modes list devices in this order, so `devices --json` is the same bytes */
export function byName(a: { name: string }, b: { name: string }): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

export interface ModeOptions {
  readonly url?: string;
  readonly dataDir?: string;
  readonly config?: string;
}
