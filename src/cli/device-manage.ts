/**
 * Managing the devices one created (docs/cli.md): `device list` and `device show` read, locally or remotely as
 * the technician's commands do; `device rename` and `device delete` write where the store is written (the
 * daemon, or this process under the data dir's lock: common.ts `adminWrite`).
 */
import type { Command } from 'commander';
import type { ConfigFlags } from '../config/index.js';
import { resolveDevice } from './backend.js';
import type { DeviceRow } from './backend-types.js';
import { adminWrite, commandGroup, configOption, confirm, dataDirOption, example } from './common.js';
import { localTime, safeText, style, table, terminalColumns } from './format.js';
import { type TechOptions, print, techOptions, withBackend } from './options.js';

function lastActivity(ts: number | null): string {
  return ts === null ? 'never' : localTime(ts);
}

export function deviceListTable(rows: readonly DeviceRow[]): string {
  return table(
    ['NAME', 'TYPE', 'PROFILE', 'CUSTOMER', 'LAST ACTIVITY'],
    rows.map((d) => [d.name, d.type, d.profile, d.customer ?? '-', lastActivity(d.lastActivityTs)]),
    terminalColumns(),
    [],
    style(),
    new Set([4]),
  );
}

export function registerDeviceManage(program: Command): void {
  const device = commandGroup(program, 'device', 'manage devices');
  example(
    techOptions(device.command('list'))
      .description('every device: name, type, profile, customer, when it was last heard from')
      .action(async (o: TechOptions) =>
        withBackend(o, async (b) => {
          const rows = await b.devices();
          print(o.json ? JSON.stringify(rows) : rows.length === 0 ? '(no devices)' : deviceListTable(rows));
        }),
      ),
    'outpost device list --url http://gw-12.local:8080',
  );
  example(
    techOptions(device.command('show').argument('<device>', 'device name or id'))
      .description('one device: id, type, profile, customer, last activity and its credentials')
      .action(async (ref: string, o: TechOptions) =>
        withBackend(o, async (b) => {
          const dev = await resolveDevice(b, ref);
          const [rows, creds] = await Promise.all([b.devices(), b.credentials(dev.id)]);
          const row = rows.find((r) => r.id === dev.id);
          const c = JSON.parse(creds) as {
            credentialsType: string;
            credentialsId: string | null;
            credentialsValue: string | null;
          };
          if (o.json) return print(JSON.stringify({ ...row, credentials: c }));
          const lines: Array<[string, string]> = [
            ['name', dev.name],
            ['id', dev.id],
            ['type', row?.type ?? '-'],
            ['profile', row?.profile ?? '-'],
            ['customer', row?.customer ?? '-'],
            ['last activity', lastActivity(row?.lastActivityTs ?? null)],
            ['credentials', c.credentialsType],
          ];
          if (c.credentialsType === 'ACCESS_TOKEN') lines.push(['token', c.credentialsId ?? '-']);
          else if (c.credentialsType === 'MQTT_BASIC') lines.push(['mqtt basic', c.credentialsValue ?? '-']);
          else lines.push(['certificate', `${(c.credentialsValue ?? '').length} bytes of PEM (--json shows it)`]);
          print(lines.map(([k, v]) => `${k.padEnd(14)}${safeText(v)}`).join('\n'));
        }),
      ),
    'outpost device show pump-1',
  );
  example(
    device
      .command('rename')
      .argument('<device>', 'device name or id')
      .argument('<new-name>', 'its new name')
      .description('rename a device (its id, credentials and data stay)')
      .addOption(dataDirOption())
      .addOption(configOption())
      .action(async (ref: string, name: string, opts: ConfigFlags) => {
        print(JSON.stringify(await adminWrite(opts, { op: 'device.rename', device: ref, name })));
      }),
    'outpost device rename pump-1 pump-01',
  );
  example(
    device
      .command('delete')
      .argument('<device>', 'device name or id')
      .description('delete a device and all its data (it leaves queries and the upstream sync); asks first')
      .option('--yes', 'do not ask (required when stdin is not a terminal)')
      .addOption(dataDirOption())
      .addOption(configOption())
      .action(async (ref: string, opts: ConfigFlags & { yes?: boolean }) => {
        if (opts.yes !== true) await confirm(`delete device "${safeText(ref)}" and all its data?`);
        print(JSON.stringify(await adminWrite(opts, { op: 'device.delete', device: ref })));
      }),
    'outpost device delete pump-9',
    'outpost device delete pump-9 --yes',
  );
}
