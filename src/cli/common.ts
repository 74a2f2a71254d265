/**
 * What every `outpost` command shares: the data-dir/config options, the command groups (`user`, `device`, ...)
 * that several files may add subcommands to, and the admin commands' write. Heavy modules (lmdb,
 * uWS, the query code) are imported inside actions, never here: `outpost --help` and `outpost latest` should
 * not pay for what they do not use (scripts/bench/cli.ts).
 */
import { type Command, Option } from 'commander';
import type { AdminOp, AdminResult } from '../admin/ops.js';
import type { ConfigFlags } from '../config/index.js';
import { CliError, noStore } from './errors.js';

export const dataDirOption = (): Option =>
  new Option('--data-dir <dir>', 'data directory (env OUTPOST_DATA_DIR, default ./data)');
export const configOption = (): Option => new Option('--config <file>', 'JSON config file (env OUTPOST_CONFIG)');

/**
 * The command group `name` (`outpost <name> <sub>`), created on first use: each file registers its own
 * subcommands under a shared group without knowing who else does.
 */
export function commandGroup(program: Command, name: string, description: string): Command {
  return program.commands.find((c) => c.name() === name) ?? program.command(name).description(description);
}

/** Appends a worked example to a command's `--help`. */
export function example(cmd: Command, ...lines: string[]): Command {
  return cmd.addHelpText(
    'after',
    `\nExample${lines.length > 1 ? 's' : ''}:\n${lines.map((l) => `  $ ${l}`).join('\n')}\n`,
  );
}

/**
 * Runs an admin command's write (docs/cli.md: usable beside the running daemon) where the store is written: by
 * the daemon when one holds the data dir, else here, under the data dir's lock (src/admin/channel.ts).
 */
export async function adminWrite(flags: ConfigFlags, op: AdminOp): Promise<AdminResult> {
  const [{ loadConfig }, channel] = await Promise.all([import('../config/index.js'), import('../admin/channel.js')]);
  const config = loadConfig(flags);
  return channel.adminWrite(config.dataDir, op, async () => {
    const [{ openStoreEnv }, { EntityStore }, { runAdminOp }, { LmdbAttributeStore }, { Dictionary }, { EventBus }] =
      await Promise.all([
        import('../store/env.js'),
        import('../store/entities.js'),
        import('../admin/ops.js'),
        import('../store/attributes.js'),
        import('../store/encoding/dict.js'),
        import('../bus/index.js'),
      ]);
    const env = openStoreEnv({ dataDir: config.dataDir, mapSizeBytes: config.store.mapSizeBytes });
    try {
      const entities = new EntityStore(env);
      await entities.ensureTenant();
      // no daemon, so no subscriber to tell: a device reads the attributes when it next connects
      return await runAdminOp(
        entities,
        env,
        op,
        () => new LmdbAttributeStore(env, new Dictionary(env), new EventBus()),
      );
    } finally {
      await env.close();
    }
  });
}

/**
 * Asks `question` on the terminal and goes on only on "y"; without a terminal it fails asking for --yes (a
 * script must say what it means).
 */
export async function confirm(question: string): Promise<void> {
  if (process.stdin.isTTY !== true) throw new CliError(`${question} Give --yes to confirm (stdin is not a terminal)`);
  const { createInterface } = await import('node:readline/promises');
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    const answer = await rl.question(`${question} [y/N] `);
    if (!/^y(es)?$/i.test(answer.trim())) throw new CliError('nothing was changed');
  } finally {
    rl.close();
  }
}

/** Runs `fn` with the entity store of the flags' data dir opened read-only (admin listings). */
export async function withEntities<T>(
  flags: ConfigFlags,
  fn: (entities: import('../store/entities.js').EntityStore) => T,
): Promise<T> {
  const [{ loadConfig }, { openStoreEnv }, { EntityStore }, { existsSync }, { join }] = await Promise.all([
    import('../config/index.js'),
    import('../store/env.js'),
    import('../store/entities.js'),
    import('node:fs'),
    import('node:path'),
  ]);
  const config = loadConfig(flags);
  if (!existsSync(join(config.dataDir, 'outpost.mdb'))) throw new CliError(noStore(config.dataDir));
  const env = openStoreEnv({ dataDir: config.dataDir, mapSizeBytes: config.store.mapSizeBytes, readOnly: true });
  try {
    return fn(new EntityStore(env));
  } finally {
    await env.close();
  }
}
