/** The disk budget that keeps an SD card from filling (docs/design/storage.md): automatic by default, explicit, or off. */
import { statfsSync } from 'node:fs';
import t from 'tap';
import { loadConfig } from '../../src/config/index.js';
import { diskBudget } from '../../src/server.js';
import { startGateway, tempDir } from '../helpers/server.js';

t.test('0 = 80% of what the filesystem can hold for the store; explicit bytes win; -1 = none', async (t) => {
  const dataDir = tempDir(t);
  const fs = statfsSync(dataDir);
  const config = loadConfig({ dataDir }, {});
  const auto = diskBudget(config);
  const free = fs.bavail * fs.bsize;
  const expected = Math.min(0.8 * free, config.store.mapSizeBytes);
  t.ok(
    auto > 0.9 * expected && auto <= expected + 1,
    `automatic budget ${auto} B is ~80% of ${free} B free (at most the map)`,
  );
  t.equal(diskBudget(loadConfig({ dataDir }, {}, { downsample: { maxDiskBytes: 5_000_000 } })), 5_000_000);
  t.equal(diskBudget(loadConfig({ dataDir }, {}, { downsample: { maxDiskBytes: -1 } })), 0);
  t.throws(() => loadConfig({ dataDir }, {}, { downsample: { maxDiskBytes: -5 } }), /maxDiskBytes/);
  t.throws(() => loadConfig({ dataDir }, {}, { downsample: { maxDiskBytes: 1.5 } }), /maxDiskBytes/);
});

t.test('the budget never exceeds the LMDB map (a 32-bit build maps 1 GiB, whatever the SD card holds)', async (t) => {
  const dataDir = tempDir(t);
  const GiB = 2 ** 30;
  const store = { mapSizeBytes: GiB };
  t.ok(diskBudget(loadConfig({ dataDir }, {}, { store })) <= GiB, 'automatic');
  t.equal(diskBudget(loadConfig({ dataDir }, {}, { store, downsample: { maxDiskBytes: 5 * GiB } })), GiB, 'explicit');
  t.equal(
    diskBudget(loadConfig({ dataDir }, {}, { store, downsample: { maxDiskBytes: 5_000_000 } })),
    5_000_000,
    'explicit, below the map',
  );
});

t.test('the daemon logs the budget it chose', async (t) => {
  const gw = await startGateway(t);
  t.ok(
    gw.logs.some((l) => /disk budget \d+ MiB/.test(l)),
    gw.logs.join('\n'),
  );
});
