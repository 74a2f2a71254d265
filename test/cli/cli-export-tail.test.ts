/**
 * `export -o` into a missing directory fails in one line, no stack; `export --keys` writes only those columns;
 * a remote `tail` reconnects with back-off when the daemon restarts and says so; `serve --check-config` checks a
 * config file without starting anything (docs/cli.md).
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { type AddressInfo, type Socket, connect, createServer } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { MAIN, cli, http, tempDir } from '../helpers/server.js';
import { failsOneLine, ok, techGateway } from '../helpers/tech.js';
import { waitFor } from '../helpers/wait.js';

t.test('export: a missing directory, --keys', async (t) => {
  const tg = await techGateway(t);
  for (const mode of [tg.L, tg.R]) {
    const r = await tg.run(['export', 'pump-1', '--from', '-3h', '-o', '/nonexistent/dir/x.csv', ...mode]);
    failsOneLine(t, r, /^outpost: cannot write \/nonexistent\/dir\/x\.csv: its directory does not exist/, 'no dir');
    t.notMatch(r.stderr, /Unhandled|\n\s+at /, 'no stack');
    const csv = ok(t, await tg.run(['export', 'pump-1', '--from', '-3h', '--keys', 'n,t', ...mode]), 'export --keys');
    t.equal(csv.split('\n')[0], 'ts,n,t', `${mode[0]}: only the keys asked for, in their order`);
    t.equal(csv.split('\n').length, 122, 'every row');
  }
});

t.test('serve --check-config', async (t) => {
  const dir = tempDir(t);
  const good = join(dir, 'good.json');
  const bad = join(dir, 'bad.json');
  writeFileSync(good, JSON.stringify({ port: 9123, dataDir: join(dir, 'data') }));
  writeFileSync(bad, JSON.stringify({ port: 'abc' }));
  const r = await cli(['serve', '--config', good, '--check-config']);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /^config OK \(.*good\.json\): data dir .*data, HTTP 0\.0\.0\.0:9123/);
  failsOneLine(t, await cli(['serve', '--config', bad, '--check-config']), /"port" must be a number/, 'bad config');
});

t.test('remote tail reconnects when the connection to the daemon drops', async (t) => {
  const tg = await techGateway(t);
  // the CLI reaches the daemon through a TCP relay the test can cut and refuse, as a daemon restart does
  // (a restarted uWS daemon cannot take its port back while the old connections linger in TIME_WAIT)
  const sockets = new Set<Socket>();
  const relay = createServer((client) => {
    const upstream = connect(tg.gw.port, '127.0.0.1');
    client.pipe(upstream).pipe(client);
    sockets.add(client).add(upstream);
    const drop = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
  const relayPort = (relay.address() as AddressInfo).port;
  const url = `http://127.0.0.1:${relayPort}`;
  t.teardown(() => new Promise<void>((r) => relay.close(() => r())));
  ok(t, await tg.run(['login', '--url', url, '--username', 'tech@example.com', '--password', 'pw']), 'login');

  const proc = spawn(process.execPath, [MAIN, 'tail', 'pump-1', '--keys', 'n', '--url', url], {
    env: { ...process.env, ...tg.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  proc.stdout.on('data', (b: Buffer) => {
    out += b.toString();
  });
  proc.stderr.on('data', (b: Buffer) => {
    err += b.toString();
  });
  t.teardown(() => {
    proc.kill('SIGKILL');
  });
  // a point shown: the tail is connected and subscribed
  const shows = (n: number) => async (): Promise<boolean> => {
    if (out.includes(String(n))) return true;
    await http('POST', `${tg.gw.url}/api/v1/PUMP1/telemetry`, { n });
    return false;
  };
  await waitFor(shows(4241), { interval: 100, message: () => `the tail showing a point; stderr: ${err}` });
  // the daemon goes away: connections cut, new ones refused until the tail has been refused once
  await new Promise<void>((r) => {
    relay.close(() => r());
    for (const s of sockets) s.destroy();
  });
  await waitFor(() => /reconnecting in 2 s\n/.test(err), { message: () => `a refused retry; stderr: ${err}` });
  await new Promise<void>((r) => relay.listen(relayPort, '127.0.0.1', r));
  await waitFor(() => err.includes('reconnected'), { message: () => `the reconnection; stderr: ${err}` });
  t.match(err, /tail: lost the connection \(.*\); reconnecting in 1 s\n/, 'says it lost the connection');
  t.match(err, /reconnecting in 2 s\n/, 'backs off while refused');
  t.match(err, `tail: reconnected to ${url}`, 'says it is back');
  await waitFor(shows(4242), { interval: 100, message: () => `a point after the reconnection; stdout: ${out}` });
  t.match(out, /4242/, 'points after the reconnection are shown');
  t.equal(proc.exitCode, null, 'still running');
});
