/**
 * Remote sessions (docs/cli.md): `outpost login` stores, per gateway URL, the refresh token (or the access
 * ticket) in `$XDG_CONFIG_HOME/outpost/credentials.json` (mode 0600); every remote command takes its access
 * token from there and refreshes it transparently when it has expired or is about to.
 * HTTP goes through node:http(s) rather than fetch: undici's first use costs tens of ms a command pays.
 */
import { chmodSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { CliError } from './errors.js';

export interface StoredSession {
  /** the access JWT (or the ticket itself) */
  token: string;
  /** absent for a ticket: it cannot be refreshed, only replaced */
  refreshToken?: string;
  email: string;
  authority: 'TENANT_ADMIN' | 'CUSTOMER_USER';
  customerId: string;
}

export function credentialsPath(): string {
  const base = process.env['XDG_CONFIG_HOME'] || join(homedir(), '.config');
  return join(base, 'outpost', 'credentials.json');
}

/** a base URL without its trailing slash, the key of its session */
export function normaliseUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new CliError(`--url "${url}" is not a URL (e.g. http://gateway.local:8080)`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new CliError(`--url "${url}": http:// or https:// only`);
  return `${u.protocol}//${u.host}${u.pathname.replace(/\/+$/, '')}`;
}

export function readCredentials(): Record<string, StoredSession> {
  try {
    return JSON.parse(readFileSync(credentialsPath(), 'utf8')) as Record<string, StoredSession>;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw new CliError(`reading ${credentialsPath()}: ${(err as Error).message}`);
  }
}

/** Written to a temporary file (0600 from the start) and renamed, so a crash never leaves half a file. */
export function writeCredentials(all: Record<string, StoredSession>): void {
  const file = credentialsPath();
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(all, null, 2)}\n`, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
}

/**
 * The gateway logged in to last, where commands without --url / --data-dir go (as kubectl's current
 * context); a file beside the credentials, so the credentials' format stays one session per URL.
 */
export function currentUrlPath(): string {
  return join(dirname(credentialsPath()), 'current-url');
}

export function readCurrentUrl(): string | undefined {
  try {
    const url = readFileSync(currentUrlPath(), 'utf8').trim();
    return url === '' ? undefined : url;
  } catch {
    return undefined;
  }
}

/** `undefined` forgets it: commands without --url are local again */
export function writeCurrentUrl(url: string | undefined): void {
  if (url === undefined) {
    rmSync(currentUrlPath(), { force: true });
    return;
  }
  mkdirSync(dirname(currentUrlPath()), { recursive: true, mode: 0o700 });
  writeFileSync(currentUrlPath(), `${url}\n`, { mode: 0o600 });
}

export interface HttpAnswer {
  readonly status: number;
  readonly body: Buffer;
  readonly text: string;
}

export interface RequestOptions {
  readonly body?: string;
  readonly token?: string;
  /** called with each body chunk instead of collecting them (downloads); awaited, so the socket pauses */
  readonly onChunk?: (chunk: Buffer) => Promise<void>;
  readonly timeoutMs?: number;
  /** non-2xx statuses the caller turns into words itself, answered rather than thrown */
  readonly accept?: readonly number[];
}

async function transport(url: string): Promise<typeof import('node:http')> {
  return url.startsWith('https:')
    ? ((await import('node:https')) as unknown as typeof import('node:http'))
    : import('node:http');
}

/** One HTTP request; network failures become one-line CliErrors. */
export async function httpRequest(method: string, url: string, o: RequestOptions = {}): Promise<HttpAnswer> {
  const mod = await transport(url);
  return new Promise<HttpAnswer>((resolve, reject) => {
    const headers: Record<string, string> = { accept: 'application/json' };
    if (o.body !== undefined) headers['content-type'] = 'application/json';
    if (o.token !== undefined) headers['x-authorization'] = `Bearer ${o.token}`;
    const req = mod.request(url, { method, headers }, (res: IncomingMessage) => {
      const status = res.statusCode ?? 0;
      const parts: Buffer[] = [];
      const streaming = o.onChunk !== undefined && status === 200;
      res.on('data', (c: Buffer) => {
        if (!streaming) {
          parts.push(c);
          return;
        }
        res.pause();
        (o.onChunk as (c: Buffer) => Promise<void>)(c).then(
          () => res.resume(),
          (err: unknown) => {
            res.destroy();
            reject(err);
          },
        );
      });
      res.on('end', () => {
        const body = Buffer.concat(parts);
        resolve({ status, body, text: body.toString('utf8') });
      });
      res.on('error', reject);
    });
    req.setTimeout(o.timeoutMs ?? 30_000, () =>
      req.destroy(new Error(`no answer within ${(o.timeoutMs ?? 30_000) / 1000} s`)),
    );
    req.on('error', (err) => reject(new CliError(`${method} ${url}: ${err.message}`)));
    req.end(o.body);
  });
}

/** The gateway's own message of a TB error JSON, else the status line. */
export function errorOf(a: HttpAnswer): CliError {
  try {
    const j = JSON.parse(a.text) as { message?: unknown };
    if (typeof j.message === 'string') return new CliError(`${a.status}: ${j.message}`);
  } catch {
    /* not JSON */
  }
  return new CliError(`HTTP ${a.status}${a.text ? `: ${a.text.slice(0, 200)}` : ''}`);
}

/** seconds of validity left under which a token is refreshed before use */
const REFRESH_MARGIN_SEC = 60;

function expOf(jwt: string): number {
  try {
    return (
      (JSON.parse(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString('utf8')) as { exp?: number }).exp ?? 0
    );
  } catch {
    return 0;
  }
}

/** An authenticated client of one gateway. */
export class RemoteSession {
  private constructor(
    readonly url: string,
    private session: StoredSession,
  ) {}

  static open(url: string): RemoteSession {
    const base = normaliseUrl(url);
    const s = readCredentials()[base];
    if (!s) throw new CliError(`not logged in to ${base}: run outpost login --url ${base} --username EMAIL`);
    return new RemoteSession(base, s);
  }

  get authority(): StoredSession['authority'] {
    return this.session.authority;
  }
  get customerId(): string {
    return this.session.customerId;
  }
  get email(): string {
    return this.session.email;
  }

  /** A valid access token, refreshed (and stored again) when it expires within a minute. */
  async token(force = false): Promise<string> {
    if (!force && expOf(this.session.token) - REFRESH_MARGIN_SEC > Date.now() / 1000) return this.session.token;
    if (this.session.refreshToken === undefined) {
      throw new CliError(
        `the ticket for ${this.url} has expired: get a new one and run outpost login --url ${this.url} --ticket FILE`,
      );
    }
    const a = await httpRequest('POST', `${this.url}/api/auth/token`, {
      body: JSON.stringify({ refreshToken: this.session.refreshToken }),
    });
    if (a.status !== 200)
      throw new CliError(`the session for ${this.url} has ended (${errorOf(a).message}): run outpost login again`);
    const pair = JSON.parse(a.text) as { token: string; refreshToken: string };
    this.session = { ...this.session, token: pair.token, refreshToken: pair.refreshToken };
    const all = readCredentials();
    all[this.url] = this.session;
    writeCredentials(all);
    return pair.token;
  }

  /** An authenticated request to `path`; a 401 "expired" once refreshes and retries. Non-2xx → CliError. */
  async request(method: string, path: string, o: Omit<RequestOptions, 'token'> = {}): Promise<HttpAnswer> {
    let a = await httpRequest(method, `${this.url}${path}`, { ...o, token: await this.token() });
    if (a.status === 401 && this.session.refreshToken !== undefined) {
      a = await httpRequest(method, `${this.url}${path}`, { ...o, token: await this.token(true) });
    }
    if ((a.status < 200 || a.status >= 300) && o.accept?.includes(a.status) !== true) throw errorOf(a);
    return a;
  }
}

/** Fetches who the token belongs to and stores the session under `url`. */
export async function saveSession(
  url: string,
  token: string,
  refreshToken: string | undefined,
): Promise<StoredSession> {
  const a = await httpRequest('GET', `${url}/api/auth/user`, { token });
  if (a.status !== 200) throw errorOf(a);
  const u = JSON.parse(a.text) as { email: string; authority: StoredSession['authority']; customerId: { id: string } };
  const s: StoredSession = {
    token,
    ...(refreshToken === undefined ? {} : { refreshToken }),
    email: u.email,
    authority: u.authority,
    customerId: u.customerId.id,
  };
  const all = readCredentials();
  all[url] = s;
  writeCredentials(all);
  writeCurrentUrl(url);
  return s;
}
