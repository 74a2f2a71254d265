/**
 * What every `outpost` command shares: the data-dir/config options, the command groups (`user`, `device`, ...)
 * that several files may add subcommands to, and the admin commands' read-write store. Heavy modules (lmdb,
 * uWS, the query code) are imported inside actions, never here: `outpost --help` and `outpost latest` should
 * not pay for what they do not use (scripts/bench/cli.ts).
 */
import { type Command, Option } from 'commander';
import type { ConfigFlags } from '../config/index.js';
import type { EntityStore } from '../store/entities.js';
import type { StoreEnv } from '../store/env.js';

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

/** The store opened read-write for an admin command (docs/cli.md: usable beside the running daemon). */
export async function withStore<T>(
  flags: ConfigFlags,
  fn: (entities: EntityStore, env: StoreEnv) => Promise<T>,
): Promise<T> {
  const [{ loadConfig }, { openStoreEnv }, { EntityStore: Entities }] = await Promise.all([
    import('../config/index.js'),
    import('../store/env.js'),
    import('../store/entities.js'),
  ]);
  const config = loadConfig(flags);
  const env = openStoreEnv({ dataDir: config.dataDir, mapSizeBytes: config.store.mapSizeBytes });
  try {
    const entities = new Entities(env);
    await entities.ensureTenant();
    return await fn(entities, env);
  } finally {
    await env.close();
  }
}
