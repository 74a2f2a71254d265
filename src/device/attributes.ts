/**
 * The device API's attribute read (docs/api.md `GET /attributes`, MQTT `v1/devices/me/attributes/request/{id}`):
 * one body for both transports.
 */
import { kvToJson } from '../model/kv.js';
import type { AttributeKv, AttributeStore } from '../store/attributes.js';

/** `a,b` split on ',' without trimming (TB); absent or empty → not given. */
export function keyList(raw: string | null | undefined): string[] | undefined {
  if (raw === null || raw === undefined || raw === '') return undefined;
  return raw.split(',');
}

function section(name: string, attrs: readonly AttributeKv[]): string {
  let out = `${JSON.stringify(name)}:{`;
  attrs.forEach((a, i) => {
    out += `${i === 0 ? '' : ','}${JSON.stringify(a.key)}:${kvToJson(a.value)}`;
  });
  return `${out}}`;
}

/**
 * `{"client":{..},"shared":{..}}` with empty sections omitted: neither key list → all client and all shared
 * attributes; one → only that section.
 */
export function deviceAttributesJson(
  attributes: AttributeStore,
  deviceId: string,
  clientKeys: string[] | undefined,
  sharedKeys: string[] | undefined,
): string {
  const neither = clientKeys === undefined && sharedKeys === undefined;
  const client = neither || clientKeys !== undefined ? attributes.get(deviceId, 'CLIENT_SCOPE', clientKeys) : [];
  const shared = neither || sharedKeys !== undefined ? attributes.get(deviceId, 'SHARED_SCOPE', sharedKeys) : [];
  const parts: string[] = [];
  if (client.length > 0) parts.push(section('client', client));
  if (shared.length > 0) parts.push(section('shared', shared));
  return `{${parts.join(',')}}`;
}
