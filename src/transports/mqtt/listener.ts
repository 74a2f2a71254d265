/**
 * The MQTT listeners (docs/mqtt.md): plain on `mqtt.port`, TLS with the daemon's certificate on
 * `mqtt.tlsPort`, in the daemon's process and event loop, sharing its store, bus, RPC broker and auth.
 * Ports are exclusive (a taken port stops the start, as HTTP's). Connections beyond `mqtt.maxConnections`, or
 * beyond `mqtt.maxConnectionsPerAddress` from one address, are closed on accept (a connection counts from its
 * accept, before CONNECT and before a TLS handshake, so one address holding silent sockets cannot keep other
 * devices out); one sweep a second closes connections silent for 1.5 × their keep-alive and those
 * that sent no CONNECT in time. Refusals are logged once per burst, not per connection.
 */
import { readFileSync } from 'node:fs';
import { type Server, type Socket, createServer } from 'node:net';
import { createServer as createTlsServer } from 'node:tls';
import { LoginThrottle } from '../../auth/throttle.js';
import type { TransportServices } from '../services.js';
import { OutpostError } from '../../errors.js';
import type { MqttCounters } from '../../status/metrics.js';
import type { MqttConnection, ParserPool } from './connection.js';
import { peerAddress } from './peer.js';
import { SessionRegistry } from './registry.js';

export interface MqttListener {
  /** the bound ports; 0 = that listener is off */
  readonly port: number;
  readonly tlsPort: number;
  close(): Promise<void>;
}

/** ms between two log lines about refused connections */
const REFUSAL_LOG_MS = 60_000;
const SWEEP_MS = 1_000;

/** One line for the first refusal, then at most one a minute with the count since. */
export function refusalLog(log: (m: string) => void, now: () => number = Date.now): (why: string) => void {
  let lastAt = -Infinity;
  let missed = 0;
  return (why) => {
    const t = now();
    if (t - lastAt < REFUSAL_LOG_MS) {
      missed++;
      return;
    }
    log(`mqtt: refused a connection (${why})${missed > 0 ? `; ${missed} more refused since the last report` : ''}`);
    lastAt = t;
    missed = 0;
  };
}

function listen(server: Server, host: string, port: number, what: string, log: (m: string) => void): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error): void =>
      reject(new OutpostError('CONFIG_INVALID', `cannot listen for ${what} on ${host}:${port}: ${err.message}`));
    server.once('error', onError);
    // exclusive: another process (or another Outpost) on the same port is an error, never a shared port
    server.listen({ host, port: port === -1 ? 0 : port, exclusive: true }, () => {
      server.off('error', onError);
      // after the start (an accept failing for want of file descriptors, say): logged, never fatal
      server.on('error', (err) => log(`mqtt: ${what} listener: ${err.message}`));
      const addr = server.address();
      resolve(typeof addr === 'object' && addr !== null ? addr.port : port);
    });
  });
}

