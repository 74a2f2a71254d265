/**
 * `outpost query` (table, --json, --csv, --chart), `export` and `status` (docs/cli.md), local and remote against
 * a real daemon: --json and export must be REST's bytes in both modes.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { statusLines } from '../../src/cli/status.js';
import type { CoapStatus, StatusJson } from '../../src/status/index.js';
import { CoapTestClient, coapPort } from '../helpers/coap.js';
import { http, tempDir } from '../helpers/server.js';
import { HOUR, ok, techGateway } from '../helpers/tech.js';

t.test('query, export and status, local and remote', async (t) => {
  const { gw, run, L, R, pump, now, H, token } = await techGateway(t);
  // query: --json == REST for raw and aggregated, both modes; csv and chart identical across modes
  const from = now - 3 * HOUR;
  const queries: Array<[string[], string]> = [
    [
      ['--keys', 't,n,s', '--from', String(from), '--to', String(now)],
      `keys=t,n,s&startTs=${from}&endTs=${now}&interval=0&agg=NONE&orderBy=DESC`,
    ],
    [
      ['--keys', 't', '--from', String(from), '--to', String(now), '--limit', '7'],
      `keys=t&startTs=${from}&endTs=${now}&interval=0&agg=NONE&orderBy=DESC&limit=7`,
    ],
    [
      ['--keys', 't,n', '--from', String(from), '--to', String(now), '--agg', 'AVG', '--interval', '20m'],
      `keys=t,n&startTs=${from}&endTs=${now}&interval=1200000&agg=AVG&orderBy=ASC`,
    ],
    [
      ['--keys', 's,n', '--from', String(from), '--to', String(now), '--agg', 'MAX', '--interval', '3600000'],
      `keys=s,n&startTs=${from}&endTs=${now}&interval=3600000&agg=MAX&orderBy=ASC`,
    ],
  ];
  await Promise.all(
    queries.map(async ([args, qs]) => {
      const rest = (
        await http('GET', `${gw.url}/api/plugins/telemetry/DEVICE/${pump.id}/values/timeseries?${qs}`, undefined, H)
      ).text;
      const [l, r] = await Promise.all([
        run(['query', 'pump-1', ...args, ...L, '--json']),
        run(['query', 'pump-1', ...args, ...R, '--json']),
      ]);
      t.equal(ok(t, l, 'query local').trim(), rest, `query ${args.join(' ')}: local --json == REST`);
      t.equal(ok(t, r, 'query remote').trim(), rest, `query ${args.join(' ')}: remote --json == REST`);
    }),
  );
  const qa = ['query', 'pump-1', '--keys', 't,n', '--from', String(from), '--to', String(now), '--limit', '1000'];
  for (const fmt of ['--csv', '--chart', '--table']) {
    const extra = fmt === '--table' ? [] : [fmt];
    const [l, r] = await Promise.all([run([...qa, ...extra, ...L]), run([...qa, ...extra, ...R])]);
    t.equal(ok(t, l, `query ${fmt} local`), ok(t, r, `query ${fmt} remote`), `query ${fmt}: same output in both modes`);
  }
  const csv = (await run([...qa, '--csv', ...L])).stdout.split('\n');
  t.equal(csv[0], 'ts,t,n');
  t.equal(csv.length, 122, 'csv: header, 120 rows, final newline');
  const chart = (await run([...qa, '--chart', ...L])).stdout.split('\n');
  t.ok(
    chart.every((l) => [...l].length <= 100),
    'chart fits $COLUMNS',
  );
  t.match(chart[0], /^t {2}min 20 {2}max 24 {2}\(120 points\)$/);
  t.ok(
    chart.some((l) => /[\u2801-\u28ff]/.test(l)),
    'braille dots',
  );

  // export: the REST download byte for byte, to stdout and to -o
  const restCsv = (
    await http(
      'GET',
      `${gw.url}/api/download/deviceSeriesData?deviceId=${pump.id}&type=ts&startValue=${from}&endValue=${now}`,
      undefined,
      { Authorization: `Bearer ${token}` },
    )
  ).text;
  const out = tempDir(t);
  await Promise.all(
    [L, R].map(async (mode) => {
      const file = join(out, `e-${mode[0]?.slice(2)}.csv`);
      const [toStdout, toFile] = await Promise.all([
        run(['export', 'pump-1', '--from', String(from), '--to', String(now), ...mode]),
        run(['export', 'pump-1', '--from', String(from), '--to', String(now), ...mode, '-o', file]),
      ]);
      t.equal(ok(t, toStdout, 'export'), restCsv, `export == REST download (${mode[0]})`);
      ok(t, toFile, 'export -o');
      t.equal(readFileSync(file, 'utf8'), restCsv, `export -o FILE == REST download (${mode[0]})`);
    }),
  );
  t.same(readdirSync(out).sort(), ['e-data-dir.csv', 'e-url.csv'], 'no partial files left');

  // status, after a CoAP read and an observation it keeps open (the CoAP line counts both)
  const coap = await CoapTestClient.open(t, coapPort(gw));
  t.equal((await coap.request({ path: 'api/v1/PUMP1/attributes' })).code, '2.05', 'CoAP attribute read');
  t.equal((await coap.request({ path: 'api/v1/PUMP1/attributes', observe: 0 })).code, '2.05', 'CoAP observation');
  const [slr, srr, shr, sll] = await Promise.all([
    run(['status', ...L, '--json']),
    run(['status', ...R, '--json']),
    run(['status', ...R]),
    run(['status', ...L]),
  ]);
  const sl = JSON.parse(ok(t, slr, 'status local')) as Record<string, unknown>;
  const sr = JSON.parse(ok(t, srr, 'status remote')) as Record<string, unknown>;
  t.equal(sl['daemon'], true, 'local status asks the running daemon');
  t.equal(sr['daemon'], true);
  t.match(sr, {
    version: '0.1.0',
    ingest: { points: 360 },
    sync: { enabled: false, state: 'off' },
    longPoll: { openPolls: 0 },
  });
  t.match(ok(t, shr, 'status human'), /^outpost 0\.1\.0 {2}up .*\nclock .*\ningest .*\nstore /);
  t.match(sr, { coap: { port: coapPort(gw), requests: 2, observations: 1, refused: 0 } });
  t.match(
    shr.stdout,
    new RegExp(
      `\\ncoap {7}port ${coapPort(gw)}: 2 requests \\(0 duplicates\\), 1 observations, 0 notifications, 0 refused\\n`,
    ),
    'the CoAP line: requests, observations, refusals',
  );
  t.match(sll.stdout, /\ncoap {7}port \d+: 2 requests /, 'the CoAP line, local status');
  const off = statusLines({ ...(sr as unknown as StatusJson), coap: { ...(sr['coap'] as CoapStatus), port: 0 } });
  t.ok(off.includes('coap       off'), 'the CoAP listener off: "coap off"');
  const loop = sr['eventLoop'] as { p99Ms: number; maxMs: number };
  t.ok(
    loop.p99Ms >= 0 && loop.maxMs >= loop.p99Ms,
    `event-loop delay reported: p99 ${loop.p99Ms} ms, max ${loop.maxMs} ms`,
  );
  t.ok(sl['eventLoop'], "local status: the daemon's event-loop figures");
  t.match(shr.stdout, /\nevent loop late by [\d.]+ ms at p99/);
  t.match(ok(t, sll, 'status local human'), /^outpost 0\.1\.0 {2}up /);
});
