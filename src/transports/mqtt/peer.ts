import type { Socket } from 'node:net';

/**
 * The client's address, as limits and logs key it: an IPv4 client of a dual-stack listener (`::ffff:10.0.0.5`) is
 * the same address as over IPv4. '' when the socket is already gone.
 */
export function peerAddress(socket: Socket): string {
  const a = socket.remoteAddress ?? '';
  return a.startsWith('::ffff:') && a.includes('.') ? a.slice(7) : a;
}
