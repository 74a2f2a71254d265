/** The disk budget that keeps an SD card from filling (issue 6): automatic by default, explicit, or off. */
import { statfsSync } from 'node:fs';
import t from 'tap';
import { loadConfig } from '../src/config/index.js';
import { diskBudget } from '../src/server.js';
import { startGateway, tempDir } from './helpers/server.js';

t.test('0 = 80% of what the filesystem can hold for the store; explicit bytes win; -1 = none', async (t) => {
  const dataDir = tempDir(t);
  const fs = statfsSync(dataDir);
  const auto = diskBudget(loadConfig({ dataDir }, {}));
  const free = fs.bavail * fs.bsize;
  t.ok(auto > 0.7 * free && auto <= 0.8 * free + 1, `automatic budget ${auto} B is ~80% of ${free} B free`);
  t.equal(diskBudget(loadConfig({ dataDir }, {}, { downsample: { maxDiskBytes: 5_000_000 } })), 5_000_000);
  t.equal(diskBudget(loadConfig({ dataDir }, {}, { downsample: { maxDiskBytes: -1 } })), 0);
  t.throws(() => loadConfig({ dataDir }, {}, { downsample: { maxDiskBytes: -5 } }), /maxDiskBytes/);
  t.throws(() => loadConfig({ dataDir }, {}, { downsample: { maxDiskBytes: 1.5 } }), /maxDiskBytes/);
});

t.test('the daemon logs the budget it chose', async (t) => {
  const gw = await startGateway(t);
  t.ok(gw.logs.some((l) => /disk budget \d+ MiB/.test(l)), gw.logs.join('\n'));
});
