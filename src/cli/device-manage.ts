/**
 * Managing the devices one created (docs/cli.md): `device list` and `device show` read, and `device rename` and
 * `device delete` write, where every command acts (target.ts): a gateway over REST, or a data dir, written where
 * its store is written (the daemon, or this process under the data dir's lock: common.ts `adminWrite`).
 */
import type { Command } from 'commander';
import { resolveDevice } from './backend.js';
import type { DeviceRow, ModeOptions } from './backend-types.js';
import { commandGroup, confirm, example } from './common.js';
import { localTime, safeText, style, table, terminalColumns } from './format.js';
import { type TechOptions, print, techOptions, withBackend, withRemote, writeOptions } from './options.js';
import { targetOf } from './target.js';
import { printWrite, writeLocal } from './write.js';

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
    writeOptions(
      device
        .command('rename')
        .argument('<device>', 'device name or id')
        .argument('<new-name>', 'its new name')
        .description('rename a device (its id, credentials and data stay)'),
    ).action(async (ref: string, name: string, o: ModeOptions) => {
      const t = await targetOf(o, { command: 'device rename', remote: true });
      if (t.mode === 'local') return printWrite(t, await writeLocal(t, o, { op: 'device.rename', device: ref, name }));
      await withRemote(t.url, async (b) => {
        const dev = await resolveDevice(b, ref);
        printWrite(t, { id: dev.id, oldName: dev.name, name: await b.renameDevice(dev.id, name) }, true, b);
      });
    }),
    'outpost device rename pump-1 pump-01',
  );
  example(
    writeOptions(
      device
        .command('delete')
        .argument('<device>', 'device name or id')
        .description('delete a device and all its data (it leaves queries and the upstream sync); asks first')
        .option('--yes', 'do not ask (required when stdin is not a terminal)'),
    ).action(async (ref: string, o: ModeOptions & { yes?: boolean }) => {
      const t = await targetOf(o, { command: 'device delete', remote: true });
      const ask = (name: string): Promise<void> =>
        o.yes === true
          ? Promise.resolve()
          : confirm(
              `delete device "${safeText(name)}" and all its data ${t.mode === 'local' ? 'in' : 'on'} ${t.where}?`,
            );
      if (t.mode === 'local') {
        await ask(ref);
        return printWrite(t, await writeLocal(t, o, { op: 'device.delete', device: ref }));
      }
      await withRemote(t.url, async (b) => {
        const dev = await resolveDevice(b, ref);
        await ask(dev.name);
        await b.deleteDevice(dev.id);
        printWrite(t, { id: dev.id, name: dev.name, deleted: true }, true, b);
      });
    }),
    'outpost device delete pump-9',
    'outpost device delete pump-9 --yes --url http://gw-12.local:8080',
  );
}
