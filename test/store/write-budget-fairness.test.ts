/**
 * A writer pays for its own bytes (store/writer-shares.ts, docs/write-budget.md): a bulk upload that drains the
 * write budget's reserve is the one paced, while a device posting one reading at a time beside it is committed
 * at once, during the upload and after it, and every point of both is stored.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { type Gateway, addDevice, http, startGateway, tempDir } from '../helpers/server.js';
import { addUser, authHeaders, login } from '../helpers/users.js';
import type { StatusJson } from '../../src/status/index.js';
import type { WriteFigures } from '../../src/store/write-budget.js';

/**
 * 800 MB a day: a 4.4-MB reserve, which a hundred bulk requests drain, and a light share of ~1.35 MB over 5 minutes
 * (670 KB each for two writers), which a device posting two dozen single readings stays well within (a 4-KiB log page
 * each)
 */
const BUDGET = 8e8;
/** timestamps per bulk request: 2 keys, 2,000 points, an LMDB commit of its own (as bench:downsample's) */
const BULK_TS = 1000;

async function writes(gw: Gateway, H: Record<string, string>): Promise<WriteFigures> {
  return (await http('GET', `${gw.url}/api/outpost/status`, undefined, H)).json<StatusJson>().writes as WriteFigures;
}

function bulkBody(from: number): { ts: number; values: { a: number; b: number } }[] {
  return Array.from({ length: BULK_TS }, (_, i) => ({ ts: from + i * 1000, values: { a: i, b: -i } }));
}

async function post(gw: Gateway, token: string, body: object): Promise<void> {
  const r = await http('POST', `${gw.url}/api/v1/${token}/telemetry`, body);
  if (r.status !== 200) throw new Error(`${token}: ${r.status} ${r.text}`);
}

async function count(gw: Gateway, H: Record<string, string>, id: string, from: number, to: number): Promise<number> {
  const r = await http(
    'GET',
    `${gw.url}/api/plugins/telemetry/DEVICE/${id}/values/timeseries?keys=a&startTs=${from}&endTs=${to}&limit=1000000`,
    undefined,
    H,
  );
  return r.json<Record<string, unknown[]>>()['a']?.length ?? 0;
}

t.test('a bulk upload is paced, and a light device beside it is committed at once, during and after', async (t) => {
  const dataDir = tempDir(t);
  const config = join(dataDir, 'config.json');
  writeFileSync(config, JSON.stringify({ store: { writeBudgetBytesPerDay: BUDGET } }));
  const gw = await startGateway(t, { dataDir, args: ['--config', config] });
  const bulk = await addDevice(dataDir, 'bulk', ['--token', 'BULK']);
  const light = await addDevice(dataDir, 'light', ['--token', 'LIGHT']);
  await addUser(dataDir, 'admin@example.com', 'pw', 'TENANT_ADMIN');
  const H = authHeaders((await login(gw, 'admin@example.com', 'pw')).token);

  // the bulk writer uploads until the budget paces at its longest (the reserve empty)
  const bulkFrom = Date.now() - 30 * 86_400_000;
  let sent = 0;
  let w = await writes(gw, H);
  while (w.commitDelayMs < 900) {
    if (sent >= 400) throw new Error(`400 bulk requests and no pacing: ${JSON.stringify(w)}`);
    await post(gw, 'BULK', bulkBody(bulkFrom + sent * BULK_TS * 1000));
    sent++;
    w = await writes(gw, H);
  }
  t.ok(w.reserveLeftBytes < w.reserveBytes / 4, `paced after ${sent} bulk requests (delay ${w.commitDelayMs} ms)`);

  // during: while a bulk request waits for its paced commit, the light device's single posts are answered
  const lightFrom = Date.now() - 3_600_000;
  let lightSent = 0;
  const before = await writes(gw, H);
  for (let round = 0; round < 3; round++) {
    const order: string[] = [];
    const pending = post(gw, 'BULK', bulkBody(bulkFrom + sent * BULK_TS * 1000)).then(() => order.push('bulk'));
    sent++;
    for (let i = 0; i < 3; i++) {
      await post(gw, 'LIGHT', { ts: lightFrom + lightSent * 1000, values: { a: lightSent } });
      lightSent++;
      order.push('light');
    }
    await pending;
    t.same(order, ['light', 'light', 'light', 'bulk'], `round ${round}: three light posts answered before the bulk`);
  }
  const during = await writes(gw, H);
  t.equal(during.heavyWriters, 1, 'one writer is paced: the bulk one');
  t.equal(during.pacedCommits - before.pacedCommits, 3, "the bulk's three requests waited the delay");
  t.equal(during.lightCommits - before.lightCommits, 9, 'the light posts were committed on their own, at once');

  // after: the upload is over, the reserve still low; the light device is still committed at once
  for (let i = 0; i < 15; i++) {
    await post(gw, 'LIGHT', { ts: lightFrom + lightSent * 1000, values: { a: lightSent } });
    lightSent++;
  }
  const after = await writes(gw, H);
  t.ok(after.commitDelayMs > 0, `still paced after the upload (delay ${after.commitDelayMs} ms)`);
  t.equal(after.pacedCommits, during.pacedCommits, 'no light post waited the delay');
  t.equal(after.lightCommits - during.lightCommits, 15, 'each light post a commit of its own, at once');

  t.equal(await count(gw, H, light.id, lightFrom, lightFrom + 3_600_000), lightSent, 'every light point stored');
  t.equal(
    await count(gw, H, bulk.id, bulkFrom, bulkFrom + sent * BULK_TS * 1000),
    sent * BULK_TS,
    'every bulk point stored',
  );
});
