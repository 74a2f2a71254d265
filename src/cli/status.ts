/** `outpost status` (docs/cli.md): the daemon's figures, or locally what the data dir alone tells. */
import type { Command } from 'commander';
import type { AdmissionFigures } from '../ingest/admission.js';
import type { StatusJson } from '../status/index.js';
import type { WriteFigures } from '../store/write-budget.js';
import type { SyncStatusFull } from '../upstream/uplink/service.js';
import { example } from './common.js';
import { type CutLine, duration, fitLines, localTime, safeText, terminalColumns } from './format.js';
import { type TechOptions, print, techOptions, withBackend } from './options.js';
import { errorAge, linkLines } from './sync.js';

/** `alarms     3 active: 1 CRITICAL, 2 MAJOR`, highest severity first (the record's order) */
function alarmLine(active: Readonly<Record<string, number>>): string {
  const parts = Object.entries(active).filter(([, n]) => n > 0);
  const total = parts.reduce((sum, [, n]) => sum + n, 0);
  return `alarms     ${total === 0 ? 'none active' : `${total} active: ${parts.map(([sev, n]) => `${n} ${sev}`).join(', ')}`}`;
}

const mb = (b: number): string => `${(b / 2 ** 20).toFixed(1)} MiB`;

/** The status as lines of any length (a wide one is broken or cut when printed: `fitLines`). */
export function statusLines(s: StatusJson): string[] {
  return statusRows(s).map((l) => (typeof l === 'string' ? l : l.cut));
}

/** Shown once uploads waited for room in ingest.maxBytesInFlight: the bound a flood met. */
function inFlightWaits(f: AdmissionFigures | undefined): string {
  if (f === undefined || f.waited === 0) return '';
  return `; ${f.waited} uploads waited for room (at most ${mb(f.peakBytes)} of the ${mb(f.budgetBytes)} in flight)`;
}

function statusRows(s: StatusJson): Array<string | CutLine> {
  const lines: Array<string | CutLine> = [
    `outpost ${s.version}  ${s.daemon ? `up ${duration(s.uptimeSec ?? 0)} (since ${localTime(s.startedTs ?? 0)})` : 'no daemon is running on this data dir: what the data dir alone tells'}`,
    `clock      ${localTime(s.now)}  ${s.clock.synchronized === null ? 'synchronization unknown' : s.clock.synchronized ? 'synchronized' : 'NOT synchronized'}`,
  ];
  if (s.ingest)
    lines.push(
      `ingest     ${s.ingest.pointsPerSec} points/s (last minute), ${s.ingest.points} points in ${s.ingest.requests} requests since start${inFlightWaits(s.ingest.inFlight)}`,
    );
  lines.push(
    `store      ${mb(s.store.liveBytes)} live of ${mb(s.store.fileBytes)} file; budget ${s.store.maxDiskBytes > 0 ? `${mb(s.store.maxDiskBytes)} (${((100 * s.store.liveBytes) / s.store.maxDiskBytes).toFixed(0)}% used)` : 'none'}`,
  );
  lines.push(
    `compaction ${s.compaction.backlogFragments} head fragments waiting${s.compaction.compactedWindows === null ? '' : `, ${s.compaction.compactedWindows} windows compacted since start`}`,
  );
  const y = s.sync;
  lines.push(
    `sync       ${y.enabled ? `${y.state} to ${safeText(y.url ?? '?')}: ${y.backlogPoints} points behind, ${y.sentPoints} sent, ${y.droppedPoints} dropped` : 'off'}`,
  );
  // the upstream's words, on a line of their own cut to the width: `outpost sync` and `--json` have them whole
  if (y.enabled && y.lastError)
    lines.push({ cut: `last error ${errorAge(y.lastErrorTs, s.now)}: ${safeText(y.lastError)}` });
  if (y.enabled) {
    // what the sync adds to its status fields (set aside, depth, the MQTT session and its downlink), when the daemon says
    const x = y as Partial<SyncStatusFull>;
    const extra = [
      x.setAsidePoints ? `${x.setAsidePoints} points set aside (outpost sync --set-aside)` : '',
      x.heldPoints ? `${x.heldPoints} held for their timestamp` : '',
      x.depthBacklogPoints !== undefined && x.depthBacklogPoints + (x.depthSentPoints ?? 0) > 0
        ? `depth ${x.depthBacklogPoints} behind, ${x.depthSentPoints ?? 0} sent`
        : '',
    ].filter((e) => e !== '');
    if (extra.length > 0) lines.push(`           ${extra.join('; ')}`);
    for (const l of linkLines(x, s.now)) lines.push(l);
  }
  if (s.http) {
    const beside = s.http.plainPort > 0 ? `, plain HTTP ${s.http.plainPort}` : '';
    lines.push(`http       port ${s.http.port}${s.http.tls ? ' (HTTPS)' : ''}${beside}`);
  }
  if (s.alarms) lines.push(alarmLine(s.alarms.active));
  if (s.longPoll) lines.push(`clients    ${s.longPoll.openPolls} long-polls, ${s.websockets ?? 0} websockets`);
  if (s.devices) lines.push(`devices    ${s.devices.active} active of ${s.devices.total}`);
  const m = s.mqtt;
  if (m) {
    const ports = [m.port > 0 ? `port ${m.port}` : '', m.tlsPort > 0 ? `TLS ${m.tlsPort}` : '']
      .filter((x) => x !== '')
      .join(', ');
    lines.push(
      ports === ''
        ? 'mqtt       off'
        : `mqtt       ${ports}: ${m.connections} connections (${m.refusedConnections} refused), ${m.messagesIn} messages in, ${m.messagesOut} out${m.pubackMeanMs === null ? '' : `, PUBACK ${m.pubackMeanMs} ms mean`}`,
    );
  }
  const co = s.coap;
  if (co)
    lines.push(
      co.port > 0
        ? `coap       port ${co.port}: ${co.requests} requests (${co.duplicates} duplicates), ${co.observations} observations, ${co.notifications} notifications, ${co.refused} refused${co.createdMeanMs === null ? '' : `, 2.01 ${co.createdMeanMs} ms mean`}`
        : 'coap       off',
    );
  if (s.process)
    lines.push(
      `memory     ${mb(s.process.rssBytes)} RSS${s.process.rssAnonBytes === null ? '' : `, ${mb(s.process.rssAnonBytes)} RssAnon`}`,
    );
  if (s.writes) lines.push(...writeLines(s.writes));
  if (s.eventLoop)
    lines.push(`event loop late by ${s.eventLoop.p99Ms} ms at p99, ${s.eventLoop.maxMs} ms at most (last minute)`);
  return lines;
}

