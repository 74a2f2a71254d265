/** Telemetry and attributes as the device and REST payloads carry them (ingest/payload.ts parses into these). */
import type { EpochMs } from '../types.js';
import type { KvValue } from './kv.js';

export type KvEntry = readonly [key: string, value: KvValue];

/** Values written at one timestamp. */
export interface TsRecord {
  readonly ts: EpochMs;
  readonly values: KvEntry[];
}
