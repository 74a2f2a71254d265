/**
 * MQTT provisioning (TB): a client connecting with username `provision` may only publish `/provision/request`
 * and gets the answer of HTTP `POST /api/v1/provision` on `/provision/response`.
 */
import type { Services } from '../../context.js';
import { provisionDevice } from '../../device/provision.js';
import { parseBody } from '../../ingest/payload.js';
import { OK, type PublishOutcome, UNKNOWN_TOPIC } from './device-topics.js';

export const PROVISION_USERNAME = 'provision';

export async function handleProvisionPublish(
  s: Pick<Services, 'config' | 'entities' | 'env' | 'attributes' | 'now'>,
  topic: string,
  payload: Buffer,
  publish: (topic: string, body: string) => void,
): Promise<PublishOutcome> {
  if (topic !== '/provision/request') return UNKNOWN_TOPIC;
  const answer = await provisionDevice(s, parseBody(payload));
  publish('/provision/response', JSON.stringify(answer));
  return OK;
}
