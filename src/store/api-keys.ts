/**
 * API keys (docs/api.md "API keys"): ThingsBoard 4.3's long-lived credentials of a user. Only the SHA-256 of a
 * key's value is stored, never the value: a value is 64 random bytes (512 bits), so a plain hash cannot be
 * reversed or guessed, and a slow KDF (as for passwords) would only cost time on every request.
 *
 * Kept in `meta`: ['apiKey', id] → ApiKeyRecord, ['apiKeyHash', sha256 hex] → id. A user's keys are removed with
 * its other data once it is deleted (background/purge.ts); until then they no longer authenticate (auth/).
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { OutpostError } from '../errors.js';
import type { EpochMs } from '../types.js';
import type { StoreEnv } from './env.js';

const BY_ID = 'apiKey';
const BY_HASH = 'apiKeyHash';

/** ThingsBoard's `security.api_key.value_prefix` default */
export const API_KEY_PREFIX = 'tb_';
/** random bytes of a value: base64url without padding, 86 characters after the prefix */
const VALUE_BYTES = 64;

export interface ApiKeyRecord {
  readonly id: string;
  readonly createdTime: EpochMs;
  readonly tenantId: string;
  readonly userId: string;
  /** 0: never expires */
  readonly expirationTime: EpochMs;
  readonly description: string;
  readonly enabled: boolean;
  /** SHA-256 of the value, hex */
  readonly hash: string;
}

export interface NewApiKey {
  readonly tenantId: string;
  readonly userId: string;
  readonly description: string;
  readonly enabled: boolean;
  readonly expirationTime: EpochMs;
}

/** The stored form of a value. */
export function hashApiKey(value: string): string {
  return createHash('sha256').update(value).digest('hex');
}

/** ThingsBoard's `expired`: an expiration time that has passed. */
export function isExpired(k: Pick<ApiKeyRecord, 'expirationTime'>, now: EpochMs): boolean {
  return k.expirationTime !== 0 && now > k.expirationTime;
}

export class ApiKeyStore {
  constructor(private readonly env: StoreEnv) {}

  get(id: string): ApiKeyRecord | undefined {
    return this.env.meta.get([BY_ID, id]) as ApiKeyRecord | undefined;
  }

  /** The key whose value has this hash: one or two reads. */
  byHash(hash: string): ApiKeyRecord | undefined {
    const id = this.env.meta.get([BY_HASH, hash]);
    return typeof id === 'string' ? this.get(id) : undefined;
  }

  /** Every key, or a user's, oldest first. Gateway scale (a few per user): a scan of the keys is fine. */
  list(userId?: string): ApiKeyRecord[] {
    const out: ApiKeyRecord[] = [];
    for (const { key, value } of this.env.meta.getRange({ start: [BY_ID] })) {
      if (!Array.isArray(key) || key[0] !== BY_ID) break;
      const r = value as ApiKeyRecord;
      if (userId === undefined || r.userId === userId) out.push(r);
    }
    return out.sort((a, b) => a.createdTime - b.createdTime || (a.id < b.id ? -1 : 1));
  }

  /** A new key and its value, which is not kept: the caller shows it once. */
  async create(k: NewApiKey): Promise<{ record: ApiKeyRecord; value: string }> {
    const value = API_KEY_PREFIX + randomBytes(VALUE_BYTES).toString('base64url');
    const record: ApiKeyRecord = {
      id: randomUUID(),
      createdTime: Date.now(),
      tenantId: k.tenantId,
      userId: k.userId,
      expirationTime: k.expirationTime,
      description: k.description,
      enabled: k.enabled,
      hash: hashApiKey(value),
    };
    await this.env.root.transaction(() => {
      void this.env.meta.put([BY_ID, record.id], record);
      void this.env.meta.put([BY_HASH, record.hash], record.id);
    });
    await this.env.flushed();
    return { record, value };
  }

  /** Changes what may change of a key (its description, whether it is enabled); 404 when there is none. */
  async update(id: string, patch: { description?: string; enabled?: boolean }): Promise<ApiKeyRecord> {
    const next = await this.env.root.transaction(() => {
      const r = this.get(id);
      if (r === undefined) return undefined;
      const n: ApiKeyRecord = { ...r, ...patch };
      void this.env.meta.put([BY_ID, id], n);
      return n;
    });
    if (next === undefined) throw notFound(id);
    await this.env.flushed();
    return next;
  }

  /** Removes a key; false when there was none. */
  async delete(id: string): Promise<boolean> {
    const done = await this.env.root.transaction(() => removeTx(this.env, id));
    await this.env.flushed();
    return done;
  }
}

/** Inside a write transaction: removes a key and its hash entry. */
function removeTx(env: StoreEnv, id: string): boolean {
  const r = env.meta.get([BY_ID, id]) as ApiKeyRecord | undefined;
  if (r === undefined) return false;
  void env.meta.remove([BY_ID, id]);
  void env.meta.remove([BY_HASH, r.hash]);
  return true;
}

/** Inside a write transaction: removes every key of a deleted user. */
export function removeUserApiKeysTx(env: StoreEnv, userId: string): void {
  const ids: string[] = [];
  for (const { key, value } of env.meta.getRange({ start: [BY_ID] })) {
    if (!Array.isArray(key) || key[0] !== BY_ID) break;
    if ((value as ApiKeyRecord).userId === userId) ids.push((value as ApiKeyRecord).id);
  }
  for (const id of ids) removeTx(env, id);
}

export function notFound(id: string): OutpostError {
  return new OutpostError('ENTITY_NOT_FOUND', `Api key with id [${id}] is not found`);
}
