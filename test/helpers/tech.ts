/**
 * A daemon set up for the technician's CLI tests (docs/cli.md): a tenant admin, customer Acme, devices pump-1
 * (Acme, two hours of t/n/s points, client and shared attributes) and valve-7 (no data), and a CLI environment
 * (its own credentials dir, TZ=UTC, NO_COLOR, 100 columns), logged in unless asked not to be.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import type { Test } from 'tap';
import { type CliResult, type Gateway, addDevice, cli, cliJson, http, startGateway, tempDir } from './server.js';
import { addUser, authHeaders, login } from './users.js';

export const HOUR = 3_600_000;

export interface TechGateway {
  readonly gw: Gateway;
  /** the CLI's XDG_CONFIG_HOME */
  readonly cfg: string;
  readonly credFile: string;
  readonly env: NodeJS.ProcessEnv;
  run(args: string[]): Promise<CliResult>;
  /** local and remote mode flags */
  readonly L: string[];
  readonly R: string[];
  readonly pump: { id: string };
  readonly now: number;
  readonly points: Array<{ ts: number; values: Record<string, unknown> }>;
  /** REST headers of the tenant admin */
  readonly H: Record<string, string>;
  readonly token: string;
}

export async function techGateway(t: Test, opts: { login?: boolean } = {}): Promise<TechGateway> {
  const gw = await startGateway(t);
  const cfg = tempDir(t);
  const env = { XDG_CONFIG_HOME: cfg, TZ: 'UTC', NO_COLOR: '1', COLUMNS: '100', OUTPOST_URL: '' };
  const run = (args: string[]): Promise<CliResult> => cli(args, env);
  await addUser(gw.dataDir, 'tech@example.com', 'pw', 'TENANT_ADMIN');
  await cliJson(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'Acme']);
  const [pump] = await Promise.all([
    addDevice(gw.dataDir, 'pump-1', ['--customer', 'Acme', '--token', 'PUMP1']),
    addDevice(gw.dataDir, 'valve-7', ['--token', 'VALVE7']),
  ]);
  const now = Date.now();
  const points = Array.from({ length: 120 }, (_, i) => ({
    ts: now - 2 * HOUR + i * 60_000,
    values: { t: 20 + (i % 9) / 2, n: i, s: `s${i % 3}` },
  }));
  t.equal((await http('POST', `${gw.url}/api/v1/PUMP1/telemetry`, points)).status, 200);
  t.equal((await http('POST', `${gw.url}/api/v1/PUMP1/attributes`, { fw: '1.2.3', slot: 4 })).status, 200);
  const { token } = await login(gw, 'tech@example.com', 'pw');
  const H = authHeaders(token);
  t.equal(
    (
      await http(
        'POST',
        `${gw.url}/api/plugins/telemetry/DEVICE/${pump.id}/attributes/SHARED_SCOPE`,
        { target: 21.5 },
        H,
      )
    ).status,
    200,
  );
  const R = ['--url', gw.url];
  if (opts.login !== false) {
    const r = await run(['login', ...R, '--username', 'tech@example.com', '--password', 'pw']);
    t.equal(r.code, 0, `login ${r.stderr}`);
  }
  return {
    gw,
    cfg,
    credFile: join(cfg, 'outpost', 'credentials.json'),
    env,
    run,
    L: ['--data-dir', gw.dataDir],
    R,
    pump,
    now,
    points,
    H,
    token,
  };
}

export function ok(t: Test, r: CliResult, what: string): string {
  t.equal(r.code, 0, `${what}: exit 0${r.code === 0 ? '' : ` (${r.stderr.trim()})`}`);
  return r.stdout;
}

/** A failed command: exit 1 and exactly one line on stderr (docs/cli.md). */
export function failsOneLine(t: Test, r: CliResult, msg: RegExp, what: string): void {
  t.equal(r.code, 1, `${what}: exit 1`);
  const errLines = r.stderr.trimEnd().split('\n');
  t.equal(errLines.length, 1, `${what}: one line (${r.stderr.trim()})`);
  t.match(errLines[0], msg, what);
}

/** whether `tmux` is on this machine (the screen tests are skipped, saying so, where it is not) */
export const hasTmux = ((): boolean => {
  try {
    execFileSync('tmux', ['-V'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