export async function startMqtt(s: TransportServices, counters: MqttCounters): Promise<MqttListener> {
  const cfg = s.config.mqtt;
  const host = cfg.host === '' ? s.config.host : cfg.host;
  const registry = new SessionRegistry(s.devices);
  /** open connections and the address each counts against (undefined: counted by its TLS socket's TCP socket) */
  const connections = new Map<MqttConnection, string | undefined>();
  /** open connections per remote address (only addresses holding some) */
  const perAddress = new Map<string, number>();
  const refused = refusalLog((m) => s.log.warn(m));
  /** Counts `socket` against its address: the address, or undefined (the socket destroyed) at the cap. */
  const admitAddress = (socket: Socket): string | undefined => {
    const address = peerAddress(socket);
    const n = perAddress.get(address) ?? 0;
    if (cfg.maxConnectionsPerAddress > 0 && n >= cfg.maxConnectionsPerAddress) {
      counters.closed.addressLimit++;
      refused(`mqtt.maxConnectionsPerAddress ${cfg.maxConnectionsPerAddress} reached by ${address}`);
      socket.destroy();
      return undefined;
    }
    perAddress.set(address, n + 1);
    return address;
  };
  const releaseAddress = (address: string): void => {
    const n = (perAddress.get(address) ?? 1) - 1;
    if (n <= 0) perAddress.delete(address);
    else perAddress.set(address, n);
  };
  const closed = (conn: MqttConnection): void => {
    if (!connections.has(conn)) return;
    const address = connections.get(conn);
    connections.delete(conn);
    if (address !== undefined) releaseAddress(address);
    counters.connections = connections.size;
  };
  // MQTT's own counts: a device's user name is not a user's email, and guesses here do not lock REST logins out
  const throttle = new LoginThrottle();
  const deps = { s, log: s.log, registry, counters, maxInflight: cfg.maxInflight, refused, closed, throttle };
  /** the codec and session (wire.ts), from the first connection on */
  let wire: { readonly mod: typeof import('./wire.js'); readonly parsers: ParserPool } | undefined;
  let wireLoading: Promise<unknown> | undefined;
  /** connections accepted while the first one loads the wire: counted against mqtt.maxConnections */
  let pending = 0;
  let stopped = false;
  const limits = { maxPayloadBytes: cfg.maxPayloadBytes, maxOutboundBytes: cfg.maxOutboundBytes };
  // TB's client-side RPC `getSessionLimits`: TB's Python SDK and IoT Gateway ask it after connecting and size
  // their payloads and in-flight window from it (empty rate limits: none). Answered here, never upstream.
  const sessionLimits = JSON.stringify({
    maxPayloadSize: cfg.maxPayloadBytes,
    maxInflightMessages: cfg.maxInflight,
    rateLimits: { messages: '', telemetryMessages: '', telemetryDataPoints: '' },
    gatewayRateLimits: { messages: '', telemetryMessages: '', telemetryDataPoints: '' },
  });
  s.devices.registerClientRpc('getSessionLimits', () => sessionLimits);

  /** `tls`: its TCP socket already counts against the address (from before the handshake) */
  const accept = (socket: Socket, tls: boolean): void => {
    if (connections.size + pending >= cfg.maxConnections) {
      counters.closed.limit++;
      refused(`mqtt.maxConnections ${cfg.maxConnections} reached`);
      socket.destroy();
      return;
    }
    let address: string | undefined;
    if (!tls) {
      address = admitAddress(socket);
      if (address === undefined) return;
    }
    if (wire !== undefined) {
      open(wire, socket, address);
      return;
    }
    // the first connection loads the wire; its bytes wait in the socket, not read until the connection is made
    pending++;
    const ignore = (): void => undefined;
    socket.on('error', ignore);
    wireLoading ??= import('./wire.js').then((mod) => {
      wire = { mod, parsers: new mod.ParserPool() };
    });
    wireLoading.then(
      () => {
        pending--;
        socket.off('error', ignore);
        if (wire !== undefined && !stopped && !socket.destroyed) open(wire, socket, address);
        else {
          socket.destroy();
          if (address !== undefined) releaseAddress(address);
        }
      },
      (err: unknown) => {
        pending--;
        s.log.error(`mqtt: the connection's code did not load: ${(err as Error).message}`);
        socket.destroy();
        if (address !== undefined) releaseAddress(address);
      },
    );
  };
  const open = (w: NonNullable<typeof wire>, socket: Socket, address: string | undefined): void => {
    const conn = new w.mod.MqttConnection(socket, limits, counters, w.parsers, Date.now());
    conn.attach(new w.mod.MqttSession(conn, deps));
    connections.set(conn, address);
    counters.accepted++;
    counters.connections = connections.size;
  };

  const servers: Server[] = [];
  let port = 0;
  let tlsPort = 0;
  try {
    if (cfg.port !== 0) {
      const server = createServer({ noDelay: true }, (socket) => accept(socket, false));
      servers.push(server);
      port = await listen(server, host, cfg.port, 'MQTT', (m) => s.log.error(m));
    }
    if (cfg.tlsPort !== 0 && s.config.tls.cert !== '') {
      // A client certificate is asked for, never required, and its issuer is not judged here: a device's X.509
      // credentials name the certificate itself (src/device/login.ts), so self-signed ones work and no CA is configured.
      const server = createTlsServer(
        {
          cert: readFileSync(s.config.tls.cert),
          key: readFileSync(s.config.tls.key),
          requestCert: true,
          rejectUnauthorized: false,
          // a handshake is bounded as a CONNECT is (Node's default: 120 s)
          handshakeTimeout: cfg.connectTimeoutMs,
        },
        (socket) => accept(socket, true),
      );
      // counted from the TCP accept, before the handshake: a socket that never completes one holds a place too
      server.on('connection', (socket: Socket) => {
        const address = admitAddress(socket);
        if (address !== undefined) socket.once('close', () => releaseAddress(address));
      });
      // a failed TLS handshake is the client's problem, not the daemon's
      server.on('tlsClientError', () => undefined);
      servers.push(server);
      tlsPort = await listen(server, host, cfg.tlsPort, 'MQTT over TLS', (m) => s.log.error(m));
    }
  } catch (err) {
    for (const srv of servers) srv.close();
    registry.close();
    throw err;
  }
  counters.plainPort = port;
  counters.tlsPort = tlsPort;

  const sweep = setInterval(() => {
    const now = Date.now();
    for (const c of connections.keys()) {
      if (!c.connected) {
        if (now - c.openedAt > cfg.connectTimeoutMs) c.close('connectTimeout');
      } else if (c.keepAliveMs > 0 && now - c.lastSeen > c.keepAliveMs) {
        c.close('keepalive');
      }
    }
  }, SWEEP_MS);
  sweep.unref();

  return {
    port,
    tlsPort,
    async close() {
      stopped = true;
      clearInterval(sweep);
      const closed = servers.map((srv) => new Promise<void>((r) => srv.close(() => r())));
      for (const c of connections.keys()) c.close();
      registry.close();
      await Promise.all(closed);
    },
  };
}
