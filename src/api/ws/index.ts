/**
 * Websocket telemetry API (docs/api.md): the only uWS websocket code.
 *
 * - `/api/ws/plugins/telemetry?token=<jwt>`: legacy frames `{"tsSubCmds","historyCmds","attrSubCmds"}`.
 * - `/api/ws[?token=<jwt>]`: `{"authCmd":{cmdId,token|apiKey},"cmds":[{type,...}]}` (TB's current endpoint).
 * - any other `/api/ws/plugins/<x>`: accepted, then closed 1007 "Unknown session type" (TB).
 *
 * The token is verified during the upgrade (synchronously: `req` is dead after it returns); an invalid one is
 * accepted and then closed 1011 with the reason, as TB does. Without a token the session waits up to
 * config.ws.authTimeoutMs for a frame with `authCmd` (else 1008).
 *
 * A socket lives no longer than its token: at the token's `exp` its subscriptions end and it is closed 1011
 * "Token has expired" (what an expired `?token=` gets at the upgrade), and a frame arriving after `exp` is not
 * run. ThingsBoard's UI answers such a close by refreshing its token, reconnecting and subscribing again. A later
 * `authCmd` with a valid token of the same user renews the socket: the new token's `exp` applies.
 *
 * Limits: inbound frames ≤ config.ws.maxPayloadLength (uWS closes bigger ones); outbound buffer
 * ≤ config.ws.maxBackpressure: a send that would exceed it is dropped and the socket force-closed at once, so
 * a consumer that stops reading costs at most that much memory; idle sockets are pinged and closed after
 * config.ws.idleTimeoutSec; at most config.ws.maxSubscriptionsPerSession subscriptions per socket.
 */
import type {
  HttpRequest,
  HttpResponse,
  TemplatedApp,
  WebSocket,
  WebSocketBehavior,
  us_socket_context_t,
} from 'uWebSockets.js';
import type { Principal } from '../../auth/index.js';
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import { TimerWheel, type WheelEntry, realClock } from '../../rpc/timer-wheel.js';
import { runCommand, type CommandDeps } from './commands.js';
import { FrameError, type ParsedFrame, type WsFormat, parseFrame } from './protocol.js';
import { type Subscription, SubscriptionRegistry, type WsSink } from './registry.js';
import { MSG_FETCH_ATTRIBUTES, MSG_FETCH_DATA, PARSE_ERROR_FRAME, WS_ERROR, renderError } from './render.js';

/** RFC 6455 close codes used here (TB's choices). */
const CLOSE = { BAD_DATA: 1007, POLICY_VIOLATION: 1008, SERVER_ERROR: 1011 } as const;

/** Close reason for a socket whose session was logged out or whose user or customer was deleted: what REST answers. */
const REVOKED_REASON = 'Token has expired';

/** ms; the expiry wheel's tick: tokens expire on whole seconds, so a socket outlives its token by at most this */
const EXPIRY_TICK_MS = 1_000;

/** uWS `send` results */
const SEND_DROPPED = 2;

interface SessionData {
  readonly format: WsFormat | 'UNKNOWN';
  readonly principal: Principal | undefined;
  /** set when `?token=` did not verify: the socket is closed 1011 with this reason on open */
  readonly authError: string | undefined;
  session: Session | undefined;
}

/** One websocket: its user, its open/closed state and its bounded outbound path. */
class Session implements WsSink {
  open = true;
  principal: Principal | undefined;
  authTimer: NodeJS.Timeout | undefined;
  /** closes the socket at its token's expiry */
  expiry: WheelEntry | undefined;
  /** counted in its user's open sockets (undone once, on close) */
  counted = false;

  constructor(
    private readonly ws: WebSocket<SessionData>,
    readonly format: WsFormat,
    principal: Principal | undefined,
    private readonly onSlowConsumer: (bufferedBytes: number) => void,
  ) {
    this.principal = principal;
  }

  /**
   * Never sends after close. A dropped frame means the client let more than maxBackpressure bytes pile up:
   * the socket is force-closed at once (no close frame: it could not be delivered either), freeing its buffer.
   */
  send(text: string): void {
    if (!this.open) return;
    let status = 0;
    this.ws.cork(() => {
      status = this.ws.send(text, false, false);
    });
    if (status === SEND_DROPPED && this.open) {
      this.onSlowConsumer(this.ws.getBufferedAmount());
      this.ws.close();
    }
  }

  end(code: number, reason: string): void {
    if (!this.open) return;
    this.open = false;
    // RFC 6455: a close reason is at most 123 bytes of UTF-8.
    let bytes = Buffer.from(reason, 'utf8');
    if (bytes.length > 123)
      bytes = Buffer.from(
        bytes
          .subarray(0, 123)
          .toString('utf8')
          .replace(/\uFFFD$/, ''),
        'utf8',
      );
    this.ws.end(code, bytes);
  }
}

