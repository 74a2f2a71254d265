/**
 * `outpost user add` (docs/cli.md): prints `{"id","email","authority","customerId"}`; `user list`, `user passwd`
 * and `user delete` manage the users made so.
 */
import { type Command, Option } from 'commander';
import type { ConfigFlags } from '../config/index.js';
import { OutpostError } from '../errors.js';
import type { Authority } from '../store/entities.js';
import { commandGroup, configOption, confirm, dataDirOption, example, withEntities } from './common.js';
import { CliError } from './errors.js';
import { safeText } from './format.js';
import { print } from './options.js';
import { targetOf } from './target.js';
import { printWrite, writeLocal } from './write.js';

/**
 * The new password, typed twice on a terminal (a typo would lock the user out); from stdin without one (a
 * script gives --password).
 */
async function newPassword(): Promise<string> {
  const { promptPassword } = await import('./login.js');
  const first = await promptPassword('New password: ');
  if (process.stdin.isTTY !== true || first === '') return first;
  if ((await promptPassword('Retype the new password: ')) !== first)
    throw new CliError('the two passwords differ; nothing was changed');
  return first;
}

export function registerUser(program: Command): void {
  const user = commandGroup(program, 'user', 'manage users');
  example(
    user
      .command('add')
      .description('create a user')
      .requiredOption('--email <email>', "(required) the user's email, the login name")
      .requiredOption('--password <password>', '(required)')
      .addOption(
        new Option('--authority <authority>', '(required)')
          .choices(['TENANT_ADMIN', 'CUSTOMER_USER'])
          .makeOptionMandatory(),
      )
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
          const t = await targetOf(opts, { command: 'user add', remote: false, creates: true });
          if (t.mode === 'local') printWrite(t, await writeLocal(t, opts, op), false);
        },
      ),
    'outpost user add --email admin@example.com --password secret --authority TENANT_ADMIN',
  );
  example(
    user
      .command('list')
      .description('every user: email, authority, customer')
      .option('--json', 'machine output: [{"id","email","authority","customer"}]')
      .addOption(dataDirOption())
      .addOption(configOption())
      .action(async (opts: ConfigFlags & { json?: boolean }) => {
        await targetOf(opts, { command: 'user list', remote: false });
        const rows = await withEntities(opts, (entities) =>
          entities.list('USER').map((u) => ({
            id: u.id as string,
            email: u.email,
            authority: u.authority,
            customer: u.authority === 'CUSTOMER_USER' ? (entities.customer(u.customerId)?.title ?? u.customerId) : null,
          })),
        );
        if (opts.json) return print(JSON.stringify(rows));
        if (rows.length === 0) return print('(no users: outpost user add)');
        const { table, terminalColumns, style } = await import('./format.js');
        print(
          table(
            ['EMAIL', 'AUTHORITY', 'CUSTOMER'],
            rows.map((u) => [u.email, u.authority, u.customer ?? '-']),
            terminalColumns(),
            [],
            style(),
          ),
        );
      }),
    'outpost user list --config /etc/outpost/config.json',
  );
  example(
    user
      .command('passwd')
      .description("set a user's password")
      .requiredOption('--email <email>', '(required) the user')
      .option('--password <password>', 'the new password (prompted for twice when missing)')
      .addOption(dataDirOption())
      .addOption(configOption())
      .action(async (opts: ConfigFlags & { email: string; password?: string }) => {
        const t = await targetOf(opts, { command: 'user passwd', remote: false });
        const password = opts.password ?? (await newPassword());
        if (password.length === 0) throw new CliError('the password must not be empty; nothing was changed');
        const { hashPassword } = await import('../auth/password.js');
        const passwordHash = await hashPassword(password);
        if (t.mode === 'local')
          printWrite(t, await writeLocal(t, opts, { op: 'user.passwd', email: opts.email, passwordHash }));
      }),
    'outpost user passwd --email tech@example.com',
  );
  example(
    user
      .command('delete')
      .description('delete a user (its sessions end); asks first')
      .requiredOption('--email <email>', '(required) the user')
      .option('--yes', 'do not ask (required when stdin is not a terminal)')
      .addOption(dataDirOption())
      .addOption(configOption())
      .action(async (opts: ConfigFlags & { email: string; yes?: boolean }) => {
        const t = await targetOf(opts, { command: 'user delete', remote: false });
        if (t.mode !== 'local') return;
        if (opts.yes !== true) await confirm(`delete user ${safeText(opts.email)} in ${t.where}?`);
        printWrite(t, await writeLocal(t, opts, { op: 'user.delete', email: opts.email }));
      }),
    'outpost user delete --email former@example.com --yes',
  );
}
