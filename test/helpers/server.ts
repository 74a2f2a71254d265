/**
 * Black-box test harness: runs the real compiled `outpost serve` on port 0 with a temp data dir,
 * waits for its "listening" log line, and talks HTTP to it. The CLI is run the same way.
 */
import './sandbox.js';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { RpcStatus } from '../../src/rpc/broker.js';
import { waitFor } from './wait.js';

/** dist/src/main.js, found relative to this compiled file (dist/test/helpers/server.js). */
export const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));

export interface Teardown {
  teardown(fn: () => void | Promise<void>): void;
}

export function tempDir(t: Teardown, prefix = 'outpost-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function cli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(process.execPath, [MAIN, ...args], { env: { ...process.env, ...env } }, (err, stdout, stderr) => {
      const code = err
        ? typeof (err as { code?: unknown }).code === 'number'
          ? (err as { code: number }).code
          : 1
        : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** Runs a CLI command that must succeed and print one JSON line. */
export async function cliJson<T = Record<string, string>>(args: string[]): Promise<T> {
  const r = await cli(args);
  if (r.code !== 0) throw new Error(`outpost ${args.join(' ')} failed (${r.code}): ${r.stderr}`);
  return JSON.parse(r.stdout.trim()) as T;
}

export interface Gateway {
  /** the serve port's URL (the first of the listening line): HTTPS with --tls-cert, else plain HTTP */
  readonly url: string;
  readonly port: number;
  /**
   * the plain HTTP URL (the serve port without a certificate, `http.plainPort` beside HTTPS with one) and the
   * HTTPS one, as the listening line names them ('' = not listening)
   */
  readonly httpUrl: string;
  readonly httpsUrl: string;
  readonly dataDir: string;
  readonly proc: ChildProcess;
  /** log lines so far */
  readonly logs: string[];
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export interface StartOptions {
  dataDir?: string;
  args?: string[];
  env?: NodeJS.ProcessEnv;
}

export async function startGateway(t: Teardown, opts: StartOptions = {}): Promise<Gateway> {
  const dataDir = opts.dataDir ?? tempDir(t);
  const proc = spawn(
    process.execPath,
    [MAIN, 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', dataDir, ...(opts.args ?? [])],
    {
      env: { ...process.env, ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const logs: string[] = [];
  let exited: Promise<number | null> = new Promise((resolve) => proc.once('exit', (code) => resolve(code)));
  const listening = await new Promise<string>((resolve, reject) => {
    let buf = '';
    const onData = (chunk: Buffer): void => {
      buf += chunk.toString();
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        logs.push(line);
        if (/listening on https?:\/\//.test(line)) resolve(line);
      }
    };
    proc.stderr?.on('data', onData);
    proc.stdout?.on('data', onData);
    void exited.then((code) =>
      reject(new Error(`gateway exited with ${code} before listening:\n${logs.join('\n')}${buf}`)),
    );
  });
  const portOf = (scheme: string): number => Number(new RegExp(`${scheme}://[^:]+:(\\d+)`).exec(listening)?.[1] ?? 0);
  const [httpPort, httpsPort] = [portOf('http'), portOf('https')];
  const first = /listening on (https?):\/\/[^:]+:(\d+)/.exec(listening);
  const port = Number(first?.[2]);
  const gw: Gateway = {
    url: `${first?.[1]}://127.0.0.1:${port}`,
    port,
    httpUrl: httpPort > 0 ? `http://127.0.0.1:${httpPort}` : '',
    httpsUrl: httpsPort > 0 ? `https://127.0.0.1:${httpsPort}` : '',
    dataDir,
    proc,
    logs,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode;
      proc.kill(signal);
      return exited;
    },
  };
  t.teardown(async () => {
    await gw.stop('SIGKILL');
  });
  exited = exited.then((c) => c);
  return gw;
}

export interface HttpResult {
  status: number;
  text: string;
  headers: Headers;
  json<T = unknown>(): T;
}

export async function http(
  method: string,
  url: string,
  body?: string | Buffer | object,
  headers: Record<string, string> = {},
): Promise<HttpResult> {
  const init: RequestInit = { method, headers: { ...headers } };
  if (body !== undefined) {
    init.body = typeof body === 'string' || Buffer.isBuffer(body) ? (body as string) : JSON.stringify(body);
    (init.headers as Record<string, string>)['content-type'] ??= 'application/json';
  }
  const res = await fetch(url, init);
  const text = await res.text();
  return { status: res.status, text, headers: res.headers, json: <T>() => JSON.parse(text) as T };
}

/** A device created through the CLI. */
export async function addDevice(
  dataDir: string,
  name: string,
  extra: string[] = [],
): Promise<{ id: string; name: string; token: string }> {
  return cliJson(['device', 'add', '--data-dir', dataDir, '--name', name, ...extra]);
}

/**
 * Polls `GET /api/outpost/status` (every `intervalMs`) until `pred` holds for its body, and resolves with that
 * body: the daemon does things after it answers a request (registers a poll, expires a queue, backs off), so a
 * test waits for the state, not for a fixed time (waitFor). Throws after `timeoutMs`.
 */
export async function waitStatus<S = Record<string, unknown>>(
  gw: Pick<Gateway, 'url'>,
  headers: Record<string, string>,
  pred: (status: S) => boolean,
  timeoutMs = 20_000,
  intervalMs = 20,
): Promise<S> {
  let last = '';
  return waitFor(
    async () => {
      const r = await http('GET', `${gw.url}/api/outpost/status`, undefined, headers);
      if (r.status !== 200) throw new Error(`status answered ${r.status}: ${r.text}`);
      last = r.text;
      const status = r.json<S>();
      return pred(status) ? status : undefined;
    },
    { timeout: timeoutMs, interval: intervalMs, message: () => `a status that matches; the last: ${last}` },
  );
}

/** waitStatus on the status body's `longPoll` section (the long-poll and RPC counters). */
export async function waitLongPoll(
  gw: Pick<Gateway, 'url'>,
  headers: Record<string, string>,
  pred: (s: RpcStatus) => boolean,
): Promise<RpcStatus> {
  return (await waitStatus<{ longPoll: RpcStatus }>(gw, headers, (s) => pred(s.longPoll))).longPoll;
}

/**
 * Resolves with the first `count` log lines of `gw` that match `pattern`, once they are logged, counting from
 * line `from` (take `gw.logs.length` before an action to wait for the lines it causes); throws after `timeoutMs`.
 */
export async function waitLogLines(
  gw: Pick<Gateway, 'logs'>,
  pattern: RegExp,
  count = 1,
  opts: { from?: number; timeoutMs?: number } = {},
): Promise<string[]> {
  const matching = (): string[] => gw.logs.slice(opts.from ?? 0).filter((l) => pattern.test(l));
  return waitFor(
    () => {
      const found = matching();
      return found.length >= count && found.slice(0, count);
    },
    {
      timeout: opts.timeoutMs ?? 20_000,
      message: () => `${count} log lines matching ${pattern} (${matching().length} did):\n${gw.logs.join('\n')}`,
    },
  );
}