/** TB's close reason for a token that did not verify. */
function authFailure(err: unknown): string {
  if (err instanceof OutpostError && err.code === 'TOKEN_EXPIRED') return err.message;
  if (err instanceof OutpostError) return `Invalid JWT token: ${err.message}`;
  return 'Invalid JWT token';
}

/** On each app (plain and TLS): one registry and one count of sockets per user over them all. */
export function registerWsApi(apps: readonly TemplatedApp[], s: Services): SubscriptionRegistry {
  const registry = new SubscriptionRegistry();
  const deps: CommandDeps = { s, registry, attributes: s.attributes };

  /** open sessions that have a principal; walked only when principals are revoked (rare) */
  const authenticated = new Set<Session>();
  /** open authenticated sockets per user id (only users holding some) */
  const socketsByUser = new Map<string, number>();
  /** every socket's token expiry on one runtime timer, however many sockets are open */
  const expiries = new TimerWheel(EXPIRY_TICK_MS, realClock, (m) => s.log.error(`ws: ${m}`));

  /** The token is past its `exp`: what REST answers now, the socket gets too. */
  const expired = (session: Session): boolean => (session.principal?.exp ?? 0) * 1000 <= Date.now();

  const expire = (session: Session): void => {
    registry.removeSession(session);
    session.end(CLOSE.SERVER_ERROR, REVOKED_REASON);
  };

  /** (Re)arms the close at the session's token expiry. The wheel counts a duration: `exp` is wall-clock seconds. */
  const armExpiry = (session: Session): void => {
    session.expiry?.cancel();
    const exp = (session.principal as Principal).exp * 1000;
    session.expiry = expiries.schedule(exp - Date.now(), () => {
      session.expiry = undefined;
      // a wall clock stepped back since arming: not expired yet, armed again for what is left
      if (expired(session)) expire(session);
      else if (session.open) armExpiry(session);
    });
  };

  /** The session has its principal: counted against its user's sockets, or closed 1008 over the limit. */
  const admit = (session: Session): boolean => {
    const userId = (session.principal as Principal).userId;
    const n = socketsByUser.get(userId) ?? 0;
    if (n >= s.config.ws.maxSessionsPerUser) {
      session.end(CLOSE.POLICY_VIOLATION, 'Max user sessions limit reached');
      return false;
    }
    socketsByUser.set(userId, n + 1);
    session.counted = true;
    authenticated.add(session);
    armExpiry(session);
    return true;
  };

  // Registered once for the whole server; each event reaches only the written entity's subscribers.
  s.bus.on('telemetry', (ev) => registry.onTelemetry(ev));
  s.bus.on('telemetryDeleted', (ev) =>
    registry.onTelemetryDeleted(ev, (keys) => s.timeseries.latest(ev.entityId, keys)),
  );
  s.bus.on('attributes', (ev) => registry.onAttributes(ev));

  /** The frame ending `sub` when its session may no longer read the entity: what subscribing now would answer. */
  const lostAccess = (sub: Subscription): string | undefined => {
    const principal = sub.session.principal;
    const rec = s.entities.get(sub.entityId);
    if (principal !== undefined && rec !== undefined) {
      try {
        s.auth.checkAccess(principal, rec.entityType, rec.id, 'read');
        return undefined;
      } catch (err) {
        if (!(err instanceof OutpostError)) throw err;
      }
    }
    return renderError(sub.cmdId, WS_ERROR.INTERNAL, sub.kind === 'ATTR' ? MSG_FETCH_ATTRIBUTES : MSG_FETCH_DATA);
  };
  s.bus.on('entityDeleted', (ev) => registry.endWhere(ev.entityId, lostAccess));
  s.bus.on('accessChanged', (ev) => registry.endWhere(ev.entityId, lostAccess));
  s.bus.on('principalsRevoked', (ev) => {
    const sessionIds = new Set(ev.sessionIds);
    const userIds = new Set(ev.userIds);
    const customerIds = new Set(ev.customerIds);
    for (const session of [...authenticated]) {
      const p = session.principal;
      if (p === undefined) continue;
      if (sessionIds.has(p.sessionId) || userIds.has(p.userId) || customerIds.has(p.customerId)) {
        registry.removeSession(session);
        session.end(CLOSE.POLICY_VIOLATION, REVOKED_REASON);
      }
    }
  });

  /**
   * A later `authCmd`: a valid token of the same user replaces the session's (its `exp` and session apply from
   * now on); an invalid one closes the socket as a first `authCmd` would be, and another user's 1008, since the
   * socket's subscriptions were checked for its user.
   */
  const renew = (session: Session, token: string): boolean => {
    let principal: Principal;
    try {
      principal = s.auth.authenticateToken(token);
    } catch (err) {
      session.end(CLOSE.BAD_DATA, authFailure(err));
      return false;
    }
    if (principal.userId !== (session.principal as Principal).userId) {
      session.end(CLOSE.POLICY_VIOLATION, 'Auth cmd is for another user');
      return false;
    }
    session.principal = principal;
    armExpiry(session);
    return true;
  };

  const handleFrame = (session: Session, text: string): void => {
    let frame: ParsedFrame;
    try {
      frame = parseFrame(text, session.format);
    } catch (err) {
      if (!(err instanceof FrameError)) throw err;
      s.log.debug(`ws: unparsable frame: ${err.message}`);
      session.send(PARSE_ERROR_FRAME);
      return;
    }
    if (session.principal === undefined) {
      if (frame.auth === undefined) {
        session.end(CLOSE.POLICY_VIOLATION, 'Auth cmd is missing');
        return;
      }
      const { apiKey, token } = frame.auth;
      try {
        session.principal =
          apiKey !== undefined && apiKey !== '' ? s.auth.authenticateApiKey(apiKey) : s.auth.authenticateToken(token);
      } catch (err) {
        // an API key's refusal says what REST would (its key is not a JWT)
        const apiKeyRefused = apiKey !== undefined && apiKey !== '' && err instanceof OutpostError;
        session.end(CLOSE.BAD_DATA, apiKeyRefused ? err.message : authFailure(err));
        return;
      }
      clearTimeout(session.authTimer);
      session.authTimer = undefined;
      if (!admit(session)) return;
    } else if (expired(session)) {
      // the wheel fires up to a tick late: a command arriving meanwhile is not run
      expire(session);
      return;
    } else if (frame.auth !== undefined && !renew(session, frame.auth.token)) {
      return;
    }
    for (const cmd of frame.cmds) {
      if (!session.open) return;
      runCommand(deps, session, session.principal, cmd);
    }
  };

  const behavior = (format: WsFormat | 'UNKNOWN'): WebSocketBehavior<SessionData> => ({
    maxPayloadLength: s.config.ws.maxPayloadLength,
    idleTimeout: s.config.ws.idleTimeoutSec,
    maxBackpressure: s.config.ws.maxBackpressure,
    closeOnBackpressureLimit: true,
    sendPingsAutomatically: true,
    upgrade: (res: HttpResponse, req: HttpRequest, context: us_socket_context_t) => {
      // Everything from `req` is read here, synchronously.
      const key = req.getHeader('sec-websocket-key');
      const protocol = req.getHeader('sec-websocket-protocol');
      const extensions = req.getHeader('sec-websocket-extensions');
      const token = req.getQuery('token');
      let principal: Principal | undefined;
      let authError: string | undefined;
      if (format !== 'UNKNOWN' && token !== undefined && token !== '') {
        try {
          principal = s.auth.authenticateToken(token);
        } catch (err) {
          authError = authFailure(err);
        }
      }
      const data: SessionData = { format, principal, authError, session: undefined };
      res.upgrade(data, key, protocol, extensions, context);
    },
    open: (ws: WebSocket<SessionData>) => {
      const data = ws.getUserData();
      const session = new Session(ws, format === 'UNKNOWN' ? 'LEGACY' : format, data.principal, (buffered) => {
        s.log.warn(`ws: closed a slow consumer (${buffered} bytes unsent, limit ${s.config.ws.maxBackpressure})`);
      });
      data.session = session;
      if (s.metrics) s.metrics.websockets++;
      if (format === 'UNKNOWN') return session.end(CLOSE.BAD_DATA, 'Unknown session type');
      if (data.authError !== undefined) return session.end(CLOSE.SERVER_ERROR, data.authError);
      if (session.principal !== undefined) admit(session);
      else {
        session.authTimer = setTimeout(
          () => session.end(CLOSE.POLICY_VIOLATION, 'Auth timeout'),
          s.config.ws.authTimeoutMs,
        );
        session.authTimer.unref();
      }
    },
    message: (ws: WebSocket<SessionData>, message: ArrayBuffer) => {
      const session = ws.getUserData().session;
      if (session === undefined || !session.open) return;
      // Decoding copies the bytes: uWS neuters `message` when this callback returns.
      const text = Buffer.from(message).toString('utf8');
      try {
        handleFrame(session, text);
      } catch (err) {
        s.log.error(`ws: frame handling failed: ${(err as Error)?.stack ?? String(err)}`);
        session.end(CLOSE.SERVER_ERROR, 'Internal server error');
      }
    },
    close: (ws: WebSocket<SessionData>) => {
      const session = ws.getUserData().session;
      if (session === undefined) return;
      if (s.metrics) s.metrics.websockets--;
      session.open = false;
      clearTimeout(session.authTimer);
      session.expiry?.cancel();
      authenticated.delete(session);
      registry.removeSession(session);
      if (session.counted && session.principal !== undefined) {
        session.counted = false;
        const n = (socketsByUser.get(session.principal.userId) ?? 1) - 1;
        if (n === 0) socketsByUser.delete(session.principal.userId);
        else socketsByUser.set(session.principal.userId, n);
      }
    },
  });

  for (const app of apps) {
    app.ws<SessionData>('/api/ws/plugins/telemetry', behavior('LEGACY'));
    app.ws<SessionData>('/api/ws', behavior('GENERAL'));
    app.ws<SessionData>('/api/ws/plugins/*', behavior('UNKNOWN'));
  }
  return registry;
}
