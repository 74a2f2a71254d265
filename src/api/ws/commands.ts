/**
 * Running one websocket command for an authenticated user (docs/api.md): validation, access
 * rules, the first reply, and registering the live subscription. Plain and synchronous: every read here
 * (latest values, history, attributes) is a synchronous LMDB read, so the first reply and the registration
 * happen in one turn and no committed write can fall between them.
 */
import type { Principal } from '../../auth/index.js';
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import { kvToString } from '../../model/kv.js';
import { isAggFn } from '../../store/rollups/aggregate.js';
import { type AggParam, queryHistory, queryLatest } from '../../query/history.js';
import { type AttributeStore, isAttributeScope } from '../../store/attributes.js';
import { type EpochMs, isEntityType } from '../../types.js';
import type { AttrSubCmd, HistoryCmd, TsSubCmd, WsCmd } from './protocol.js';
import { type SubscriptionRegistry, type WsSink, shownKey } from './registry.js';
import {
  MSG_FETCH_ATTRIBUTES,
  MSG_FETCH_DATA,
  type RenderedPoint,
  WS_ERROR,
  renderData,
  renderError,
  renderPoint,
} from './render.js';

/**
 * Points in one history reply, all keys together. A reply is one frame built in memory, so its size must be
 * bounded: beyond this the command is refused (errorCode 2) rather than truncated silently. TB has no cap;
 * its UI asks for a few thousand points per widget.
 */
export const MAX_POINTS_PER_REPLY = 100_000;

export interface CommandDeps {
  readonly s: Services;
  readonly registry: SubscriptionRegistry;
  readonly attributes: AttributeStore;
}

type Entries = Array<readonly [string, readonly RenderedPoint[]]>;

/** A command that cannot run: answered with `renderError(cmdId, code, message)`, nothing registered. */
class CmdFailure extends Error {
  constructor(
    readonly errorCode: number,
    message: string,
  ) {
    super(message);
  }
}

const bad = (message: string): CmdFailure => new CmdFailure(WS_ERROR.BAD_REQUEST, message);

export function runCommand(deps: CommandDeps, session: WsSink, principal: Principal, cmd: WsCmd): void {
  try {
    switch (cmd.kind) {
      case 'TS_SUB':
        tsSubscribe(deps, session, principal, cmd);
        return;
      case 'HISTORY':
        history(deps, session, principal, cmd);
        return;
      case 'ATTR_SUB':
        attrSubscribe(deps, session, principal, cmd);
        return;
      case 'UNSUPPORTED':
        throw bad(`Unsupported command type: ${cmd.type}`);
    }
  } catch (err) {
    if (err instanceof CmdFailure) {
      session.send(renderError(cmd.cmdId, err.errorCode, err.message));
      return;
    }
    deps.s.log.error(`ws command ${cmd.kind} ${cmd.cmdId} failed: ${(err as Error)?.stack ?? String(err)}`);
    session.send(
      renderError(cmd.cmdId, WS_ERROR.INTERNAL, cmd.kind === 'ATTR_SUB' ? MSG_FETCH_ATTRIBUTES : MSG_FETCH_DATA),
    );
  }
}

/** `unsubscribe: true`: by cmdId; an empty entityId cancels every subscription of the session. */
function unsubscribe(deps: CommandDeps, session: WsSink, cmd: TsSubCmd | AttrSubCmd): void {
  if (cmd.entityId === '') deps.registry.removeSession(session);
  else deps.registry.remove(session, cmd.cmdId);
}

/** TB's checks in its order: cmdId, entityId, (history: keys), entityType, then access (the rules in docs/api.md). */
function checkTarget(
  deps: CommandDeps,
  principal: Principal,
  cmd: TsSubCmd | HistoryCmd | AttrSubCmd,
  failMsg: string,
): void {
  if (cmd.cmdId < 0) throw bad('Cmd id is negative value!');
  if (cmd.entityId === '') throw bad('Device id is empty!');
  if (cmd.kind === 'HISTORY' && cmd.keys === undefined) throw bad('Keys are empty!');
  if (!isEntityType(cmd.entityType)) {
    throw new CmdFailure(
      WS_ERROR.INTERNAL,
      `No enum constant org.thingsboard.server.common.data.EntityType.${cmd.entityType}`,
    );
  }
  try {
    deps.s.auth.checkAccess(principal, cmd.entityType, cmd.entityId, 'read');
  } catch (err) {
    if (err instanceof OutpostError) throw new CmdFailure(WS_ERROR.INTERNAL, failMsg);
    throw err;
  }
}

function checkCapacity(deps: CommandDeps, session: WsSink, principal: Principal, cmdId: number): void {
  if (deps.registry.has(session, cmdId)) return; // replaces one it holds
  const { maxSubscriptionsPerSession: max, maxSubscriptionsPerUser: maxUser } = deps.s.config.ws;
  if (deps.registry.count(session) >= max) throw bad(`Max subscriptions limit reached: ${max} per session!`);
  if (deps.registry.countUser(principal.userId) >= maxUser)
    throw bad(`Max user subscriptions limit reached: ${maxUser} per user!`);
}

function parseAgg(agg: string): AggParam {
  if (agg === '' || agg === 'NONE') return 'NONE';
  if (isAggFn(agg)) return agg;
  throw bad(`Invalid aggregation type: ${agg}`);
}

/**
 * History as reply entries (sorted keys; raw points newest first as TB's ws history, aggregated buckets
 * ascending). [startTs, endTs); limit 0 → the default (100). Invalid parameters → errorCode 2.
 */
