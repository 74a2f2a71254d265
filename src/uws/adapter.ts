/**
 * The one place that touches uWebSockets.js for HTTP: route table, request copying, abort
 * tracking, capped body collection, corked replies, streaming with backpressure and the JSON error shape.
 * Route handlers are plain async functions from an HttpContext to a Reply.
 *
 * uWS rules kept here: `res.onAborted` is registered before anything async; everything needed from `req`
 * is copied up front (req is dead after the handler returns); writes after an await are corked; body
 * chunks are copied (uWS neuters them on return).
 */
import type { HttpRequest, HttpResponse, TemplatedApp } from 'uWebSockets.js';
import { OutpostError, asOutpostError, errorBody } from '../errors.js';

export type Method = 'get' | 'post' | 'del' | 'put';

export interface Reply {
  readonly status?: number;
  readonly body?: string | Buffer;
  readonly contentType?: string;
  readonly headers?: Readonly<Record<string, string>>;
}

/** A streamed reply: `write` resolves when the chunk is handed to the socket without overflow. */
export interface StreamSink {
  write(chunk: string | Buffer): Promise<void>;
  readonly aborted: boolean;
}
export interface StreamReply {
  readonly status?: number;
  readonly contentType: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly produce: (sink: StreamSink) => Promise<void>;
}

export interface HttpContext {
  readonly method: string;
  readonly url: string;
  readonly query: URLSearchParams;
  /** path parameters in pattern order */
  readonly params: readonly string[];
  /** lower-cased header names */
  header(name: string): string | undefined;
  /** the request body, at most the route's cap (rejects with PAYLOAD_TOO_LARGE) */
  body(): Promise<Buffer>;
  readonly aborted: boolean;
  /** called once if the client goes away before the reply; for long-poll registries */
  onAbort(cb: () => void): void;
  /** the peer's address as text (IPv6 in full form); call before the first await */
  remoteAddress(): string;
}

/** What a handler gives back: a reply, a stream, or nothing when it answered the exchange itself. */
// biome-ignore lint/suspicious/noConfusingVoidType: `void` lets handlers that return nothing (async or not) type-check
export type HandlerResult = Reply | StreamReply | void;

export type Handler = (ctx: HttpContext) => Promise<HandlerResult> | HandlerResult;

export interface RouteOptions {
  /** bytes; defaults to the server's maxBodyBytes */
  readonly maxBody?: number;
}

/** bodies up to this declared size are read into one buffer allocated up front (see startBody) */
const PREALLOCATE_MAX = 256 * 1024;

const COPIED_HEADERS = ['content-length', 'content-type', 'authorization', 'x-authorization', 'accept'] as const;

const STATUS_TEXT: Record<number, string> = {
  200: '200 OK',
  204: '204 No Content',
  400: '400 Bad Request',
  401: '401 Unauthorized',
  403: '403 Forbidden',
  404: '404 Not Found',
  405: '405 Method Not Allowed',
  406: '406 Not Acceptable',
  408: '408 Request Timeout',
  409: '409 Conflict',
  413: '413 Payload Too Large',
  429: '429 Too Many Requests',
  500: '500 Internal Server Error',
  503: '503 Service Unavailable',
  504: '504 Gateway Timeout',
};
export const statusLine = (s: number): string => STATUS_TEXT[s] ?? `${s} Status`;

const EMPTY_REPLY: Reply = Object.freeze({});

function isPromise<T>(v: T | Promise<T>): v is Promise<T> {
  return typeof (v as { then?: unknown } | undefined)?.then === 'function';
}

function isStream(r: Reply | StreamReply): r is StreamReply {
  return typeof (r as StreamReply).produce === 'function';
}

