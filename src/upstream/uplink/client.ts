/**
 * The upstream's HTTP device API over node:http/https with keep-alive agents (one connection per device in
 * flight, reused), a timeout per request, and answers reduced to what the sync service decides on.
 */
import http from 'node:http';
import https from 'node:https';

export interface UpstreamAnswer {
  /** HTTP status; 0 for a network error or timeout */
  readonly status: number;
  readonly body: string;
  /** ms from Retry-After (seconds or an HTTP date), undefined when absent */
  readonly retryAfterMs?: number | undefined;
  /** the network error's text, for status 0 */
  readonly error?: string | undefined;
}

/** Bodies of answers are read up to this (errors and provisioning answers are small; the rest is dropped). */
const MAX_ANSWER_BYTES = 16 * 1024;

export function retryAfterMs(h: string | undefined, now: number): number | undefined {
  if (h === undefined || h === '') return undefined;
  if (/^\d+$/.test(h.trim())) return Number(h.trim()) * 1000;
  const at = Date.parse(h);
  return Number.isFinite(at) ? Math.max(0, at - now) : undefined;
}

export class UpstreamClient {
  private readonly agent: http.Agent;
  private readonly mod: typeof http | typeof https;
  private readonly base: URL;

  constructor(
    url: string,
    concurrency: number,
    private readonly timeoutMs: number,
  ) {
    this.base = new URL(url.endsWith('/') ? url : `${url}/`);
    this.mod = this.base.protocol === 'https:' ? https : http;
    const opts = { keepAlive: true, maxSockets: concurrency + 2, maxFreeSockets: concurrency + 2 };
    this.agent = this.base.protocol === 'https:' ? new https.Agent(opts) : new http.Agent(opts);
  }

  get url(): string {
    return this.base.href.replace(/\/$/, '');
  }

  post(path: string, body: string | Uint8Array): Promise<UpstreamAnswer> {
    const u = new URL(path.replace(/^\//, ''), this.base);
    return new Promise((resolve) => {
      let done = false;
      const finish = (a: UpstreamAnswer): void => {
        if (done) return;
        done = true;
        resolve(a);
      };
      const req = this.mod.request(
        u,
        {
          method: 'POST',
          agent: this.agent,
          timeout: this.timeoutMs,
          headers: {
            'Content-Type': 'application/json',
            'Content-Length': typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength,
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          let len = 0;
          res.on('data', (c: Buffer) => {
            if (len < MAX_ANSWER_BYTES) chunks.push(c);
            len += c.length;
          });
          res.on('end', () =>
            finish({
              status: res.statusCode ?? 0,
              body: Buffer.concat(chunks).toString('utf8').slice(0, MAX_ANSWER_BYTES),
              retryAfterMs: retryAfterMs(res.headers['retry-after'], Date.now()),
            }),
          );
          res.on('error', (err) => finish({ status: 0, body: '', error: err.message }));
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${this.timeoutMs} ms`)));
      req.on('error', (err) =>
        finish({ status: 0, body: '', error: (err as NodeJS.ErrnoException).code ?? err.message }),
      );
      req.end(body);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}