function historyEntries(
  deps: CommandDeps,
  entityId: string,
  keys: readonly string[],
  startTs: EpochMs,
  endTs: EpochMs,
  interval: number,
  limit: number,
  agg: string,
): Entries {
  const { s } = deps;
  const out: Entries = [];
  let total = 0;
  try {
    const series = queryHistory(
      s.timeseries,
      entityId,
      keys,
      {
        startTs,
        endTs,
        agg: parseAgg(agg),
        interval,
        limit: limit > 0 ? limit : undefined,
        orderBy: 'DESC',
      },
      { maxIntervals: s.config.query.maxIntervals, defaultLimit: s.config.query.defaultLimit },
    );
    // for-of releases the LMDB range iterators when the cap throws out of them
    for (const { key, points } of series) {
      const rendered: RenderedPoint[] = [];
      for (const p of points) {
        if (++total > MAX_POINTS_PER_REPLY) {
          throw bad(
            `Too many points requested: more than ${MAX_POINTS_PER_REPLY} in one reply; narrow the keys, range or limit`,
          );
        }
        rendered.push(renderPoint(p.ts, kvToString(p.value)));
      }
      out.push([key, rendered]);
    }
  } catch (err) {
    if (err instanceof OutpostError && err.status === 400) throw bad(err.message);
    throw err;
  }
  return out.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

function tsSubscribe(deps: CommandDeps, session: WsSink, principal: Principal, cmd: TsSubCmd): void {
  if (cmd.unsubscribe) {
    unsubscribe(deps, session, cmd);
    return;
  }
  checkTarget(deps, principal, cmd, MSG_FETCH_DATA);
  checkCapacity(deps, session, principal, cmd.cmdId);
  const { s } = deps;
  const now = s.now();
  const latestOnly = cmd.scope === 'LATEST_TELEMETRY';
  /** key → newest ts sent in the first reply; a key reported as [now, null] sent nothing, suppresses nothing */
  const lastTs = new Map<string, EpochMs>();
  let entries: Entries;
  if (cmd.timeWindow > 0) {
    // The window starts at the client's startTs (TB's UI sends now - timeWindow); absent → now - timeWindow.
    const startTs = cmd.startTs !== 0 ? cmd.startTs : now - cmd.timeWindow;
    const keys = cmd.keys ?? s.timeseries.keys(cmd.entityId);
    entries = historyEntries(
      deps,
      cmd.entityId,
      keys,
      startTs,
      startTs + cmd.timeWindow,
      cmd.interval,
      cmd.limit,
      cmd.agg,
    );
    for (const [key, points] of entries)
      lastTs.set(
        key,
        points.reduce((m, p) => Math.max(m, p.ts), -Infinity),
      );
  } else {
    const latest = queryLatest(s.timeseries, cmd.entityId, cmd.keys, now);
    for (const [key, p] of latest) if (p.value !== null) lastTs.set(key, p.ts);
    entries = latest
      .map(([key, p]) => [key, [renderPoint(p.ts, p.value === null ? null : kvToString(p.value))]] as const)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  }
  session.send(renderData(cmd.cmdId, entries));
  deps.registry.add({
    kind: 'TS',
    session,
    cmdId: cmd.cmdId,
    entityId: cmd.entityId,
    keys: cmd.keys && new Set(cmd.keys),
    latestOnly,
    lastTs: latestOnly ? lastTs : new Map(),
  });
}

function history(deps: CommandDeps, session: WsSink, principal: Principal, cmd: HistoryCmd): void {
  checkTarget(deps, principal, cmd, MSG_FETCH_DATA);
  const entries = historyEntries(
    deps,
    cmd.entityId,
    cmd.keys ?? [],
    cmd.startTs,
    cmd.endTs,
    cmd.interval,
    cmd.limit,
    cmd.agg,
  );
  session.send(renderData(cmd.cmdId, entries));
}

function attrSubscribe(deps: CommandDeps, session: WsSink, principal: Principal, cmd: AttrSubCmd): void {
  if (cmd.unsubscribe) {
    unsubscribe(deps, session, cmd);
    return;
  }
  // Access is checked here too: TB skips it on this path (a TB quirk), Outpost denies.
  checkTarget(deps, principal, cmd, MSG_FETCH_ATTRIBUTES);
  const scopeText = cmd.scope === undefined || cmd.scope === '' ? undefined : cmd.scope;
  if (scopeText !== undefined && !isAttributeScope(scopeText)) throw bad(`Invalid attribute scope: ${scopeText}`);
  checkCapacity(deps, session, principal, cmd.cmdId);
  const current = deps.attributes.get(cmd.entityId, scopeText, cmd.keys);
  // A key present in two scopes lists both values (TB adds every entry under its key).
  const byKey = new Map<string, RenderedPoint[]>();
  const shown = new Map<string, string>();
  for (const a of current) {
    let pts = byKey.get(a.key);
    if (pts === undefined) byKey.set(a.key, (pts = []));
    const p = renderPoint(a.lastUpdateTs, kvToString(a.value));
    pts.push(p);
    shown.set(shownKey(a.scope, a.key), p.json);
  }
  const entries: Entries = [...byKey].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  session.send(renderData(cmd.cmdId, entries));
  deps.registry.add({
    kind: 'ATTR',
    session,
    cmdId: cmd.cmdId,
    entityId: cmd.entityId,
    keys: cmd.keys && new Set(cmd.keys),
    scope: scopeText,
    shown,
  });
}
