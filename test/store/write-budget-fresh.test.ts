/**
 * A fresh store answers at fsync speed from its first requests (docs/write-budget.md): its one-off costs (the
 * log's first segment and the spare made ahead, the entities README's walkthrough creates, the first apply of a
 * handful of points) must not drain the write budget's reserve, so neither a burst of single posts nor a quiet
 * device after it waits for grouped commits. The scenario: README's flow on a fresh data dir, 300 single posts,
 * each its own commit (an SDK's publish worker), then a few more from a quiet device; once more after a restart.
 * The test holds what the budget decided (no commit paced, the reserve at least half full), not wall time:
 * bench:wear's "fresh" row times the same flow against the disk's own fsyncs.
 */
import t, { type Test } from 'tap';
import { addDevice, cli, type Gateway, http, startGateway } from '../helpers/server.js';
import { addUser, authHeaders, login } from '../helpers/users.js';
import type { StatusJson } from '../../src/status/index.js';
import type { WriteFigures } from '../../src/store/write-budget.js';

async function post(gw: Gateway, token: string, body: object): Promise<void> {
  const r = await http('POST', `${gw.url}/api/v1/${token}/telemetry`, body);
  if (r.status !== 200) throw new Error(`post: ${r.status} ${r.text}`);
}

/** `count` posts one after another, each sent when the last is answered: each is a commit of its own. */
async function oneByOne(gw: Gateway, token: string, count: number): Promise<void> {
  for (let i = 0; i < count; i++) await post(gw, token, { temperature: 20 + (i % 10) / 10, humidity: 40 + (i % 7) });
}

async function writes(gw: Gateway, H: Record<string, string>): Promise<WriteFigures> {
  return (await http('GET', `${gw.url}/api/outpost/status`, undefined, H)).json<StatusJson>().writes as WriteFigures;
}

/** README's walkthrough: a user, a device, two posts, `outpost latest`, a login and one REST read. */
async function readmeFlow(gw: Gateway): Promise<{ H: Record<string, string>; id: string }> {
  await addUser(gw.dataDir, 'admin@example.com', 'secret', 'TENANT_ADMIN');
  const dev = await addDevice(gw.dataDir, 'thermo-1', ['--token', 'THERMO_TOKEN']);
  await post(gw, 'THERMO_TOKEN', { temperature: 21.5, humidity: 40 });
  await post(gw, 'THERMO_TOKEN', { temperature: 21.6, humidity: 41 });
  const latest = await cli(['latest', 'thermo-1', '--data-dir', gw.dataDir]);
  if (latest.code !== 0) throw new Error(`outpost latest: ${latest.stderr}`);
  const H = authHeaders((await login(gw, 'admin@example.com', 'secret')).token);
  const r = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/values/timeseries?keys=temperature,humidity`,
    undefined,
    H,
  );
  if (r.status !== 200) throw new Error(`REST read: ${r.status} ${r.text}`);
  return { H, id: dev.id };
}

/** 300 single posts, then `quiet` more: no commit waited for the budget, the reserve is at least half full. */
async function scenario(t: Test, gw: Gateway, H: Record<string, string>, quiet: number): Promise<void> {
  const before = await writes(gw, H);
  await oneByOne(gw, 'THERMO_TOKEN', 300);
  await oneByOne(gw, 'THERMO_TOKEN', quiet);
  const w = await writes(gw, H);
  const left = w.reserveLeftBytes / w.reserveBytes;
  t.comment(
    `${300 + quiet} posts: reserve ${(100 * left).toFixed(0)}% left, ${(w.sinceStartBytes / 1e6).toFixed(2)} MB ` +
      `written (log ${(w.logSinceStartBytes / 1e6).toFixed(2)} MB)`,
  );
  t.ok(left >= 0.5, `the reserve is at least half full: ${(100 * left).toFixed(0)}%`);
  t.equal(w.commitDelayMs, 0, 'commits are not paced now');
  t.equal(w.pacedCommits - before.pacedCommits, 0, 'no post waited for the budget to pace its commit');
}

t.test('a fresh daemon after README’s flow commits a burst and a quiet device at once, its reserve kept', async (t) => {
  const gw = await startGateway(t);
  const { H } = await readmeFlow(gw);
  await t.test('fresh', (t) => scenario(t, gw, H, 20));
  // a restart starts with an empty per-point history again: the same load must not pace either
  await gw.stop('SIGTERM');
  const again = await startGateway(t, { dataDir: gw.dataDir });
  await post(again, 'THERMO_TOKEN', { temperature: 22 });
  const latest = await cli(['latest', 'thermo-1', '--data-dir', again.dataDir]);
  t.equal(latest.code, 0);
  const H2 = authHeaders((await login(again, 'admin@example.com', 'secret')).token);
  await t.test('after a restart', (t) => scenario(t, again, H2, 5));
});