/** Per-request state; also the HttpContext handed to handlers. */
class Exchange implements HttpContext {
  aborted = false;
  done = false;
  /** the raw query string, copied from `req` up front; parsed on first use (most device posts have none) */
  private readonly rawQuery: string;
  private parsedQuery: URLSearchParams | undefined;
  /** COPIED_HEADERS in order; '' when absent */
  private readonly headerValues: string[];
  private abortCbs: Array<() => void> | undefined;
  /**
   * Body collection, without a promise until a handler asks (most device posts ask once, after auth):
   * `bodyState` is 'none' (no body expected), 'reading', 'done' (bodyBuf) or 'failed' (bodyErr).
   */
  private bodyState: 'none' | 'reading' | 'done' | 'failed' = 'none';
  private bodyBuf: Buffer | undefined;
  private bodyErr: unknown;
  private bodyWaiter: { resolve: (b: Buffer) => void; reject: (e: unknown) => void } | undefined;

  constructor(
    readonly res: HttpResponse,
    req: HttpRequest,
    readonly method: string,
    readonly url: string,
    readonly params: readonly string[],
    private readonly maxBody: number,
    private readonly log: (msg: string) => void,
  ) {
    this.rawQuery = req.getQuery() ?? '';
    // same order as COPIED_HEADERS
    this.headerValues = [
      req.getHeader('content-length'),
      req.getHeader('content-type'),
      req.getHeader('authorization'),
      req.getHeader('x-authorization'),
      req.getHeader('accept'),
    ];
    res.onAborted(() => {
      this.aborted = true;
      if (this.bodyState === 'reading') this.failBody(new OutpostError('BAD_PAYLOAD', 'client went away'));
      const cbs = this.abortCbs;
      this.abortCbs = undefined;
      if (cbs) {
        for (const cb of cbs) {
          try {
            cb();
          } catch (err) {
            this.log(`abort callback failed: ${String(err)}`);
          }
        }
      }
    });
    if (method === 'post' || method === 'put' || method === 'del' || method === 'delete') this.startBody();
  }

  remoteAddress(): string {
    return Buffer.from(this.res.getRemoteAddressAsText()).toString('latin1');
  }

  get query(): URLSearchParams {
    return (this.parsedQuery ??= new URLSearchParams(this.rawQuery));
  }

  header(name: string): string | undefined {
    const i = (COPIED_HEADERS as readonly string[]).indexOf(name);
    const v = i < 0 ? '' : (this.headerValues[i] as string);
    return v === '' ? undefined : v;
  }

  onAbort(cb: () => void): void {
    if (this.aborted) cb();
    else (this.abortCbs ??= []).push(cb);
  }

  body(): Promise<Buffer> {
    switch (this.bodyState) {
      case 'none':
        return Promise.resolve(Buffer.alloc(0));
      case 'done':
        return Promise.resolve(this.bodyBuf as Buffer);
      case 'failed':
        return Promise.reject(this.bodyErr);
      case 'reading':
        return new Promise<Buffer>((resolve, reject) => {
          const prev = this.bodyWaiter;
          // a second caller while reading: both get the outcome
          this.bodyWaiter = prev
            ? {
                resolve: (b) => {
                  prev.resolve(b);
                  resolve(b);
                },
                reject: (e) => {
                  prev.reject(e);
                  reject(e);
                },
              }
            : { resolve, reject };
        });
    }
  }

  private finishBody(buf: Buffer): void {
    this.bodyState = 'done';
    this.bodyBuf = buf;
    const w = this.bodyWaiter;
    this.bodyWaiter = undefined;
    w?.resolve(buf);
  }

  private failBody(err: unknown): void {
    this.bodyState = 'failed';
    this.bodyErr = err;
    const w = this.bodyWaiter;
    this.bodyWaiter = undefined;
    w?.reject(err);
  }

