/**
 * One daemon per data dir: `serve` holds this lock from before it opens the store until it exits, so a second
 * daemon never replays or appends to the write-ahead log another one owns (two writers over one store lose
 * acknowledged points at the next power cut).
 *
 * The lock is a Linux abstract unix socket named after the data dir's real path. Binding a name that is bound
 * fails with EADDRINUSE, and the kernel frees the name when the holder exits in any way (kill -9, power cut),
 * so a crash never leaves a stale lock behind; the holder greets whoever connects with its pid and role, for the
 * refusal message. Node has no flock(2), and a pid file alone goes stale.
 *
 * The admin commands (`outpost device add`, ...) write the store, and only one process may: lmdb-js 3.5, with
 * two processes writing one environment, lost acknowledged commits (docs/design/storage.md, "One writer"). So
 * they hand their write to the daemon over this same socket when one holds it (src/admin/channel.ts), and
 * otherwise take the lock themselves, as role 'admin', for the second their write lasts; a daemon starting
 * meanwhile waits for them. The technician's read-only commands take nothing.
 *
 * Limits: abstract names live in a network namespace, so a daemon in another namespace (a container with its
 * own network, a unit with PrivateNetwork=yes) does not see this one's lock; the name comes from the real path,
 * so the same directory reached through two mounts (a bind mount) counts as two. Other platforms have no
 * abstract sockets: there the socket is a file in the data dir, and one nobody answers on is taken as stale.
 */
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, realpathSync, rmSync, statSync } from 'node:fs';
import { type Server, connect, createServer } from 'node:net';
import { join } from 'node:path';
import { OutpostError } from '../errors.js';

/** who holds a data dir: the daemon, or an admin command writing for a moment */
export type HolderRole = 'serve' | 'admin';

/** What the holder says first to whoever connects: one JSON line. */
export interface HolderGreeting {
  readonly pid: number;
  readonly role: HolderRole;
}

/** Answers one request line with one reply line (src/admin/channel.ts); undefined: not taking requests now. */
export type RequestHandler = (line: string) => Promise<string> | undefined;

export interface DataDirLock {
  /** the data dir's real path, the lock's key */
  readonly dataDir: string;
  /** answer request lines sent after the greeting with `handler` (the daemon, once its store is open) */
  serveRequests(handler: RequestHandler): void;
  release(): Promise<void>;
}

/** how long a refused daemon waits for the holder to say its pid (it answers at once unless it is stuck) */
const HOLDER_REPLY_MS = 1000;
/** how long a daemon waits for an admin command's write to end before it gives up starting */
const ADMIN_HOLD_WAIT_MS = 30_000;
const ADMIN_HOLD_POLL_MS = 100;
/** a request line's cap, and how long a connection may stay idle, before its request, until the holder drops it */
const MAX_REQUEST_BYTES = 64 * 1024;
const IDLE_CONNECTION_MS = 10_000;

/**
 * The data dir's lock, or a CONFIG_INVALID error naming the holder. Creates the dir (0700) if it does not exist.
 * A daemon waits (up to ADMIN_HOLD_WAIT_MS) while an admin command holds it.
 */
export async function lockDataDir(dataDir: string): Promise<DataDirLock> {
  const deadline = performance.now() + ADMIN_HOLD_WAIT_MS;
  for (;;) {
    const r = await tryLockDataDir(dataDir, 'serve');
    if ('lock' in r) return r.lock;
    if (r.holder?.role !== 'admin' || performance.now() > deadline) {
      const who = r.holder !== undefined ? ` (pid ${r.holder.pid})` : '';
      const what = r.holder?.role === 'admin' ? 'an outpost admin command' : 'another outpost serve';
      throw new OutpostError('CONFIG_INVALID', `data dir ${r.dataDir} is in use by ${what}${who}; nothing was changed`);
    }
    await new Promise((resolve) => setTimeout(resolve, ADMIN_HOLD_POLL_MS));
  }
}

