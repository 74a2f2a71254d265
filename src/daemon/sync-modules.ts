/**
 * What serve needs of upstream sync, in one module that server.ts imports only when a sync URL is configured:
 * a gateway without upstream does not hold these modules' source and bytecode (docs/design/memory-budget.md).
 */
export { SyncService } from '../upstream/uplink/service.js';
export { SyncRelay } from '../upstream/uplink/relay.js';
export { isMqttUrl } from '../upstream/session/upstream-session.js';
export { loadMqtt } from '../upstream/session/connection.js';
export { OutboxRecorder } from '../store/outbox.js';
export { LmdbDownlinkStore, LmdbOutbox } from '../store/outbox-lmdb.js';