  /** Must run synchronously inside the uWS handler: data can arrive in the same loop iteration. */
  private startBody(): void {
    const declared = Number(this.headerValues[0] || '0');
    const cap = this.maxBody;
    this.bodyState = 'reading';
    if (declared > cap) {
      this.failBody(new OutpostError('PAYLOAD_TOO_LARGE', `Payload size exceeds the limit of ${cap} bytes`));
      // keep draining into the void so the connection stays usable
      this.res.onData(() => undefined);
      return;
    }
    // A declared length up to PREALLOCATE_MAX gets one buffer up front that every chunk is copied into: a
    // 60 KB batch arrives in several chunks, and a buffer per chunk plus a concat cost more than the copies.
    // Larger bodies are collected as they arrive, so memory follows the bytes received, not a declared size.
    let whole: Buffer | undefined =
      Number.isSafeInteger(declared) && declared > 0 && declared <= PREALLOCATE_MAX
        ? Buffer.allocUnsafe(declared)
        : undefined;
    let chunks: Buffer[] | undefined;
    let size = 0;
    this.res.onData((ab, isLast) => {
      if (this.bodyState !== 'reading') return;
      const at = size;
      size += ab.byteLength;
      if (size > cap) {
        this.failBody(new OutpostError('PAYLOAD_TOO_LARGE', `Payload size exceeds the limit of ${cap} bytes`));
        return;
      }
      if (whole !== undefined && size <= whole.length) {
        // copy: uWS neuters `ab` when this callback returns
        whole.set(new Uint8Array(ab), at);
        if (isLast) this.finishBody(size === whole.length ? whole : whole.subarray(0, size));
        return;
      }
      if (whole !== undefined) {
        // more than declared (uWS enforces Content-Length, so only if it did not): fall back to chunks
        chunks = [whole.subarray(0, at)];
        whole = undefined;
      }
      // Buffer.from(Uint8Array) puts small chunks into Node's shared 8 KiB pool rather than a fresh
      // ArrayBuffer per request (as ab.slice would).
      const chunk = Buffer.from(new Uint8Array(ab));
      if (isLast && chunks === undefined) {
        this.finishBody(chunk);
        return;
      }
      (chunks ??= []).push(chunk);
      if (isLast) this.finishBody(Buffer.concat(chunks, size));
    });
  }

  send(reply: Reply): void {
    if (this.aborted || this.done) return;
    this.done = true;
    const res = this.res;
    res.cork(() => {
      // uWS writes "200 OK" itself when no status was written
      if (reply.status !== undefined && reply.status !== 200) res.writeStatus(statusLine(reply.status));
      if (reply.contentType) res.writeHeader('Content-Type', reply.contentType);
      if (reply.headers) for (const [k, v] of Object.entries(reply.headers)) res.writeHeader(k, v);
      res.end(reply.body ?? '');
    });
  }

  sendError(err: unknown): void {
    const e = asOutpostError(err);
    if (e.code === 'INTERNAL')
      this.log(`internal error on ${this.method.toUpperCase()} ${this.url}: ${(err as Error)?.stack ?? String(err)}`);
    this.send({
      status: e.status,
      contentType: 'application/json',
      body: errorBody(e),
      ...(e.retryAfterS === undefined ? {} : { headers: { 'Retry-After': String(e.retryAfterS) } }),
    });
  }

  async stream(reply: StreamReply): Promise<void> {
    if (this.aborted || this.done) return;
    this.done = true;
    const res = this.res;
    res.cork(() => {
      res.writeStatus(statusLine(reply.status ?? 200));
      res.writeHeader('Content-Type', reply.contentType);
      if (reply.headers) for (const [k, v] of Object.entries(reply.headers)) res.writeHeader(k, v);
    });
    let drained: (() => void) | undefined;
    res.onWritable(() => {
      drained?.();
      drained = undefined;
      return true;
    });
    const self = this;
    const sink: StreamSink = {
      get aborted() {
        return self.aborted;
      },
      write(chunk) {
        if (self.aborted) return Promise.resolve();
        let ok = true;
        res.cork(() => {
          ok = res.write(chunk);
        });
        // uWS keeps the chunk even when write returns false; we only wait for the socket to drain.
        if (ok) return Promise.resolve();
        return new Promise<void>((resolve) => {
          drained = resolve;
          self.onAbort(resolve);
        });
      },
    };
    try {
      await reply.produce(sink);
      if (!this.aborted) res.cork(() => res.end());
    } catch (err) {
      this.log(`stream failed on ${this.url}: ${String(err)}`);
      if (!this.aborted) res.close();
    }
  }
}

