/**
 * The timer wheel's real clock under a stepped wall clock (docs/design/soak.md, "clockStep"): a process whose
 * wall clock libfaketime steps back 120 s, or ahead 120 s, while an RPC or long-poll deadline waits. Deadlines are
 * durations, so they must fire after their delay whatever the wall clock does: not 120 s late after a step back,
 * not at once after a step ahead. Skipped without libfaketime (Debian package faketime).
 */
import '../helpers/sandbox.js';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';

const LIBFAKETIME = [
  '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/arm-linux-gnueabihf/faketime/libfaketime.so.1',
].find((p) => existsSync(p));
const WHEEL = fileURLToPath(new URL('../../src/rpc/timer-wheel.js', import.meta.url));

/** Runs a wheel in a child under libfaketime; the wall clock is stepped by `stepS` 100 ms after a 600 ms schedule. */
function firedAfterMs(stepS: number): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-wheel-step-'));
  const file = join(dir, 'faketime');
  writeFileSync(file, '+0\n');
  const script = `
    import { writeFileSync } from 'node:fs';
    import { TimerWheel } from ${JSON.stringify(WHEEL)};
    const wheel = new TimerWheel(50);
    const t0 = performance.now();
    const keep = setTimeout(() => { console.log('never'); process.exit(0); }, 10_000);
    wheel.schedule(600, () => { console.log(Math.round(performance.now() - t0)); clearTimeout(keep); });
    setTimeout(() => writeFileSync(${JSON.stringify(file)}, ${JSON.stringify(`${stepS >= 0 ? '+' : ''}${stepS}\n`)}), 100);
  `;
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, ['--input-type=module', '-e', script], {
      env: {
        ...process.env,
        LD_PRELOAD: LIBFAKETIME,
        FAKETIME_TIMESTAMP_FILE: file,
        FAKETIME_NO_CACHE: '1',
        FAKETIME_DONT_FAKE_MONOTONIC: '1',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    p.stdout.on('data', (c: Buffer) => {
      out += c.toString();
    });
    p.once('error', reject);
    p.once('exit', () => {
      rmSync(dir, { recursive: true, force: true });
      const ms = Number(out.trim());
      resolve(Number.isFinite(ms) ? ms : Number.POSITIVE_INFINITY);
    });
  });
}

t.test(
  'a deadline fires after its delay when the wall clock steps',
  { skip: LIBFAKETIME === undefined ? 'libfaketime not installed (Debian package faketime)' : false },
  async (t) => {
    const back = await firedAfterMs(-120);
    t.ok(back >= 600 && back < 1_500, `stepped back 120 s: fired after ${back} ms`);
    const ahead = await firedAfterMs(120);
    t.ok(ahead >= 600 && ahead < 1_500, `stepped ahead 120 s: fired after ${ahead} ms`);
  },
);
