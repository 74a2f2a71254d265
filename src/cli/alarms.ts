/**
 * `outpost alarms [ack|clear]` (docs/cli.md "Alarms"): the alarms, locally (the data dir, read with the REST
 * handlers' own filter and JSON; ack and clear go where the store is written, common.ts `adminWrite`) or
 * remotely (`--url`, after `outpost login`: the gateway's alarm REST). Names and types come from devices and
 * users: shown escaped (format.ts safeText); severities in colour on a terminal.
 */
import type { Command } from 'commander';
import { remoteUrlOf, resolveDevice } from './backend.js';
import { example } from './common.js';
import { CliError } from './errors.js';
import { type TechOptions, print, techOptions, withBackend } from './options.js';

interface AlarmInfoJson {
  id: { id: string };
  type: string;
  severity: string;
  status: string;
  startTs: number;
  originatorName: string | null;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** SGR colour per severity: the most severe stands out most */
const SEVERITY_SGR: Readonly<Record<string, string>> = {
  CRITICAL: '1;31',
  MAJOR: '31',
  MINOR: '33',
  WARNING: '36',
  INDETERMINATE: '2',
};

type ListOptions = TechOptions & { device?: string; all?: boolean; limit: string };

/** the narrowest DEVICE and TYPE are worth showing on a narrow terminal */
const DEVICE_KEPT = 12;
const TYPE_KEPT = 8;

/**
 * One line per alarm whatever the terminal's width, its id whole (what `ack` and `clear` take): on a narrow one
 * STATUS is left out first, then SINCE shortens to `MM-DD HH:MM`, then it is left out too (80 columns: SEVERITY,
 * DEVICE, TYPE, ID); DEVICE and TYPE give way meanwhile.
 */
async function alarmsTable(rows: readonly AlarmInfoJson[]): Promise<string> {
  const { table, terminalColumns, style, useColour, localTime, displayWidth, safeText } = await import('./format.js');
  const headers = ['SEVERITY', 'DEVICE', 'TYPE', 'STATUS', 'SINCE', 'ID'];
  const cells = rows.map((a) => [
    a.severity,
    a.originatorName ?? '(deleted)',
    a.type,
    a.status,
    localTime(a.startTs - (a.startTs % 1000)),
    a.id.id,
  ]);
  const short = (row: readonly string[]): string[] => row.map((c, i) => (i === 4 ? c.slice(5, 16) : c));
  const width = terminalColumns();
  const natural = (rs: readonly string[][], i: number): number =>
    Math.max(displayWidth(headers[i] as string), ...rs.map((r) => displayWidth(safeText(r[i] ?? ''))));
  const floor = (rs: readonly string[][], i: number): number =>
    i === 1 ? Math.min(natural(rs, i), DEVICE_KEPT) : i === 2 ? Math.min(natural(rs, i), TYPE_KEPT) : natural(rs, i);
  const layouts: Array<[number[], string[][]]> = [
    [[0, 1, 2, 3, 4, 5], cells],
    [[0, 1, 2, 4, 5], cells],
    [[0, 1, 2, 4, 5], cells.map(short)],
    [[0, 1, 2, 5], cells],
  ];
  const fits = ([cols, rs]: [number[], string[][]]): boolean =>
    cols.reduce((sum, i) => sum + floor(rs, i), 0) + 2 * (cols.length - 1) <= width;
  const [cols, rs] = layouts.find(fits) ?? (layouts[layouts.length - 1] as [number[], string[][]]);
  const text = table(
    cols.map((i) => headers[i] as string),
    rs.map((r) => cols.map((i) => r[i] as string)),
    width,
    [],
    style(),
    new Set(cols.flatMap((i, at) => (i === 0 || i === 4 || i === 5 ? [at] : []))),
    cols.map((i) => floor(rs, i)),
  );
  if (!useColour()) return text;
  // the severity is each row's first word, one of TB's five: coloured after the table escaped every cell
  return text
    .split('\n')
    .map((line, i) => {
      const word = /^[A-Z]+/.exec(line)?.[0] ?? '';
      const sgr = i === 0 ? undefined : SEVERITY_SGR[word];
      return sgr === undefined ? line : `\x1b[${sgr}m${word}\x1b[0m${line.slice(word.length)}`;
    })
    .join('\n');
}

async function act(id: string, what: 'ack' | 'clear', o: TechOptions): Promise<void> {
  if (!UUID.test(id)) throw new CliError(`"${id}" is not an alarm id (outpost alarms shows them)`);
  const url = remoteUrlOf(o);
  let info: AlarmInfoJson;
  if (url === undefined) {
    const { adminWrite } = await import('./common.js');
    info = (await adminWrite(o, { op: what === 'ack' ? 'alarm.ack' : 'alarm.clear', id })) as unknown as AlarmInfoJson;
  } else {
    const { RemoteSession } = await import('./session.js');
    const r = await RemoteSession.open(url).request('POST', `/api/alarm/${id.toLowerCase()}/${what}`);
    info = JSON.parse(r.text) as AlarmInfoJson;
  }
  if (o.json) return print(JSON.stringify(info));
  const { safeText } = await import('./format.js');
  print(
    safeText(
      `alarm ${info.id.id} ${what === 'ack' ? 'acknowledged' : 'cleared'}: ${info.severity} ${info.type} on ${info.originatorName ?? '(deleted)'} (${info.status})`,
    ),
  );
}

export function registerAlarms(program: Command): void {
  const alarms = example(
    techOptions(program.command('alarms'))
      .description('the active alarms (newest first): severity, device, type, status, since')
      .option('--device <nameOrId>', "only this device's alarms")
      .option('--all', 'cleared alarms too')
      .option('--limit <n>', 'alarms shown at most', '100')
      .action(async (o: ListOptions) =>
        withBackend(o, async (b) => {
          const limit = Number(o.limit);
          if (!Number.isInteger(limit) || limit < 1)
            throw new CliError(`--limit must be an integer >= 1, got ${o.limit}`);
          const deviceId = o.device === undefined ? undefined : (await resolveDevice(b, o.device)).id;
          const query = `pageSize=${limit}&page=0&sortProperty=createdTime&sortOrder=DESC${o.all ? '' : '&searchStatus=ACTIVE'}`;
          const text = await b.alarms(deviceId, query);
          if (o.json) return print(text);
          const page = JSON.parse(text) as { data: AlarmInfoJson[]; totalElements: number };
          if (page.data.length === 0) return print(o.all ? '(no alarms)' : '(no active alarms)');
          const more = page.totalElements - page.data.length;
          print(`${await alarmsTable(page.data)}${more > 0 ? `\n(${more} more: --limit)` : ''}`);
        }),
      ),
    'outpost alarms',
    'outpost alarms --device freezer-1 --all',
    'outpost alarms --url http://gw-12.local:8080 --json',
  );
  for (const what of ['ack', 'clear'] as const) {
    example(
      techOptions(alarms.command(what).argument('<id>', "the alarm's id (outpost alarms)"))
        .description(
          what === 'ack'
            ? 'acknowledge an alarm (it stays active until cleared)'
            : 'clear an alarm (the next one of its type is a new alarm)',
        )
        // `outpost alarms` has the same options: commander gives it those written after the subcommand too
        .action((id: string, _o: TechOptions, cmd: Command) => act(id, what, cmd.optsWithGlobals<TechOptions>())),
      `outpost alarms ${what} 5b7f0c1e-8d2a-4c6e-9f10-3a4b5c6d7e8f`,
    );
  }
}
