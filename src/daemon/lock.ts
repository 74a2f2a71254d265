/**
 * One daemon per data dir: `serve` holds this lock from before it opens the store until it exits, so a second
 * daemon never replays or appends to the write-ahead log another one owns (two writers over one store lose
 * acknowledged points at the next power cut).
 *
 * The lock is a Linux abstract unix socket named after the data dir's real path. Binding a name that is bound
 * fails with EADDRINUSE, and the kernel frees the name when the holder exits in any way (kill -9, power cut),
 * so a crash never leaves a stale lock behind; the holder answers whoever connects with its pid, for the
 * refusal message. Node has no flock(2), and a pid file alone goes stale. The admin and technician commands do
 * not take it: they never write the log.
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

export interface DataDirLock {
  /** the data dir's real path, the lock's key */
  readonly dataDir: string;
  release(): Promise<void>;
}

/** how long a refused daemon waits for the holder to say its pid (it answers at once unless it is stuck) */
const HOLDER_REPLY_MS = 1000;

/** The data dir's lock, or a CONFIG_INVALID error naming the holder. Creates the dir (0700) if it does not exist. */
export async function lockDataDir(dataDir: string): Promise<DataDirLock> {
  try {
    statSync(dataDir);
  } catch {
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    // mkdir's mode passes through the umask, which may only take bits away; this makes it exact
    chmodSync(dataDir, 0o700);
  }
  const real = realpathSync(dataDir);
  const address = lockAddress(real);
  const server = createServer((socket) => {
    socket.on('error', () => {
      /* the asker went away: nothing to tell */
    });
    socket.end(`${JSON.stringify({ pid: process.pid })}\n`);
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
    const who = typeof holder === 'number' ? ` (pid ${holder})` : '';
    throw new OutpostError(
      'CONFIG_INVALID',
      `data dir ${real} is in use by another outpost serve${who}; nothing was changed`,
    );
  }
  // the lock must not keep the process alive; it lasts as long as the process
  server.unref();
  return {
    dataDir: real,
    release: () => new Promise((resolve) => server.close(() => resolve())),
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

/** The holder's pid, 'gone' when nobody listens, undefined when it did not say. */
function askHolder(path: string): Promise<number | 'gone' | undefined> {
  return new Promise((resolve) => {
    const socket = connect({ path });
    let text = '';
    const done = (v: number | 'gone' | undefined): void => {
      socket.destroy();
      resolve(v);
    };
    socket.setTimeout(HOLDER_REPLY_MS, () => done(undefined));
    socket.on('data', (b: Buffer) => {
      text += b.toString();
    });
    socket.on('end', () => {
      try {
        const { pid } = JSON.parse(text) as { pid?: unknown };
        done(typeof pid === 'number' ? pid : undefined);
      } catch {
        done(undefined);
      }
    });
    socket.on('error', (err: NodeJS.ErrnoException) =>
      done(err.code === 'ECONNREFUSED' || err.code === 'ENOENT' ? 'gone' : undefined),
    );
  });
}
