/** `outpost user add` (docs/cli.md): prints `{"id","email","authority","customerId"}`. */
import { type Command, Option } from 'commander';
import type { ConfigFlags } from '../config/index.js';
import { OutpostError } from '../errors.js';
import type { Authority } from '../store/entities.js';
import { adminWrite, commandGroup, configOption, dataDirOption, example } from './common.js';

export function registerUser(program: Command): void {
  const user = commandGroup(program, 'user', 'manage users');
  example(
    user
      .command('add')
      .description('create a user')
      .requiredOption('--email <email>')
      .requiredOption('--password <password>')
      .addOption(new Option('--authority <authority>').choices(['TENANT_ADMIN', 'CUSTOMER_USER']).makeOptionMandatory())
      .option('--customer <idOrTitle>', 'the customer of a CUSTOMER_USER')
      .addOption(dataDirOption())
      .addOption(configOption())
      .action(
        async (opts: ConfigFlags & { email: string; password: string; authority: Authority; customer?: string }) => {
          if (opts.password.length === 0) throw new OutpostError('BAD_PARAM', 'password must not be empty');
          const { hashPassword } = await import('../auth/password.js');
          const passwordHash = await hashPassword(opts.password);
          const op = {
            op: 'user.add',
            email: opts.email,
            passwordHash,
            authority: opts.authority,
            customer: opts.customer,
          } as const;
          console.log(JSON.stringify(await adminWrite(opts, op)));
        },
      ),
    'outpost user add --email admin@example.com --password secret --authority TENANT_ADMIN',
  );
}
