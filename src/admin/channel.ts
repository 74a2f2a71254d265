/**
 * How an admin command's write reaches the one process that writes the store (src/daemon/lock.ts). A daemon
 * holding the data dir gets it over the lock's socket: after the greeting, one request line
 * `{"key","op"}` and one reply line `{"ok":true,"result"}` or `{"ok":false,"code","message"}`. Without a daemon,
 * the command takes the lock itself and writes.
 *
 * The socket is an abstract one, open to every local user, so a request carries the key the daemon wrote at
 * start to `admin.key` in the data dir (0600): only who may read the data dir may write through the daemon, as
 * only they may open the store.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { type DataDirLock, holderAddress, parseGreeting, tryLockDataDir } from '../daemon/lock.js';
import { ERRORS, type ErrorCode, OutpostError } from '../errors.js';
import { type AdminOp, type AdminResult, parseAdminOp } from './ops.js';

const KEY_FILE = 'admin.key';
/** how long a command waits for the data dir while another admin command holds it, or a daemon starts */
const WAIT_FOR_WRITER_MS = 30_000;
const RETRY_MS = 100;
/** a daemon answers within a commit; one with a stuck disk may take long, and the command says so */
const REPLY_TIMEOUT_MS = 60_000;

/**
 * Runs `op` where the store is written: through the daemon if one holds the data dir, else here under the lock
 * (`local` opens the store, runs the op and closes it).
 */
export async function adminWrite(
  dataDir: string,
  op: AdminOp,
  local: () => Promise<AdminResult>,
): Promise<AdminResult> {
  const deadline = performance.now() + WAIT_FOR_WRITER_MS;
  for (;;) {
    const r = await tryLockDataDir(dataDir, 'admin');
    if ('lock' in r) {
      try {
        return await local();
      } finally {
        await r.lock.release();
      }
    }
    if (r.holder?.role === 'serve') {
      const reply = await requestDaemon(dataDir, op);
      if (reply !== 'busy') return reply;
    }
    if (performance.now() > deadline) {
      const who = r.holder === undefined ? 'a process that does not answer' : `pid ${r.holder.pid}`;
      throw new OutpostError('STORE_FAILED', `data dir ${r.dataDir} stayed busy (${who}); nothing was changed`);
    }
    await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
  }
}

/**
 * A read only a running daemon can answer (`status`, `sync.status`): its answer, or undefined when no daemon
 * holds the data dir (or one is starting or stopping).
 */
export async function askDaemon(dataDir: string, op: AdminOp): Promise<AdminResult | undefined> {
  try {
    holderAddress(dataDir);
  } catch {
    return undefined;
  }
  const r = await requestDaemon(dataDir, op);
  return r === 'busy' ? undefined : r;
}

/**
 * Sends `op` to the daemon; 'busy' when it is not taking requests (starting, before its key is written, or
 * stopping). `key`: the one in the data dir unless given.
 */
export function requestDaemon(dataDir: string, op: AdminOp, key?: string): Promise<AdminResult | 'busy'> {
  return new Promise((resolve, reject) => {
    const socket = connect({ path: holderAddress(dataDir) });
    let text = '';
    let greeted = false;
    let settled = false;
    const settle = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      socket.destroy();
      fn();
    };
    socket.setTimeout(REPLY_TIMEOUT_MS, () =>
      settle(() =>
        reject(
          new OutpostError(
            'STORE_FAILED',
            `the daemon did not answer within ${REPLY_TIMEOUT_MS / 1000} s: the change may or may not have been made`,
          ),
        ),
      ),
    );
    socket.on('data', (b: Buffer) => {
      text += b.toString();
      for (let nl = text.indexOf('\n'); nl >= 0; nl = text.indexOf('\n')) {
        const line = text.slice(0, nl);
        text = text.slice(nl + 1);
        if (!greeted) {
          greeted = true;
          if (parseGreeting(line)?.role !== 'serve') return settle(() => resolve('busy'));
          let k: string | 'starting';
          try {
            k = key ?? readKey(dataDir);
          } catch (err) {
            return settle(() => reject(err));
          }
          if (k === 'starting') return settle(() => resolve('busy'));
          socket.write(`${JSON.stringify({ key: k, op })}\n`);
          continue;
        }
        return settle(() => {
          try {
            resolve(parseReply(line));
          } catch (err) {
            reject(err);
          }
        });
      }
    });
    const lost = (): void =>
      settle(() =>
        greeted
          ? reject(
              new OutpostError(
                'STORE_FAILED',
                'the daemon went away before it answered: the change may or may not have been made',
              ),
            )
          : resolve('busy'),
      );
    socket.on('end', lost);
    socket.on('error', lost);
  });
}

function parseReply(line: string): AdminResult | 'busy' {
  const r = JSON.parse(line) as { ok?: unknown; busy?: unknown; result?: unknown; code?: unknown; message?: unknown };
  if (r.ok === true && typeof r.result === 'object' && r.result !== null) return r.result as AdminResult;
  if (r.busy === true) return 'busy';
  const code = typeof r.code === 'string' && r.code in ERRORS ? (r.code as ErrorCode) : 'STORE_FAILED';
  throw new OutpostError(code, typeof r.message === 'string' ? r.message : undefined);
}

/** The daemon's key; 'starting' when there is none yet (a daemon writes it once its store is open). */
function readKey(dataDir: string): string | 'starting' {
  try {
    return readFileSync(join(dataDir, KEY_FILE), 'utf8').trim();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'starting';
    throw new OutpostError(
      'STORE_FAILED',
      `cannot read ${join(dataDir, KEY_FILE)}: run the command as the daemon's user (${(err as Error).message})`,
      { cause: err },
    );
  }
}

/**
 * The daemon's side: a new key in the data dir (replaced whole, never half written), and the handler that runs
 * each request whose key matches with `run`. The returned stop removes both.
 */
export function serveAdminRequests(lock: DataDirLock, run: (op: AdminOp) => Promise<AdminResult>): () => void {
  const key = randomBytes(32).toString('hex');
  const file = join(lock.dataDir, KEY_FILE);
  writeFileSync(`${file}.tmp`, `${key}\n`, { mode: 0o600 });
  renameSync(`${file}.tmp`, file);
  const expected = Buffer.from(key);
  let open = true;
  lock.serveRequests((line) => {
    if (!open) return undefined;
    return answer(line, expected, run);
  });
  return () => {
    open = false;
    rmSync(file, { force: true });
  };
}

async function answer(line: string, expected: Buffer, run: (op: AdminOp) => Promise<AdminResult>): Promise<string> {
  const refuse = (e: OutpostError): string => JSON.stringify({ ok: false, code: e.code, message: e.message });
  let op: AdminOp;
  try {
    const req = JSON.parse(line) as { key?: unknown; op?: unknown };
    const given = Buffer.from(typeof req.key === 'string' ? req.key : '');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      return refuse(new OutpostError('AUTH_FAILED', 'admin request: wrong key (read from admin.key in the data dir)'));
    }
    op = parseAdminOp(req.op);
  } catch (err) {
    return refuse(err instanceof OutpostError ? err : new OutpostError('BAD_PAYLOAD', (err as Error).message));
  }
  try {
    return JSON.stringify({ ok: true, result: await run(op) });
  } catch (err) {
    return refuse(
      err instanceof OutpostError ? err : new OutpostError('STORE_FAILED', (err as Error).message, { cause: err }),
    );
  }
}
