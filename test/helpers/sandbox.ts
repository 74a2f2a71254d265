/**
 * Imported first by test/helpers/server.ts, so by every test that starts a daemon or the CLI (and by the others
 * directly: test/repo/tree-rules.test.ts sees to it), before the test's body runs: the test process, and every daemon,
 * CLI, tmux or client it starts, runs in a temp directory of its own with a temp HOME and XDG dirs, and without the
 * OUTPOST_* variables of the shell that ran `npm test`. So no test reads the clone's `./data` (which README's "Try
 * it" leaves there, maybe beside a running daemon) nor the user's saved logins (`$XDG_CONFIG_HOME/outpost/
 * credentials.json`), and a test that forgets `--data-dir` writes into the sandbox, not the repository. Removed when
 * the process exits. (Not tap's node-arg: a worker thread takes the process's execArgv and would look for this file
 * relative to the sandbox.)
 */
import { mkdirSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = realpathSync(mkdtempSync(join(tmpdir(), 'outpost-sandbox-')));
const home = join(root, 'home');
const cwd = join(root, 'cwd');
for (const dir of [home, cwd, join(home, '.config'), join(home, '.cache'), join(home, '.local', 'share')])
  mkdirSync(dir, { recursive: true });

for (const name of Object.keys(process.env)) if (name.startsWith('OUTPOST_')) delete process.env[name];
process.env['HOME'] = home;
process.env['XDG_CONFIG_HOME'] = join(home, '.config');
process.env['XDG_CACHE_HOME'] = join(home, '.cache');
process.env['XDG_DATA_HOME'] = join(home, '.local', 'share');
process.env['XDG_STATE_HOME'] = join(home, '.local', 'state');
process.env['TEST_SANDBOX'] = root;
process.chdir(cwd);

process.once('exit', () => {
  try {
    process.chdir(tmpdir());
    rmSync(root, { recursive: true, force: true });
  } catch {
    // a child still writing there: the OS's temp cleanup takes the rest
  }
});
