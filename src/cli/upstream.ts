/**
 * The CLI's part of upstream sync (CONTRACT §9 device mapping): `outpost device upstream <name|id> --token T`
 * and `device add --upstream-token T`. The token goes to the sync outbox (`['t', deviceId]`, src/store/outbox.ts),
 * durably, where the running daemon reads it before its next request for that device (a device parked for
 * want of a token resumes within seconds).
 */
import type { Command } from 'commander';
import { type ConfigFlags, loadConfig } from '../config/index.js';
import { OutpostError } from '../errors.js';
import { EntityStore } from '../store/entities.js';
import type { StoreEnv } from '../store/env.js';
import { openStoreEnv } from '../store/env.js';

/** Stores `token` as the device's upstream token; resolves once it is on disk. */
export async function setUpstreamToken(env: StoreEnv, deviceId: string, token: string): Promise<void> {
  if (token === '') throw new OutpostError('BAD_PAYLOAD', 'the upstream token must not be empty');
  await env.outbox.put(['t', deviceId], { token, provisioned: false });
  await env.flushed();
}

export function registerUpstreamCommands(device: Command, dataDirOption: () => import('commander').Option, configOption: () => import('commander').Option): void {
  device.command('upstream <device>')
    .description('set the access token a device uses on the upstream ThingsBoard (sync.url)')
    .requiredOption('--token <token>', 'the device\'s access token upstream')
    .addOption(dataDirOption())
    .addOption(configOption())
    .action(async (ref: string, opts: ConfigFlags & { token: string }) => {
      const config = loadConfig(opts);
      const env = openStoreEnv({ dataDir: config.dataDir, mapSizeBytes: config.store.mapSizeBytes });
      try {
        const entities = new EntityStore(env);
        const d = entities.device(ref) ?? entities.byName('DEVICE', ref);
        if (d === undefined || d.entityType !== 'DEVICE') throw new OutpostError('ENTITY_NOT_FOUND', `no device with id or name "${ref}"`);
        await setUpstreamToken(env, d.id, opts.token);
        console.log(JSON.stringify({ id: d.id, name: d.name, upstreamToken: opts.token }));
      } finally {
        await env.close();
      }
    });
}
