/** `outpost devices`, `latest`, `query` and `attributes` (docs/cli.md), local or remote. */
import { type Command, Option } from 'commander';
import type { AggParam } from '../query/history.js';
import { type AttributeScopeArg, type Backend, resolveDevice } from './backend.js';
import { example } from './common.js';
import { CliError } from './errors.js';
import { safeText } from './format.js';
import { type TechOptions, flushHeader, keysOption, print, techOptions, withBackend } from './options.js';
import type { SeriesJson } from './render.js';
import { HOUR_MS, parseDuration, parseTime } from './time.js';

/** the human views' modules, loaded only without --json */
const views = async (): Promise<
  typeof import('./render.js') & typeof import('./format.js') & typeof import('./chart.js')
> => {
  const [render, format, chart] = await Promise.all([
    import('./render.js'),
    import('./format.js'),
    import('./chart.js'),
  ]);
  return { ...render, ...format, ...chart };
};

/** A key's last hour as AVG buckets of SPARK_WIDTH per hour (the planner answers from rollups). */
async function lastHour(b: Backend, deviceId: string, keys: readonly string[], now: number): Promise<SeriesJson> {
  if (keys.length === 0) return {};
  const { SPARK_WIDTH } = await import('./render.js');
  const interval = HOUR_MS / SPARK_WIDTH;
  return JSON.parse(
    await b.history(deviceId, keys, { startTs: now - HOUR_MS, endTs: now, agg: 'AVG', interval }),
  ) as SeriesJson;
}

/** raw points per key a query shows unless --limit says otherwise (REST's default limit) */
const RAW_LIMIT = 100;

/**
 * The newest `limit` raw points of each key in [startTs, endTs), in time order, and a note of what the limit
 * left out with how to see it (a technician asking for the last hours wants the latest points).
 */
async function newestRaw(
  b: Backend,
  deviceId: string,
  keys: readonly string[],
  startTs: number,
  endTs: number,
  limit: number,
): Promise<{ series: SeriesJson; note?: string }> {
  const series = JSON.parse(
    await b.history(deviceId, keys, { startTs, endTs, agg: 'NONE', interval: 0, limit, order: 'DESC' }),
  ) as SeriesJson;
  for (const pts of Object.values(series)) pts.reverse();
  const cut = Object.entries(series)
    .filter(([, pts]) => pts.length >= limit)
    .map(([k]) => k);
  if (cut.length === 0) return { series };
  const counts = JSON.parse(
    await b.history(deviceId, cut, { startTs, endTs, agg: 'COUNT', interval: endTs - startTs, limit: 1 }),
  ) as SeriesJson;
  const left = cut
    .map((k) => {
      const total = counts[k]?.reduce((n, p) => n + Number(p.value), 0) ?? limit;
      return { k, total, out: total - limit };
    })
    .filter((c) => c.out > 0);
  if (left.length === 0) return { series };
  const most = Math.max(...left.map((c) => c.total));
  return {
    series,
    note: `newest ${limit} per key shown; ${left.map((c) => `${c.out} older of ${c.k}`).join(', ')} left out (all: --limit ${most}; whole range: --chart)`,
  };
}

