/**
 * Which gateway answered (docs/cli.md "Local and remote"): an explicit --config or --data-dir beats the saved
 * login; every remote answer names its gateway (a header line on stderr, a field in status/sync --json);
 * `outpost context` shows and switches the current gateway; `sync` follows the same rule as every other command;
 * a local `status` or `sync` asks the running daemon over the admin channel and says plainly when none runs.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { addDevice, tempDir } from '../helpers/server.js';
import { failsOneLine, ok, techGateway } from '../helpers/tech.js';

t.test('explicit --config beats the login; answers name the gateway; context; sync; local status', async (t) => {
  const tg = await techGateway(t);
  // a second data dir, no daemon on it, known only through its config file
  const otherDir = tempDir(t);
  await addDevice(otherDir, 'only-on-b');
  const cfgB = join(tempDir(t), 'b.json');
  writeFileSync(cfgB, JSON.stringify({ dataDir: otherDir }));

  const viaConfig = await tg.run(['devices', '--config', cfgB]);
  t.match(ok(t, viaConfig, 'devices --config B'), /only-on-b/, '--config B lists B');
  t.notMatch(viaConfig.stdout, /pump-1/, "not the logged-in gateway's devices");
  t.notMatch(viaConfig.stderr, /gateway http/, 'no gateway named: the answer came from the data dir');

  const plain = await tg.run(['devices']);
  t.match(ok(t, plain, 'devices'), /pump-1/);
  t.match(plain.stderr, `gateway ${tg.gw.url} (tech@example.com)`, 'the remote answer names its gateway');
  const json = await tg.run(['latest', 'pump-1', '--json']);
  t.match(json.stderr, `gateway ${tg.gw.url}`, '--json: named on stderr, stdout stays REST');
  t.ok(JSON.parse(ok(t, json, 'latest --json')).t, 'REST JSON on stdout');
  const st = JSON.parse(ok(t, await tg.run(['status', '--json']), 'status --json')) as Record<string, unknown>;
  t.equal(st['gateway'], tg.gw.url, 'status --json names the gateway');

  // sync follows the login like every other command, and names the gateway
  const sync = JSON.parse(ok(t, await tg.run(['sync', '--json']), 'sync after login')) as Record<string, unknown>;
  t.equal(sync['gateway'], tg.gw.url);
  t.equal(sync['enabled'], false);
  // locally, the running daemon answers over the admin channel
  const localSync = JSON.parse(ok(t, await tg.run(['sync', '--json', ...tg.L]), 'sync --data-dir')) as {
    enabled: boolean;
  };
  t.equal(localSync.enabled, false);
  failsOneLine(
    t,
    await tg.run(['sync', '--data-dir', otherDir]),
    /no daemon is running on data dir/,
    'sync, no daemon',
  );

  const localStatus = JSON.parse(ok(t, await tg.run(['status', '--json', ...tg.L]), 'local status')) as Record<
    string,
    unknown
  >;
  t.equal(localStatus['daemon'], true, 'local status: the running daemon answered');
  t.ok(localStatus['ingest'], "the daemon's ingest figures");
  t.match(
    ok(t, await tg.run(['status', '--data-dir', otherDir]), 'status, no daemon'),
    /no daemon is running on this data dir/,
  );

  // context: show, switch to local, switch back
  t.match(ok(t, await tg.run(['context']), 'context'), new RegExp(`^current: ${tg.gw.url}\\n\\* ${tg.gw.url}  tech@`));
  ok(t, await tg.run(['context', 'local']), 'context local');
  t.match(ok(t, await tg.run(['context']), 'context'), /^current: local/);
  failsOneLine(t, await tg.run(['devices']), /no store in/, 'local again: ./data has no store');
  failsOneLine(t, await tg.run(['context', 'use', 'http://nowhere.test:1']), /not logged in to/, 'unknown gateway');
  ok(t, await tg.run(['context', 'use', tg.gw.url]), 'context use');
  t.match(ok(t, await tg.run(['devices']), 'devices after use'), /pump-1/);
});
