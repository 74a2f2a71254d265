/**
 * A fake ThingsBoard upstream for the sync tests (docs/sync.md): an HTTP server on loopback that takes TB's device
 * API (`POST /api/v1/{token}/telemetry|attributes`, `POST /api/v1/provision`) and types values by TB's literal
 * rules (JsonConverter: a number literal with `.` is a double, other integers a long), so a test can check that
 * `42.0` arrived as a double. It can refuse connections (stop listening), answer with a status per request
 * (`answer` hook: 5xx, 429 + Retry-After, 401, 400) or be slow. Depth series
 * (`POST /api/v1/{token}/depth/telemetry`) are answered 404, as plain TB does, unless `acceptsDepth` is set (as
 * another Outpost or Tempus would).
 */
import { EventEmitter } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { NumLit, parseJson, type JsonValue } from '../../src/ingest/json.js';
import { waitFor } from './wait.js';

export interface Received {
  readonly token: string;
  readonly ts: number;
  readonly key: string;
  readonly type: 'DOUBLE' | 'LONG' | 'STRING' | 'BOOLEAN' | 'JSON';
  /** the value's text: the literal for numbers, the string itself, JSON text for objects */
  readonly value: string;
}

/** A depth point received (acceptsDepth). */
export interface ReceivedDepth {
  readonly token: string;
  /** the depth's literal */
  readonly ds: string;
  readonly key: string;
  readonly type: Received['type'];
  readonly value: string;
}

export interface Request {
  readonly path: string;
  readonly token: string;
  readonly kind: 'telemetry' | 'attributes' | 'provision' | 'depth' | 'other';
  readonly body: string;
  readonly at: number;
}

/** What the fake answers; undefined from the hook: 200 and the request is recorded. */
export interface Answer {
  status: number;
  headers?: Record<string, string>;
  body?: string;
}

function typed(v: JsonValue): { type: Received['type']; value: string } {
  if (v instanceof NumLit)
    return v.text.includes('.') ? { type: 'DOUBLE', value: v.text } : { type: 'LONG', value: v.text };
  if (typeof v === 'number') return { type: 'LONG', value: String(v) };
  if (typeof v === 'boolean') return { type: 'BOOLEAN', value: String(v) };
  if (typeof v === 'string') return { type: 'STRING', value: v };
  return { type: 'JSON', value: JSON.stringify(v, (_k, x: unknown) => (x instanceof NumLit ? Number(x.text) : x)) };
}

