/** `outpost devices`, `latest`, `query` and `attributes` (CONTRACT §10), local or remote. */
import { type Command, Option } from 'commander';
import type { AggParam } from '../query/history.js';
import { type AttributeScopeArg, type Backend, resolveDevice } from './backend.js';
import { example } from './common.js';
import { CliError } from './errors.js';
import { type TechOptions, keysOption, print, techOptions, withBackend } from './options.js';
import type { SeriesJson } from './render.js';
import { HOUR_MS, parseDuration, parseTime } from './time.js';

/** the human views' modules, loaded only without --json */
const views = async (): Promise<typeof import('./render.js') & typeof import('./format.js') & typeof import('./chart.js')> => {
  const [render, format, chart] = await Promise.all([import('./render.js'), import('./format.js'), import('./chart.js')]);
  return { ...render, ...format, ...chart };
};

/** A key's last hour as AVG buckets of SPARK_WIDTH per hour (the planner answers from rollups). */
async function lastHour(b: Backend, deviceId: string, keys: readonly string[], now: number): Promise<SeriesJson> {
  if (keys.length === 0) return {};
  const { SPARK_WIDTH } = await import('./render.js');
  const interval = HOUR_MS / SPARK_WIDTH;
  return JSON.parse(await b.history(deviceId, keys, { startTs: now - HOUR_MS, endTs: now, agg: 'AVG', interval })) as SeriesJson;
}

export function registerRead(program: Command): void {
  example(techOptions(program.command('devices'))
    .description('list devices with their last activity and a sparkline of the last hour')
    .action(async (o: TechOptions) => withBackend(o, async (b) => {
      const rows = await b.devices();
      if (o.json) return print(JSON.stringify(rows));
      const { numericValue, sparkOf, devicesTable } = await views();
      const now = Date.now();
      const sparks = new Map<string, string>();
      for (const d of rows) {
        if (d.lastActivityTs === null || d.lastActivityTs < now - HOUR_MS) continue;
        // the most recently updated numeric key stands for the device
        const latest = Object.entries(JSON.parse(await b.latest(d.id, undefined)) as SeriesJson)
          .filter(([, p]) => numericValue(p[0]?.value) !== undefined)
          .sort((x, y) => (y[1][0]?.ts ?? 0) - (x[1][0]?.ts ?? 0));
        const key = latest[0]?.[0];
        if (key !== undefined) sparks.set(d.id, `${sparkOf((await lastHour(b, d.id, [key], now))[key] ?? [], now)} ${key}`);
      }
      print(rows.length === 0 ? '(no devices)' : devicesTable(rows, sparks));
    })), 'outpost devices', 'outpost devices --url http://gw-12.local:8080 --json');

  example(techOptions(program.command('latest').argument('<device>', 'device name or id'))
    .description('latest value of each key, with a sparkline of the last hour')
    .option('--keys <a,b>', 'only these keys')
    .action(async (ref: string, o: TechOptions & { keys?: string }) => withBackend(o, async (b) => {
      const dev = await resolveDevice(b, ref);
      const text = await b.latest(dev.id, keysOption(o.keys));
      if (o.json) return print(text);
      const { sparkOf, latestTable } = await views();
      const latest = JSON.parse(text) as SeriesJson;
      const now = Date.now();
      const hour = await lastHour(b, dev.id, Object.keys(latest).filter((k) => (latest[k]?.[0]?.ts ?? 0) >= now - HOUR_MS), now);
      const sparks = new Map(Object.entries(hour).map(([k, pts]) => [k, sparkOf(pts, now)] as const));
      print(Object.keys(latest).length === 0 ? `(no telemetry from ${dev.name})` : latestTable(latest, sparks));
    })), 'outpost latest pump-1', 'outpost latest pump-1 --keys temperature,pressure --json');

  example(techOptions(program.command('query').argument('<device>', 'device name or id'))
    .description('history of keys over a time range: a table, JSON (REST\'s answer), CSV or a chart')
    .requiredOption('--keys <a,b>', 'keys to read')
    .option('--from <T>', 'start (inclusive): epoch ms, ISO-8601, now, or -15m/-6h/-7d', '-1h')
    .option('--to <T>', 'end (exclusive)', 'now')
    .addOption(new Option('--agg <fn>', 'aggregation').choices(['NONE', 'AVG', 'MIN', 'MAX', 'SUM', 'COUNT']).default('NONE'))
    .option('--interval <D>', 'bucket width with --agg: 30s, 10m, 1h, 1d or ms')
    .option('--limit <n>', 'raw: points per key (default 100); aggregated: buckets')
    .option('--csv', 'CSV: ts then one column per key')
    .option('--chart', 'a line chart per key, as wide as the terminal')
    .action(async (ref: string, o: TechOptions & { keys: string; from: string; to: string; agg: AggParam; interval?: string; limit?: string; csv?: boolean; chart?: boolean }) => {
      const now = Date.now();
      const startTs = parseTime(o.from, now, '--from');
      const endTs = parseTime(o.to, now, '--to');
      const interval = o.interval === undefined ? 0 : parseDuration(o.interval, '--interval');
      if (o.agg !== 'NONE' && interval === 0) throw new CliError(`--agg ${o.agg} needs --interval (e.g. --interval 1h)`);
      let limit: number | undefined;
      if (o.limit !== undefined) {
        limit = Number(o.limit);
        if (!Number.isSafeInteger(limit) || limit < 1) throw new CliError(`--limit "${o.limit}" must be a positive integer`);
      }
      if ([o.json, o.csv, o.chart].filter(Boolean).length > 1) throw new CliError('choose one of --json, --csv, --chart');
      const keys = keysOption(o.keys) ?? [];
      await withBackend(o, async (b) => {
        const dev = await resolveDevice(b, ref);
        const text = await b.history(dev.id, keys, { startTs, endTs, agg: o.agg, interval, limit });
        if (o.json) return print(text);
        const { historyCsv, historyCharts, historyTable } = await views();
        const series = JSON.parse(text) as SeriesJson;
        if (o.csv) return process.stdout.write(historyCsv(series));
        print(o.chart ? historyCharts(series, startTs, endTs) : historyTable(series));
      });
    }), 'outpost query pump-1 --keys temperature --from -6h --chart',
  'outpost query pump-1 --keys temperature,pressure --from 2026-11-01 --to 2026-12-01 --agg AVG --interval 2h --json');

  example(techOptions(program.command('attributes').argument('<device>', 'device name or id'))
    .description('a device\'s attributes (all scopes, or one)')
    .addOption(new Option('--scope <scope>').choices(['client', 'shared', 'server']))
    .action(async (ref: string, o: TechOptions & { scope?: AttributeScopeArg }) => withBackend(o, async (b) => {
      const dev = await resolveDevice(b, ref);
      const text = await b.attributes(dev.id, o.scope);
      if (o.json) return print(text);
      const { table, localTime, terminalColumns, style } = await views();
      const attrs = JSON.parse(text) as Array<{ lastUpdateTs: number; key: string; value: unknown }>;
      if (attrs.length === 0) return print(`(no attributes on ${dev.name})`);
      print(table(['KEY', 'VALUE', 'LAST UPDATE'], attrs.map((a) => [a.key, typeof a.value === 'string' ? a.value : JSON.stringify(a.value), localTime(a.lastUpdateTs)]),
        terminalColumns(), [], style()));
    })), 'outpost attributes pump-1 --scope shared');
}
