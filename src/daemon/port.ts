/**
 * One daemon per port. uWS listens with SO_REUSEPORT unless told otherwise, and then a second daemon on the
 * same port starts without error while the kernel splits connections between the two; `serve` listens with
 * LIBUS_LISTEN_EXCLUSIVE_PORT instead (HTTP and websocket share that one socket). The port is tried before the
 * store is opened, so a daemon refused for its port has changed nothing.
 */
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { createSocket } from 'node:dgram';
import { createServer, isIPv6 } from 'node:net';
import * as uws from 'uWebSockets.js';
import { OutpostError } from '../errors.js';

/**
 * The package exports the flag as LIBUS_LISTEN_EXCLUSIVE_PORT while its typings declare a ListenOptions enum
 * that does not exist at run time; the value is uSockets' LIBUS_LISTEN_EXCLUSIVE_PORT, 1.
 */
const EXCLUSIVE_PORT = (uws as unknown as { LIBUS_LISTEN_EXCLUSIVE_PORT?: number }).LIBUS_LISTEN_EXCLUSIVE_PORT ?? 1;

/** uWS's listen(host, port, options, cb): the typings lack the form with both a host and options */
type ListenWithOptions = (
  host: string,
  port: number,
  options: number,
  cb: (ls: uws.us_listen_socket | false) => void,
) => unknown;

/** Listens on host:port alone (no other socket may share the port), or fails saying who holds it. */
export function listenExclusive(app: uws.TemplatedApp, host: string, port: number): Promise<uws.us_listen_socket> {
  return new Promise((resolve, reject) => {
    (app.listen as unknown as ListenWithOptions).call(app, host, port, EXCLUSIVE_PORT, (ls) => {
      if (ls) resolve(ls);
      else reject(portInUse(host, port));
    });
  });
}

/** Fails, as listenExclusive would, when host:port is taken; leaves nothing listening. Port 0 is always free. */
export async function checkPortFree(host: string, port: number): Promise<void> {
  if (port === 0) return;
  const probe = uws.App();
  const ls = await listenExclusive(probe, host, port);
  uws.us_listen_socket_close(ls);
  probe.close();
}

/**
 * The same check for a port a node:net server will take (the MQTT listener): a daemon refused for its MQTT port
 * must not have created its store either. Port 0 and -1 (an OS-chosen port) are always free.
 */
export function checkTcpPortFree(host: string, port: number, what: string, setting?: string): Promise<void> {
  if (port <= 0) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', (err: NodeJS.ErrnoException) => {
      reject(
        err.code === 'EADDRINUSE'
          ? portInUse(host, port, what, 'tcp', setting)
          : new OutpostError('CONFIG_INVALID', `cannot listen for ${what} on ${host}:${port}: ${err.message}`),
      );
    });
    probe.listen({ host, port, exclusive: true }, () => probe.close(() => resolve()));
  });
}

/** The same check for the CoAP listener's UDP port (bound without address reuse, as the listener binds it). */
export function checkUdpPortFree(host: string, port: number, what: string, setting?: string): Promise<void> {
  if (port <= 0) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const probe = createSocket({ type: isIPv6(host) ? 'udp6' : 'udp4', reuseAddr: false });
    probe.once('error', (err: NodeJS.ErrnoException) => {
      probe.close();
      reject(
        err.code === 'EADDRINUSE'
          ? portInUse(host, port, what, 'udp', setting)
          : new OutpostError('CONFIG_INVALID', `cannot listen for ${what} on ${host}:${port}: ${err.message}`),
      );
    });
    probe.bind({ address: host, port, exclusive: true }, () => probe.close(() => resolve()));
  });
}

/** `setting`: how to choose another port (`OUTPOST_MQTT_PORT or mqtt.port`), said after the refusal */
function portInUse(host: string, port: number, what = '', proto: 'tcp' | 'udp' = 'tcp', setting = ''): OutpostError {
  const holder = listenerPid(port, proto);
  const who = holder === undefined ? '' : ` by pid ${holder.pid}${holder.command === '' ? '' : ` (${holder.command})`}`;
  const forWhat = what === '' ? '' : ` for ${what}`;
  const how = setting === '' ? '' : `: give ${what} another port with ${setting} (0 turns it off)`;
  return new OutpostError(
    'CONFIG_INVALID',
    `cannot listen${forWhat} on ${host}:${port}: the port is in use${who}; nothing was changed${how}`,
  );
}

/**
 * The process listening on TCP (or bound to UDP) `port`, from /proc (Linux): the socket's inode in
 * /proc/net/tcp{,6} (udp{,6}), then the process holding that inode. Only processes this user may inspect are
 * found (all of them for root).
 */
export function listenerPid(port: number, proto: 'tcp' | 'udp' = 'tcp'): { pid: number; command: string } | undefined {
  const inodes = new Set<string>();
  // st 0A is a listening TCP socket, 07 an unconnected (bound) UDP one
  const state = proto === 'tcp' ? '0A' : '07';
  for (const table of [`/proc/net/${proto}`, `/proc/net/${proto}6`]) {
    let text: string;
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      // local_address is ADDR:PORT in hex; inode is the tenth field
      if (f.length > 9 && f[3] === state && Number.parseInt(f[1]?.split(':')[1] ?? '', 16) === port)
        inodes.add(f[9] ?? '');
    }
  }
  if (inodes.size === 0) return undefined;
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return undefined;
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (m && inodes.has(m[1] ?? '')) return { pid: Number(pid), command: commandLine(pid) };
    }
  }
  return undefined;
}

function commandLine(pid: string): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8')
      .split('\0')
      .filter((a) => a !== '')
      .join(' ')
      .slice(0, 120);
  } catch {
    return '';
  }
}
