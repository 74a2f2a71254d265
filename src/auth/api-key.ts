/**
 * `X-Authorization: ApiKey <value>` (docs/api.md "API keys"): the key's record by the SHA-256 of its value,
 * from a bounded cache of lookups. Whether it is enabled and unexpired is checked on every request against the
 * cached record; a change to a key drops its entry (`forget`), so disabling or deleting it takes effect at once.
 */
import { OutpostError } from '../errors.js';
import { type ApiKeyRecord, type ApiKeyStore, hashApiKey, isExpired } from '../store/api-keys.js';
import type { EpochMs } from '../types.js';

/** keys whose lookups are kept; the oldest entry goes first beyond this */
const CACHE_SIZE = 1024;
/** longer values are no key (a value is 89 characters): not hashed, not looked up */
const MAX_VALUE_CHARS = 256;

export class ApiKeyAuth {
  /** sha256 hex → the key's record as last read */
  private readonly cache = new Map<string, ApiKeyRecord>();

  constructor(readonly store: ApiKeyStore) {}

  /**
   * The enabled, unexpired key of `value`, as ThingsBoard's ApiKeyAuthenticationProvider answers: unknown →
   * 401 "Invalid username or password", disabled → 401 "User account is not active", expired → 401 "API key is
   * expired" (all errorCode 10).
   */
  authenticate(value: string, now: EpochMs): ApiKeyRecord {
    if (value.length === 0 || value.length > MAX_VALUE_CHARS) throw new OutpostError('BAD_CREDENTIALS');
    const hash = hashApiKey(value);
    let rec = this.cache.get(hash);
    if (rec === undefined) {
      rec = this.store.byHash(hash);
      if (rec === undefined) throw new OutpostError('BAD_CREDENTIALS');
      if (this.cache.size >= CACHE_SIZE) {
        const oldest = this.cache.keys().next().value;
        if (oldest !== undefined) this.cache.delete(oldest);
      }
      this.cache.set(hash, rec);
    }
    if (!rec.enabled) throw new OutpostError('AUTH_FAILED', 'User account is not active');
    if (isExpired(rec, now)) throw new OutpostError('AUTH_FAILED', 'API key is expired');
    return rec;
  }

  /** Drops the cached lookup of key `id` (changed or deleted): its next use reads the store. */
  forget(id: string): void {
    for (const [hash, rec] of this.cache) if (rec.id === id) this.cache.delete(hash);
  }
}
