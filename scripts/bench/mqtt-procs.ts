/** Process, socket and figure helpers of the MQTT benchmark (mqtt.ts). */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { type Socket, connect } from 'node:net';
import { clientAddress } from './lib.js';

/** Spawns a process and resolves with the regex groups of the first output line matching `re`. */
export function spawnUntil(
  cmd: string,
  args: string[],
  re: RegExp,
): Promise<{ proc: ChildProcess; m: RegExpExecArray }> {
  const proc = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let buf = '';
    const on = (b: Buffer): void => {
      buf += b.toString();
      const m = re.exec(buf);
      if (m) resolve({ proc, m });
    };
    proc.stdout?.on('data', on);
    proc.stderr?.on('data', on);
    proc.once('exit', (code) => reject(new Error(`${cmd} exited with ${code}: ${buf}`)));
  });
}

/** A bare node:net server that reads and drops what it gets: the baseline of the idle-connection measure. */
export function spawnBare(): Promise<{ proc: ChildProcess; m: RegExpExecArray }> {
  return spawnUntil(
    process.execPath,
    [
      '-e',
      `const s=require('net').createServer((c)=>{c.on('error',()=>{});c.on('data',()=>{})});s.listen(0,'127.0.0.1',()=>console.log('port '+s.address().port))`,
    ],
    /port (\d+)/,
  );
}

/** Opens `n` sockets (200 at a time), runs `hello` on each; with `waitConnack`, waits for a CONNACK 0 on each. */
export async function openIdle(
  n: number,
  hello: (s: Socket, i: number) => Promise<void>,
  port: number,
  waitConnack: boolean,
): Promise<Socket[]> {
  const out: Socket[] = [];
  for (let i = 0; i < n; i += 200) {
    out.push(
      ...(await Promise.all(
        Array.from(
          { length: Math.min(200, n - i) },
          (_, k) =>
            new Promise<Socket>((resolve, reject) => {
              const s = connect({ port, host: '127.0.0.1', localAddress: clientAddress(i + k) });
              s.on('error', () => undefined);
              s.once('connect', () => {
                void hello(s, i + k);
                if (!waitConnack) {
                  resolve(s);
                  return;
                }
                s.once('data', (b: Buffer) =>
                  b[0] === 0x20 && b[3] === 0 ? resolve(s) : reject(new Error(`CONNACK refused for idle-${i + k}`)),
                );
              });
            }),
        ),
      )),
    );
  }
  return out;
}

/** CPU time (user + system) a process has used, in µs (Linux /proc, clock ticks of 10 ms). */
export function cpuUs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return (Number(f[11]) + Number(f[12])) * 10_000;
}

/** The p-th percentile of ascending `sorted` (NaN when empty). */
export function percentile(sorted: readonly number[], p: number): number {
  return sorted.length === 0
    ? NaN
    : (sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number);
}
