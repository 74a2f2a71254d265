/**
 * The outbox ports over LMDB (src/store/outbox-lmdb.ts) pass the suite every implementation must pass
 * (test/helpers/outbox-port.ts).
 */
import '../helpers/sandbox.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { type StoreEnv, openStoreEnv } from '../../src/store/env.js';
import { LmdbDownlinkStore, LmdbOutbox } from '../../src/store/outbox-lmdb.js';
import { type OutboxFactory, type OutboxPorts, outboxPortSuite } from '../helpers/outbox-port.js';

const MAP_BYTES = 64 * 1024 * 1024;

const lmdb: OutboxFactory = async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'outpost-outbox-'));
  let env: StoreEnv = openStoreEnv({ dataDir, mapSizeBytes: MAP_BYTES });
  const ports = (): OutboxPorts => ({ outbox: new LmdbOutbox(env), downlink: new LmdbDownlinkStore(env) });
  t.teardown(async () => {
    await env.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  return {
    ...ports(),
    reopen: async () => {
      await env.close();
      env = openStoreEnv({ dataDir, mapSizeBytes: MAP_BYTES });
      return ports();
    },
  };
};

outboxPortSuite(t, lmdb);
