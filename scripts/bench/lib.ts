/** Shared by the benchmarks: process memory readings, medians and numeric command-line flags. */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** Anonymous resident memory of a process (heap, stacks, buffers; not mapped files such as LMDB's). Linux only. */
export function rssAnonBytes(pid: number): number {
  const m = /RssAnon:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error('RssAnon not found in /proc/<pid>/status (Linux only)');
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
export function spawnListening(args: readonly string[], label = args.join(' ')): Promise<{ proc: ChildProcess; port: number }> {
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

/** `--name <positive integer>` from argv, `def` when absent; anything else is an error (no silent fallback). */
export function intArg(argv: readonly string[], name: string, def: number): number {
  const i = argv.indexOf(`--${name}`);
  const v = i >= 0 ? Number(argv[i + 1]) : def;
  if (!Number.isInteger(v) || v <= 0) throw new Error(`--${name} must be a positive integer`);
  return v;
}
