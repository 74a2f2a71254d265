/**
 * Charts and tables that tell the truth (docs/cli.md): `query --chart` shows the data's true min, max and count
 * and each column's min–max envelope; `--json --limit N` and the table both show the newest N (`--oldest` the
 * first); aggregate rows label their time column and round numbers for people (`--json` keeps full precision);
 * `attributes` across scopes has a SCOPE column; a mistyped key is named with the near one; `rpc --oneway` and
 * `logout` say what they did.
 */
import t from 'tap';
import { addDevice, http, waitLongPoll } from '../helpers/server.js';
import { HOUR, ok, techGateway } from '../helpers/tech.js';

t.test('charts, limits, aggregates, attributes, keys, rpc --oneway, logout', async (t) => {
  const tg = await techGateway(t);
  await addDevice(tg.gw.dataDir, 'spiky', ['--token', 'SPIKY']);
  const now = Date.now();
  const from = now - 6 * HOUR;
  // 3,600 points from 1,400 to 1,449: the averages of the chart's columns all sit near 1,424
  const pts = Array.from({ length: 3600 }, (_, i) => ({
    ts: from + i * 6000,
    values: { temperature: 1400 + (i % 50) },
  }));
  for (let i = 0; i < pts.length; i += 600)
    t.equal((await http('POST', `${tg.gw.url}/api/v1/SPIKY/telemetry`, pts.slice(i, i + 600))).status, 200);

  for (const mode of [tg.L, tg.R]) {
    const chart = ok(
      t,
      await tg.run(['query', 'spiky', '--from', String(from), '--to', String(now), '--chart', ...mode]),
      'chart',
    );
    t.match(
      chart,
      /^temperature {2}min 1400 {2}max 1449 {2}\(3600 points, \d+ columns\)\n/,
      'the true min, max, count',
    );
    const rows = chart.split('\n').slice(1, 11);
    t.match(rows[0], /^1449 ┤/, 'the y axis spans the true range');
    // the envelope fills each column from its min to its max: the top and bottom rows are inked across
    const inked = (row: string): number => [...row.slice(6)].filter((c) => c !== '⠀').length;
    t.ok(inked(rows[0] as string) > 50, `the top row is inked by the envelope (${inked(rows[0] as string)})`);
    t.ok(inked(rows[9] as string) > 50, 'the bottom row too');
  }

  // --json --limit and the table: the newest N; --oldest the first N
  const q = ['query', 'pump-1', '--keys', 'n', '--from', String(tg.now - 3 * HOUR), '--limit', '2'];
  const j = JSON.parse(ok(t, await tg.run([...q, '--json', ...tg.R]), 'json')) as { n: Array<{ value: string }> };
  t.same(j.n.map((p) => p.value).sort(), ['118', '119'], '--json --limit 2: the newest two');
  const table = ok(t, await tg.run([...q, ...tg.R]), 'table');
  t.match(table, /\n\S+ \S+\s+118\n\S+ \S+\s+119\n$/, 'the table: the same newest two');
  const oldest = JSON.parse(ok(t, await tg.run([...q, '--json', '--oldest', ...tg.L]), 'oldest')) as {
    n: Array<{ value: string }>;
  };
  t.same(
    oldest.n.map((p) => p.value),
    ['0', '1'],
    '--oldest: the first two',
  );

  // aggregates: a labelled time column, numbers rounded for people, full precision in --json
  const agg = [
    'query',
    'pump-1',
    '--keys',
    't',
    '--from',
    String(tg.now - 3 * HOUR),
    '--agg',
    'AVG',
    '--interval',
    '7m',
  ];
  const aggTable = ok(t, await tg.run([...agg, ...tg.L]), 'agg table');
  t.match(aggTable, /^TIME \(middle of 7m bucket\)\s+t\n/, 'the time column says what it is');
  t.notMatch(aggTable, /\.\d{4,}/, 'no number with more than three decimals');
  t.match(ok(t, await tg.run([...agg, '--json', ...tg.L]), 'agg json'), /\.\d{6,}/, '--json: full precision');

  // attributes across scopes: one SCOPE column
  const attrs = ok(t, await tg.run(['attributes', 'pump-1', ...tg.R]), 'attributes');
  t.match(attrs, /^SCOPE\s+KEY\s+VALUE\s+LAST UPDATE\n/);
  t.match(attrs, /\nclient\s+fw\s+1\.2\.3/);
  t.match(attrs, /\nshared\s+target\s+21\.5/);

  // a mistyped key
  const typo = await tg.run(['query', 'spiky', '--keys', 'temprature', ...tg.L]);
  t.match(typo.stderr, /no key "temprature" on spiky; did you mean "temperature"\?/);

  // rpc --oneway says it went out
  const poll = http('GET', `${tg.gw.url}/api/v1/PUMP1/rpc?timeout=20000`);
  await waitLongPoll(tg.gw, tg.H, (s) => s.openPolls === 1);
  const rpc = ok(t, await tg.run(['rpc', 'pump-1', 'reboot', '--oneway', ...tg.R]), 'rpc --oneway');
  t.match(rpc, /^sent reboot to pump-1 \(one-way: no reply is awaited\)\n$/);
  await poll;

  t.match(ok(t, await tg.run(['logout']), 'logout'), /^logged out of /);
  t.match(ok(t, await tg.run(['logout']), 'logout again'), /^not logged in to any gateway\n$/);
});
