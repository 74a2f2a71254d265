/**
 * The CLI's part of upstream sync (the device mapping of docs/sync.md): `outpost device upstream <name|id> --token T`
 * and `device add --upstream-token T` (device.ts). The token goes to the sync outbox (`['t', deviceId]`,
 * src/store/outbox.ts), durably, where the running daemon reads it before its next request for that device (a
 * device parked for want of a token resumes within seconds).
 */
import type { Command } from 'commander';
import type { ConfigFlags } from '../config/index.js';
import { OutpostError } from '../errors.js';
import type { StoreEnv } from '../store/env.js';
import { commandGroup, configOption, dataDirOption, example, withStore } from './common.js';

/** Stores `token` as the device's upstream token; resolves once it is on disk. */
export async function setUpstreamToken(env: StoreEnv, deviceId: string, token: string): Promise<void> {
  if (token === '') throw new OutpostError('BAD_PAYLOAD', 'the upstream token must not be empty');
  await env.outbox.put(['t', deviceId], { token, provisioned: false });
  await env.flushed();
}

export function registerUpstream(program: Command): void {
  const device = commandGroup(program, 'device', 'manage devices');
  example(
    device
      .command('upstream <device>')
      .description('set the access token a device uses on the upstream ThingsBoard (sync.url)')
      .requiredOption('--token <token>', "the device's access token upstream")
      .addOption(dataDirOption())
      .addOption(configOption())
      .action(async (ref: string, opts: ConfigFlags & { token: string }) => {
        const d = await withStore(opts, async (entities, env) => {
          const found = entities.device(ref) ?? entities.byName('DEVICE', ref);
          if (found === undefined || found.entityType !== 'DEVICE')
            throw new OutpostError('ENTITY_NOT_FOUND', `no device with id or name "${ref}"`);
          await setUpstreamToken(env, found.id, opts.token);
          return found;
        });
        console.log(JSON.stringify({ id: d.id, name: d.name, upstreamToken: opts.token }));
      }),
    'outpost device upstream pump-1 --token UPSTREAM_TOKEN_OF_PUMP_1',
  );
}
