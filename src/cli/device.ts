/**
 * `outpost device add` (docs/cli.md): prints `{"id","name","token"}`, or `{"id","name","credentialsType",
 * "credentialsId"}` for MQTT Basic (`--mqtt-basic`) or X.509 (`--cert`) credentials. `--upstream-token` sets the
 * device's token on the upstream (docs/sync.md) in the same run; `device upstream` (upstream.ts) sets it later.
 * `outpost device credentials <device>` shows a device's credentials as ThingsBoard's REST does.
 */
import { readFileSync } from 'node:fs';
import { type Command, Option } from 'commander';
import type { CredentialsInput } from '../admin/ops.js';
import type { ConfigFlags } from '../config/index.js';
import { resolveDevice } from './backend.js';
import { commandGroup, configOption, dataDirOption, example } from './common.js';
import { CliError } from './errors.js';
import { type TechOptions, print, techOptions, withBackend, withRemote } from './options.js';
import { targetOf } from './target.js';
import { printWrite, writeLocal } from './write.js';

/** `clientId:userName:password`, any part empty (= none); the password is the rest, so it may hold ':'. */
export function mqttBasicOption(spec: string): CredentialsInput {
  const first = spec.indexOf(':');
  const second = first < 0 ? -1 : spec.indexOf(':', first + 1);
  if (first < 0 || second < 0)
    throw new CliError('--mqtt-basic takes CLIENT_ID:USER_NAME:PASSWORD (parts may be empty)');
  const part = (s: string): string | null => (s === '' ? null : s);
  const value = {
    clientId: part(spec.slice(0, first)),
    userName: part(spec.slice(first + 1, second)),
    password: part(spec.slice(second + 1)),
  };
  return { credentialsType: 'MQTT_BASIC', credentialsValue: JSON.stringify(value) };
}

function certOption(path: string): CredentialsInput {
  let pem: string;
  try {
    pem = readFileSync(path, 'utf8');
  } catch (err) {
    throw new CliError(`--cert ${path}: ${(err as Error).message}`);
  }
  const m = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/.exec(pem);
  if (m === null) throw new CliError(`--cert ${path}: no PEM certificate in it`);
  return { credentialsType: 'X509_CERTIFICATE', credentialsValue: m[0] };
}

export function registerDevice(program: Command): void {
  const device = commandGroup(program, 'device', 'manage devices');
  example(
    device
      .command('add')
      .description('create a device with an access token, MQTT Basic credentials or an X.509 certificate')
      .requiredOption('--name <name>', '(required) a name unique among devices')
      .option('--type <type>', 'device type: its device profile, created if no profile has the name', 'default')
      .option('--token <token>', 'access token (default: 20 random alphanumerics)')
      .option('--mqtt-basic <clientId:userName:password>', 'MQTT Basic credentials instead of a token')
      .option('--cert <file.pem>', "the device's X.509 certificate instead of a token (MQTT over TLS)")
      .option('--customer <idOrTitle>', 'assign to this customer')
      .option('--upstream-token <token>', 'its access token on the upstream ThingsBoard (sync.url, docs/sync.md)')
      .option('--gateway', 'a gateway: may publish for sub-devices over the MQTT Gateway API (v1/gateway/*)')
      .addOption(new Option('--url <url>', 'a remote gateway (env OUTPOST_URL), after outpost login'))
      .addOption(dataDirOption())
      .addOption(configOption())
      .action(
        async (
          opts: ConfigFlags & {
            url?: string;
            name: string;
            type: string;
            token?: string;
            mqttBasic?: string;
            cert?: string;
            customer?: string;
            upstreamToken?: string;
            gateway?: boolean;
          },
        ) => {
          if ([opts.token, opts.mqttBasic, opts.cert].filter((o) => o !== undefined).length > 1)
            throw new CliError('give one of --token, --mqtt-basic and --cert');
          const credentials =
            opts.mqttBasic !== undefined
              ? mqttBasicOption(opts.mqttBasic)
              : opts.cert !== undefined
                ? certOption(opts.cert)
                : undefined;
          const op = {
            op: 'device.add',
            name: opts.name,
            type: opts.type,
            token: opts.token,
            credentials,
            customer: opts.customer,
            gateway: opts.gateway === true,
            upstreamToken: opts.upstreamToken,
          } as const;
          const t = await targetOf(opts, { command: 'device add', remote: true, creates: true });
          if (t.mode === 'local') return printWrite(t, await writeLocal(t, opts, op), false);
          // what REST's device create takes; credentials and the upstream token are set on the gateway itself
          if (credentials !== undefined || opts.upstreamToken !== undefined)
            throw new CliError(
              `--mqtt-basic, --cert and --upstream-token act on a local data dir only, and commands go to ${t.where}: give --data-dir DIR or --config FILE; nothing was changed`,
            );
          await withRemote(t.url, async (b) => printWrite(t, await b.addDevice(op), false, b));
        },
      ),
    'outpost device add --name pump-1 --type pump --customer "Acme Water"',
    'outpost device add --name plc-7 --mqtt-basic plc-7:plc:s3cret',
    'outpost device add --name meter-3 --cert meter-3.pem',
    'outpost device add --name pump-2 --upstream-token UPSTREAM_TOKEN_OF_PUMP_2',
    'outpost device add --name modbus-gw --gateway',
  );
  example(
    techOptions(device.command('credentials').argument('<device>', 'device name or id'), true)
      .description("a device's credentials as ThingsBoard's REST shows them (an MQTT Basic password included)")
      .action(async (ref: string, o: TechOptions) =>
        withBackend(o, async (b) => {
          const dev = await resolveDevice(b, ref);
          print(await b.credentials(dev.id));
        }),
      ),
    'outpost device credentials plc-7',
  );
}
