/** `outpost tail <device>` (docs/cli.md): each new point as it is stored, until interrupted. */
import type { Command } from 'commander';
import { resolveDevice } from './backend.js';
import { example } from './common.js';
import { localTime, safeText, style } from './format.js';
import { type TechOptions, flushHeader, keysOption, techOptions, withBackend } from './options.js';

export function registerTail(program: Command): void {
  example(
    techOptions(program.command('tail').argument('<device>', 'device name or id'))
      .description('follow new points live (remote: the websocket API; local: the store) until Ctrl-C')
      .option('--keys <a,b>', 'only these keys')
      .action(async (ref: string, o: TechOptions & { keys?: string }) =>
        withBackend(o, async (b) => {
          const dev = await resolveDevice(b, ref);
          const stop = new AbortController();
          process.once('SIGINT', () => stop.abort());
          process.once('SIGTERM', () => stop.abort());
          const st = style();
          // on a terminal, silence until the next point looks like a hang: once watching, say what it waits for
          const onReady =
            process.stdout.isTTY === true && o.json !== true
              ? () => {
                  flushHeader();
                  process.stderr.write(
                    `${st.dim(`waiting for new points from ${safeText(dev.name)}${o.keys ? ` (${safeText(o.keys)})` : ''} on the ${b.where}; Ctrl-C to stop`)}\n`,
                  );
                }
              : undefined;
          await b.tail(
            dev.id,
            keysOption(o.keys),
            (p) => {
              flushHeader();
              process.stdout.write(
                o.json
                  ? `${JSON.stringify({ ts: p.ts, key: p.key, value: p.value })}\n`
                  : `${st.dim(localTime(p.ts))}  ${st.accent(safeText(p.key))}  ${safeText(p.value)}\n`,
              );
            },
            stop.signal,
            onReady,
          );
        }),
      ),
    'outpost tail pump-1 --keys temperature',
    'outpost tail pump-1 --json | jq .value',
  );
}
