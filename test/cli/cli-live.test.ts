/**
 * `outpost rpc` and `outpost tail` (docs/cli.md) against a real daemon: rpc through a device long-poll
 * (remote only), tail following new points in both modes until Ctrl-C.
 */
import { spawn } from 'node:child_process';
import t from 'tap';
import { MAIN, http } from '../helpers/server.js';
import { failsOneLine, ok, techGateway } from '../helpers/tech.js';

t.test('rpc and tail', async (t) => {
  const { gw, env, run, L, R, now } = await techGateway(t);
  // rpc: remote two-way through a device long-poll; local refuses with a hint
  const poll = http('GET', `${gw.url}/api/v1/VALVE7/rpc?timeout=20000`);
  const rpc = run(['rpc', 'valve-7', 'setValve', '--params', '{"open":true}', '--timeout', '15s', ...R]);
  const req = (await poll).json<{ id: number; method: string; params: unknown }>();
  t.same([req.method, req.params], ['setValve', { open: true }], 'the device got the RPC');
  t.equal((await http('POST', `${gw.url}/api/v1/VALVE7/rpc/${req.id}`, { done: 1 })).status, 200);
  t.equal(ok(t, await rpc, 'rpc').trim(), '{"done":1}', "rpc prints the device's reply");
  failsOneLine(t, await run(['rpc', 'valve-7', 'x', ...L]), /use --url/, 'local rpc');

  // tail: each new point once, in order, both modes
  for (const mode of [L, R]) {
    const child = spawn(process.execPath, [MAIN, 'tail', 'valve-7', '--keys', 'v', '--json', ...mode], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const lines: string[] = [];
    let buf = '';
    const got = new Promise<void>((resolve) =>
      child.stdout.on('data', (c: Buffer) => {
        buf += c.toString();
        const parts = buf.split('\n');
        buf = parts.pop() ?? '';
        lines.push(...parts);
        if (lines.length >= 3) resolve();
      }),
    );
    // posts until the tail has shown three points (it may start after the first posts): no sleeps
    let i = 0;
    let done = false;
    void got.then(() => {
      done = true;
    });
    while (!done && i < 400) {
      await http('POST', `${gw.url}/api/v1/VALVE7/telemetry`, { ts: now + i, values: { v: i, other: 1 } });
      i++;
      await Promise.race([got, new Promise((r) => setTimeout(r, 20))]);
    }
    t.ok(done, `tail ${mode[0]} showed new points`);
    const pts = lines.slice(0, 3).map((l) => JSON.parse(l) as { ts: number; key: string; value: string });
    t.ok(
      pts.every((p) => p.key === 'v' && p.value === String(p.ts - now)),
      `tail ${mode[0]}: {"ts","key","value"} of the posted points`,
    );
    const [p0, p1, p2] = pts.map((p) => p.ts);
    t.ok(
      p0 !== undefined && p1 !== undefined && p2 !== undefined && p1 > p0 && p2 > p1,
      `tail ${mode[0]}: in order, no repeats`,
    );
    child.kill('SIGINT');
    const code = await new Promise<number | null>((r) => child.once('exit', r));
    t.equal(code, 0, `tail ${mode[0]} exits 0 on Ctrl-C`);
  }
});
