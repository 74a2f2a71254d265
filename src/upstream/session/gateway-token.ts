/**
 * The gateway's own credentials upstream, for the MQTT gateway session: `sync.gatewayToken`, else a token
 * provisioned once over TB's MQTT provisioning (`/provision/request` with `"gateway": true`, TB 3.8+) and stored
 * durably before it is used (a crash after the upstream created the device but before the store kept its token
 * would leave a name upstream that can no longer be provisioned).
 */
import { hostname } from 'node:os';
import type { Config } from '../../config/index.js';
import type { Logger } from '../../log.js';
import type { Outbox } from '../../store/outbox.js';
import { loadMqtt } from './connection.js';

/** the outbox's token slot of the gateway itself (device ids are UUIDs: no clash) */
const GATEWAY_SLOT = 'gateway';

export interface GatewayTokenOptions {
  readonly outbox: Pick<Outbox, 'token' | 'setToken'>;
  readonly config: Readonly<
    Pick<
      Config['sync'],
      'url' | 'gatewayToken' | 'gatewayName' | 'provisionKey' | 'provisionSecret' | 'requestTimeoutMs'
    >
  >;
  readonly log: Logger;
  /** the provisioning said no: shown as the sync's last error */
  readonly refused: (why: string) => void;
}

export function gatewayName(config: Readonly<Pick<Config['sync'], 'gatewayName'>>): string {
  return config.gatewayName !== '' ? config.gatewayName : hostname();
}

/** The token to connect with; undefined when there is none yet (no key, or the upstream said no). */
export async function gatewayToken(o: GatewayTokenOptions): Promise<string | undefined> {
  if (o.config.gatewayToken !== '') return o.config.gatewayToken;
  const stored = o.outbox.token(GATEWAY_SLOT);
  if (stored !== undefined) return stored.token;
  if (o.config.provisionKey === '') return undefined;
  const name = gatewayName(o.config);
  const { connectAsync } = await loadMqtt();
  const client = await connectAsync(o.config.url, {
    username: 'provision',
    clean: true,
    reconnectPeriod: 0,
    connectTimeout: o.config.requestTimeoutMs,
    protocolVersion: 4,
    // as the session's (session.ts): no cache of 65,536 Buffers filled in one task on the first packet
    writeCache: false,
  });
  try {
    const answer = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no provisioning answer')), o.config.requestTimeoutMs);
      client.on('message', (topic, payload) => {
        if (topic !== '/provision/response') return;
        clearTimeout(timer);
        resolve(payload.toString());
      });
      client.on('close', () => {
        clearTimeout(timer);
        reject(new Error('the provisioning session closed'));
      });
      client.subscribe('/provision/response', { qos: 1 }, () => {
        client.publish(
          '/provision/request',
          JSON.stringify({
            deviceName: name,
            provisionDeviceKey: o.config.provisionKey,
            provisionDeviceSecret: o.config.provisionSecret,
            gateway: true,
          }),
          { qos: 1 },
        );
      });
    });
    let a: { status?: unknown; credentialsValue?: unknown; errorMsg?: unknown };
    try {
      a = JSON.parse(answer) as typeof a;
    } catch {
      a = {};
    }
    if (a.status !== 'SUCCESS' || typeof a.credentialsValue !== 'string' || a.credentialsValue === '') {
      o.refused(
        `gateway provisioning as "${name}" refused: ${String(a.status ?? 'no status')}${typeof a.errorMsg === 'string' ? ` (${a.errorMsg})` : ''}`,
      );
      return undefined;
    }
    await o.outbox.setToken(GATEWAY_SLOT, { token: a.credentialsValue, provisioned: true });
    o.log.info(`sync: provisioned this gateway upstream as "${name}"`);
    return a.credentialsValue;
  } finally {
    client.end(true);
  }
}
