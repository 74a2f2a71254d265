/**
 * The two modes of the technician's commands (docs/cli.md) behind one interface (backend-types.ts): Local reads
 * the data dir read-only with the daemon's own query code, Remote asks a gateway's REST/websocket API. Answers
 * are REST's JSON text in both, so `--json` is the same bytes either way and the human output is rendered from
 * it once.
 */
import type { Backend, DeviceRef, ModeOptions } from './backend-types.js';
import { CliError } from './errors.js';
import { readCurrentUrl } from './session.js';
import { unknownDevice } from './suggest.js';

export type {
  AttributeScopeArg,
  Backend,
  DeviceRef,
  DeviceRow,
  HistoryQuery,
  ModeOptions,
  TailPoint,
} from './backend-types.js';
export { SCOPE_PARAM, byName } from './backend-types.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A device by id or name (exact, then case-insensitive); else an error naming the nearest names. */
export async function resolveDevice(b: Backend, ref: string): Promise<DeviceRef> {
  const refs = await b.deviceRefs();
  const hit =
    refs.find((d) => d.id === ref || d.name === ref) ??
    (UUID.test(ref) ? undefined : refs.find((d) => d.name.toLowerCase() === ref.toLowerCase()));
  if (hit) return hit;
  throw new CliError(
    unknownDevice(
      ref,
      refs.map((d) => d.name),
    ),
  );
}

/**
 * The gateway a command goes to, or undefined for the local data dir (docs/cli.md "Local and remote"): what is
 * given on the command line beats the environment, which beats the current gateway (`outpost login`,
 * `outpost context`). `--url` is remote; `--data-dir` or `--config` local; else OUTPOST_URL remote; else
 * OUTPOST_DATA_DIR or OUTPOST_CONFIG local; else the current gateway; else local (./data).
 */
export function remoteUrlOf(o: ModeOptions): string | undefined {
  if (o.url !== undefined && o.url !== '') return o.url;
  if (o.dataDir !== undefined || o.config !== undefined) return undefined;
  const fromEnv = process.env['OUTPOST_URL'];
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  if (process.env['OUTPOST_DATA_DIR'] || process.env['OUTPOST_CONFIG']) return undefined;
  return readCurrentUrl();
}

export async function openBackend(o: ModeOptions): Promise<Backend> {
  const url = remoteUrlOf(o);
  if (url !== undefined) {
    const { RemoteBackend } = await import('./remote.js');
    return RemoteBackend.open(url);
  }
  const { LocalBackend } = await import('./local.js');
  return LocalBackend.open(o);
}
