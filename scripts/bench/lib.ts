/** Shared by the benchmarks: process memory readings, medians, numeric command-line flags and a lean HTTP client. */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { type Socket, connect } from 'node:net';

/** Anonymous resident memory of a process (heap, stacks, buffers; not mapped files such as LMDB's). Linux only. */
export function rssAnonBytes(pid: number): number {
  const m = /RssAnon:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error('RssAnon not found in /proc/<pid>/status (Linux only)');
  return Number(m[1]) * 1024;
}

/** VmHWM: the process's peak resident set so far (Linux). */
export function peakRssBytes(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error('VmHWM not found in /proc/<pid>/status (Linux only)');
  return Number(m[1]) * 1024;
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

/** `--name <positive number>` from argv, or the fallback. */
export function argValue(name: string, fallback: number): number {
  const i = process.argv.indexOf(name);
  const v = i >= 0 ? Number(process.argv[i + 1]) : NaN;
  return Number.isFinite(v) && v > 0 ? v : fallback;
}

/** Spawns `node <args>` and resolves with its port once it logs "listening on http(s)://host:port". */
export function spawnListening(
  args: readonly string[],
  label = args.join(' '),
): Promise<{ proc: ChildProcess; port: number }> {
  const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let buf = '';
    const onData = (c: Buffer): void => {
      buf += c.toString();
      const m = /listening on https?:\/\/[^:]+:(\d+)/.exec(buf);
      if (m) resolve({ proc, port: Number(m[1]) });
    };
    proc.stderr?.on('data', onData);
    proc.stdout?.on('data', onData);
    proc.once('exit', (code) => reject(new Error(`${label} exited with ${code}: ${buf}`)));
  });
}

/** SIGTERM, then waits for the exit (the daemon flushes its store first). */
export async function stopDaemon(d: { proc: ChildProcess }): Promise<void> {
  if (d.proc.exitCode !== null) return;
  const exited = new Promise<void>((r) => d.proc.once('exit', () => r()));
  d.proc.kill('SIGTERM');
  await exited;
}

/** `--name <positive integer>` from argv, `def` when absent; anything else is an error (no silent fallback). */
export function intArg(argv: readonly string[], name: string, def: number): number {
  const i = argv.indexOf(`--${name}`);
  const v = i >= 0 ? Number(argv[i + 1]) : def;
  if (!Number.isInteger(v) || v <= 0) throw new Error(`--${name} must be a positive integer`);
  return v;
}

/**
 * One keep-alive HTTP/1.1 connection for bulk loads: a request goes out as one pre-encoded buffer (`encodeRequest`:
 * head and body) and only the status line, Content-Length and body of the answer are read, one request at a
 * time. On the 2 shared cores the load generator's CPU is taken from the server under test: for a 65 KB body
 * this costs 0.10–0.14 ms of CPU per request where node:http costs 0.31–0.36 ms (docs/benchmarks-history.md,
 * "Downsampling"). Answers must carry a Content-Length or have no body (204, 304); a chunked answer is an error.
 */
export class RawHttpConnection {
  private buf: Buffer = Buffer.alloc(0);
  private pending: { resolve: (r: { status: number; body: Buffer }) => void; reject: (e: Error) => void } | undefined;
  private failure: Error | undefined;

  private constructor(private readonly socket: Socket) {
    socket.setNoDelay(true);
    socket.on('data', (d: Buffer) => {
      this.buf = this.buf.length === 0 ? d : Buffer.concat([this.buf, d]);
      this.deliver();
    });
    const fail = (e: Error): void => {
      this.failure ??= e;
      this.pending?.reject(this.failure);
      this.pending = undefined;
    };
    socket.on('error', fail);
    socket.on('close', () => fail(new Error('connection closed by the server')));
  }

  static open(port: number, host = '127.0.0.1'): Promise<RawHttpConnection> {
    return new Promise((resolve, reject) => {
      const socket = connect(port, host);
      socket.once('error', reject);
      socket.once('connect', () => {
        socket.off('error', reject);
        resolve(new RawHttpConnection(socket));
      });
    });
  }

  /** Sends one encoded request and resolves with its answer (one at a time per connection). */
  request(bytes: Buffer): Promise<{ status: number; body: Buffer }> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.pending !== undefined)
      return Promise.reject(new Error('a request is already in flight on this connection'));
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject };
      this.socket.write(bytes);
    });
  }

  close(): void {
    this.socket.destroy();
  }

  private deliver(): void {
    if (this.pending === undefined) return;
    const headEnd = this.buf.indexOf('\r\n\r\n');
    if (headEnd < 0) return;
    const head = this.buf.toString('latin1', 0, headEnd);
    const status = Number(head.slice(9, 12));
    if (/\r\ntransfer-encoding:/i.test(head)) {
      this.pending.reject(new Error(`chunked answers are not supported: ${head.split('\r\n')[0] ?? ''}`));
      this.pending = undefined;
      return;
    }
    const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    const length = m ? Number(m[1]) : 0;
    const end = headEnd + 4 + length;
    if (this.buf.length < end) return;
    const body = this.buf.subarray(headEnd + 4, end);
    this.buf = this.buf.subarray(end);
    const { resolve } = this.pending;
    this.pending = undefined;
    resolve({ status, body });
  }
}

/** A complete HTTP/1.1 request as one buffer, for RawHttpConnection. */
export function encodeRequest(
  method: string,
  path: string,
  body: string,
  headers: Record<string, string> = {},
): Buffer {
  const payload = Buffer.from(body);
  let head = `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${payload.length}\r\n`;
  for (const [name, value] of Object.entries(headers)) head += `${name}: ${value}\r\n`;
  return Buffer.concat([Buffer.from(`${head}\r\n`, 'latin1'), payload]);
}
