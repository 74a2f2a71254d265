/**
 * The soak's rig (docs/design/soak.md): daemons that can be killed and started again on the same data dir, a TCP
 * proxy that can blackhole the link, a small filesystem that can be filled, and process samples. Loopback only.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createSocket } from 'node:dgram';
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  rmdirSync,
  rmSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { type Server, type Socket, connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MAIN } from '../../test/helpers/server.js';
import { rssAnonBytes } from './lib.js';

/** A line that belongs to a JavaScript stack trace (`    at fn (file:1:2)`). */
export const STACK_LINE = /^\s+at\s.*(?::\d+:\d+\)?|\(native\)|\(<anonymous>\))\s*$/;

/** One `outpost serve` on a fixed data dir and config, started again after each kill; its log kept across runs. */
export class Daemon {
  proc: ChildProcess | undefined;
  port = 0;
  mqttPort = 0;
  /** 0 when CoAP is off; the config should fix it, so that devices keep their target across restarts */
  coapPort = 0;
  /** every line logged by every run, prefixed with the run's number */
  readonly logs: string[] = [];
  runs = 0;
  startedAt = 0;

  constructor(
    readonly name: string,
    readonly dataDir: string,
    readonly configFile: string,
    /** added to the daemon's environment (libfaketime's variables for the LAN) */
    readonly env: Record<string, string> = {},
  ) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get up(): boolean {
    return this.proc !== undefined && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** Starts a run; resolves once it listens (at most `timeoutMs`). */
  async start(timeoutMs = 30_000): Promise<void> {
    const run = ++this.runs;
    const proc = spawn(
      process.execPath,
      [MAIN, 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', this.dataDir, '--config', this.configFile],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...this.env } },
    );
    this.proc = proc;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        proc.kill('SIGKILL');
        reject(new Error(`${this.name} run ${run} did not listen within ${timeoutMs} ms`));
      }, timeoutMs);
      let buf = '';
      const onData = (chunk: Buffer): void => {
        buf += chunk.toString();
        let nl: number;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          this.logs.push(`[${this.name}#${run}] ${line}`);
          const m = /listening on https?:\/\/[^:]+:(\d+)(?:, mqtt:\/\/[^:]+:(\d+))?/.exec(line);
          if (m) {
            this.port = Number(m[1]);
            this.mqttPort = Number(m[2] ?? 0);
            this.coapPort = Number(/coap:\/\/[^:]+:(\d+)/.exec(line)?.[1] ?? 0);
            this.startedAt = Date.now();
            clearTimeout(timer);
            resolve();
          }
        }
      };
      proc.stdout?.on('data', onData);
      proc.stderr?.on('data', onData);
      proc.once('exit', (code, signal) => {
        this.logs.push(`[${this.name}#${run}] (exited: ${code ?? signal})`);
        clearTimeout(timer);
        const own = this.logs.filter((l) => l.startsWith(`[${this.name}#${run}] `)).slice(-8);
        reject(new Error(`${this.name} run ${run} exited (${code ?? signal}) before listening:\n${own.join('\n')}`));
      });
    });
  }

  /** Sends `signal` and waits for the exit (at most `timeoutMs`, then SIGKILL). */
  async stop(signal: NodeJS.Signals, timeoutMs = 30_000): Promise<void> {
    const proc = this.proc;
    if (proc === undefined || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise<void>((r) => proc.once('exit', () => r()));
    if (signal === 'SIGKILL') proc.kill('SIGCONT');
    proc.kill(signal);
    const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
    await exited;
    clearTimeout(timer);
  }

  /** SIGSTOP / SIGCONT: a process that holds its connections and answers nothing. */
  freeze(on: boolean): void {
    if (this.up) this.proc?.kill(on ? 'SIGSTOP' : 'SIGCONT');
  }

  /** RssAnon and open descriptors now, undefined while it is not running. */
  sample(): { rssAnon: number; fds: number } | undefined {
    const pid = this.proc?.pid;
    if (!this.up || pid === undefined) return undefined;
    try {
      return { rssAnon: rssAnonBytes(pid), fds: readdirSync(`/proc/${pid}/fd`).length };
    } catch {
      return undefined;
    }
  }

  stackTraceLines(): string[] {
    return this.logs.filter((l) => STACK_LINE.test(l.replace(/^\[[^\]]+\] /, '')));
  }
}

/**
 * A TCP proxy on loopback in front of `target()`. Blackholed, it forwards nothing and accepts connections it
 * does not pass on, every socket left open: the link hangs rather than refuses, as a cut cable or a dead route
 * does. Healed, what waited goes on (TCP would have retransmitted it).
 */
export class BlackholeProxy {
  private server: Server | undefined;
  private readonly pairs = new Set<{ client: Socket; upstream: Socket | undefined; pending: Buffer[] }>();
  private holed = false;
  port = 0;

  constructor(private readonly target: () => number) {}

  async start(): Promise<void> {
    const server = createServer((client) => this.accept(client));
    this.server = server;
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    this.port = (server.address() as { port: number }).port;
  }

  private accept(client: Socket): void {
    const pair = { client, upstream: undefined as Socket | undefined, pending: [] as Buffer[] };
    this.pairs.add(pair);
    client.on('error', () => undefined);
    client.on('close', () => {
      pair.upstream?.destroy();
      this.pairs.delete(pair);
    });
    client.on('data', (b: Buffer) => {
      if (pair.upstream !== undefined && !this.holed) pair.upstream.write(b);
      else if (pair.pending.length < 1024) pair.pending.push(b);
      else client.destroy();
    });
    if (this.holed) client.pause();
    else this.connectUpstream(pair);
  }

