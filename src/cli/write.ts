/**
 * The writes' side of "where a command acts" (target.ts): a write names the gateway or data dir it changed, on
 * stderr before its JSON line (as a remote answer names its gateway) and, where the line's shape is not fixed
 * by docs/cli.md's adds, in the line itself (`"gateway"` or `"dataDir"`); a local write's failure names the
 * data dir, as a remote one names its gateway.
 */
import type { AdminOp, AdminResult } from '../admin/ops.js';
import type { ConfigFlags } from '../config/index.js';
import type { RemoteBackend } from './remote.js';
import { adminWrite } from './common.js';
import { CliError } from './errors.js';
import { announce, print } from './options.js';
import type { Target } from './target.js';

/**
 * Runs `op` on the target's data dir (through its daemon when one runs). A failure's line names the dir, but
 * for the adds, whose refusals are ThingsBoard's messages as docs/cli.md gives them.
 */
export async function writeLocal(
  t: Extract<Target, { mode: 'local' }>,
  flags: ConfigFlags,
  op: AdminOp,
): Promise<AdminResult> {
  try {
    return await adminWrite({ ...flags, dataDir: t.dataDir }, op);
  } catch (err) {
    const msg = (err as Error).message;
    if (op.op.endsWith('.add') || msg.includes(t.dataDir)) throw err;
    throw new CliError(`${msg} (${t.where})`);
  }
}

/**
 * Prints a write's result: `named` adds where it acted to the JSON line; the stderr line names it always
 * (remote: the gateway and user, as every remote answer).
 */
export function printWrite(t: Target, result: AdminResult, named = true, remote?: RemoteBackend): void {
  announce(remote?.header ?? t.where);
  const where = t.mode === 'remote' ? { gateway: t.url } : { dataDir: t.dataDir };
  print(JSON.stringify(named ? { ...result, ...where } : result));
}
