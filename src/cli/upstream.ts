/**
 * The CLI's part of upstream sync (the device mapping of docs/sync.md): `outpost device upstream <name|id> --token T`
 * and `device add --upstream-token T` (device.ts), both run by src/admin/ops.ts. The token goes to the sync outbox
 * (`['t', deviceId]`, src/store/outbox.ts), durably, where the daemon reads it before its next request for that
 * device (a device parked for want of a token resumes within seconds).
 */
import type { Command } from 'commander';
import type { ConfigFlags } from '../config/index.js';
import { commandGroup, configOption, dataDirOption, example } from './common.js';
import { targetOf } from './target.js';
import { printWrite, writeLocal } from './write.js';

export function registerUpstream(program: Command): void {
  const device = commandGroup(program, 'device', 'manage devices');
  example(
    device
      .command('upstream <device>')
      .description('set the access token a device uses on the upstream ThingsBoard (sync.url)')
      .requiredOption('--token <token>', "(required) the device's access token upstream")
      .addOption(dataDirOption())
      .addOption(configOption())
      .action(async (ref: string, opts: ConfigFlags & { token: string }) => {
        const t = await targetOf(opts, { command: 'device upstream', remote: false });
        if (t.mode === 'local')
          printWrite(t, await writeLocal(t, opts, { op: 'device.upstream', device: ref, token: opts.token }));
      }),
    'outpost device upstream pump-1 --token UPSTREAM_TOKEN_OF_PUMP_1',
  );
}