  private connectUpstream(pair: { client: Socket; upstream: Socket | undefined; pending: Buffer[] }): void {
    const upstream = connect(this.target(), '127.0.0.1');
    pair.upstream = upstream;
    upstream.on('error', () => undefined);
    upstream.on('close', () => pair.client.destroy());
    upstream.on('data', (b: Buffer) => {
      if (!this.holed) pair.client.write(b);
      else upstream.pause();
    });
    for (const b of pair.pending.splice(0)) upstream.write(b);
  }

  /** Stops (true) or resumes (false) forwarding. */
  blackhole(on: boolean): void {
    this.holed = on;
    for (const pair of this.pairs) {
      if (on) {
        pair.client.pause();
        pair.upstream?.pause();
        continue;
      }
      if (pair.upstream === undefined) this.connectUpstream(pair);
      else for (const b of pair.pending.splice(0)) pair.upstream.write(b);
      pair.client.resume();
      pair.upstream?.resume();
    }
  }

  async close(): Promise<void> {
    for (const p of this.pairs) {
      p.client.destroy();
      p.upstream?.destroy();
    }
    const s = this.server;
    if (s !== undefined) await new Promise<void>((r) => s.close(() => r()));
  }
}

/**
 * A directory on a small tmpfs that can be filled to ENOSPC and emptied again; mounting needs root, so without
 * it `mounted` is false, the directory is a plain temp dir and the disk fault is skipped.
 */
export class SmallDisk {
  readonly dir: string;
  readonly mounted: boolean;
  private readonly junk: string;

  constructor(sizeMb: number) {
    this.dir = mkdtempSync(join(tmpdir(), 'outpost-soak-disk-'));
    let mounted = false;
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${sizeMb}m`, 'tmpfs', this.dir], { stdio: 'ignore' });
      mounted = true;
    } catch {
      // not root: a plain directory, the disk-full fault left out
    }
    this.mounted = mounted;
    this.junk = join(this.dir, 'junk');
  }

  sub(name: string): string {
    const p = join(this.dir, name);
    mkdirSync(p, { recursive: true });
    return p;
  }

  /** Writes zeros until the filesystem refuses (bounded by its size). */
  fill(): void {
    const fd = openSync(this.junk, 'w');
    const chunk = Buffer.alloc(256 * 1024);
    try {
      for (let i = 0; i < 1_000_000; i++) writeSync(fd, chunk);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
    } finally {
      closeSync(fd);
    }
  }

  empty(): void {
    rmSync(this.junk, { force: true });
  }

  remove(): void {
    if (this.mounted) {
      try {
        execFileSync('umount', ['-l', this.dir], { stdio: 'ignore' });
        rmdirSync(this.dir);
      } catch {
        // a tmpfs left mounted in the temp dir holds nothing a later run needs
      }
    } else rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A UDP port free now on loopback (bound and released), for a daemon's fixed `coap.port`. */
export async function freeUdpPort(): Promise<number> {
  const s = createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
  const port = s.address().port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

const LIBFAKETIME_PATHS = [
  '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/arm-linux-gnueabihf/faketime/libfaketime.so.1',
  '/usr/lib/faketime/libfaketime.so.1',
];

/**
 * A wall clock the soak steps for one daemon: libfaketime (Debian's `faketime` package) preloaded, its offset
 * read from a file on every clock call (FAKETIME_NO_CACHE), the monotonic clock left alone
 * (FAKETIME_DONT_FAKE_MONOTONIC) so that Node's timers keep their pace. Without libfaketime `available` is false,
 * `env` is empty and the soak leaves clock steps out.
 */
export class SteppedClock {
  readonly library: string | undefined;
  private readonly file: string;
  /** every offset set, with the true time it took effect; the first is 0 at construction */
  readonly steps: Array<{ wall: number; offsetMs: number }> = [];

  constructor(dir: string) {
    this.library = LIBFAKETIME_PATHS.find((p) => existsSync(p));
    this.file = join(dir, 'faketime');
    this.set(0);
  }

  get available(): boolean {
    return this.library !== undefined;
  }

  get env(): Record<string, string> {
    if (this.library === undefined) return {};
    return {
      LD_PRELOAD: this.library,
      FAKETIME_TIMESTAMP_FILE: this.file,
      FAKETIME_NO_CACHE: '1',
      FAKETIME_DONT_FAKE_MONOTONIC: '1',
    };
  }

  /** Steps the clock to true time plus `offsetMs` (whole seconds: libfaketime's relative offset is in seconds). */
  set(offsetMs: number): void {
    const s = Math.round(offsetMs / 1000);
    writeFileSync(this.file, `${s >= 0 ? '+' : ''}${s}\n`);
    this.steps.push({ wall: Date.now(), offsetMs: s * 1000 });
  }

  get offsetMs(): number {
    return this.steps[this.steps.length - 1]?.offsetMs ?? 0;
  }
}

/** Every offset in effect at some time in [from, to] of `steps` (sorted by `wall`; none before the first: 0). */
export function offsetsDuring(
  steps: ReadonlyArray<{ wall: number; offsetMs: number }>,
  from: number,
  to: number,
): number[] {
  let current = 0;
  for (const st of steps) if (st.wall <= from) current = st.offsetMs;
  const out = new Set([current]);
  for (const st of steps) if (st.wall > from && st.wall <= to) out.add(st.offsetMs);
  return [...out];
}

/** Least-squares slope of `ys` over `xs` (per unit of x); 0 with fewer than 3 points. */
export function slope(xs: readonly number[], ys: readonly number[]): number {
  const n = xs.length;
  if (n < 3) return 0;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let num = 0;
  let den = 0;
  for (let i = 0; i < n; i++) {
    num += ((xs[i] as number) - mx) * ((ys[i] as number) - my);
    den += ((xs[i] as number) - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}
