/** What the device layer (src/device/actions.ts) is built over, wired once in server.ts. */
import type { ProvisionGuard } from '../auth/provision-limits.js';
import type { EventBus } from '../bus/index.js';
import type { Config } from '../config/index.js';
import type { IngestAdmission } from '../ingest/admission.js';
import type { TelemetryIngest } from '../ingest/service.js';
import type { RpcBroker } from '../rpc/broker.js';
import type { FailureLog } from '../status/failures.js';
import type { AttributeStore } from '../store/attributes.js';
import type { DepthStore } from '../store/depth.js';
import type { EntityStore } from '../store/entities.js';
import type { StoreEnv } from '../store/env.js';
import type { DeviceStateService } from './state.js';

export interface DeviceDeps {
  readonly config: Readonly<Config>;
  readonly log: { warn(msg: string): void; error(msg: string): void };
  readonly env: StoreEnv;
  readonly entities: EntityStore;
  readonly attributes: AttributeStore;
  readonly ingest: TelemetryIngest;
  /** uploads decoded and being written at once, bounded by ingest.maxBytesInFlight; absent in unit tests */
  readonly admission?: IngestAdmission;
  readonly depth: DepthStore;
  readonly rpc: RpcBroker;
  readonly bus: EventBus;
  /** absent in unit tests */
  readonly state?: DeviceStateService;
  /** absent in unit tests */
  readonly failures?: FailureLog;
  /** absent in unit tests */
  readonly provisionGuard?: ProvisionGuard;
  readonly now: () => number;
}
