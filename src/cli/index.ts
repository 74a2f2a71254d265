/**
 * The `outpost` command line: `serve` and the admin commands (docs/cli.md), the technician's commands
 * and access tickets (docs/cli.md). One file per command group, each exporting a `register(program)`.
 *
 * COMMAND_GROUPS maps each top-level command to the modules that register it; a run loads only the modules
 * of the command it names (all of them for `--help` or an unknown command), so `outpost latest` does not
 * load the code of twenty other commands (its wall time is benchmarked: scripts/bench/cli.ts). Adding a
 * command, or subcommands to an existing group from a new file, is one entry here.
 */
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { safeText } from './format.js';

type Register = (program: Command) => void;
type Loader = () => Promise<Register>;

/** top-level command → the registering modules, in `outpost --help` order */
export const COMMAND_GROUPS: Readonly<Record<string, readonly Loader[]>> = {
  serve: [() => import('./serve.js').then((m) => m.registerServe)],
  user: [() => import('./user.js').then((m) => m.registerUser)],
  customer: [() => import('./customer.js').then((m) => m.registerCustomer)],
  device: [
    () => import('./device.js').then((m) => m.registerDevice),
    () => import('./upstream.js').then((m) => m.registerUpstream),
    () => import('./device-manage.js').then((m) => m.registerDeviceManage),
  ],
  login: [() => import('./login.js').then((m) => m.registerLogin)],
  logout: [() => import('./login.js').then((m) => m.registerLogin)],
  context: [() => import('./context.js').then((m) => m.registerContext)],
  devices: [() => import('./read.js').then((m) => m.registerRead)],
  latest: [() => import('./read.js').then((m) => m.registerRead)],
  query: [() => import('./read.js').then((m) => m.registerRead)],
  attributes: [
    () => import('./read.js').then((m) => m.registerRead),
    () => import('./attributes-write.js').then((m) => m.registerAttributeWrites),
  ],
  tail: [() => import('./tail.js').then((m) => m.registerTail)],
  export: [() => import('./export.js').then((m) => m.registerExport)],
  rpc: [() => import('./rpc.js').then((m) => m.registerRpc)],
  status: [() => import('./status.js').then((m) => m.registerStatus)],
  sync: [() => import('./sync.js').then((m) => m.registerSync)],
  ticket: [() => import('./ticket.js').then((m) => m.registerTicket)],
  apikey: [() => import('./apikey.js').then((m) => m.registerApiKey)],
  alarms: [() => import('./alarms.js').then((m) => m.registerAlarms)],
};

/** The program with the commands `argv` needs: the named command's modules, or every module. */
export async function buildCli(argv: readonly string[] = []): Promise<Command> {
  const program = new Command('outpost')
    .description('Outpost IoT edge gateway')
    .version(packageVersion(), '-V, --version', 'print the version')
    // a command's options stop at its subcommand's name (`attributes <device>` and `attributes set`)
    .enablePositionalOptions()
    // failures print one line (docs/cli.md) (commander's own "error: ..." line; `--help` shows usage)
    .exitOverride();
  const named = argv[2] === undefined ? undefined : COMMAND_GROUPS[argv[2]];
  const loaders = named ?? Object.values(COMMAND_GROUPS).flat();
  // one module may register several commands (read.ts: devices, latest, ...): each registers once
  const registers = [...new Set(await Promise.all(loaders.map((load) => load())))];
  for (const register of registers) register(program);
  return program;
}

/** package.json's version; dist/src/cli/index.js is three levels below it */
function packageVersion(): string {
  return (JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string })
    .version;
}

export async function runCli(argv: string[]): Promise<void> {
  try {
    const program = await buildCli(argv);
    await program.parseAsync(argv);
  } catch (err) {
    const e = err as { code?: string; exitCode?: number; message?: string };
    if (typeof e.code === 'string' && e.code.startsWith('commander.')) {
      // commander already printed its message (help, version, missing option, unknown command): usage
      // errors exit 2, failures of a command that ran exit 1 (docs/cli.md)
      process.exit(e.exitCode === 0 ? 0 : 2);
    }
    process.stderr.write(`outpost: ${oneLine(e.message ?? String(err))}\n`);
    process.exit(1);
  }
}

/** An error is one line (docs/cli.md), whatever the message carried. */
function oneLine(msg: string): string {
  return safeText(msg.replace(/\s*\n\s*/g, ' ').trim());
}