/** The lock as `role`, or who holds it (undefined: a holder that did not say). */
export async function tryLockDataDir(
  dataDir: string,
  role: HolderRole,
): Promise<{ lock: DataDirLock } | { dataDir: string; holder: HolderGreeting | undefined }> {
  try {
    statSync(dataDir);
  } catch {
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    // mkdir's mode passes through the umask, which may only take bits away; this makes it exact
    chmodSync(dataDir, 0o700);
  }
  const real = realpathSync(dataDir);
  const address = lockAddress(real);
  let handler: RequestHandler | undefined;
  const server = createServer((socket) => {
    socket.on('error', () => {
      /* the asker went away: nothing to tell */
    });
    socket.setTimeout(IDLE_CONNECTION_MS, () => socket.destroy());
    socket.write(`${JSON.stringify({ pid: process.pid, role } satisfies HolderGreeting)}\n`);
    let buffered = '';
    const onData = (b: Buffer): void => {
      buffered += b.toString();
      const nl = buffered.indexOf('\n');
      if (nl < 0) {
        if (buffered.length > MAX_REQUEST_BYTES) socket.destroy();
        return;
      }
      socket.off('data', onData);
      // a write on a slow card may take long: the asker's own timeout decides
      socket.setTimeout(0);
      const reply = handler?.(buffered.slice(0, nl));
      if (reply === undefined) {
        socket.end(`${JSON.stringify({ ok: false, busy: true })}\n`);
        return;
      }
      reply.then(
        (line) => socket.end(`${line}\n`),
        () => socket.destroy(),
      );
    };
    socket.on('data', onData);
  });
  for (let attempt = 0; ; attempt++) {
    const err = await listen(server, address);
    if (err === undefined) break;
    if (err.code !== 'EADDRINUSE') {
      throw new OutpostError('STORE_FAILED', `cannot lock data dir ${real}: ${err.message}`, { cause: err });
    }
    const holder = await askHolder(address);
    if (holder === 'gone' && !address.startsWith('\0') && attempt === 0) {
      rmSync(address, { force: true }); // a socket file left by a crash
      continue;
    }
    return { dataDir: real, holder: holder === 'gone' ? undefined : holder };
  }
  // the lock must not keep the process alive; it lasts as long as the process
  server.unref();
  return {
    lock: {
      dataDir: real,
      serveRequests: (h) => {
        handler = h;
      },
      release: () => new Promise((resolve) => server.close(() => resolve())),
    },
  };
}

/** sun_path's size on Linux */
const SUN_PATH_BYTES = 108;

/**
 * Abstract names (leading NUL) are Linux's; the hash keeps a long path within sun_path. The name fills sun_path
 * exactly: Node 20's libuv binds an abstract name padded with NULs to the whole of sun_path, newer ones bind
 * it at its own length, and only a name of full length is the same address for both (a daemon under another
 * Node version must still see the lock).
 */
function lockAddress(realDataDir: string): string {
  if (process.platform !== 'linux') return join(realDataDir, 'daemon.sock');
  return `\0outpost-data-dir:${createHash('sha256').update(realDataDir).digest('hex')}:`.padEnd(SUN_PATH_BYTES, '.');
}

function listen(server: Server, path: string): Promise<NodeJS.ErrnoException | undefined> {
  return new Promise((resolve) => {
    const onError = (err: NodeJS.ErrnoException): void => resolve(err);
    server.once('error', onError);
    server.listen({ path, exclusive: true }, () => {
      server.off('error', onError);
      resolve(undefined);
    });
  });
}

/** The holder's greeting, 'gone' when nobody listens, undefined when it did not say. */
function askHolder(path: string): Promise<HolderGreeting | 'gone' | undefined> {
  return new Promise((resolve) => {
    const socket = connect({ path });
    let text = '';
    const done = (v: HolderGreeting | 'gone' | undefined): void => {
      socket.destroy();
      resolve(v);
    };
    socket.setTimeout(HOLDER_REPLY_MS, () => done(undefined));
    socket.on('data', (b: Buffer) => {
      text += b.toString();
      const nl = text.indexOf('\n');
      if (nl >= 0) done(parseGreeting(text.slice(0, nl)));
    });
    socket.on('end', () => done(parseGreeting(text)));
    socket.on('error', (err: NodeJS.ErrnoException) =>
      done(err.code === 'ECONNREFUSED' || err.code === 'ENOENT' ? 'gone' : undefined),
    );
  });
}

export function parseGreeting(line: string): HolderGreeting | undefined {
  try {
    const { pid, role } = JSON.parse(line) as { pid?: unknown; role?: unknown };
    if (typeof pid !== 'number') return undefined;
    return { pid, role: role === 'admin' ? 'admin' : 'serve' };
  } catch {
    return undefined;
  }
}

/** The lock's socket address for a data dir (its real path), for a client of the holder. */
export function holderAddress(dataDir: string): string {
  return lockAddress(realpathSync(dataDir));
}
