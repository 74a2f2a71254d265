/** `outpost customer add` (docs/cli.md): prints `{"id","title"}`. */
import type { Command } from 'commander';
import type { ConfigFlags } from '../config/index.js';
import { adminWrite, commandGroup, configOption, dataDirOption, example } from './common.js';

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
        console.log(JSON.stringify(await adminWrite(opts, { op: 'customer.add', title: opts.title })));
      }),
    'outpost customer add --title "Acme Water"',
  );
}
