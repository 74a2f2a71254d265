/**
 * A full disk. The disk budget keeps the store itself from filling the SD card, but other files (logs, a
 * user's copies) still can. Then every write answers 507 STORE_FULL with nothing of it stored (the first ones
 * refused by LMDB itself, the rest before LMDB, once the free-space check sees it), the daemon keeps running
 * and says so in its log (not once per request), writes succeed again once space is freed, and nothing
 * acknowledged is lost across a restart: not a key first seen while the disk was full, not a `latest` value
 * older than a point that failed. Background compaction backs off meanwhile. Runs on a 16 MiB tmpfs, so it
 * needs root (skipped otherwise).
 */
import { execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, rmdirSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { CoapTestClient, coapPort } from '../helpers/coap.js';
import { readEntity } from '../helpers/readback.js';
import { addDevice, http, startGateway, waitLogLines } from '../helpers/server.js';
import { waitFor } from '../helpers/wait.js';

const mnt = mkdtempSync(join(tmpdir(), 'outpost-full-'));
let mounted = false;
try {
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16m', 'tmpfs', mnt], { stdio: 'ignore' });
  mounted = true;
} catch {
  rmdirSync(mnt);
}
t.teardown(() => {
  if (!mounted) return;
  try {
    execFileSync('umount', ['-l', mnt], { stdio: 'ignore' });
    rmdirSync(mnt);
  } catch {
    // a tmpfs left mounted in the temp dir holds nothing the next run needs
  }
});

/** Writes zeros into `path` until the filesystem refuses (ENOSPC). */
function fill(path: string): void {
  const fd = openSync(path, 'w');
  const chunk = Buffer.alloc(256 * 1024);
  try {
    for (;;) writeSync(fd, chunk);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
  } finally {
    closeSync(fd);
  }
}

const body = (keys: readonly string[], from: number, n: number): string => {
  const rows: string[] = [];
  for (let i = 0; i < n; i++)
    rows.push(`{"ts":${from + i * 1000},"values":{${keys.map((k) => `"${k}":${i + 0.5}`).join(',')}}}`);
  return `[${rows.join(',')}]`;
};

t.test(
  'writes on a full disk answer 507 and store nothing; the daemon stays up and recovers',
  { skip: mounted ? false : 'cannot mount a tmpfs here (needs root)' },
  async (t) => {
    const dataDir = join(mnt, 'data');
    mkdirSync(dataDir);
    const junk = join(mnt, 'junk');
    t.teardown(() => rmSync(junk, { force: true }));
    const gw = await startGateway(t, { dataDir });
    const dev = await addDevice(dataDir, 'logger');
    const url = `${gw.url}/api/v1/${dev.token}/telemetry`;
    const BASE = 1_700_000_000_000;
    /** every acknowledged request: its keys, first ts and point count */
    const acked: Array<{ keys: string[]; from: number; n: number }> = [];
    const post = async (keys: string[], from: number, n: number): Promise<number> => {
      const r = await http('POST', url, body(keys, from, n));
      if (r.status === 200) acked.push({ keys, from, n });
      else
        t.same(
          r.json(),
          {
            status: 507,
            message: 'Storage is full',
            errorCode: 2,
            timestamp: r.json<{ timestamp: number }>().timestamp,
          },
          'TB error JSON',
        );
      return r.status;
    };

    t.equal(await post(['a'], BASE, 100), 200, 'a write before the disk fills');
    fill(junk);
    // A write that needs new pages fails; one that fits in pages LMDB freed earlier may still pass. Each attempt
    // brings a key never seen before, and a ts later than every earlier attempt's.
    let failedKey: string | undefined;
    let failedNewest = 0;
    for (let i = 0; i < 5 && failedKey === undefined; i++) {
      const key = `fresh${i}`;
      const from = BASE + 1e9 + i * 1e7;
      if ((await post(['a', key], from, 3000)) === 507) {
        failedKey = key;
        failedNewest = from + 2_999_000;
      }
    }
    t.ok(failedKey !== undefined, 'a write on the full disk answered 507');
    // more of them, all older than those
    for (let i = 0; i < 5; i++) await post(['a'], BASE + 1e8 + i * 1e7, 3000);
    t.equal((await http('GET', `${gw.url}/api/v1/${dev.token}/attributes`)).status, 200, 'the daemon still answers');
    t.equal(gw.proc.exitCode, null, 'the daemon is still running');
    const reports = gw.logs.filter((l) => /store write failed \(STORE_FULL\)/.test(l));
    t.equal(reports.length, 1, `one log line for the burst of failures, not one per request:\n${reports.join('\n')}`);
    // The writes went quiet, so compaction runs, and fails: it retries 2, 4, 8, ... s later (the sweep interval,
    // 1 s, doubled per failure) and logs the 1st, 2nd, 4th, ... failure in a row. Wait for the second line, then
    // read the gap from the daemon's own timestamps: 2 s (less at most a millisecond by which a timer can run
    // early against the wall clock), where retrying every second would give 1 s; and one line per failure.
    const failureLine = /downsampling step failed \((\d+) in a row\): Storage is full/;
    await waitLogLines(gw, /downsampling step failed \(2 in a row\): Storage is full/);
    const stepFailures = gw.logs.filter((l) => failureLine.test(l));
    t.same(
      stepFailures.map((l) => failureLine.exec(l)?.[1]),
      ['1', '2'],
      `compaction failed and said so once per failure:\n${stepFailures.join('\n')}`,
    );
    const loggedAt = (line: string): number => Date.parse(line.slice(0, line.indexOf(' ')));
    const retryGapMs = loggedAt(stepFailures[1] as string) - loggedAt(stepFailures[0] as string);
    t.ok(retryGapMs >= 1990, `compaction backed off: retried ${retryGapMs} ms after the first failure`);
    t.ok(
      stepFailures.some((l) => /free-space reserve/.test(l)),
      'by then writes are refused before LMDB sees them',
    );

    // over CoAP the same refusal is 5.03 Service Unavailable (CoAP has no 507): a device retries later
    const coap = await CoapTestClient.open(t, coapPort(gw));
    const refused = await coap.request({ method: 'POST', path: `api/v1/${dev.token}/telemetry`, payload: '{"c":1}' });
    t.equal(refused.code, '5.03', 'a CoAP upload on the full disk: 5.03');

    rmSync(junk);
    // After the failure: the key it first brought, and `a` at a ts newer than every acknowledged point but older
    // than the refused ones, so `latest` must move to it.
    const newestAcked = (): number =>
      Math.max(...acked.filter((r) => r.keys.includes('a')).map((r) => r.from + (r.n - 1) * 1000));
    const LATER = newestAcked() + 1_000_000;
    t.ok(LATER < failedNewest, 'the refused write held newer points of `a`');
    // free space is read once a second: the same request is retried until then
    let status = 0;
    await waitFor(async () => (status = await post(['a', failedKey as string], LATER, 100)) === 200, {
      interval: 100,
      message: 'a write taken again',
    }).catch(() => undefined);
    t.equal(status, 200, 'writes succeed again once space is freed (the free space is read once a second)');
    t.equal(await gw.stop('SIGTERM'), 0, 'a clean shutdown');

    const dump = await readEntity(dataDir, dev.id);
    for (const { keys, from, n } of acked) {
      for (const k of keys) {
        const have = new Map((dump.points[k] ?? []).map((p) => [p.ts, p.value]));
        let missing = 0;
        for (let i = 0; i < n; i++) if (have.get(from + i * 1000) !== String(i + 0.5)) missing++;
        t.equal(missing, 0, `${k}: every point of the request from ts ${from} is stored`);
      }
    }
    t.equal(
      dump.latest[failedKey as string]?.ts,
      LATER + 99_000,
      'the key first seen in a failed write is stored under its name',
    );
    t.equal(dump.latest['a']?.ts, LATER + 99_000, 'latest is the newest acknowledged point');
    const failedTs = (dump.points['a'] ?? []).filter(
      (p) => p.ts >= BASE + 1e9 && !acked.some((r) => p.ts >= r.from && p.ts < r.from + r.n * 1000),
    );
    t.equal(failedTs.length, 0, 'nothing of a refused write is stored');
  },
);
