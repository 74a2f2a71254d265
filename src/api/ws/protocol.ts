/**
 * Websocket command frames (docs/api.md): parsing is pure and strict, as TB's
 * Jackson parser with FAIL_ON_UNKNOWN_PROPERTIES is. A frame that is not JSON, not an object, or carries an
 * unknown property or a value of the wrong type is rejected whole (`FrameError`), and the caller answers with
 * the "Failed to parse the payload" frame. Semantic checks (negative cmdId, empty entityId, access) happen
 * later, per command, and answer that command alone.
 */
import type { AttributeScope } from '../../bus/index.js';

/** The two session flavours: `/api/ws/plugins/telemetry` (legacy arrays) and `/api/ws` (`cmds` + `authCmd`). */
export type WsFormat = 'LEGACY' | 'GENERAL';

interface CmdBase {
  readonly cmdId: number;
  /** as sent; validated against EntityType when the command runs */
  readonly entityType: string;
  /** '' when absent */
  readonly entityId: string;
  /** undefined = every key of the entity (absent, null or blank `keys`) */
  readonly keys: readonly string[] | undefined;
  readonly unsubscribe: boolean;
}

export interface TsSubCmd extends CmdBase {
  readonly kind: 'TS_SUB';
  /** 'LATEST_TELEMETRY' suppresses points older than the last one sent */
  readonly scope: string | undefined;
  /** ms; > 0 → the first reply is history over [startTs, startTs + timeWindow) */
  readonly timeWindow: number;
  /** ms; 0 = absent */
  readonly startTs: number;
  readonly interval: number;
  readonly limit: number;
  readonly agg: string;
}

export interface HistoryCmd extends CmdBase {
  readonly kind: 'HISTORY';
  readonly startTs: number;
  readonly endTs: number;
  readonly interval: number;
  readonly limit: number;
  readonly agg: string;
}

export interface AttrSubCmd extends CmdBase {
  readonly kind: 'ATTR_SUB';
  /** as sent; undefined = every scope */
  readonly scope: string | undefined;
}

/** A `/api/ws` command of a type we know from TB but do not serve (ENTITY_DATA, ALARM_DATA, ...). */
export interface UnsupportedCmd {
  readonly kind: 'UNSUPPORTED';
  readonly cmdId: number;
  readonly type: string;
}

export type WsCmd = TsSubCmd | HistoryCmd | AttrSubCmd | UnsupportedCmd;

export interface AuthCmd {
  readonly cmdId: number;
  readonly token: string;
  /** an API key's value instead of a token (docs/api.md "API keys") */
  readonly apiKey: string | undefined;
}

export interface ParsedFrame {
  /** present only when the frame carried `authCmd` */
  readonly auth: AuthCmd | undefined;
  /** in the order TB runs them: attribute subs, ts subs, history (legacy); as listed (general) */
  readonly cmds: readonly WsCmd[];
}

export class FrameError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'FrameError';
  }
}

export const ATTRIBUTE_SCOPES: readonly AttributeScope[] = ['CLIENT_SCOPE', 'SERVER_SCOPE', 'SHARED_SCOPE'];

/** Arrays of the legacy wrapper TB knows but Outpost does not serve: accepted and ignored. */
const LEGACY_IGNORED_ARRAYS = new Set([
  'entityDataCmds',
  'entityDataUnsubscribeCmds',
  'alarmDataCmds',
  'alarmDataUnsubscribeCmds',
  'entityCountCmds',
  'entityCountUnsubscribeCmds',
  'alarmCountCmds',
  'alarmCountUnsubscribeCmds',
]);

/** `WsCmdType` values other than the three we serve; a type outside this list fails parsing (Jackson subtype). */
const GENERAL_UNSUPPORTED_TYPES = new Set([
  'ENTITY_DATA',
  'ENTITY_COUNT',
  'ALARM_DATA',
  'ALARM_COUNT',
  'ALARM_STATUS',
  'NOTIFICATIONS',
  'NOTIFICATIONS_COUNT',
  'MARK_NOTIFICATIONS_AS_READ',
  'MARK_ALL_NOTIFICATIONS_AS_READ',
  'ENTITY_DATA_UNSUBSCRIBE',
  'ENTITY_COUNT_UNSUBSCRIBE',
  'ALARM_DATA_UNSUBSCRIBE',
  'ALARM_COUNT_UNSUBSCRIBE',
  'ALARM_STATUS_UNSUBSCRIBE',
  'NOTIFICATIONS_UNSUBSCRIBE',
]);

/**
 * Properties each command class has in TB 3.x/4.x. `type` is ignored in legacy commands; `intervalType`,
 * `timeZoneId` and `fetchLatestPreviousPoint` are newer TB fields that current clients send: accepted and
 * ignored (Outpost aggregates in fixed milliseconds intervals only).
 */
const BASE_PROPS = ['cmdId', 'entityType', 'entityId', 'keys', 'scope', 'unsubscribe', 'type'];
const AGG_PROPS = ['startTs', 'interval', 'limit', 'agg', 'intervalType', 'timeZoneId', 'fetchLatestPreviousPoint'];
const TS_SUB_PROPS = new Set([...BASE_PROPS, ...AGG_PROPS, 'timeWindow']);
const ATTR_SUB_PROPS = new Set(BASE_PROPS);
const HISTORY_PROPS = new Set(['cmdId', 'entityType', 'entityId', 'keys', 'endTs', 'type', ...AGG_PROPS]);

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function checkProps(o: Obj, allowed: ReadonlySet<string>, what: string): void {
  for (const k of Object.keys(o)) if (!allowed.has(k)) throw new FrameError(`unknown property "${k}" in ${what}`);
}

