/**
 * The sync thread (src/upstream/uplink/thread.ts, thread-worker.ts): outbox entries read back from the real LMDB store,
 * encoded and posted by a worker thread reach the upstream exactly as the main thread would send them, see
 * commits made just before they were asked for, hold and drop as the main thread does, and a thread that dies,
 * idles or is stopped mid-request costs nothing but itself. Real LMDB in a temp dir, a real worker thread, a
 * fake ThingsBoard on loopback.
 */
import t from 'tap';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Logger } from '../../src/log.js';
import { kvDouble, kvLong, kvString } from '../../src/model/kv.js';
import { Dictionary } from '../../src/store/encoding/dict.js';
import { type StoreEnv, openStoreEnv } from '../../src/store/env.js';
import { OutboxRecorder, type QueueKey, decodeRefs, refSourceOf } from '../../src/store/outbox.js';
import { DEFAULT_STORE_OPTIONS } from '../../src/store/series/options.js';
import { LmdbTimeseriesStore } from '../../src/store/series/store.js';
import { MAX_AHEAD_MS } from '../../src/upstream/uplink/clock.js';
import { UpstreamClient } from '../../src/upstream/uplink/client.js';
import { type EncodeRequest, type EncodedGroup, encodeGroup } from '../../src/upstream/uplink/encode.js';
import { type ReadyGroup, SyncThread, type SyncThreadOptions } from '../../src/upstream/uplink/thread.js';
import { FakeTb } from '../helpers/fake-tb.js';
import { type Teardown, addDevice, http, tempDir } from '../helpers/server.js';
import { syncGateway, syncStatusUntil } from '../helpers/sync.js';
import { addUser, login } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';

const MAP = 64 * 1024 * 1024;
const DEVICE = '11111111-2222-3333-4444-555555555555';
const BASE = 1_700_000_000_000;

function open(t: Teardown) {
  const dataDir = tempDir(t);
  const env = openStoreEnv({ dataDir, mapSizeBytes: MAP });
  const dict = new Dictionary(env);
  const store = new LmdbTimeseriesStore(env, dict, {
    ...DEFAULT_STORE_OPTIONS,
    commitDelayMs: 0,
    outbox: new OutboxRecorder(env),
  });
  return { dataDir, env, dict, store };
}

function logger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    info: (m) => lines.push(m),
    warn: (m) => lines.push(m),
    error: (m) => lines.push(m),
    debug: () => undefined,
  };
}

/** A request for the outbox entries of DEVICE (all, or from seq `fromSeq`), every key named. */
function requestFor(
  env: StoreEnv,
  dict: Dictionary,
  fromSeq = 0,
  overrides: Partial<EncodeRequest> = {},
): EncodeRequest {
  const e = dict.entityIdx(DEVICE) as number;
  const entries = [];
  const keyNames = new Map<number, string>();
  for (const { key, value } of env.outbox.getRange({ start: ['q', fromSeq], end: ['q', Number.MAX_SAFE_INTEGER] })) {
    const [, seq, ee] = key as QueueKey;
    if (ee !== e) continue;
    const refs = decodeRefs(value as number[]);
    for (const r of refs) keyNames.set(r.k, dict.keyName(r.k) as string);
    entries.push({ seq, refs, fromTs: Number.MIN_SAFE_INTEGER });
  }
  return {
    e,
    entries,
    keyNames,
    windowMs: DEFAULT_STORE_OPTIONS.windowMs,
    maxTs: Date.now() + MAX_AHEAD_MS,
    maxBodyBytes: 65_536,
    maxBodyPoints: Infinity,
    ...overrides,
  };
}

const text = (g: EncodedGroup): string[] => g.bodies.map((b) => Buffer.from(b.body).toString('utf8'));

/**
 * A sync thread posting to `tb`. Requests made in the main thread go to `here` (tb unless given), so a test
 * can tell which thread made one.
 */
async function syncThread(
  t: Teardown,
  env: StoreEnv,
  dataDir: string,
  opts: Partial<SyncThreadOptions> & { here?: FakeTb } = {},
): Promise<{ thread: SyncThread; tb: FakeTb }> {
  const { here, ...rest } = opts;
  const tb = await FakeTb.start();
  const client = new UpstreamClient((here ?? tb).url, 2, 5_000);
  const thread = new SyncThread({
    refs: refSourceOf(env),
    client,
    log: logger(),
    setup: { dataDir, mapSizeBytes: MAP, url: tb.url, concurrency: 2, requestTimeoutMs: 5_000 },
    ...rest,
  });
  t.teardown(async () => {
    await thread.close();
    client.close();
    await tb.close();
  });
  return { thread, tb };
}

