/**
 * The two modes of the technician's commands (CONTRACT §10) behind one interface: Local reads the data dir
 * read-only with the daemon's own query code, Remote asks a gateway's REST/websocket API. Answers are REST's
 * JSON text in both, so `--json` is the same bytes either way and the human output is rendered from it once.
 */
import type { StatusJson } from '../status/index.js';
import type { AggParam } from '../query/history.js';
import type { EpochMs } from '../types.js';
import { CliError } from './errors.js';
import { unknownDevice } from './suggest.js';

/** `outpost devices --json`, CONTRACT §10 */
export interface DeviceRow {
  readonly id: string;
  readonly name: string;
  readonly type: string;
  readonly customer: string | null;
  readonly lastActivityTs: EpochMs | null;
}

export interface DeviceRef { readonly id: string; readonly name: string }

export interface HistoryQuery {
  readonly startTs: EpochMs;
  readonly endTs: EpochMs;
  readonly agg: AggParam;
  readonly interval: number;
  readonly limit?: number | undefined;
}

export interface TailPoint { readonly ts: EpochMs; readonly key: string; readonly value: string }

export type AttributeScopeArg = 'client' | 'shared' | 'server';

export interface Backend {
  readonly mode: 'local' | 'remote';
  /** every device the user may see, by name */
  deviceRefs(): Promise<DeviceRef[]>;
  devices(): Promise<DeviceRow[]>;
  /** REST `values/timeseries?keys=` (latest) text */
  latest(deviceId: string, keys: readonly string[] | undefined): Promise<string>;
  /** REST `values/timeseries` history text, orderBy ASC */
  history(deviceId: string, keys: readonly string[], q: HistoryQuery): Promise<string>;
  /** REST `/api/download/deviceSeriesData` bytes, chunk by chunk; `write` is awaited */
  exportCsv(deviceId: string, type: 'ts' | 'ds', start: number, end: number, write: (chunk: Buffer) => Promise<void>): Promise<void>;
  /** REST `values/attributes[/{scope}]` text */
  attributes(deviceId: string, scope: AttributeScopeArg | undefined): Promise<string>;
  /** the device's reply (two-way) or '' (one-way) */
  rpc(deviceId: string, method: string, paramsJson: string, oneway: boolean, timeoutMs: number | undefined): Promise<string>;
  /** calls `onPoint` for each point stored from now on, until `signal` aborts */
  tail(deviceId: string, keys: readonly string[] | undefined, onPoint: (p: TailPoint) => void, signal: AbortSignal): Promise<void>;
  status(): Promise<StatusJson>;
  close(): Promise<void>;
}

export const SCOPE_PARAM: Readonly<Record<AttributeScopeArg, string>> = { client: 'CLIENT_SCOPE', shared: 'SHARED_SCOPE', server: 'SERVER_SCOPE' };

/** both modes list devices in this order, so `devices --json` is the same bytes */
export function byName(a: { name: string }, b: { name: string }): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A device by id or name (exact, then case-insensitive); else an error naming the nearest names. */
export async function resolveDevice(b: Backend, ref: string): Promise<DeviceRef> {
  const refs = await b.deviceRefs();
  const hit = refs.find((d) => d.id === ref || d.name === ref)
    ?? (UUID.test(ref) ? undefined : refs.find((d) => d.name.toLowerCase() === ref.toLowerCase()));
  if (hit) return hit;
  throw new CliError(unknownDevice(ref, refs.map((d) => d.name)));
}

export interface ModeOptions {
  readonly url?: string;
  readonly dataDir?: string;
  readonly config?: string;
}

/** Remote with `--url`; local with `--data-dir`; else remote with OUTPOST_URL, else local (OUTPOST_DATA_DIR, ./data). */
export async function openBackend(o: ModeOptions): Promise<Backend> {
  const url = o.url ?? (o.dataDir === undefined ? process.env['OUTPOST_URL'] : undefined);
  if (url !== undefined && url !== '') {
    const { RemoteBackend } = await import('./remote.js');
    return RemoteBackend.open(url);
  }
  const { LocalBackend } = await import('./local.js');
  return LocalBackend.open(o);
}