export interface HttpRouterOptions {
  readonly maxBodyBytes: number;
  readonly log: (msg: string) => void;
  /** told of every routed request once it is answered: wall ms from the handler's start, and whether it failed */
  readonly observe?: (method: Method, pattern: string, ms: number, failed: boolean) => void;
}

export class HttpRouter {
  /** requests whose reply is still pending (for graceful shutdown and metrics) */
  inFlight = 0;

  /** every route goes on each app: plain HTTP and HTTPS serve the same API (docs/configuration.md) */
  private readonly apps: readonly TemplatedApp[];

  constructor(
    app: TemplatedApp | readonly TemplatedApp[],
    private readonly opts: HttpRouterOptions,
  ) {
    this.apps = Array.isArray(app) ? app : [app as TemplatedApp];
  }

  route(method: Method, pattern: string, handler: Handler, options: RouteOptions = {}): this {
    const paramCount = (pattern.match(/\/:/g) ?? []).length;
    const maxBody = options.maxBody ?? this.opts.maxBodyBytes;
    const serve = (res: HttpResponse, req: HttpRequest): void => {
      const params: string[] = [];
      for (let i = 0; i < paramCount; i++) {
        const raw = req.getParameter(i) ?? '';
        params.push(raw.includes('%') ? decodeURIComponent(raw) : raw);
      }
      const ex = new Exchange(res, req, method, req.getUrl(), params, maxBody, this.opts.log);
      const observe = this.opts.observe;
      if (observe === undefined) {
        this.run(ex, handler);
        return;
      }
      const t0 = performance.now();
      this.run(ex, handler, (failed) => observe(method, pattern, performance.now() - t0, failed));
    };
    for (const app of this.apps) app[method](pattern, serve);
    return this;
  }

  /** Unknown path or method → 404 JSON (docs/api.md). Register last. */
  fallback(): void {
    for (const app of this.apps) {
      app.any('/*', (res, req) => {
        const ex = new Exchange(res, req, req.getMethod(), req.getUrl(), [], this.opts.maxBodyBytes, this.opts.log);
        ex.sendError(new OutpostError('NOT_FOUND', `No endpoint ${req.getMethod().toUpperCase()} ${req.getUrl()}`));
      });
    }
  }

  private run(ex: Exchange, handler: Handler, done?: (failed: boolean) => void): void {
    this.inFlight++;
    let out: ReturnType<Handler>;
    try {
      out = handler(ex);
    } catch (err) {
      this.inFlight--;
      ex.sendError(err);
      done?.(true);
      return;
    }
    if (isPromise(out)) {
      out.then(
        (reply: HandlerResult) => this.finish(ex, reply, done),
        (err: unknown) => {
          this.inFlight--;
          ex.sendError(err);
          done?.(true);
        },
      );
    } else {
      this.finish(ex, out, done);
    }
  }

  private finish(ex: Exchange, reply: HandlerResult, done?: (failed: boolean) => void): void {
    if (reply && isStream(reply)) {
      void ex.stream(reply).finally(() => {
        this.inFlight--;
        done?.(ex.aborted);
      });
      return;
    }
    this.inFlight--;
    ex.send(reply ?? EMPTY_REPLY);
    done?.((reply?.status ?? 200) >= 400);
  }
}

export const json = (value: unknown, status = 200): Reply => ({
  status,
  contentType: 'application/json',
  body: JSON.stringify(value),
});
export const jsonText = (text: string, status = 200): Reply => ({
  status,
  contentType: 'application/json',
  body: text,
});
