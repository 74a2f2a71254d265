/** `outpost tail <device>` (docs/cli.md): each new point as it is stored, until interrupted. */
import type { Command } from 'commander';
import { resolveDevice } from './backend.js';
import { example } from './common.js';
import { cut, displayWidth, fitCells, localTime, safeText, style, terminalColumns } from './format.js';
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
                  const lines = waitingLines(dev.name, o.keys, b.where, process.stderr.columns ?? terminalColumns());
                  process.stderr.write(lines.map((l) => `${st.dim(l)}\n`).join(''));
                }
              : undefined;
          await b.tail(
            dev.id,
            keysOption(o.keys),
            (p) => {
              flushHeader();
              if (o.json) {
                process.stdout.write(`${JSON.stringify({ ts: p.ts, key: p.key, value: p.value })}\n`);
                return;
              }
              // never wider than the terminal, as wide as it is now: a wrapped line reads as two points
              const [time, key, value] = fitCells(
                [localTime(p.ts), safeText(p.key), safeText(p.value)],
                terminalColumns(),
                new Set([0]),
              );
              process.stdout.write(`${st.dim(time ?? '')}  ${st.accent(key ?? '')}  ${value ?? ''}\n`);
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

/** What the tail waits for, on one line when it fits; else the device (its name cut) and where, on two. */
function waitingLines(name: string, keys: string | undefined, where: string, width: number): string[] {
  const what = `${safeText(name)}${keys ? ` (${safeText(keys)})` : ''}`;
  const one = `waiting for new points from ${what} on the ${where}; Ctrl-C to stop`;
  if (displayWidth(one) <= width) return [one];
  return [cut(`waiting for new points from ${what}`, width), cut(`  on the ${where}; Ctrl-C to stop`, width)];
}
