/**
 * `outpost ticket keygen` / `issue` (docs/cli.md): an operator's Ed25519 key pair and the tickets it signs.
 * Both work offline; a gateway trusts a key once its public half is in `auth.ticketKeys`.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { type Command, Option } from 'commander';
import { commandGroup, example } from './common.js';
import { CliError } from './errors.js';
import { print } from './options.js';
import { parseDuration } from './time.js';

export function registerTicket(program: Command): void {
  const ticket = commandGroup(
    program,
    'ticket',
    'access tickets: offline, fleet-wide logins signed by an operator key',
  );
  example(
    ticket
      .command('keygen')
      .description(
        'create an operator key pair: writes the secret key (0600), prints the public key for auth.ticketKeys',
      )
      .requiredOption('--out <file>', '(required) where the secret key goes (must not exist)')
      .action(async (o: { out: string }) => {
        const { generateTicketKey } = await import('../auth/ticket-issue.js');
        const { secretKey, publicKey } = generateTicketKey();
        try {
          writeFileSync(o.out, `${secretKey.toString('base64url')}\n`, { mode: 0o600, flag: 'wx' });
        } catch (err) {
          throw new CliError(`writing ${o.out}: ${(err as Error).message}`);
        }
        print(publicKey);
      }),
    'outpost ticket keygen --out operator.key',
  );

  example(
    ticket
      .command('issue')
      .description('sign a ticket (a JWT, EdDSA) for a technician; at most 7 days')
      .requiredOption('--key <file>', "(required) the operator's secret key (from ticket keygen)")
      .requiredOption('--email <email>', '(required) who the ticket is for')
      .addOption(
        new Option('--authority <authority>', '(required)')
          .choices(['TENANT_ADMIN', 'CUSTOMER_USER'])
          .makeOptionMandatory(),
      )
      .option('--customer <titleOrId>', 'the customer of a CUSTOMER_USER ticket (a title works on every gateway)')
      .requiredOption('--ttl <D>', '(required) lifetime: 8h, 2d ... at most 7d')
      .action(
        async (o: {
          key: string;
          email: string;
          authority: 'TENANT_ADMIN' | 'CUSTOMER_USER';
          customer?: string;
          ttl: string;
        }) => {
          const [{ issueTicket }, { MAX_TICKET_TTL_SEC }] = await Promise.all([
            import('../auth/ticket-issue.js'),
            import('../auth/ticket.js'),
          ]);
          const ttlMs = parseDuration(o.ttl, '--ttl');
          if (ttlMs <= 0 || ttlMs > MAX_TICKET_TTL_SEC * 1000)
            throw new CliError(`--ttl ${o.ttl}: a ticket lives at most 7 days`);
          if (o.authority === 'CUSTOMER_USER' && o.customer === undefined)
            throw new CliError('a CUSTOMER_USER ticket needs --customer TITLE|ID');
          let secretKey: Buffer;
          try {
            secretKey = Buffer.from(readFileSync(o.key, 'utf8').trim(), 'base64url');
          } catch (err) {
            throw new CliError(`reading ${o.key}: ${(err as Error).message}`);
          }
          if (secretKey.length !== 64)
            throw new CliError(`${o.key} is not an operator secret key (outpost ticket keygen makes one)`);
          print(
            issueTicket(secretKey, {
              email: o.email,
              authority: o.authority,
              customer: o.customer,
              ttlSec: Math.floor(ttlMs / 1000),
              nowSec: Math.floor(Date.now() / 1000),
            }),
          );
        },
      ),
    'outpost ticket issue --key operator.key --email tech@example.com --authority CUSTOMER_USER --customer "Acme Water" --ttl 2d > ticket.jwt',
  );
}