export function registerRead(program: Command): void {
  example(
    techOptions(program.command('devices'))
      .description('list devices with their last activity and a sparkline of the last hour')
      .action(async (o: TechOptions) =>
        withBackend(o, async (b) => {
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
            // a device heard from lately may have posted only old readings: nothing to draw for the last hour
            if (key !== undefined && (latest[0]?.[1][0]?.ts ?? 0) >= now - HOUR_MS)
              sparks.set(d.id, `${sparkOf((await lastHour(b, d.id, [key], now))[key] ?? [], now)} ${key}`);
          }
          print(rows.length === 0 ? '(no devices)' : devicesTable(rows, sparks));
        }),
      ),
    'outpost devices',
    'outpost devices --url http://gw-12.local:8080 --json',
  );

  example(
    techOptions(program.command('latest').argument('<device>', 'device name or id'))
      .description('latest value of each key, with a sparkline of the last hour')
      .option('--keys <a,b>', 'only these keys')
      .action(async (ref: string, o: TechOptions & { keys?: string }) =>
        withBackend(o, async (b) => {
          const dev = await resolveDevice(b, ref);
          const text = await b.latest(dev.id, keysOption(o.keys));
          if (o.json) return print(text);
          const { sparkOf, latestTable } = await views();
          const latest = JSON.parse(text) as SeriesJson;
          const now = Date.now();
          const hour = await lastHour(
            b,
            dev.id,
            Object.keys(latest).filter((k) => (latest[k]?.[0]?.ts ?? 0) >= now - HOUR_MS),
            now,
          );
          const sparks = new Map(Object.entries(hour).map(([k, pts]) => [k, sparkOf(pts, now)] as const));
          print(
            Object.keys(latest).length === 0
              ? `(no telemetry from ${safeText(dev.name)})`
              : latestTable(latest, sparks),
          );
        }),
      ),
    'outpost latest pump-1',
    'outpost latest pump-1 --keys temperature,pressure --json',
  );

  example(
    techOptions(program.command('query').argument('<device>', 'device name or id'))
      .description("history of keys over a time range: a table, JSON (REST's answer), CSV or a chart")
      .option('--keys <a,b>', "keys to read (default: all of the device's keys)")
      .option('--from <T>', 'start (inclusive): epoch ms, ISO-8601, now, or -15m/-6h/-7d', '-1h')
      .option('--to <T>', 'end (exclusive)', 'now')
      .addOption(
        new Option('--agg <fn>', 'aggregation').choices(['NONE', 'AVG', 'MIN', 'MAX', 'SUM', 'COUNT']).default('NONE'),
      )
      .option('--interval <D>', 'bucket width with --agg: 30s, 10m, 1h, 1d or ms')
      .option(
        '--limit <n>',
        `raw: points per key, the newest (default ${RAW_LIMIT}; --oldest: the first); aggregated: buckets`,
      )
      .option('--oldest', 'raw: the first --limit points of the range instead of the newest')
      .option('--csv', 'CSV: ts then one column per key')
      .option('--chart', 'a line chart per key over the whole range, as wide as the terminal')
      .action(
        async (
          ref: string,
          o: TechOptions & {
            keys?: string;
            from: string;
            to: string;
            agg: AggParam;
            interval?: string;
            limit?: string;
            oldest?: boolean;
            csv?: boolean;
            chart?: boolean;
          },
        ) => {
          const now = Date.now();
          const startTs = parseTime(o.from, now, '--from');
          const endTs = parseTime(o.to, now, '--to');
          if (endTs <= startTs) throw new CliError(`--from ${o.from} is not before --to ${o.to}`);
          const interval = o.interval === undefined ? 0 : parseDuration(o.interval, '--interval');
          if (o.agg !== 'NONE' && interval === 0)
            throw new CliError(`--agg ${o.agg} needs --interval (e.g. --interval 1h)`);
          let limit: number | undefined;
          if (o.limit !== undefined) {
            limit = Number(o.limit);
            if (!Number.isSafeInteger(limit) || limit < 1)
              throw new CliError(`--limit "${o.limit}" must be a positive integer`);
          }
          if ([o.json, o.csv, o.chart].filter(Boolean).length > 1)
            throw new CliError('choose one of --json, --csv, --chart');
          await withBackend(o, async (b) => {
            const dev = await resolveDevice(b, ref);
            const known = Object.keys(JSON.parse(await b.latest(dev.id, undefined)) as SeriesJson).sort();
            const keys = keysOption(o.keys) ?? known;
            if (keys.length === 0) return print(o.json ? '{}' : `(no telemetry from ${safeText(dev.name)})`);
            // a mistyped key reads as "no data": name the near ones
            const { nearest } = await import('./suggest.js');
            for (const k of keys.filter((k) => !known.includes(k))) {
              const near = nearest(k, known);
              process.stderr.write(
                `${safeText(`no key "${k}" on ${dev.name}${near.length > 0 ? `; did you mean ${near.map((s) => `"${s}"`).join(', ')}?` : ` (its keys: ${known.join(', ') || 'none'})`}`)}\n`,
              );
            }
            // raw points: the newest --limit of the range unless --oldest, in --json as in the table
            const order = o.agg === 'NONE' && o.oldest !== true ? ('DESC' as const) : ('ASC' as const);
            const q = { startTs, endTs, agg: o.agg, interval, limit, order };
            if (o.json) return print(await b.history(dev.id, keys, q));
            const { historyCsv, historyCharts, historyTable, terminalColumns } = await views();
            if (o.csv) {
              flushHeader();
              return process.stdout.write(historyCsv(JSON.parse(await b.history(dev.id, keys, q)) as SeriesJson));
            }
            if (o.chart) {
              // raw points cut by a limit would fill only the range's start: the chart averages the whole range
              // into about two buckets per column (a braille cell is two dots wide)
              const width = terminalColumns();
              const buckets = width * 2;
              if (o.agg !== 'NONE')
                return print(
                  historyCharts(JSON.parse(await b.history(dev.id, keys, q)) as SeriesJson, startTs, endTs, width),
                );
              // the averages draw the line; MIN and MAX of the same buckets its envelope and the range's true
              // extremes, COUNT the points (averages alone flatten the peaks a technician looks for)
              const bucketed = (agg: 'AVG' | 'MIN' | 'MAX' | 'COUNT') =>
                b
                  .history(dev.id, keys, {
                    startTs,
                    endTs,
                    agg,
                    interval: Math.max(1, Math.ceil((endTs - startTs) / buckets)),
                    limit: buckets + 1,
                  })
                  .then((text) => JSON.parse(text) as SeriesJson);
              const [avg, min, max, count] = await Promise.all([
                bucketed('AVG'),
                bucketed('MIN'),
                bucketed('MAX'),
                bucketed('COUNT'),
              ]);
              return print(historyCharts(avg, startTs, endTs, width, undefined, { min, max, count }));
            }
            if (o.agg !== 'NONE')
              return print(
                historyTable(
                  JSON.parse(await b.history(dev.id, keys, q)) as SeriesJson,
                  `TIME (middle of ${o.interval} bucket)`,
                ),
              );
            if (o.oldest === true)
              return print(
                historyTable(
                  JSON.parse(await b.history(dev.id, keys, { ...q, limit: limit ?? RAW_LIMIT })) as SeriesJson,
                ),
              );
            const { series, note } = await newestRaw(b, dev.id, keys, q.startTs, q.endTs, limit ?? RAW_LIMIT);
            print(historyTable(series));
            // after the table, where the eye ends up
            if (note !== undefined) process.stderr.write(`${note}\n`);
          });
        },
      ),
    'outpost query pump-1 --from -6h --chart',
    'outpost query pump-1 --keys temperature,pressure --from 2026-11-01 --to 2026-12-01 --agg AVG --interval 2h --json',
  );

  example(
    techOptions(
      program
        .command('attributes')
        .argument('<device>', 'device name or id')
        // its options stop at `set`/`delete` (attributes-write.ts), whose --url, --scope ... are theirs
        .enablePositionalOptions(),
    )
      .description("a device's attributes (all scopes, or one)")
      .addOption(new Option('--scope <scope>').choices(['client', 'shared', 'server']))
      .action(async (ref: string, o: TechOptions & { scope?: AttributeScopeArg }) =>
        withBackend(o, async (b) => {
          const dev = await resolveDevice(b, ref);
          const text = await b.attributes(dev.id, o.scope);
          if (o.json) return print(text);
          const { table, localTime, terminalColumns, style } = await views();
          type Attr = { lastUpdateTs: number; key: string; value: unknown };
          // across scopes, a key may be in several: each row says its scope (REST's answer does not)
          const scopes: AttributeScopeArg[] = o.scope === undefined ? ['client', 'shared', 'server'] : [o.scope];
          const rows: string[][] = [];
          for (const scope of scopes) {
            const attrs =
              o.scope === undefined
                ? (JSON.parse(await b.attributes(dev.id, scope)) as Attr[])
                : (JSON.parse(text) as Attr[]);
            for (const a of attrs)
              rows.push([
                scope,
                a.key,
                typeof a.value === 'string' ? a.value : JSON.stringify(a.value),
                localTime(a.lastUpdateTs),
              ]);
          }
          if (rows.length === 0) return print(`(no attributes on ${safeText(dev.name)})`);
          print(table(['SCOPE', 'KEY', 'VALUE', 'LAST UPDATE'], rows, terminalColumns(), [], style(), new Set([3])));
        }),
      ),
    'outpost attributes pump-1 --scope shared',
  );
}