/**
 * A Java int/long field: JSON null/absent → 0, a number (fractions truncated, as Jackson's
 * ACCEPT_FLOAT_AS_INT), or a string holding an integer (Jackson scalar coercion). Anything else fails.
 */
function num(o: Obj, k: string): number {
  const v = o[k];
  if (v === undefined || v === null) return 0;
  if (typeof v === 'number' && Number.isFinite(v)) return Math.trunc(v);
  if (typeof v === 'string' && /^-?\d+$/.test(v.trim())) return Number(v.trim());
  throw new FrameError(`"${k}" must be a number`);
}

/** A Java String field: null/absent → undefined; numbers and booleans coerced to text as Jackson does. */
function str(o: Obj, k: string): string | undefined {
  const v = o[k];
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  throw new FrameError(`"${k}" must be a string`);
}

function bool(o: Obj, k: string): boolean {
  const v = o[k];
  if (v === undefined || v === null) return false;
  if (typeof v === 'boolean') return v;
  if (v === 'true' || v === 'false') return v === 'true';
  throw new FrameError(`"${k}" must be a boolean`);
}

/** Comma-separated keys, trimmed, blanks dropped; nothing left → undefined (all keys). */
export function splitKeys(csv: string | undefined): string[] | undefined {
  if (csv === undefined) return undefined;
  const keys = csv
    .split(',')
    .map((k) => k.trim())
    .filter((k) => k !== '');
  return keys.length > 0 ? [...new Set(keys)] : undefined;
}

function base(o: Obj): CmdBase {
  return {
    cmdId: num(o, 'cmdId'),
    entityType: str(o, 'entityType') ?? '',
    entityId: str(o, 'entityId') ?? '',
    keys: splitKeys(str(o, 'keys')),
    unsubscribe: bool(o, 'unsubscribe'),
  };
}

function tsSub(o: Obj): TsSubCmd {
  checkProps(o, TS_SUB_PROPS, 'tsSubCmds');
  return {
    kind: 'TS_SUB',
    ...base(o),
    scope: str(o, 'scope'),
    timeWindow: num(o, 'timeWindow'),
    startTs: num(o, 'startTs'),
    interval: num(o, 'interval'),
    limit: num(o, 'limit'),
    agg: str(o, 'agg') ?? '',
  };
}

function history(o: Obj): HistoryCmd {
  checkProps(o, HISTORY_PROPS, 'historyCmds');
  return {
    kind: 'HISTORY',
    ...base(o),
    unsubscribe: false,
    startTs: num(o, 'startTs'),
    endTs: num(o, 'endTs'),
    interval: num(o, 'interval'),
    limit: num(o, 'limit'),
    agg: str(o, 'agg') ?? '',
  };
}

function attrSub(o: Obj): AttrSubCmd {
  checkProps(o, ATTR_SUB_PROPS, 'attrSubCmds');
  return { kind: 'ATTR_SUB', ...base(o), scope: str(o, 'scope') };
}

function authCmd(v: unknown): AuthCmd | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isObj(v)) throw new FrameError('"authCmd" must be an object');
  checkProps(v, new Set(['cmdId', 'token', 'apiKey']), 'authCmd');
  return { cmdId: num(v, 'cmdId'), token: str(v, 'token') ?? '', apiKey: str(v, 'apiKey') };
}

function array(o: Obj, k: string): Obj[] {
  const v = o[k];
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new FrameError(`"${k}" must be an array`);
  return v.map((item) => {
    if (!isObj(item)) throw new FrameError(`"${k}" items must be objects`);
    return item;
  });
}

function parseLegacy(o: Obj): ParsedFrame {
  for (const k of Object.keys(o)) {
    if (
      k !== 'tsSubCmds' &&
      k !== 'historyCmds' &&
      k !== 'attrSubCmds' &&
      k !== 'authCmd' &&
      !LEGACY_IGNORED_ARRAYS.has(k)
    ) {
      throw new FrameError(`unknown property "${k}"`);
    }
  }
  for (const k of LEGACY_IGNORED_ARRAYS) array(o, k);
  // TB's DefaultWebSocketService handles attribute subscriptions, then ts subscriptions, then history.
  const cmds: WsCmd[] = [
    ...array(o, 'attrSubCmds').map(attrSub),
    ...array(o, 'tsSubCmds').map(tsSub),
    ...array(o, 'historyCmds').map(history),
  ];
  return { auth: authCmd(o['authCmd']), cmds };
}

function parseGeneral(o: Obj): ParsedFrame {
  for (const k of Object.keys(o)) {
    if (k !== 'authCmd' && k !== 'cmds') throw new FrameError(`unknown property "${k}"`);
  }
  const cmds = array(o, 'cmds').map((c): WsCmd => {
    const type = str(c, 'type');
    switch (type) {
      case 'TIMESERIES':
        return tsSub(c);
      case 'TIMESERIES_HISTORY':
        return history(c);
      case 'ATTRIBUTES':
        return attrSub(c);
      default:
        if (type !== undefined && GENERAL_UNSUPPORTED_TYPES.has(type))
          return { kind: 'UNSUPPORTED', cmdId: num(c, 'cmdId'), type };
        throw new FrameError(`unknown command type ${JSON.stringify(type ?? null)}`);
    }
  });
  return { auth: authCmd(o['authCmd']), cmds };
}

/** Parses one text frame; throws FrameError for anything TB's parser would reject. */
export function parseFrame(text: string, format: WsFormat): ParsedFrame {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new FrameError(`invalid JSON: ${(err as Error).message}`);
  }
  if (!isObj(value)) throw new FrameError('the frame must be a JSON object');
  return format === 'LEGACY' ? parseLegacy(value) : parseGeneral(value);
}
