/**
 * Where a command acts (docs/cli.md "Local and remote"): the one rule of backend.ts `remoteUrlOf`, for the writes
 * as for the reads, so a command never shows one gateway and changes another. A command that can act only on a
 * data dir refuses, in one line, when the rule points at a gateway; a local command that needs a store refuses
 * where there is none rather than create one.
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { ModeOptions } from './backend-types.js';
import { remoteUrlOf } from './backend.js';
import { CliError, noStore } from './errors.js';

export type Target =
  | { readonly mode: 'remote'; readonly url: string; readonly where: string }
  | { readonly mode: 'local'; readonly dataDir: string; readonly where: string };

export interface TargetRule {
  /** the command as typed (`user add`), for the refusal's line */
  readonly command: string;
  /** it can act on a gateway over its REST API */
  readonly remote: boolean;
  /** it may create the store: the first user, customer or device of a new data dir */
  readonly creates?: boolean;
}

/** what made the rule pick `url`, for a refusal to say what to change */
function remoteReason(o: ModeOptions): string {
  if (o.url !== undefined && o.url !== '') return '--url';
  if (process.env['OUTPOST_URL']) return 'OUTPOST_URL';
  return 'the current login: outpost context';
}

export async function targetOf(o: ModeOptions, rule: TargetRule): Promise<Target> {
  const url = remoteUrlOf(o);
  if (url !== undefined) {
    if (!rule.remote)
      throw new CliError(
        `${rule.command} acts on a local data dir only, and commands go to gateway ${url} (${remoteReason(o)}): give --data-dir DIR or --config FILE, or run outpost context local; nothing was changed`,
      );
    return { mode: 'remote', url, where: `gateway ${url}` };
  }
  const { loadConfig } = await import('../config/index.js');
  const dataDir = resolve(loadConfig({ dataDir: o.dataDir, config: o.config }).dataDir);
  if (rule.creates !== true && !existsSync(join(dataDir, 'outpost.mdb'))) throw new CliError(noStore(dataDir));
  return { mode: 'local', dataDir, where: `data dir ${dataDir}` };
}
