/**
 * Websocket limits (docs/api.md): a consumer that stops reading is closed once its outbound buffer
 * passes ws.maxBackpressure, server memory stays bounded, other sockets keep receiving; the per-session
 * subscription cap. Small limits come from a config file so the test needs little data.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { addDevice, http, startGateway, tempDir, waitLogLines } from '../../helpers/server.js';
import { adminToken } from '../../helpers/users.js';
import { WsClient, wsUrl } from '../../helpers/ws.js';

const MAX_BACKPRESSURE = 64 * 1024;
const configDir = tempDir(t);
const configFile = join(configDir, 'outpost.json');
// The 30 MiB written here would spend the write budget's reserve, and the budget would then pace this one heavy
// writer's commits (docs/write-budget.md), a second each: commits at once keep the test about websockets.
writeFileSync(
  configFile,
  JSON.stringify({
    ws: { maxBackpressure: MAX_BACKPRESSURE, maxSubscriptionsPerSession: 3, authTimeoutMs: 300 },
    store: { commitDelayMs: 0 },
  }),
);

// RssAnon growth should show retained memory (socket buffers), not how lazily garbage is returned: a small V8
// heap makes the daemon collect promptly, and a fixed glibc mmap threshold returns freed large blocks (request
// bodies, frames) to the OS at once instead of keeping them in the malloc heap. The heap must still hold the
// daemon's code and the writes' own values until the log's points are applied (up to the 30 MiB written here,
// docs/write-budget.md): 64 MB no longer did, and the daemon aborted out of heap mid-test.
const gw = await startGateway(t, {
  args: ['--config', configFile],
  env: { NODE_OPTIONS: '--max-old-space-size=96 --max-semi-space-size=2', MALLOC_MMAP_THRESHOLD_: '131072' },
});
const admin = await adminToken(gw, 'admin@example.com');
const open = (): Promise<WsClient> => WsClient.connect(`${wsUrl(gw, '/api/ws/plugins/telemetry')}?token=${admin}`);

/** kB of anonymous memory of the daemon (Linux /proc), i.e. heap and buffers, not the LMDB map. */
function rssAnonKb(pid: number): number {
  const m = /RssAnon:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error('no RssAnon in /proc status');
  return Number(m[1]);
}

t.test('consumers that stop reading are closed; memory bounded; others unaffected', async (t) => {
  const dev = await addDevice(gw.dataDir, 'slow-dev');
  const SLOW = 8;
  const slow: WsClient[] = [];
  for (let i = 0; i < SLOW; i++) slow.push(await open());
  const healthy = await open();
  t.teardown(() => {
    for (const c of slow) c.terminate();
    healthy.close();
  });
  for (const c of [...slow, healthy]) {
    c.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, keys: 'blob', cmdId: 1 }] });
    t.equal((await c.nextJson()).errorCode, 0);
  }
  for (const c of slow) c.socket.pause();
  const rssBefore = rssAnonKb(gw.proc.pid as number);

  // 120 writes of a 256 KiB value: 30 MiB per slow socket, 240 MiB in all, that a server without the limit
  // would have to hold (less what the kernel's socket buffers absorb).
  const WRITES = 120;
  const blob = 'x'.repeat(256 * 1024);
  const closedLogs = waitLogLines(gw, /ws: closed a slow consumer/, SLOW, { from: gw.logs.length, timeoutMs: 15_000 });
  for (let i = 0; i < WRITES; i++) {
    const r = await http(
      'POST',
      `${gw.url}/api/v1/${dev.token}/telemetry`,
      `{"ts":${1000 + i},"values":{"blob":"${blob}"}}`,
    );
    if (r.status !== 200) t.fail(`write ${i}: ${r.status}`);
    // the healthy socket keeps up: it gets every frame, in order
    const f = await healthy.nextJson(10_000);
    if (f.latestValues['blob'] !== 1000 + i) t.fail(`healthy frame ${i} out of order`);
  }
  const grewMiB = (rssAnonKb(gw.proc.pid as number) - rssBefore) / 1024;
  t.ok(
    grewMiB < 100,
    `RssAnon grew by ${grewMiB.toFixed(1)} MiB (< 100 MiB while 240 MiB were produced for slow sockets)`,
  );
  const lines = await closedLogs;
  t.equal(lines.length, SLOW, 'the server closed every slow socket itself');
  t.match(lines[0], new RegExp(`limit ${MAX_BACKPRESSURE}`));

  for (const c of slow) {
    c.socket.resume();
    const closed = await c.waitClosed(10_000);
    t.equal(closed.code, 1006, 'force-closed without a close frame');
    t.ok(
      c.received.length - 1 < WRITES,
      `a slow socket got ${c.received.length - 1} of ${WRITES} updates before the close`,
    );
  }

  // The daemon is fine: a new subscriber works.
  const again = await open();
  t.teardown(() => again.close());
  again.send({ tsSubCmds: [{ entityType: 'DEVICE', entityId: dev.id, keys: 'blob', cmdId: 2 }] });
  t.equal((await again.nextJson()).latestValues['blob'], 1000 + WRITES - 1);
});

t.test('subscriptions per session are capped', async (t) => {
  const dev = await addDevice(gw.dataDir, 'cap-dev');
  const c = await open();
  t.teardown(() => c.close());
  const sub = (cmdId: number): object => ({ entityType: 'DEVICE', entityId: dev.id, cmdId });
  c.send({ tsSubCmds: [sub(1), sub(2)], attrSubCmds: [sub(3)] });
  for (let i = 0; i < 3; i++) t.equal((await c.nextJson()).errorCode, 0);
  c.send({ tsSubCmds: [sub(4)] });
  const refused = await c.nextJson();
  t.equal(refused.subscriptionId, 4);
  t.equal(refused.errorCode, 2);
  t.match(refused.errorMsg, /Max subscriptions limit reached: 3/);
  c.send({ tsSubCmds: [sub(2)] });
  t.equal((await c.nextJson()).errorCode, 0, 'the same cmdId replaces its subscription, within the cap');
  c.send({ tsSubCmds: [{ cmdId: 1, entityId: dev.id, unsubscribe: true }, sub(5)] });
  const after = await c.nextJson();
  t.equal(after.subscriptionId, 5);
  t.equal(after.errorCode, 0, 'room again after an unsubscribe');
  c.send({ historyCmds: [{ entityType: 'DEVICE', entityId: dev.id, keys: 'a', startTs: 0, endTs: 1, cmdId: 6 }] });
  t.equal((await c.nextJson()).errorCode, 0, 'history commands do not count');
});

t.test('a socket without a token that never authenticates is closed after ws.authTimeoutMs', async (t) => {
  const started = Date.now();
  const c = await WsClient.connect(wsUrl(gw, '/api/ws'));
  t.same(await c.waitClosed(5000), { code: 1008, reason: 'Auth timeout' });
  t.ok(Date.now() - started >= 250, 'not before the timeout');
  const late = await WsClient.connect(wsUrl(gw, '/api/ws'));
  t.teardown(() => late.close());
  late.send({ authCmd: { cmdId: 0, token: admin }, cmds: [] });
  // authenticated in time: a command sent after the timeout still gets its answer
  const dev = await addDevice(gw.dataDir, 'auth-dev');
  late.send({ cmds: [{ type: 'TIMESERIES', cmdId: 1, entityType: 'DEVICE', entityId: dev.id, keys: 'k' }] });
  t.equal((await late.nextJson()).errorCode, 0);
});