/** Posts every body of `g` as device `token`, in order; the bodies as `tb` received them. */
async function sent(tb: FakeTb, thread: SyncThread, g: ReadyGroup, token = 'T'): Promise<string[]> {
  const before = tb.requests.length;
  for (let i = 0; i < g.bodies.length; i++) {
    const a = await thread.postBody(g, i, `api/v1/${token}/telemetry`);
    if (a.status !== 200) throw new Error(`body ${i}: ${a.status} ${a.error ?? a.body}`);
  }
  return tb.requests.slice(before).map((r) => r.body);
}

/** What a group says besides its bodies. */
const counts = (g: ReadyGroup | EncodedGroup): object => ({
  points: g.points,
  dropped: g.dropped,
  droppedFrom: g.droppedFrom,
  droppedTo: g.droppedTo,
  held: g.held,
  bodies: g.bodies.length,
});

/**
 * Waits for the thread to end after its idle time: polled (the idle timer and the worker's exit have no event to
 * wait on from here, and a fake clock would not move the worker), 10 s at most, instead of a fixed sleep that a
 * loaded machine can outlast.
 */
async function untilIdle(thread: SyncThread): Promise<void> {
  const end = Date.now() + 10_000;
  while (thread.threadRunning && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
}
t.test('the thread sends exactly what the main thread would, types kept', async (t) => {
  const { dataDir, env, dict, store } = open(t);
  t.teardown(() => env.close());
  const { thread: encoder, tb } = await syncThread(t, env, dataDir);
  for (let i = 0; i < 30; i++) {
    await store.write(DEVICE, [
      {
        ts: BASE + i * 1000,
        values: [
          ['t', kvDouble(20 + i / 4)],
          ['n', kvLong(i)],
          ['whole', kvDouble(42)],
          ['s', kvString(`x"${i}`)],
        ],
      },
    ]);
  }
  const req = requestFor(env, dict, 0, { maxBodyBytes: 1024 });
  t.equal(req.entries.length, 30, 'one outbox entry per write');
  const here = encodeGroup(refSourceOf(env), req);
  const there = await encoder.encode(req);
  t.ok(encoder.threadRunning, 'encoded in a thread');
  t.notOk('local' in there.at, 'its bodies stay there');
  // field 19 of /proc/<pid>/task/<tid>/stat is the thread's nice value (after the parenthesised name)
  const nices = readdirSync('/proc/self/task').map((tid) =>
    Number(readFileSync(`/proc/self/task/${tid}/stat`, 'utf8').split(') ')[1]?.split(' ')[16]),
  );
  t.ok(nices.includes(10), `one thread at nice 10, the sync thread's (nice values: ${[...new Set(nices)].join(', ')})`);
  t.equal(nices[0], 0, 'the main thread keeps nice 0');
  t.ok(there.bodies.length > 1, `cut into bodies of at most 1024 bytes (${there.bodies.length})`);
  t.same(counts(there), counts(here), 'the same counts');
  t.same(
    there.bodies.map((b) => b.bytes),
    here.bodies.map((b) => b.body.byteLength),
    'the same sizes',
  );
  const received = await sent(tb, encoder, there);
  t.same(received, text(here), 'the upstream got the same bodies, byte for byte, in order');
  t.equal(there.points, 120);
  const first = (JSON.parse(received[0] as string) as Array<{ ts: number; values: Record<string, unknown> }>)[0];
  t.same(first, { ts: BASE, values: { t: 20, n: 0, whole: 42, s: 'x"0' } });
  t.match(received[0], /"whole":42\.0/, '42.0 stays a double on the wire');
  t.equal(
    tb.points.filter((p) => p.key === 'whole' && p.type === 'DOUBLE').length,
    30,
    'and the upstream typed it DOUBLE',
  );
  const again = await encoder.postBody(there, 0, 'api/v1/T/telemetry');
  t.equal(again.status, 0, 'a body is posted once: the thread forgets it then');
  const mainOnly = new SyncThread({
    refs: refSourceOf(env),
    client: new UpstreamClient(tb.url, 1, 5_000),
    log: logger(),
    thread: false,
    setup: { dataDir, mapSizeBytes: MAP, url: tb.url, concurrency: 1, requestTimeoutMs: 5_000 },
  });
  const inMain = await mainOnly.encode(req);
  t.ok('local' in inMain.at, 'sync.encoderThread false: encoded in the main thread');
  t.same(await sent(tb, mainOnly, inMain), text(here), 'and sent the same');
  t.notOk(mainOnly.threadRunning, 'without a thread');
  await mainOnly.close();
});

t.test("while the thread runs, live posts go through it; else through the main thread's client", async (t) => {
  const { dataDir, env, dict, store } = open(t);
  t.teardown(() => env.close());
  const here = await FakeTb.start();
  t.teardown(() => here.close());
  const { thread, tb } = await syncThread(t, env, dataDir, { here, idleMs: 200 });
  const live = '[{"ts":1700000000000,"values":{"v":1.0}}]';
  t.equal((await thread.post('api/v1/L/telemetry', live)).status, 200);
  t.equal(here.requests.length, 1, 'no thread running: made here');
  t.notOk(thread.threadRunning, 'a live post does not start the thread');
  await store.write(DEVICE, [{ ts: BASE, values: [['v', kvLong(1)]] }]);
  const g = await thread.encode(requestFor(env, dict));
  t.equal((await thread.post('api/v1/L/telemetry', live)).status, 200);
  t.equal(tb.requests.length, 1, 'thread running: made there');
  t.same(
    tb.points.map((p) => [p.token, p.type, p.value]),
    [['L', 'DOUBLE', '1.0']],
    'the body as given',
  );
  t.same(await sent(tb, thread, g), [JSON.stringify([{ ts: BASE, values: { v: 1 } }])]);
  await untilIdle(thread);
  t.notOk(thread.threadRunning, 'ended after idleMs without a request');
  t.equal((await thread.post('api/v1/L/telemetry', live)).status, 200);
  t.equal(here.requests.length, 2, 'made here again');
});

t.test('a group left unsent is forgotten, and a stop answers the requests in flight at once', async (t) => {
  const { dataDir, env, dict, store } = open(t);
  t.teardown(() => env.close());
  const { thread, tb } = await syncThread(t, env, dataDir, { idleMs: 200 });
  for (let i = 0; i < 20; i++) await store.write(DEVICE, [{ ts: BASE + i, values: [['v', kvLong(i)]] }]);
  const g = await thread.encode(requestFor(env, dict, 0, { maxBodyBytes: 100 }));
  t.ok(g.bodies.length > 2, `several bodies (${g.bodies.length})`);
  t.equal((await thread.postBody(g, 0, 'api/v1/T/telemetry')).status, 200);
  thread.release(g);
  t.equal((await thread.postBody(g, 1, 'api/v1/T/telemetry')).status, 0, 'released: gone from the thread');
  await untilIdle(thread);
  t.notOk(thread.threadRunning, 'and the thread is idle once nothing is held');
  const g2 = await thread.encode(requestFor(env, dict, 0, { maxBodyBytes: 100 }));
  await new Promise((r) => setTimeout(r, 500));
  t.ok(thread.threadRunning, 'a group not all posted keeps the thread');
  tb.delayMs = 10_000;
  const t0 = Date.now();
  const pending = thread.postBody(g2, 0, 'api/v1/T/telemetry');
  await new Promise((r) => setTimeout(r, 100));
  thread.abortRequests();
  const a = await pending;
  t.equal(a.status, 0, `a request in flight answers as a network error (${a.error})`);
  t.ok(Date.now() - t0 < 5_000, "at once, not after the upstream's delay");
  thread.release(g2);
});

t.test('the thread sees a commit made just before it was asked (a fresh snapshot per group)', async (t) => {
  const { dataDir, env, dict, store } = open(t);
  t.teardown(() => env.close());
  const { thread: encoder } = await syncThread(t, env, dataDir);
  // One write after the other, each asked for as soon as this thread sees its entry committed (as the sync's
  // outbox scan does), not waiting for its flush: the thread answered the previous group a moment before, and
  // lmdb-js renews a thread's read transaction only on a timer of its own.
  let stale = 0;
  const durable: Array<Promise<void>> = [];
  for (let i = 0; i < 300; i++) {
    durable.push(store.write(DEVICE, [{ ts: BASE + i, values: [['v', kvLong(i)]] }]));
    let req = requestFor(env, dict);
    while (req.entries.length < i + 1) {
      await new Promise((r) => setImmediate(r));
      req = requestFor(env, dict);
    }
    const g = await encoder.encode(req);
    encoder.release(g);
    if (g.points !== i + 1) stale++;
  }
  await Promise.all(durable);
  t.equal(stale, 0, 'every group read after its entries were committed');
});

t.test('held and dropped points are counted in the thread as in the main thread', async (t) => {
  const { dataDir, env, dict, store } = open(t);
  t.teardown(() => env.close());
  const { thread: encoder, tb } = await syncThread(t, env, dataDir);
  const now = Date.now();
  await store.write(DEVICE, [
    {
      ts: now,
      values: [
        ['a', kvLong(1)],
        ['gone', kvLong(2)],
      ],
    },
    { ts: now + 2 * MAX_AHEAD_MS, values: [['a', kvLong(3)]] },
    { ts: 900_000_000_000, values: [['a', kvLong(4)]] },
  ]);
  const req = requestFor(env, dict);
  const keyNames = new Map(req.keyNames);
  keyNames.delete(dict.keyIdx('gone') as number);
  const g = await encoder.encode({ ...req, keyNames, maxTs: now + MAX_AHEAD_MS });
  t.equal(g.points, 1, 'only the point in range is sent');
  t.equal(g.dropped, 1, 'a key without a name is dropped');
  t.equal(g.held.length, 1);
  t.match(g.held[0]?.value, { held: 2, pre2000: 1, futureMin: now + 2 * MAX_AHEAD_MS, above: now + MAX_AHEAD_MS });
  t.same(
    counts(g),
    counts(encodeGroup(refSourceOf(env), { ...req, keyNames, maxTs: now + MAX_AHEAD_MS })),
    'the main thread counts the same',
  );
  t.same(
    (await sent(tb, encoder, g)).map((b) => JSON.parse(b) as unknown),
    [[{ ts: now, values: { a: 1 } }]],
  );
});

t.test(
  'a thread that dies: its groups are encoded here; three deaths in a row and the thread is given up',
  async (t) => {
    const { dataDir, env, dict, store } = open(t);
    t.teardown(() => env.close());
    const broken = join(tempDir(t), 'broken-worker.mjs');
    writeFileSync(broken, 'throw new Error("no encoder here");\n');
    const log = logger();
    const { thread: encoder, tb } = await syncThread(t, env, dataDir, { log, workerUrl: pathToFileURL(broken) });
    await store.write(DEVICE, [{ ts: BASE, values: [['v', kvLong(7)]] }]);
    const req = requestFor(env, dict);
    const want = text(encodeGroup(refSourceOf(env), req));
    for (let i = 0; i < 4; i++)
      t.same(await sent(tb, encoder, await encoder.encode(req)), want, `group ${i + 1} sent all the same`);
    t.equal(
      log.lines.filter((l) => l.includes('the sync thread ended (no encoder here)')).length,
      2,
      'two deaths logged',
    );
    t.equal(
      log.lines.filter((l) => l.includes('ended 3 times in a row')).length,
      1,
      'the third gives the thread up, once',
    );
    t.notOk(encoder.threadRunning, 'no thread started after that');
  },
);

t.test('an idle thread ends and a later group starts another; closing leaves the store usable', async (t) => {
  const { dataDir, env, dict, store } = open(t);
  t.teardown(() => env.close());
  const { thread: encoder, tb } = await syncThread(t, env, dataDir, { idleMs: 100 });
  await store.write(DEVICE, [{ ts: BASE, values: [['v', kvLong(1)]] }]);
  const g = await encoder.encode(requestFor(env, dict));
  t.equal(g.points, 1);
  await sent(tb, encoder, g);
  t.ok(encoder.threadRunning);
  await untilIdle(encoder);
  t.notOk(encoder.threadRunning, 'ended after idleMs without a request');
  const g2 = await encoder.encode(requestFor(env, dict));
  t.equal(g2.points, 1, 'a new thread for the next group');
  t.equal((await sent(tb, encoder, g2)).length, 1, 'which sends it');
  await encoder.close();
  t.notOk(encoder.threadRunning);
  // the thread closed its handle of the shared environment, not the main thread's
  await store.write(DEVICE, [{ ts: BASE + 1, values: [['v', kvLong(2)]] }]);
  t.same(
    [...store.range(DEVICE, 'v', { startTs: BASE, endTs: BASE + 2, order: 'ASC' })].map((p) => p.value.v),
    [1, 2],
  );
});

t.test('a group that cannot be read back is refused, by the thread and then by the main thread', async (t) => {
  const { dataDir, env, dict, store } = open(t);
  t.teardown(() => env.close());
  const { thread: encoder } = await syncThread(t, env, dataDir);
  await store.write(DEVICE, [
    { ts: BASE, values: [['v', kvLong(1)]] },
    { ts: BASE + 1, values: [['v', kvLong(2)]] },
  ]);
  const req = requestFor(env, dict);
  // damage the fragment the entry points at
  for (const { key } of env.head.getRange({})) await env.head.put(key, Buffer.from([0xff, 0xff, 0xff]));
  await t.rejects(encoder.encode(req), 'rejected');
});

t.test('a gateway sets a batch that cannot be read back aside, shows it and sends the rest', async (t) => {
  const tb = await FakeTb.start();
  t.teardown(() => tb.close());
  await tb.down();
  // the log goes into LMDB at once, so the points are in head fragments to damage
  const gw = await syncGateway(t, tb.url, {}, { store: { applyIntervalMs: 50 } });
  await addUser(gw.dataDir, 'admin@enc.test', 'secret', 'TENANT_ADMIN');
  const jwt = (await login(gw, 'admin@enc.test', 'secret')).token;
  const bad = await addDevice(gw.dataDir, 'bad', ['--upstream-token', 'B']);
  const good = await addDevice(gw.dataDir, 'good', ['--upstream-token', 'G']);
  // stamped now: the fragments stay in the head (compaction takes windows older than store.headWindowMs)
  const now = Date.now();
  for (const d of [bad, good]) {
    const r = await http(
      'POST',
      `${gw.url}/api/v1/${d.token}/telemetry`,
      JSON.stringify([
        { ts: now - 1, values: { a: 1 } },
        { ts: now, values: { a: 2 } },
      ]),
    );
    t.equal(r.status, 200);
  }
  type Seen = { backlogPoints: number; setAsidePoints: number; sentPoints: number; lastError: string | null };
  await syncStatusUntil<Seen>(gw, jwt, (s) => s.backlogPoints === 4, 'both posts pending', 10_000, 50);
  // another process writes the same store while the daemon runs, as the CLI does (LMDB's lock file): once the
  // log has put the bad device's points into head fragments, they are overwritten with what no decoder takes
  const env = openStoreEnv({ dataDir: gw.dataDir, mapSizeBytes: MAP });
  const fragmentsOfBad = (): Buffer[] => {
    const e = new Dictionary(env).entityIdx(bad.id);
    return e === undefined
      ? []
      : [...env.head.getKeys({})].map((k) => k as Buffer).filter((k) => k.readUInt32BE(0) === e);
  };
  await waitFor(() => fragmentsOfBad().length > 0, { interval: 50, message: "the bad device's points in the head" });
  for (const key of fragmentsOfBad()) await env.head.put(key, Buffer.from([0xff, 0xff, 0xff]));
  await env.close();
  await tb.up();
  await tb.waitFor(() => tb.distinct('G').size === 2, "the good device's points");
  // the upstream records a request before it answers: the gateway counts it sent a moment later
  const s = await syncStatusUntil<Seen>(
    gw,
    jwt,
    (st) => st.setAsidePoints === 2 && st.sentPoints === 2,
    'the damaged batch set aside, the rest sent',
    10_000,
    50,
  );
  t.match(s.lastError, /could not be read back \(unreadable: /, 'shown in lastError');
  t.equal(s.backlogPoints, 0, 'nothing left pending');
  t.equal(tb.requests.filter((r) => r.token === 'B').length, 0, 'nothing of it went up');
  t.ok(
    gw.logs.some((l) => /sync: a batch of bad \(2 points\) could not be read back; set aside/.test(l)),
    'one log line',
  );
});