const gb = (b: number): string => `${(b / 1e9).toFixed(2)} GB`;

/** What the store wrote against its daily budget, and a warning a technician cannot miss when it wears the card faster. */
function writeLines(w: WriteFigures): string[] {
  const life =
    w.cardLifeYears === null
      ? ', card life at this rate: too early to tell (under an hour)'
      : `, ${gb(w.bytesPerDay)}/day so far: card life ${w.cardLifeYears} years`;
  const lines = [
    `writes     ${gb(w.todayBytes)} today, ${mb(w.lastHourBytes)} last hour; budget ${gb(w.budgetBytesPerDay)}/day (card of ${(w.cardEnduranceBytes / 1e12).toFixed(0)} TB written: ${w.cardLifeYearsAtBudget} years)${life}`,
    `           commits ${w.paced ? (w.commitDelayMs === 0 ? 'at once' : `grouped, ${w.commitDelayMs} ms`) : `fixed delay ${w.commitDelayMs} ms (store.commitDelayMs)`}; reserve ${mb(w.reserveLeftBytes)} of ${mb(w.reserveBytes)} left${w.journalSinceStartBytes === null || w.journalSinceStartBytes === undefined ? '' : `; the filesystem's journal ${mb(w.journalSinceStartBytes)} of the ${mb(w.sinceStartBytes)} since start`}${w.source === 'log' ? '; counting the log only (no /proc/self/io)' : ''}`,
  ];
  if (w.overBudget)
    lines.push(
      `WARNING    the last hour wrote ${mb(w.lastHourBytes)}, more than the budget allows: the SD card wears faster than planned`,
    );
  return lines;
}

export function registerStatus(program: Command): void {
  example(
    techOptions(program.command('status'))
      .description('version, uptime, clock, ingest rate, store and budget, compaction and sync backlog, clients')
      .action(async (o: TechOptions) =>
        withBackend(o, async (b) => {
          const s = await b.status();
          // which gateway answered, in the JSON too (the REST answer is Outpost's own object)
          const named = b.mode === 'remote' ? { ...s, gateway: b.where.slice('gateway '.length) } : s;
          print(o.json ? JSON.stringify(named) : fitLines(statusRows(s), terminalColumns()).join('\n'));
        }),
      ),
    'outpost status',
    'outpost status --url http://gw-12.local:8080 --json',
  );
}
