/**
 * MQTT provisioning (TB): a client connecting with username `provision` may only publish `/provision/request`
 * and gets the answer of HTTP `POST /api/v1/provision` on `/provision/response`.
 */
import type { DeviceActions } from '../../device/actions.js';
import { OK, type PublishOutcome, UNKNOWN_TOPIC } from './device-topics.js';

export const PROVISION_USERNAME = 'provision';

export async function handleProvisionPublish(
  devices: DeviceActions,
  topic: string,
  payload: Buffer,
  address: string,
  publish: (topic: string, body: string) => void,
): Promise<PublishOutcome> {
  if (topic !== '/provision/request') return UNKNOWN_TOPIC;
  const answer = await devices.provision(payload, address);
  publish('/provision/response', JSON.stringify(answer));
  return OK;
}