/** The body as a JSON array (numbers as written), undefined when it is not one. */
function jsonArray(body: string): JsonValue[] | undefined {
  try {
    const v = parseJson(body);
    return Array.isArray(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

export class FakeTb extends EventEmitter {
  readonly points: Received[] = [];
  readonly requests: Request[] = [];
  readonly attributes = new Map<string, Record<string, string>>();
  readonly depthPoints: ReceivedDepth[] = [];
  /** answer the depth path (else 404, as TB) */
  acceptsDepth = false;
  /** decides each request's answer before it is recorded */
  answer: ((r: Request) => Answer | undefined) | undefined;
  /** ms to wait before answering */
  delayMs = 0;
  /** provisioning: device name → token handed out; refused names answer FAILURE */
  readonly provisioned = new Map<string, string>();
  provisionKey = 'pk';
  provisionSecret = 'ps';
  private server: http.Server;
  port = 0;

  private constructor() {
    super();
    this.server = this.makeServer();
  }

  static async start(): Promise<FakeTb> {
    const tb = new FakeTb();
    await tb.listen(0);
    return tb;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  private makeServer(): http.Server {
    return http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        const path = req.url ?? '';
        const m = /^\/api\/v1\/([^/]+)\/(telemetry|attributes|depth\/telemetry)$/.exec(path);
        const r: Request = {
          path,
          body,
          at: Date.now(),
          token: m ? decodeURIComponent(m[1] as string) : '',
          kind:
            path === '/api/v1/provision'
              ? 'provision'
              : m
                ? m[2] === 'depth/telemetry'
                  ? 'depth'
                  : (m[2] as 'telemetry' | 'attributes')
                : 'other',
        };
        const reply = (a: Answer): void => {
          res.writeHead(a.status, { 'Content-Type': 'application/json', ...a.headers });
          res.end(a.body ?? '');
        };
        const go = (): void => {
          this.requests.push(r);
          const a = this.answer?.(r);
          if (a !== undefined) {
            reply(a);
            this.emit('request', r, a.status);
            return;
          }
          if (r.kind === 'provision') reply({ status: 200, body: JSON.stringify(this.provision(body)) });
          else if (r.kind === 'telemetry')
            this.record(r, body) ? reply({ status: 200 }) : reply({ status: 400, body: '{"error":"bad"}' });
          else if (r.kind === 'depth' && this.acceptsDepth)
            this.recordDepth(r, body) ? reply({ status: 200 }) : reply({ status: 400, body: '{"error":"bad"}' });
          else if (r.kind === 'attributes') {
            const o = parseJson(body) as Record<string, JsonValue>;
            const cur = this.attributes.get(r.token) ?? {};
            for (const [k, v] of Object.entries(o)) cur[k] = `${typed(v).type}:${typed(v).value}`;
            this.attributes.set(r.token, cur);
            reply({ status: 200 });
          } else reply({ status: 404 });
          this.emit('request', r, 200);
        };
        if (this.delayMs > 0) setTimeout(go, this.delayMs);
        else go();
      });
    });
  }

  private provision(body: string): unknown {
    const b = JSON.parse(body) as { deviceName?: string; provisionDeviceKey?: string; provisionDeviceSecret?: string };
    if (b.provisionDeviceKey !== this.provisionKey || b.provisionDeviceSecret !== this.provisionSecret) {
      return { status: 'NOT_FOUND', errorMsg: 'Provision data was not found!' };
    }
    const name = b.deviceName ?? '';
    if (this.provisioned.has(name)) return { status: 'FAILURE', errorMsg: 'exists' };
    const token = `up-${name}`;
    this.provisioned.set(name, token);
    return { status: 'SUCCESS', credentialsType: 'ACCESS_TOKEN', credentialsValue: token };
  }

  private record(r: Request, body: string): boolean {
    const arr = jsonArray(body);
    if (arr === undefined) return false;
    for (const el of arr) {
      const o = el as { ts?: JsonValue; values?: Record<string, JsonValue> };
      if (o.values === undefined || o.ts === undefined) return false;
      const ts = o.ts instanceof NumLit ? Number(o.ts.text) : (o.ts as number);
      for (const [key, v] of Object.entries(o.values)) this.points.push({ token: r.token, ts, key, ...typed(v) });
    }
    this.emit('points');
    return true;
  }

  private recordDepth(r: Request, body: string): boolean {
    const arr = jsonArray(body);
    if (arr === undefined) return false;
    for (const el of arr) {
      const o = el as { ds?: JsonValue; values?: Record<string, JsonValue> };
      if (o.values === undefined || !(o.ds instanceof NumLit)) return false;
      for (const [key, v] of Object.entries(o.values))
        this.depthPoints.push({ token: r.token, ds: o.ds.text, key, ...typed(v) });
    }
    return true;
  }

  /** Resolves once `pred` holds, checked after every request (no polling). */
  async waitFor(pred: () => boolean, label = 'condition', timeoutMs = 30_000): Promise<void> {
    await waitFor(pred, {
      timeout: timeoutMs,
      interval: 1_000,
      message: `fake TB: ${label}`,
      wake: (check) => {
        this.on('request', check);
        return () => this.off('request', check);
      },
    });
  }

  /** Points received for `token`, distinct by (key, ts) (duplicates are allowed upstream: TB upserts). */
  distinct(token: string): Map<string, Received> {
    const out = new Map<string, Received>();
    for (const p of this.points) if (p.token === token) out.set(`${p.key}@${p.ts}`, p);
    return out;
  }

  /** Stops listening and drops open connections: the gateway sees refused connections. */
  async down(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  /** Listens again on the same port. */
  async up(): Promise<void> {
    this.server = this.makeServer();
    await this.listen(this.port);
  }

  private listen(port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, '127.0.0.1', () => {
        this.port = (this.server.address() as AddressInfo).port;
        resolve();
      });
    });
  }

  close(): Promise<void> {
    return this.down();
  }
}
