/**
 * What the daemon is made of, wired once in server.ts and handed to each API module. Handlers take what they
 * need from here; nothing reaches into another module's internals.
 */
import type { AuthService } from './auth/index.js';
import type { ProvisionGuard } from './auth/provision-limits.js';
import type { EventBus } from './bus/index.js';
import type { Config } from './config/index.js';
import type { Logger } from './log.js';
import type { IngestAdmission } from './ingest/admission.js';
import type { TelemetryIngest } from './ingest/service.js';
import type { Dictionary } from './store/encoding/dict.js';
import type { EntityStore } from './store/entities.js';
import type { RelationStore } from './store/relations.js';
import type { AlarmStore } from './store/alarms.js';
import type { StoreEnv } from './store/env.js';
import type { TimeseriesStore } from './store/series/interface.js';
import type { DownsampleEngine } from './store/background/downsample.js';
import type { AttributeStore } from './store/attributes.js';
import type { RpcBroker } from './rpc/broker.js';
import type { DepthStore } from './store/depth.js';
import type { SyncStatusSource } from './upstream/uplink/status.js';
import type { FailureLog } from './status/failures.js';
import type { Metrics } from './status/metrics.js';
import type { WriteBudget } from './store/write-budget.js';
import type { DeviceStateService } from './device/state.js';
import type { AlarmRuleService } from './alarms/service.js';
import type { DeviceActions } from './device/actions.js';

export interface Services {
  readonly config: Readonly<Config>;
  readonly log: Logger;
  readonly env: StoreEnv;
  readonly dict: Dictionary;
  readonly entities: EntityStore;
  /** entity relations (docs/api.md "Relations"), kept beside the entities */
  readonly relations: RelationStore;
  /** alarms (docs/api.md "Alarms"), kept beside the entities */
  readonly alarms: AlarmStore;
  readonly timeseries: TimeseriesStore;
  /** background compaction/rollups/retention of the timeseries store; `stats()` for status endpoints */
  readonly downsample?: DownsampleEngine;
  /** depth series (docs/api.md) */
  readonly depth: DepthStore;
  readonly bus: EventBus;
  readonly ingest: TelemetryIngest;
  /** device uploads decoded and being written at once (ingest.maxBytesInFlight); absent in unit tests */
  readonly admission?: IngestAdmission;
  readonly auth: AuthService;
  /** attributes: client/server/shared scopes (docs/api.md) */
  readonly attributes: AttributeStore;
  /** device long-polls, server- and client-side RPC (docs/api.md) */
  readonly rpc: RpcBroker;
  /** upstream store-and-forward (docs/sync.md); absent when `sync.url` is unset */
  readonly sync?: SyncStatusSource;
  /** request, ingest and websocket counters for the status endpoints; absent in unit tests */
  readonly metrics?: Metrics;
  /** what the store writes against its daily budget (store.writeBudgetBytesPerDay); absent in unit tests */
  readonly writeBudget?: WriteBudget;
  /** failed logins, unknown tokens, bad publishes: counted and logged a line a minute (status/failures.ts); absent in unit tests */
  readonly failures?: FailureLog;
  /** provisioning's rate limits per address and key (auth/provision-limits.ts); absent in unit tests */
  readonly provisionGuard?: ProvisionGuard;
  /** device connectivity (docs/api.md "Device state"): the transports report activity and sessions here; absent in unit tests */
  readonly state?: DeviceStateService;
  /** device-profile alarm rules (docs/api.md "Alarm rules"); absent in unit tests */
  readonly alarmRules?: AlarmRuleService;
  /** the device layer: what the LAN transports (src/transports/) call, and all they call */
  readonly devices: DeviceActions;
  /** the clock; tests substitute a fake one */
  readonly now: () => number;
}
