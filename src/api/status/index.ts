/**
 * The daemon's figures (docs/cli.md `outpost status`, docs/api.md): `GET /api/outpost/status` (tenant admin) as
 * JSON, `GET /metrics` in the Prometheus text format, and ThingsBoard's `GET /api/system/info`. /metrics answers loopback clients (a Prometheus agent
 * on the gateway itself), or any client with `Authorization: Bearer <metrics.token>` when that is set.
 */
import { timingSafeEqual } from 'node:crypto';
import type * as uws from 'uWebSockets.js';
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import { type HttpRouter, json } from '../../uws/adapter.js';
import { daemonStatus, prometheusText } from '../../status/index.js';
import type { Metrics } from '../../status/metrics.js';
import { principalOf } from '../principal.js';

/** 127.0.0.0/8 and ::1, in the forms uWS gives them (IPv6 in full, IPv4 possibly mapped into IPv6). */
export function isLoopback(addr: string): boolean {
  const a = addr.toLowerCase();
  if (a.startsWith('127.') || a === '::1') return true;
  if (/^(0000:){7}0001$/.test(a)) return true;
  // ::ffff:127.x.y.z, written in full as 0000:0000:0000:0000:0000:ffff:7fxx:xxxx
  return /^(0000:){5}ffff:7f[0-9a-f]{2}:[0-9a-f]{4}$/.test(a) || /^::ffff:127\./.test(a);
}

function tokenMatches(given: string | undefined, token: string): boolean {
  if (given === undefined || !given.startsWith('Bearer ')) return false;
  const a = Buffer.from(given.slice(7).trim());
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * ThingsBoard CE's `GET /api/system/info`, for clients that pick features by edition and version: the
 * ThingsBoard release whose REST this gateway follows (docs/api.md), not Outpost's own version (status has it).
 */
export const SYSTEM_INFO = {
  version: '4.3.1.3',
  artifact: 'application',
  name: 'ThingsBoard Server Application',
  type: 'CE',
} as const;

export function registerStatusApi(router: HttpRouter, s: Services, metrics: Metrics): void {
  router.route('get', '/api/system/info', (ctx) => {
    principalOf(s, ctx);
    return json(SYSTEM_INFO);
  });
  router.route('get', '/api/outpost/status', (ctx) => {
    s.auth.requireTenantAdmin(principalOf(s, ctx));
    return json(daemonStatus(s, metrics));
  });
  router.route('get', '/metrics', (ctx) => {
    if (!metricsAllowed(s, ctx.remoteAddress(), ctx.header('authorization'))) {
      throw new OutpostError(
        'PERMISSION_DENIED',
        s.config.metrics.token === ''
          ? '/metrics answers loopback clients only (set metrics.token to allow others)'
          : undefined,
      );
    }
    return {
      contentType: 'text/plain; version=0.0.4; charset=utf-8',
      body: prometheusText(daemonStatus(s, metrics), metrics),
    };
  });
}

function metricsAllowed(s: Services, remoteAddress: string, authorization: string | undefined): boolean {
  const token = s.config.metrics.token;
  return isLoopback(remoteAddress) || (token !== '' && tokenMatches(authorization, token));
}

/**
 * HEAD /metrics answers as GET does, without the body (monitoring probes check it so). On the uWS app itself:
 * the router serves GET/POST/PUT/DELETE only. It answers before returning, so the abort handler is a formality.
 */
export function registerMetricsHead(
  apps: readonly uws.TemplatedApp[],
  s: Services,
  metrics: Metrics,
  log: (m: string) => void,
): void {
  const head = (res: uws.HttpResponse, req: uws.HttpRequest): void => {
    res.onAborted(() => undefined);
    const allowed = metricsAllowed(
      s,
      Buffer.from(res.getRemoteAddressAsText()).toString('latin1'),
      req.getHeader('authorization') || undefined,
    );
    if (!allowed) {
      res.writeStatus('403 Forbidden').writeHeader('content-type', 'application/json').endWithoutBody(0);
      return;
    }
    let length: number;
    try {
      length = Buffer.byteLength(prometheusText(daemonStatus(s, metrics), metrics));
    } catch (err) {
      log(`HEAD /metrics: ${String(err)}`);
      res.writeStatus('500 Internal Server Error').endWithoutBody(0);
      return;
    }
    res.writeHeader('content-type', 'text/plain; version=0.0.4; charset=utf-8').endWithoutBody(length);
  };
  for (const app of apps) app.head('/metrics', head);
}
