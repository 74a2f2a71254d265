/**
 * ThingsBoard's API key JSON (docs/api.md "API keys"), a pure function of the record: REST answers it, and so
 * does `outpost apikey` from the data dir (without loading the HTTP server's code).
 */
import { type ApiKeyRecord, isExpired } from '../../store/api-keys.js';

/** TB's ApiKeyInfo JSON; ApiKey adds `value` (only the create's answer carries one). */
export function apiKeyJson(k: ApiKeyRecord, now: number, value?: string | null): Record<string, unknown> {
  return {
    id: { entityType: 'API_KEY', id: k.id },
    createdTime: k.createdTime,
    tenantId: { entityType: 'TENANT', id: k.tenantId },
    userId: { entityType: 'USER', id: k.userId },
    expirationTime: k.expirationTime,
    description: k.description,
    enabled: k.enabled,
    expired: isExpired(k, now),
    ...(value === undefined ? {} : { value }),
  };
}
