/**
 * A 200 is sent only after the points are committed (docs/api.md): kill -9 the daemon in the middle of a
 * burst of concurrent posts, then find EVERY point whose request got a 200, with the value that was posted.
 * Requests cut off by the kill may or may not be stored, but nothing stored may be something never sent,
 * and a stored request is stored whole (both its keys).
 */
import t from 'tap';
import { readEntity } from '../../helpers/readback.js';
import { addDevice, startGateway } from '../../helpers/server.js';

const CLIENTS = 32;
/** kill once this many requests are acknowledged (the trigger is the event, not a timer) */
const KILL_AFTER_ACKS = 1200;
/** upper bound on the burst, should the machine be too slow to reach KILL_AFTER_ACKS */
const MAX_BURST_MS = 10_000;

t.test('kill -9 during a burst of concurrent posts loses no acknowledged point', async (t) => {
  const gw = await startGateway(t);
  const dev = await addDevice(gw.dataDir, 'burst');
  const url = `${gw.url}/api/v1/${dev.token}/telemetry`;

  /** per client, the sequence numbers whose request got a 200 */
  const acked: number[][] = Array.from({ length: CLIENTS }, () => []);
  let ackCount = 0;
  let killed = false;
  let onKill: () => void = () => undefined;
  const killedPromise = new Promise<void>((resolve) => {
    onKill = resolve;
  });
  const kill = (): void => {
    if (killed) return;
    killed = true;
    gw.proc.kill('SIGKILL');
    onKill();
  };
  const fallback = setTimeout(kill, MAX_BURST_MS);

  // Client c posts seq i as one request with two keys: its own series (ts = i) and a series shared by all
  // clients (ts = c * 1e6 + i), so concurrent requests land in the same group-commit transactions.
  const client = async (c: number): Promise<void> => {
    for (let i = 0; !killed; i++) {
      const body = `{"ts":${1_000_000 * (c + 1) + i},"values":{"c${c}":${i},"shared":"${c}:${i}"}}`;
      let status: number;
      try {
        const res = await fetch(url, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
        await res.arrayBuffer();
        status = res.status;
      } catch {
        return; // the daemon is gone; this request's fate is unknown
      }
      if (status !== 200) throw new Error(`client ${c} seq ${i}: status ${status}`);
      (acked[c] as number[]).push(i);
      if (++ackCount >= KILL_AFTER_ACKS) kill();
    }
  };
  await Promise.all([...Array.from({ length: CLIENTS }, (_, c) => client(c)), killedPromise]);
  clearTimeout(fallback);
  t.equal(await gw.stop('SIGKILL'), null, 'the daemon died by the signal');
  t.ok(ackCount > CLIENTS, `a real burst was acknowledged before the kill (${ackCount} requests)`);

  const check = async (label: string): Promise<void> => {
    const dump = await readEntity(gw.dataDir, dev.id);
    const shared = new Map((dump.points['shared'] ?? []).map((p) => [p.ts, p.value]));
    let missing = 0;
    let wrong = 0;
    for (let c = 0; c < CLIENTS; c++) {
      const own = new Map((dump.points[`c${c}`] ?? []).map((p) => [p.ts, p.value]));
      for (const i of acked[c] as number[]) {
        const ts = 1_000_000 * (c + 1) + i;
        if (!own.has(ts) || !shared.has(ts)) missing++;
        else if (own.get(ts) !== String(i) || shared.get(ts) !== `${c}:${i}`) wrong++;
      }
      // whatever is stored was sent, and each stored request is whole (both of its keys are there)
      for (const [ts, v] of own) {
        const i = ts - 1_000_000 * (c + 1);
        if (v !== String(i) || shared.get(ts) !== `${c}:${i}`) wrong++;
      }
    }
    t.equal(missing, 0, `${label}: every acknowledged point is on disk (${ackCount} requests, ${ackCount * 2} points)`);
    t.equal(wrong, 0, `${label}: every stored point has the value that was posted, both keys of a request together`);
    let stored = 0;
    for (let c = 0; c < CLIENTS; c++) stored += dump.points[`c${c}`]?.length ?? 0;
    t.ok(stored >= ackCount, `${label}: stored requests (${stored}) ≥ acknowledged (${ackCount})`);
    // latest must be the newest stored point of each series
    let staleLatest = 0;
    for (let c = 0; c < CLIENTS; c++) {
      const pts = dump.points[`c${c}`] ?? [];
      const last = pts[pts.length - 1];
      if (last && dump.latest[`c${c}`]?.ts !== last.ts) staleLatest++;
    }
    t.equal(staleLatest, 0, `${label}: the latest value of every series is its newest stored point`);
  };
  await check('after kill -9');

  // The store reopens cleanly after the crash, keeps everything and takes new writes.
  const again = await startGateway(t, { dataDir: gw.dataDir });
  const res = await fetch(`${again.url}/api/v1/${dev.token}/telemetry`, {
    method: 'POST',
    body: '{"ts":1,"values":{"after":1}}',
  });
  t.equal(res.status, 200, 'the restarted daemon accepts writes');
  t.equal(await again.stop('SIGTERM'), 0);
  await check('after restart');
});
