/** `outpost rpc <device> <method>` (docs/cli.md, docs/api.md): prints the device's reply. */
import type { Command } from 'commander';
import { resolveDevice } from './backend.js';
import { example } from './common.js';
import { CliError } from './errors.js';
import { safeText } from './format.js';
import { type TechOptions, print, techOptions, withBackend } from './options.js';
import { parseDuration } from './time.js';

export function registerRpc(program: Command): void {
  example(
    techOptions(
      program.command('rpc').argument('<device>', 'device name or id').argument('<method>', 'RPC method'),
      true,
    )
      .description('send a server-side RPC to a device and print its reply (needs the daemon: --url)')
      .option('--params <json>', 'the params, as JSON', '{}')
      .option('--oneway', 'do not wait for a reply')
      .option('--timeout <D>', 'how long to wait: 30s, 1m or ms (the gateway raises it to its minimum)')
      .action(
        async (
          ref: string,
          method: string,
          o: TechOptions & { params: string; oneway?: boolean; timeout?: string },
        ) => {
          try {
            JSON.parse(o.params);
          } catch {
            throw new CliError(`--params is not JSON: ${o.params}`);
          }
          const timeout = o.timeout === undefined ? undefined : parseDuration(o.timeout, '--timeout');
          await withBackend(o, async (b) => {
            const dev = await resolveDevice(b, ref);
            const reply = await b.rpc(dev.id, method, o.params, o.oneway === true, timeout);
            if (reply !== '') print(reply);
            // a one-way RPC has no reply: say it went out rather than print nothing
            else if (o.oneway === true && o.json !== true)
              print(`sent ${safeText(method)} to ${safeText(dev.name)} (one-way: no reply is awaited)`);
          });
        },
      ),
    'outpost rpc pump-1 setValve --params \'{"open":true}\' --url http://gw-12.local:8080',
  );
}
