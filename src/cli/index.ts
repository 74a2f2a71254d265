/**
 * The `outpost` command line: `serve` and the admin commands (CONTRACT §1), the technician's commands
 * (§10) and access tickets (§11). One file per command group, each exporting a `register(program)`; adding a
 * group is one line in COMMAND_GROUPS. Failures print one line on stderr and exit 1.
 */
import { Command } from 'commander';
import { registerCustomer } from './customer.js';
import { registerDevice } from './device.js';
import { registerExport } from './export.js';
import { registerLogin } from './login.js';
import { registerRead } from './read.js';
import { registerRpc } from './rpc.js';
import { registerServe } from './serve.js';
import { registerStatus } from './status.js';
import { registerTail } from './tail.js';
import { registerTicket } from './ticket.js';
import { registerUser } from './user.js';

/** Every command group, in `outpost --help` order. */
export const COMMAND_GROUPS: ReadonlyArray<(program: Command) => void> = [
  registerServe, registerUser, registerCustomer, registerDevice,
  registerLogin, registerRead, registerTail, registerExport, registerRpc, registerStatus, registerTicket,
];

export function buildCli(): Command {
  const program = new Command('outpost')
    .description('Outpost IoT edge gateway')
    // CONTRACT §1: failures print one line (commander's own "error: ..." line; `--help` shows usage)
    .exitOverride();
  for (const register of COMMAND_GROUPS) register(program);
  return program;
}

export async function runCli(argv: string[]): Promise<void> {
  const program = buildCli();
  try {
    await program.parseAsync(argv);
  } catch (err) {
    const e = err as { code?: string; exitCode?: number; message?: string };
    if (typeof e.code === 'string' && e.code.startsWith('commander.')) {
      // commander already printed its message (help, missing option, unknown command)
      process.exit(e.exitCode === 0 ? 0 : 2);
    }
    process.stderr.write(`outpost: ${oneLine(e.message ?? String(err))}\n`);
    process.exit(1);
  }
}

/** CONTRACT §10: an error is one line, whatever the message carried. */
function oneLine(msg: string): string {
  return msg.replace(/\s*\n\s*/g, ' ').trim();
}
