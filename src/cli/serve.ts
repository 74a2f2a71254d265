/** `outpost serve` (docs/cli.md): the daemon, until SIGTERM/SIGINT, then a flushed exit 0. */
import type { Command } from 'commander';
import type { ConfigFlags } from '../config/index.js';
import { configOption, dataDirOption, example } from './common.js';

export function registerServe(program: Command): void {
  example(
    program
      .command('serve')
      .description('run the gateway daemon')
      .option('--host <host>', 'listen address (env OUTPOST_HOST, default 0.0.0.0)')
      .option('--port <port>', 'listen port, 0 for any free one (env OUTPOST_PORT, default 8080)')
      .addOption(dataDirOption())
      .addOption(configOption())
      .option('--tls-cert <file>', 'PEM certificate: serve HTTPS/WSS on --port')
      .option('--tls-key <file>', 'PEM private key for --tls-cert')
      .option('--check-config', 'check the configuration (file, environment, options) and exit: starts nothing')
      .action(async (opts: ConfigFlags & { checkConfig?: boolean }) => {
        if (opts.checkConfig === true) {
          // the same loading and checks as a start; a bad value fails in one line naming it
          const { loadConfig, checkServeConfig } = await import('../config/index.js');
          const config = loadConfig(opts);
          checkServeConfig(config);
          const source = opts.config ?? process.env['OUTPOST_CONFIG'];
          console.log(
            `config OK${source ? ` (${source})` : ' (defaults and environment)'}: data dir ${config.dataDir}, ${config.tls.cert === '' ? 'HTTP' : 'HTTPS'} ${config.host}:${config.port}${config.http.plainPort === 0 ? '' : `, plain HTTP port ${config.http.plainPort}`}, MQTT port ${config.mqtt.port}${config.sync.url === '' ? '' : `, sync to ${config.sync.url}`}`,
          );
          return;
        }
        const [{ loadConfig }, { startServer }] = await Promise.all([
          import('../config/index.js'),
          import('../server.js'),
        ]);
        const config = loadConfig(opts);
        // everything the daemon creates (store, log segments, keys) is its user's alone, whatever the shell's umask
        process.umask(0o077);
        // The handlers go in before the server starts: until a process has one, SIGINT/SIGTERM kill it outright,
        // and a signal sent as soon as "listening" is logged (systemd, a test, a technician's ^C) would skip the
        // flush. A signal during start-up is acted on once the store is open.
        let requested: string | undefined;
        let stop = (signal: string): void => {
          requested ??= signal;
        };
        process.on('SIGTERM', () => stop('SIGTERM'));
        process.on('SIGINT', () => stop('SIGINT'));
        const server = await startServer(config);
        let stopping = false;
        stop = (signal: string): void => {
          if (stopping) return;
          stopping = true;
          server.services.log.info(`${signal} received: closing listeners and flushing the store`);
          server.close().then(
            () => process.exit(0),
            (err: unknown) => {
              server.services.log.error(`shutdown failed: ${String(err)}`);
              process.exit(1);
            },
          );
        };
        if (requested !== undefined) stop(requested);
      }),
    'outpost serve --port 8080 --data-dir /var/lib/outpost',
    'outpost serve --config /etc/outpost/config.json --check-config',
  );
}
