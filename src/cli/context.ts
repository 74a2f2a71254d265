/**
 * `outpost context` (docs/cli.md): the gateway commands go to when given neither `--url`, `--data-dir` nor
 * `--config` (as kubectl's current context). `outpost login` sets it; `context use` switches between the
 * gateways logged in to; `context local` makes such commands read the local data dir again.
 */
import type { Command } from 'commander';
import { example } from './common.js';
import { CliError } from './errors.js';
import { safeText } from './format.js';
import { print } from './options.js';
import { normaliseUrl, readCredentials, readCurrentUrl, writeCurrentUrl } from './session.js';

export function registerContext(program: Command): void {
  const context = example(
    program
      .command('context')
      .description('show the gateways logged in to and the current one (where commands without --url go)')
      .option('--json', 'machine output: {"current","gateways":[{"url","email","authority"}]}')
      .action((o: { json?: boolean }) => {
        const all = readCredentials();
        const current = readCurrentUrl();
        if (o.json) {
          const gateways = Object.entries(all).map(([url, s]) => ({ url, email: s.email, authority: s.authority }));
          return print(JSON.stringify({ current: current ?? null, gateways }));
        }
        const lines = [
          current === undefined
            ? 'current: local (commands without --url read the data dir: --data-dir, OUTPOST_DATA_DIR or ./data)'
            : `current: ${current}`,
        ];
        for (const [url, s] of Object.entries(all))
          lines.push(`${url === current ? '*' : ' '} ${url}  ${safeText(s.email)} (${s.authority})`);
        if (Object.keys(all).length === 0) lines.push('  (not logged in to any gateway: outpost login --url URL)');
        print(lines.join('\n'));
      }),
    'outpost context',
    'outpost context use http://gw-12.local:8080',
    'outpost context local',
  );
  example(
    context
      .command('use')
      .argument('<url>', 'a gateway logged in to')
      .description('make commands without --url, --data-dir or --config go to this gateway')
      .action((raw: string) => {
        const url = normaliseUrl(raw);
        const known = Object.keys(readCredentials());
        if (!known.includes(url))
          throw new CliError(
            `not logged in to ${url}${known.length > 0 ? ` (logged in to ${known.join(', ')})` : ''}: run outpost login --url ${url}`,
          );
        writeCurrentUrl(url);
        print(`commands without --url, --data-dir or --config now go to ${url}`);
      }),
    'outpost context use http://gw-7.local:8080',
  );
  example(
    context
      .command('local')
      .description('make commands without --url read the local data dir (sessions are kept)')
      .action(() => {
        writeCurrentUrl(undefined);
        print('commands without --url now read the local data dir (--data-dir, OUTPOST_DATA_DIR or ./data)');
      }),
    'outpost context local  # commands without --url read ./data again',
  );
}
