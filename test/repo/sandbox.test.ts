/**
 * Every test process runs in a sandbox (test/helpers/sandbox.ts, imported through test/helpers/server.ts): after README's
 * "Try it" left `./data` and maybe a running daemon in the clone, and with a technician's saved login in the home
 * directory, the suite must still pass, so no test may see the clone's cwd, the user's home or their OUTPOST_*
 * variables; nor may the CLI and daemons the tests start.
 */
import { readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { cli } from '../helpers/server.js';

const REPO = fileURLToPath(new URL('../../..', import.meta.url));
const inside = (dir: string, parent: string): boolean => !relative(parent, dir).startsWith('..');

t.test('the test process has a temp cwd, HOME and XDG dirs, and no OUTPOST_* variable', async (t) => {
  const sandbox = process.env['TEST_SANDBOX'];
  if (sandbox === undefined) return t.fail('no sandbox: test/helpers/server.ts imports test/helpers/sandbox.js first');
  t.ok(inside(process.cwd(), sandbox), `cwd ${process.cwd()} is in the sandbox`);
  t.notOk(inside(process.cwd(), REPO), 'and not in the repository');
  t.same(readdirSync(process.cwd()), [], 'an empty cwd: no ./data, no config file');
  for (const name of ['HOME', 'XDG_CONFIG_HOME', 'XDG_DATA_HOME', 'XDG_STATE_HOME', 'XDG_CACHE_HOME'])
    t.ok(inside(process.env[name] ?? '/', sandbox), `${name} is in the sandbox`);
  t.same(
    Object.keys(process.env).filter((k) => k.startsWith('OUTPOST_')),
    [],
    "none of the shell's OUTPOST_* variables",
  );
});

t.test('the CLI a test runs looks in the sandbox, not in the clone', async (t) => {
  const r = await cli(['device', 'list']);
  t.not(r.code, 0, 'nothing to list');
  t.equal(
    r.stderr.trim().split(': give ')[0],
    `outpost: no store in ${join(process.cwd(), 'data')}`,
    "its ./data is the sandbox's",
  );
});
