/** `outpost customer add` (docs/cli.md): prints `{"id","title"}`; `customer list` lists them. */
import { type Command, Option } from 'commander';
import type { ConfigFlags } from '../config/index.js';
import { commandGroup, configOption, dataDirOption, example, withEntities } from './common.js';
import { print, withRemote } from './options.js';
import { targetOf } from './target.js';
import { printWrite, writeLocal } from './write.js';

export function registerCustomer(program: Command): void {
  const customer = commandGroup(program, 'customer', 'manage customers');
  example(
    customer
      .command('add')
      .description('create a customer')
      .requiredOption('--title <title>', '(required)')
      .addOption(new Option('--url <url>', 'a remote gateway (env OUTPOST_URL), after outpost login'))
      .addOption(dataDirOption())
      .addOption(configOption())
      .action(async (opts: ConfigFlags & { title: string; url?: string }) => {
        const t = await targetOf(opts, { command: 'customer add', remote: true, creates: true });
        if (t.mode === 'local')
          return printWrite(t, await writeLocal(t, opts, { op: 'customer.add', title: opts.title }), false);
        await withRemote(t.url, async (b) => printWrite(t, await b.addCustomer(opts.title), false, b));
      }),
    'outpost customer add --title "Acme Water"',
  );
  example(
    customer
      .command('list')
      .description('every customer: title, id, how many devices and users it has')
      .option('--json', 'machine output: [{"id","title","devices","users"}]')
      .addOption(dataDirOption())
      .addOption(configOption())
      .action(async (opts: ConfigFlags & { json?: boolean }) => {
        await targetOf(opts, { command: 'customer list', remote: false });
        const rows = await withEntities(opts, (entities) => {
          const devices = entities.list('DEVICE');
          const users = entities.list('USER');
          return entities.list('CUSTOMER').map((c) => ({
            id: c.id as string,
            title: c.title,
            devices: devices.filter((d) => (d.customerId as string) === c.id).length,
            users: users.filter((u) => (u.customerId as string) === c.id).length,
          }));
        });
        if (opts.json) return print(JSON.stringify(rows));
        if (rows.length === 0) return print('(no customers: outpost customer add)');
        const { table, terminalColumns, style } = await import('./format.js');
        print(
          table(
            ['TITLE', 'ID', 'DEVICES', 'USERS'],
            rows.map((c) => [c.title, c.id, String(c.devices), String(c.users)]),
            terminalColumns(),
            ['l', 'l', 'r', 'r'],
            style(),
            new Set([1]),
          ),
        );
      }),
    'outpost customer list --json',
  );
}
