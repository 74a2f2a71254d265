/** Table-driven units of the CLI and the status endpoints: friendly times, durations, "did you mean", loopback. */
import '../helpers/sandbox.js';
import t from 'tap';
import { isLoopback } from '../../src/api/status/index.js';
import { editDistance, nearest, unknownDevice } from '../../src/cli/suggest.js';
import { parseDuration, parseTime } from '../../src/cli/time.js';
import { Histogram, LATENCY_BUCKETS_SEC, kindOf } from '../../src/status/metrics.js';

process.env['TZ'] = 'UTC';
const NOW = 1_795_500_000_000;

t.test('times and durations', async (t) => {
  const ok: Array<[string, number]> = [
    ['now', NOW],
    ['-15m', NOW - 900_000],
    ['-6h', NOW - 21_600_000],
    ['-7d', NOW - 604_800_000],
    ['-1w', NOW - 604_800_000],
    ['-500ms', NOW - 500],
    ['0', 0],
    ['1767225600000', 1_767_225_600_000],
    ['2026-01-01', 1_767_225_600_000],
    ['2026-01-01T06:30', 1_767_249_000_000],
    ['2026-01-01T06:30:00Z', 1_767_249_000_000],
    ['2026-01-01T06:30:00+02:00', 1_767_241_800_000],
  ];
  for (const [text, want] of ok) t.equal(parseTime(text, NOW), want, text);
  for (const bad of ['yesterday', '-6x', '', '2026-13-45', '6h', '1e3'])
    t.throws(() => parseTime(bad, NOW), /expected now, -6h/, `"${bad}" refused`);
  // a relative time without a unit is a typo for hours or days more often than a count of ms
  t.throws(
    () => parseTime('-90', NOW, '--from'),
    /^--from "-90" needs a unit: e\.g\. -90m, -90h or -90d$/,
    '"-90" refused',
  );
  const durations: Array<[string, number]> = [
    ['30s', 30_000],
    ['10m', 600_000],
    ['1h', 3_600_000],
    ['1d', 86_400_000],
    ['250', 250],
    ['1.5h', 5_400_000],
    ['7200000', 7_200_000],
  ];
  for (const [text, want] of durations) t.equal(parseDuration(text), want, text);
  for (const bad of ['-1h', 'h', '1y', ''])
    t.throws(() => parseDuration(bad), /expected e\.g\. 30s/, `"${bad}" refused`);
});

t.test('did you mean', async (t) => {
  t.equal(editDistance('kitten', 'sitting'), 3);
  t.equal(editDistance('Pump-1', 'pump-1'), 0, 'case-insensitive');
  const names = ['pump-1', 'pump-2', 'pump-10', 'boiler', 'valve-7'];
  t.same(nearest('pump1', names), ['pump-1', 'pump-10', 'pump-2'], 'nearest first, ties by name');
  t.same(nearest('valve', names), ['valve-7'], 'a prefix is found by containment');
  t.same(nearest('xyzzy', names), [], 'nothing near');
  t.equal(unknownDevice('boilr', names), 'no device "boilr"; did you mean "boiler"?');
  t.equal(unknownDevice('xyzzy', names), 'no device "xyzzy"');
});

t.test('loopback addresses as uWS gives them', async (t) => {
  for (const a of [
    '127.0.0.1',
    '127.8.9.10',
    '::1',
    '0000:0000:0000:0000:0000:0000:0000:0001',
    '0000:0000:0000:0000:0000:ffff:7f00:0001',
  ])
    t.ok(isLoopback(a), a);
  for (const a of [
    '10.0.0.1',
    '192.168.1.127',
    '0000:0000:0000:0000:0000:ffff:0a00:0001',
    'fe80:0000:0000:0000:0000:0000:0000:0001',
    '',
  ])
    t.notOk(isLoopback(a), a || '(empty)');
});

t.test('latency histogram and request kinds', async (t) => {
  const h = new Histogram();
  for (const s of [0.0005, 0.001, 0.003, 0.2, 99]) h.observe(s);
  t.equal(h.count, 5);
  t.equal(h.counts[0], 2, 'le 0.001 holds 0.0005 and 0.001 (bounds inclusive)');
  t.equal(h.counts[2], 1, 'le 0.005');
  t.equal(h.counts[LATENCY_BUCKETS_SEC.indexOf(0.25)], 1);
  t.equal(h.counts[LATENCY_BUCKETS_SEC.length], 1, '+Inf');
  t.equal(kindOf('post', '/api/v1/:token/telemetry'), 'ingest');
  t.equal(kindOf('get', '/api/v1/:token/rpc'), 'other', 'a long-poll is not an ingest');
  t.equal(kindOf('get', '/api/plugins/telemetry/:entityType/:entityId/values/timeseries'), 'query');
  t.equal(kindOf('get', '/api/download/deviceSeriesData'), 'query');
});

t.test('every command has --help with a worked example', async (t) => {
  const { buildCli } = await import('../../src/cli/index.js');
  const program = await buildCli();
  const leaves = (c: import('commander').Command): Array<import('commander').Command> =>
    c.commands.length === 0 ? [c] : c.commands.flatMap(leaves);
  const all = program.commands.flatMap(leaves);
  t.ok(all.length >= 16, `${all.length} commands`);
  for (const cmd of all) {
    let text = '';
    cmd.configureOutput({
      writeOut: (s) => {
        text += s;
      },
    });
    cmd.outputHelp();
    const name = cmd.parent && cmd.parent !== program ? `${cmd.parent.name()} ${cmd.name()}` : cmd.name();
    t.match(text, new RegExp(`\\n {2}\\$ outpost ${name} `), `outpost ${name} --help has an example`);
  }
});
