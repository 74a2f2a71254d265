/** `outpost customer add` (docs/cli.md): prints `{"id","title"}`. */
import type { Command } from 'commander';
import type { ConfigFlags } from '../config/index.js';
import { OutpostError } from '../errors.js';
import type { EntityStore } from '../store/entities.js';
import type { CustomerId } from '../types.js';
import { commandGroup, configOption, dataDirOption, example, withStore } from './common.js';

/** `--customer ID|TITLE` of the admin commands; undefined when not given. */
export function customerIdOf(entities: EntityStore, ref: string | undefined): CustomerId | undefined {
  if (ref === undefined) return undefined;
  const c = entities.findCustomer(ref);
  if (!c) throw new OutpostError('ENTITY_NOT_FOUND', `no customer with id or title "${ref}"`);
  return c.id as string as CustomerId;
}

export function registerCustomer(program: Command): void {
  const customer = commandGroup(program, 'customer', 'manage customers');
  example(
    customer
      .command('add')
      .description('create a customer')
      .requiredOption('--title <title>')
      .addOption(dataDirOption())
      .addOption(configOption())
      .action(async (opts: ConfigFlags & { title: string }) => {
        const c = await withStore(opts, (entities) => entities.createCustomer(opts.title));
        console.log(JSON.stringify({ id: c.id, title: c.title }));
      }),
    'outpost customer add --title "Acme Water"',
  );
}
