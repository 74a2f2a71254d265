/**
 * `outpost sync`: the upstream sync as the running daemon sees it (`GET /api/outpost/sync`, docs/sync.md), for a
 * technician on site: is it connected, how far behind, since when, what was dropped, held or set aside, and which
 * devices are parked and why. The figures live in the daemon (its backlog counts, its back-off), so this asks it:
 * remotely over REST, or locally over the admin channel of the daemon holding the data dir (src/admin/channel.ts),
 * chosen by the rule every technician's command follows (backend.ts `remoteUrlOf`).
 */
import { type Command, Option } from 'commander';
import type { SyncStatusFull } from '../upstream/uplink/service.js';
import type { SetAsideBatch } from '../upstream/uplink/set-aside.js';
import { remoteUrlOf } from './backend.js';
import { configOption, dataDirOption, example } from './common.js';
import { CliError } from './errors.js';
import { duration, localTime, safeText } from './format.js';
import { announce, print } from './options.js';
import { RemoteBackend } from './remote.js';

/** devices listed beyond the parked ones: those furthest behind */
const MOST_BEHIND = 10;

const n = (x: number): string => x.toLocaleString('en');
const points = (x: number): string => `${n(x)} point${x === 1 ? '' : 's'}`;

const ago = (ts: number, now: number): string => `${duration(Math.max(0, Math.round((now - ts) / 1000)))} ago`;

/** when an error happened, as `3m 10s ago (2026-12-06 10:02:11)`; an error kept before times were: its age unknown */
export function errorAge(ts: number | null | undefined, now: number): string {
  return ts === null || ts === undefined ? 'at an unknown time' : `${ago(ts, now)} (${localTime(ts)})`;
}

export function syncLines(s: SyncStatusFull, now: number): string[] {
  if (!s.enabled) return ['sync       off (no sync.url in the config)'];
  const clock =
    s.clockSynchronized === null
      ? 'clock synchronization unknown'
      : s.clockSynchronized
        ? 'clock synchronized'
        : 'clock NOT synchronized: points stamped more than a day ahead are held';
  const lines = [
    `sync       ${s.state} to ${s.url ?? '?'}; ${clock}`,
    `last ok    ${s.lastSuccessTs === null ? 'never' : `${localTime(s.lastSuccessTs)} (${ago(s.lastSuccessTs, now)})`}`,
    `backlog    ${points(s.backlogPoints)} behind${s.oldestPendingTs === null ? '' : `, the oldest stamped ${localTime(s.oldestPendingTs)} (${ago(s.oldestPendingTs, now)})`}; ${n(s.sentPoints)} sent since the data dir was made`,
  ];
  if (s.droppedPoints > 0) {
    const range =
      s.droppedRange === null ? '' : ` (stamped ${localTime(s.droppedRange[0])} .. ${localTime(s.droppedRange[1])})`;
    lines.push(
      `dropped    ${points(s.droppedPoints)} removed by retention or the disk budget before they were sent${range}`,
    );
  }
  if (s.heldPoints > 0)
    lines.push(
      `held       ${points(s.heldPoints)} stamped before 2000 or more than a day ahead of the clock: not sent until the clock agrees`,
    );
  if (s.setAsidePoints > 0)
    lines.push(
      `set aside  ${points(s.setAsidePoints)} the upstream refused (400) or that could not be read back: kept in the store, not retried`,
    );
  if (s.notSyncedPoints > 0) lines.push(`not synced ${points(s.notSyncedPoints)} of assets (only devices are synced)`);
  if (s.depthEndpoint !== 'unknown' || s.depthBacklogPoints + s.depthSentPoints > 0) {
    lines.push(
      `depth      endpoint ${s.depthEndpoint}: ${n(s.depthBacklogPoints)} behind, ${n(s.depthSentPoints)} sent${s.depthSetAsidePoints > 0 ? `, ${n(s.depthSetAsidePoints)} set aside` : ''}${s.depthNotSyncedPoints > 0 ? `, ${n(s.depthNotSyncedPoints)} not synced` : ''}`,
    );
  }
  if (s.lastError !== null) lines.push(`last error ${errorAge(s.lastErrorTs, now)}: ${safeText(s.lastError)}`);
  const before = s.previousRunError;
  if (before !== undefined && before !== null)
    lines.push(`earlier    before this start, ${errorAge(before.ts, now)}: ${safeText(before.message)}`);
  lines.push(...linkLines(s, now));
  const parked = s.devices.filter((d) => d.state === 'parked');
  const behind = s.devices
    .filter((d) => d.state !== 'parked' && d.backlogPoints + d.depthBacklogPoints > 0)
    .sort((a, b) => b.backlogPoints + b.depthBacklogPoints - (a.backlogPoints + a.depthBacklogPoints));
  if (parked.length > 0) {
    lines.push(
      `parked     ${parked.length} device${parked.length === 1 ? '' : 's'} (their points wait; the others go on):`,
    );
    for (const d of parked)
      lines.push(`  ${safeText(d.name)}: ${d.reason ?? 'parked'}; ${points(d.backlogPoints)} behind`);
  }
  if (behind.length > 0) {
    lines.push(
      `behind     ${behind.length} device${behind.length === 1 ? '' : 's'} with points to send${behind.length > MOST_BEHIND ? `, the ${MOST_BEHIND} furthest behind` : ''}:`,
    );
    for (const d of behind.slice(0, MOST_BEHIND))
      lines.push(
        `  ${safeText(d.name)}: ${points(d.backlogPoints)}${d.depthBacklogPoints > 0 ? ` and ${n(d.depthBacklogPoints)} depth` : ''}`,
      );
  }
  return lines;
}

