/**
 * The `outpost` command line (CONTRACT §1): `serve`, and the admin commands a field technician uses with or
 * without the daemon running. Each admin command prints one JSON line; failures print one line and exit 1.
 */
import { Command, Option } from 'commander';
import { hashPassword } from '../auth/password.js';
import { type ConfigFlags, loadConfig } from '../config/index.js';
import { OutpostError } from '../errors.js';
import { startServer } from '../server.js';
import { EntityStore, type Authority } from '../store/entities.js';
import { type StoreEnv, openStoreEnv } from '../store/env.js';
import { registerUpstreamCommands, setUpstreamToken } from './upstream.js';
import { type CustomerId, NULL_UUID } from '../types.js';

async function withStore<T>(flags: ConfigFlags, fn: (entities: EntityStore, env: StoreEnv) => Promise<T>): Promise<T> {
  const config = loadConfig(flags);
  const env = openStoreEnv({ dataDir: config.dataDir, mapSizeBytes: config.store.mapSizeBytes });
  try {
    const entities = new EntityStore(env);
    await entities.ensureTenant();
    return await fn(entities, env);
  } finally {
    await env.close();
  }
}

function customerIdOf(entities: EntityStore, ref: string | undefined): CustomerId | undefined {
  if (ref === undefined) return undefined;
  const c = entities.findCustomer(ref);
  if (!c) throw new OutpostError('ENTITY_NOT_FOUND', `no customer with id or title "${ref}"`);
  return c.id as string as CustomerId;
}

const dataDirOption = (): Option => new Option('--data-dir <dir>', 'data directory (env OUTPOST_DATA_DIR, default ./data)');
const configOption = (): Option => new Option('--config <file>', 'JSON config file (env OUTPOST_CONFIG)');

export function buildCli(): Command {
  const program = new Command('outpost')
    .description('Outpost IoT edge gateway')
    // CONTRACT §1: failures print one line (commander's own "error: ..." line; `--help` shows usage)
    .exitOverride();

  program.command('serve')
    .description('run the gateway daemon')
    .option('--host <host>', 'listen address (env OUTPOST_HOST, default 0.0.0.0)')
    .option('--port <port>', 'listen port, 0 for any free one (env OUTPOST_PORT, default 8080)')
    .addOption(dataDirOption())
    .addOption(configOption())
    .option('--tls-cert <file>', 'PEM certificate: serve HTTPS/WSS')
    .option('--tls-key <file>', 'PEM private key for --tls-cert')
    .action(async (opts: ConfigFlags) => {
      const config = loadConfig(opts);
      const server = await startServer(config);
      let stopping = false;
      const stop = (signal: string): void => {
        if (stopping) return;
        stopping = true;
        server.services.log.info(`${signal} received: closing listeners and flushing the store`);
        server.close().then(
          () => process.exit(0),
          (err: unknown) => { server.services.log.error(`shutdown failed: ${String(err)}`); process.exit(1); },
        );
      };
      process.on('SIGTERM', () => stop('SIGTERM'));
      process.on('SIGINT', () => stop('SIGINT'));
    });

  const user = program.command('user').description('manage users');
  user.command('add')
    .description('create a user')
    .requiredOption('--email <email>')
    .requiredOption('--password <password>')
    .addOption(new Option('--authority <authority>').choices(['TENANT_ADMIN', 'CUSTOMER_USER']).makeOptionMandatory())
    .option('--customer <idOrTitle>', 'the customer of a CUSTOMER_USER')
    .addOption(dataDirOption())
    .addOption(configOption())
    .action(async (opts: ConfigFlags & { email: string; password: string; authority: Authority; customer?: string }) => {
      if (opts.password.length === 0) throw new OutpostError('BAD_PARAM', 'password must not be empty');
      const passwordHash = await hashPassword(opts.password);
      const u = await withStore(opts, (entities) => entities.createUser({
        email: opts.email, passwordHash, authority: opts.authority, customerId: customerIdOf(entities, opts.customer),
      }));
      console.log(JSON.stringify({ id: u.id, email: u.email, authority: u.authority, customerId: u.customerId }));
    });

  const customer = program.command('customer').description('manage customers');
  customer.command('add')
    .description('create a customer')
    .requiredOption('--title <title>')
    .addOption(dataDirOption())
    .addOption(configOption())
    .action(async (opts: ConfigFlags & { title: string }) => {
      const c = await withStore(opts, (entities) => entities.createCustomer(opts.title));
      console.log(JSON.stringify({ id: c.id, title: c.title }));
    });

  const device = program.command('device').description('manage devices');
  device.command('add')
    .description('create a device with an access token')
    .requiredOption('--name <name>')
    .option('--type <type>', 'device type', 'default')
    .option('--token <token>', 'access token (default: 20 random alphanumerics)')
    .option('--customer <idOrTitle>', 'assign to this customer')
    .option('--upstream-token <token>', 'its access token on the upstream ThingsBoard (sync, CONTRACT §9)')
    .addOption(dataDirOption())
    .addOption(configOption())
    .action(async (opts: ConfigFlags & { name: string; type: string; token?: string; customer?: string; upstreamToken?: string }) => {
      const d = await withStore(opts, async (entities, env) => {
        const created = await entities.createDevice({
          name: opts.name, type: opts.type, token: opts.token, customerId: customerIdOf(entities, opts.customer) ?? NULL_UUID,
        });
        if (opts.upstreamToken !== undefined) await setUpstreamToken(env, created.id, opts.upstreamToken);
        return created;
      });
      console.log(JSON.stringify({ id: d.id, name: d.name, token: d.token }));
    });

  registerUpstreamCommands(device, dataDirOption, configOption);
  return program;
}

export async function runCli(argv: string[]): Promise<void> {
  const program = buildCli();
  try {
    await program.parseAsync(argv);
  } catch (err) {
    const e = err as { code?: string; exitCode?: number; message?: string };
    if (typeof e.code === 'string' && e.code.startsWith('commander.')) {
      // commander already printed its message (help, missing option, unknown command)
      process.exit(e.exitCode === 0 ? 0 : 2);
    }
    process.stderr.write(`outpost: ${e.message ?? String(err)}\n`);
    process.exit(1);
  }
}
