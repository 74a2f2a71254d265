/**
 * A device's or an asset's `additionalInfo` (docs/api.md "Entities"): the JSON object a client gives is kept as
 * given, as ThingsBoard keeps it (its UI stores `description` and `overwriteActivityTime` there, its REST clients
 * post an entity back whole), and a device's is answered with the two keys Outpost acts on merged in: `gateway`,
 * read from the object, and `lastConnectedGateway`, which only Outpost sets.
 */
import { OutpostError } from '../../errors.js';
import type { AdditionalInfoPatch, AssetRecord, DeviceRecord } from '../../store/entities.js';

/** Serialized size cap: generous for descriptions and UI settings, small beside a record on an SD card. */
export const ADDITIONAL_INFO_MAX_BYTES = 16 * 1024;

/** The key Outpost sets when a gateway creates or connects the device; a client's value would not move it. */
const LAST_CONNECTED_GATEWAY = 'lastConnectedGateway';

/**
 * A body's `additionalInfo`: undefined when absent, null clears it, an object is kept serialized (a device's
 * without `lastConnectedGateway`). Anything but an object or null, a `gateway` that is not a boolean, or more than
 * ADDITIONAL_INFO_MAX_BYTES of JSON → 400.
 */
export function readAdditionalInfo(
  body: Record<string, unknown>,
  entityType: 'DEVICE' | 'ASSET',
): AdditionalInfoPatch | undefined {
  const info = body['additionalInfo'];
  if (info === undefined) return undefined;
  if (info === null) return { json: null, gateway: false };
  if (typeof info !== 'object' || Array.isArray(info))
    throw new OutpostError('BAD_PARAM', '"additionalInfo" must be a JSON object or null');
  if (entityType === 'ASSET') return { json: serialized(info), gateway: false };
  const { [LAST_CONNECTED_GATEWAY]: _setByOutpost, ...kept } = info as Record<string, unknown>;
  const g = kept['gateway'];
  if (g !== undefined && typeof g !== 'boolean')
    throw new OutpostError('BAD_PARAM', '"additionalInfo.gateway" must be true or false');
  return { json: serialized(kept), gateway: g === true };
}

/** The object's JSON, within ADDITIONAL_INFO_MAX_BYTES. */
function serialized(info: object): string {
  let json: string;
  try {
    json = JSON.stringify(info);
  } catch {
    // only nesting deeper than the stack can make JSON.parse's output fail to serialize
    throw new OutpostError('BAD_PARAM', '"additionalInfo" is nested too deeply');
  }
  const bytes = Buffer.byteLength(json, 'utf8');
  if (bytes > ADDITIONAL_INFO_MAX_BYTES)
    throw new OutpostError(
      'BAD_PARAM',
      `"additionalInfo" is too large: ${bytes} bytes of JSON, at most ${ADDITIONAL_INFO_MAX_BYTES}`,
    );
  return json;
}

/** TB's `additionalInfo` of a device; a record without a given object (or from before they were kept) shows Outpost's keys alone. */
export function additionalInfoJson(d: DeviceRecord): Record<string, unknown> | null {
  const given =
    d.additionalInfoJson === undefined ? undefined : (JSON.parse(d.additionalInfoJson) as Record<string, unknown>);
  if (given === undefined && d.gateway !== true && d.gatewayId === undefined) return null;
  const out = given ?? {};
  if (d.gateway === true || Object.hasOwn(out, 'gateway')) out['gateway'] = d.gateway === true;
  if (d.gatewayId !== undefined) out[LAST_CONNECTED_GATEWAY] = d.gatewayId;
  return out;
}

/** TB's `additionalInfo` of an asset: the object given, or null. */
export function assetAdditionalInfoJson(a: AssetRecord): Record<string, unknown> | null {
  return a.additionalInfoJson === undefined ? null : (JSON.parse(a.additionalInfoJson) as Record<string, unknown>);
}