/** The transport, the MQTT session and what came down it (docs/sync.md "Downlink"). */
export function linkLines(
  s: Partial<Pick<SyncStatusFull, 'transport' | 'session' | 'downlink'>>,
  now: number,
): string[] {
  const lines: string[] = [];
  if (s.transport === undefined) return lines;
  const ss = s.session;
  lines.push(
    `transport  ${s.transport === 'mqtt' ? 'MQTT gateway session' : 'HTTP device API (uplink only: no downlink)'}${
      ss === null || ss === undefined
        ? ''
        : `: ${ss.state}${ss.protocol === undefined ? '' : ` (MQTT ${ss.protocol})`} since ${localTime(ss.since)} (${ago(ss.since, now)}), ${n(ss.announcedDevices)} devices announced${ss.protocolReason ? `; MQTT 3.1.1 because ${ss.protocolReason}` : ''}`
    }`,
  );
  const d = s.downlink;
  if (d?.enabled) {
    lines.push(
      `downlink   ${n(d.attributesApplied)} shared attribute${d.attributesApplied === 1 ? '' : 's'} applied, last reconciled ${d.lastReconcileTs === null ? 'never' : `${localTime(d.lastReconcileTs)} (${ago(d.lastReconcileTs, now)})`}`,
    );
    lines.push(
      `rpc down   ${n(d.rpcReceived)} received, ${n(d.rpcDelivered)} delivered, ${n(d.rpcReplied)} replied, ${n(d.rpcExpired)} expired, ${n(d.rpcPending)} pending`,
    );
    for (const e of d.deviceEvents) {
      lines.push(
        `upstream   ${localTime(e.ts)}: ${e.event === 'deleted' ? `deleted "${safeText(e.name)}"` : `renamed "${safeText(e.name)}" to "${safeText(e.newName ?? '?')}"`} (kept here as it is)`,
      );
    }
  }
  return lines;
}

function setAsideLines(list: { batches: SetAsideBatch[]; total: number }): string[] {
  if (list.total === 0) return ['no batches set aside'];
  const lines = [
    `${n(list.total)} batch${list.total === 1 ? '' : 'es'} set aside${list.total > list.batches.length ? ` (the first ${list.batches.length})` : ''}:`,
  ];
  for (const b of list.batches) {
    lines.push(
      `  ${b.deviceName ?? b.deviceId ?? '?'}: ${points(b.points)} ${b.kind === 'depth' ? `of depth series at depths ${b.firstDs} .. ${b.lastDs}` : `stamped ${localTime(b.firstTs ?? 0)} .. ${localTime(b.lastTs ?? 0)}`}; ${b.status === 0 ? 'unreadable' : `HTTP ${b.status}`}: ${b.error.slice(0, 120)}`,
    );
  }
  return lines;
}

