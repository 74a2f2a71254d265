/**
 * `outpost export <device>` (docs/cli.md): the CSV of `/api/download/deviceSeriesData`, byte for byte,
 * streamed (constant memory for any range), a progress line on stderr when it is a TTY. With `-o FILE` it is
 * written to a temporary file renamed into place at the end: Ctrl-C or a failure leaves no partial FILE.
 */
import { createWriteStream, openSync, renameSync, rmSync } from 'node:fs';
import type { Writable } from 'node:stream';
import { type Command, Option } from 'commander';
import { resolveDevice } from './backend.js';
import { example } from './common.js';
import { CliError } from './errors.js';
import { safeText } from './format.js';
import { type TechOptions, flushHeader, keysOption, techOptions, withBackend } from './options.js';
import { parseTime } from './time.js';

/** waits for 'drain' when the stream's buffer is full: memory stays at one chunk or so */
function writeTo(out: Writable): (chunk: Buffer) => Promise<void> {
  return (chunk) =>
    new Promise<void>((resolve, reject) => {
      const ok = out.write(Buffer.from(chunk), (err) => {
        if (err) reject(err);
      });
      if (ok) resolve();
      else out.once('drain', resolve);
    });
}

export function registerExport(program: Command): void {
  example(
    techOptions(program.command('export').argument('<device>', 'device name or id'), true)
      .description("the device's series as CSV (the REST download, byte for byte), streamed")
      .requiredOption('--from <T>', '(required) start (inclusive): epoch ms, ISO-8601, now, or -7d')
      .option('--to <T>', 'end (inclusive)', 'now')
      .addOption(new Option('--type <type>', 'time series or depth series').choices(['ts', 'ds']).default('ts'))
      .option('--keys <a,b>', 'only these keys, in this order (default: every key)')
      .option('-o, --output <file>', 'write to FILE (default: stdout)')
      .action(
        async (
          ref: string,
          o: TechOptions & { from: string; to: string; type: 'ts' | 'ds'; output?: string; keys?: string },
        ) => {
          const now = Date.now();
          // depth bounds are depths, not times
          const bound = (t: string, what: string): number => {
            if (o.type === 'ts') return parseTime(t, now, what);
            const n = Number(t);
            if (!Number.isFinite(n)) throw new CliError(`${what} "${t}" must be a depth (a number) with --type ds`);
            return n;
          };
          const start = bound(o.from, '--from');
          const end = o.type === 'ds' && o.to === 'now' ? Number.MAX_VALUE : bound(o.to, '--to');
          const file = o.output;
          const tmp = file === undefined ? undefined : `${file}.partial-${process.pid}`;
          // opened here, synchronously: a missing directory or a refused write is one line, before anything is read
          let fd: number | undefined;
          if (tmp !== undefined) {
            try {
              fd = openSync(tmp, 'wx', 0o644);
            } catch (err) {
              const e = err as NodeJS.ErrnoException;
              throw new CliError(
                `cannot write ${file}: ${e.code === 'ENOENT' ? 'its directory does not exist' : e.code === 'EACCES' ? 'permission denied' : e.message}`,
              );
            }
          }
          const out: Writable = fd === undefined ? process.stdout : createWriteStream('', { fd });
          // a failed write (disk full) reaches the write's or end's callback and fails the command in one line;
          // the stream's 'error' event, unheard, would end the process with a stack instead
          if (fd !== undefined) out.on('error', () => undefined);
          const cleanup = (): void => {
            if (tmp !== undefined) rmSync(tmp, { force: true });
          };
          const onSignal = (): void => {
            cleanup();
            process.exit(130);
          };
          process.once('SIGINT', onSignal);
          process.once('SIGTERM', onSignal);
          const progress = process.stderr.isTTY === true;
          let bytes = 0;
          let lastShown = 0;
          const write = writeTo(out);
          try {
            await withBackend(o, async (b) => {
              const dev = await resolveDevice(b, ref);
              await b.exportCsv(dev.id, o.type, start, end, keysOption(o.keys), async (chunk) => {
                flushHeader();
                await write(chunk);
                bytes += chunk.length;
                if (progress && Date.now() - lastShown > 200) {
                  lastShown = Date.now();
                  process.stderr.write(`\rexporting ${safeText(dev.name)}: ${(bytes / 1e6).toFixed(1)} MB`);
                }
              });
            });
            if (tmp !== undefined && file !== undefined) {
              await new Promise<void>((resolve, reject) =>
                out.end((err?: Error | null) => (err ? reject(err) : resolve())),
              );
              renameSync(tmp, file);
            }
            if (progress)
              process.stderr.write(`\rexported ${(bytes / 1e6).toFixed(1)} MB${file ? ` to ${file}` : ''}\n`);
            // with -o the terminal shows nothing else: say what was written (stdout stays the CSV's alone)
            else if (file !== undefined) process.stderr.write(`wrote ${file} (${bytes} bytes)\n`);
          } catch (err) {
            cleanup();
            throw err;
          } finally {
            process.off('SIGINT', onSignal);
            process.off('SIGTERM', onSignal);
          }
        },
      ),
    'outpost export pump-1 --from -7d -o pump-1.csv',
    'outpost export rig-3 --type ds --from 0 --to 6000 > depth.csv',
  );
}
