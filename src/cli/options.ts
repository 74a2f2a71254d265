/** Options shared by the technician's commands (docs/cli.md): the mode and `--json`. */
import { type Command, Option } from 'commander';
import { type Backend, type ModeOptions, openBackend } from './backend.js';
import { configOption, dataDirOption } from './common.js';
import { CliError } from './errors.js';

export interface TechOptions extends ModeOptions {
  readonly json?: boolean;
}

/** --url, --data-dir, --config, and --json unless `noJson` */
export function techOptions(cmd: Command, noJson = false): Command {
  cmd
    .addOption(new Option('--url <url>', 'a remote gateway (env OUTPOST_URL), after outpost login'))
    .addOption(dataDirOption())
    .addOption(configOption());
  if (!noJson) cmd.option('--json', "machine output (REST's JSON)");
  return cmd;
}

/** --url, --data-dir, --config for a write that can act on a gateway or a data dir (target.ts) */
export function writeOptions(cmd: Command): Command {
  return cmd
    .addOption(new Option('--url <url>', 'a remote gateway (env OUTPOST_URL), after outpost login'))
    .addOption(dataDirOption())
    .addOption(configOption());
}

/** withBackend for the gateway `url`: its answers and failures name it */
export function withRemote<T>(url: string, fn: (b: import('./remote.js').RemoteBackend) => Promise<T>): Promise<T> {
  return withBackend({ url }, (b) => fn(b as import('./remote.js').RemoteBackend));
}

/**
 * Runs `fn` with the backend of the options' mode, closing it afterwards. A failure's line says which gateway
 * (or data dir) it came from: after a login, a plain command may not go where the technician thinks.
 */
export async function withBackend<T>(o: ModeOptions, fn: (b: Backend) => Promise<T>): Promise<T> {
  const b = await openBackend(o);
  if (b.header !== undefined) announce(b.header);
  try {
    return await fn(b);
  } catch (err) {
    if (err instanceof CliError && !err.message.includes(b.where.slice(b.where.indexOf(' ') + 1))) {
      throw new CliError(`${err.message} (${b.where})`);
    }
    throw err;
  } finally {
    await b.close();
  }
}

/** `--keys a,b` → ['a','b'] (undefined when not given) */
export function keysOption(v: string | undefined): string[] | undefined {
  if (v === undefined) return undefined;
  const keys = v
    .split(',')
    .map((k) => k.trim())
    .filter((k) => k !== '');
  return keys.length > 0 ? keys : undefined;
}

/** the line naming the gateway, written to stderr before the command's first output */
let pendingHeader: string | undefined;

/**
 * Names the gateway a remote answer comes from (docs/cli.md): on stderr, so `--json`, `--csv` and `export` stay
 * the REST bytes on stdout, and only once there is an answer (a failure's one line names the gateway itself).
 */
export function announce(header: string): void {
  pendingHeader = header;
}

/** writes the pending header; called before anything goes to stdout */
export function flushHeader(): void {
  if (pendingHeader === undefined) return;
  process.stderr.write(`${pendingHeader}\n`);
  pendingHeader = undefined;
}

export function print(text: string): void {
  flushHeader();
  process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
}