export function registerSync(program: Command): void {
  example(
    program
      .command('sync')
      .description(
        'the upstream sync of a running gateway: state, backlog and its age, dropped, held and set-aside points, parked devices',
      )
      .addOption(new Option('--url <url>', 'the gateway (env OUTPOST_URL), after outpost login'))
      .addOption(dataDirOption())
      .addOption(configOption())
      .option('--json', "machine output (REST's JSON)")
      .option('--set-aside', 'list the batches set aside (refused by the upstream, or unreadable)')
      .option('--retry-set-aside', 'put the batches set aside back in the queue')
      .option('--clear-set-aside', 'forget the batches set aside (their points stay in the store)')
      .action(
        async (o: {
          url?: string;
          dataDir?: string;
          config?: string;
          json?: boolean;
          setAside?: boolean;
          retrySetAside?: boolean;
          clearSetAside?: boolean;
        }) => {
          // the backlog's counts, the back-off and the parked devices live in the daemon, not in the data dir
          const url = remoteUrlOf(o);
          if (url === undefined) return localSync(o);
          const b = RemoteBackend.open(url);
          announce(b.header);
          try {
            if (o.retrySetAside === true || o.clearSetAside === true) {
              const r = await b.syncSetAside(o.retrySetAside === true ? 'retry' : 'clear');
              const p = (JSON.parse(r) as { points: number }).points;
              print(
                o.json
                  ? r
                  : `${points(p)} ${o.retrySetAside === true ? 'put back in the queue' : 'forgotten by the sync (kept in the store)'}`,
              );
              return;
            }
            if (o.setAside === true) {
              const r = await b.syncSetAside('list');
              print(
                o.json ? r : setAsideLines(JSON.parse(r) as { batches: SetAsideBatch[]; total: number }).join('\n'),
              );
              return;
            }
            const text = await b.syncStatus();
            print(
              o.json
                ? `{"gateway":${JSON.stringify(b.url)},${text.slice(1)}`
                : syncLines(JSON.parse(text) as SyncStatusFull, Date.now()).join('\n'),
            );
          } finally {
            await b.close();
          }
        },
      ),
    'sudo outpost sync --config /etc/outpost/config.json',
    'outpost sync --url http://gw-12.local:8080',
    'outpost sync --url http://gw-12.local:8080 --json',
    'outpost sync --url http://gw-12.local:8080 --set-aside',
    'outpost sync --url http://gw-12.local:8080 --retry-set-aside',
  );
}

/** `outpost sync` on the gateway itself: the daemon holding the data dir answers over the admin channel. */
async function localSync(o: {
  dataDir?: string;
  config?: string;
  json?: boolean;
  setAside?: boolean;
  retrySetAside?: boolean;
  clearSetAside?: boolean;
}): Promise<void> {
  if (o.setAside === true || o.retrySetAside === true || o.clearSetAside === true)
    throw new CliError('the batches set aside are handled over REST: give --url (after outpost login)');
  const [{ loadConfig }, { askDaemon }] = await Promise.all([
    import('../config/index.js'),
    import('../admin/channel.js'),
  ]);
  const dataDir = loadConfig({ dataDir: o.dataDir, config: o.config }).dataDir;
  const s = await askDaemon(dataDir, { op: 'sync.status' });
  if (s === undefined)
    throw new CliError(
      `no daemon is running on data dir ${dataDir}: the sync's figures live in the running daemon (give --data-dir or --config of the running one, or --url)`,
    );
  print(o.json ? JSON.stringify(s) : syncLines(s as unknown as SyncStatusFull, Date.now()).join('\n'));
}
