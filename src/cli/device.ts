/**
 * `outpost device add` (docs/cli.md): prints `{"id","name","token"}`. `--upstream-token` sets the device's token
 * on the upstream (docs/sync.md) in the same run; `device upstream` (upstream.ts) sets it later.
 */
import type { Command } from 'commander';
import type { ConfigFlags } from '../config/index.js';
import { adminWrite, commandGroup, configOption, dataDirOption, example } from './common.js';

export function registerDevice(program: Command): void {
  const device = commandGroup(program, 'device', 'manage devices');
  example(
    device
      .command('add')
      .description('create a device with an access token')
      .requiredOption('--name <name>')
      .option('--type <type>', 'device type: its device profile, created if no profile has the name', 'default')
      .option('--token <token>', 'access token (default: 20 random alphanumerics)')
      .option('--customer <idOrTitle>', 'assign to this customer')
      .option('--upstream-token <token>', 'its access token on the upstream ThingsBoard (sync.url, docs/sync.md)')
      .option('--gateway', 'a gateway: may publish for sub-devices over the MQTT Gateway API (v1/gateway/*)')
      .addOption(dataDirOption())
      .addOption(configOption())
      .action(
        async (
          opts: ConfigFlags & {
            name: string;
            type: string;
            token?: string;
            customer?: string;
            upstreamToken?: string;
            gateway?: boolean;
          },
        ) => {
          const op = {
            op: 'device.add',
            name: opts.name,
            type: opts.type,
            token: opts.token,
            customer: opts.customer,
            gateway: opts.gateway === true,
            upstreamToken: opts.upstreamToken,
          } as const;
          console.log(JSON.stringify(await adminWrite(opts, op)));
        },
      ),
    'outpost device add --name pump-1 --type pump --customer "Acme Water"',
    'outpost device add --name pump-2 --upstream-token UPSTREAM_TOKEN_OF_PUMP_2',
    'outpost device add --name modbus-gw --gateway',
  );
}
