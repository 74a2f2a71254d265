/**
 * package-lock.json stays complete: `npm ci` on a fresh clone must work and `npm install` must not
 * rewrite the lock. The lock once lacked msgpackr-extract's per-platform optional packages (npm records every
 * platform's, installed or not), so `npm ci` refused it. Two checks, both offline: every optional dependency
 * of a locked package is itself locked, and `npm ci --dry-run --offline` accepts the lock (with an empty cache,
 * so no download and no network; it only compares package.json with the lock), while it refuses the lock with
 * one such entry removed, which is what the check exists to catch.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { tempDir } from '../helpers/server.js';

const REPO = fileURLToPath(new URL('../../..', import.meta.url));

interface LockEntry {
  version?: string;
  optional?: boolean;
  optionalDependencies?: Record<string, string>;
}
interface Lock {
  packages: Record<string, LockEntry>;
}

const lockText = readFileSync(join(REPO, 'package-lock.json'), 'utf8');
const lock = JSON.parse(lockText) as Lock;

/** Where npm would find `dep` for the package at `from`: its own node_modules, then each ancestor's. */
function resolveIn(packages: Lock['packages'], from: string, dep: string): string | undefined {
  let base = from;
  for (;;) {
    const candidate = `${base ? `${base}/` : ''}node_modules/${dep}`;
    if (packages[candidate]) return candidate;
    if (!base) return undefined;
    const i = base.lastIndexOf('/node_modules/');
    base = i < 0 ? '' : base.slice(0, i);
  }
}

t.test('every optional dependency of a locked package is in the lock', async (t) => {
  const missing: string[] = [];
  let checked = 0;
  for (const [path, entry] of Object.entries(lock.packages)) {
    for (const dep of Object.keys(entry.optionalDependencies ?? {})) {
      checked++;
      if (!resolveIn(lock.packages, path, dep)) missing.push(`${path || '(root)'} → ${dep}`);
    }
  }
  t.ok(
    checked >= 10,
    `the lock has optional dependencies to check (${checked}: lmdb's and msgpackr-extract's platforms)`,
  );
  t.same(missing, [], 'none missing (run `npm install` and commit package-lock.json)');
});

/** npm as `npm test` runs it (npm_execpath), else the one on PATH. */
const execPath = process.env['npm_execpath'];
const [npmCmd, npmPre] = execPath?.endsWith('.js') ? [process.execPath, [execPath]] : ['npm', []];
const hasNpm = spawnSync(npmCmd, [...npmPre, '--version'], { encoding: 'utf8' }).status === 0;

function npm(args: string[], cwd: string, cache: string): { status: number | null; out: string } {
  const r = spawnSync(npmCmd, [...npmPre, ...args], {
    cwd,
    encoding: 'utf8',
    timeout: 60_000,
    env: {
      ...process.env,
      npm_config_cache: cache,
      npm_config_offline: 'true',
      npm_config_audit: 'false',
      npm_config_fund: 'false',
    },
  });
  // npm's usage text follows its error: keep the lines that say what is wrong.
  const lines = `${r.stdout}${r.stderr}`.split('\n').filter((l) => /Missing|in sync|ENOTCACHED|ERR|error code/.test(l));
  return { status: r.status, out: lines.join('\n') };
}

t.test(
  'npm ci --dry-run --offline accepts the lock, and refuses it with a platform package missing',
  { skip: hasNpm ? false : 'npm is not available' },
  async (t) => {
    const dir = tempDir(t);
    const good = join(dir, 'good');
    const bad = join(dir, 'bad');
    for (const d of [good, bad]) {
      mkdirSync(d);
      copyFileSync(join(REPO, 'package.json'), join(d, 'package.json'));
    }
    copyFileSync(join(REPO, 'package-lock.json'), join(good, 'package-lock.json'));
    const broken = JSON.parse(lockText) as Lock;
    const victim = Object.keys(broken.packages).find((p) => p.startsWith('node_modules/@msgpackr-extract/'));
    if (victim === undefined) return t.fail('the lock has msgpackr-extract platform packages');
    delete broken.packages[victim];
    writeFileSync(join(bad, 'package-lock.json'), JSON.stringify(broken, null, 2));

    const args = ['ci', '--dry-run', '--ignore-scripts', '--loglevel=error'];
    const ok = npm(args, good, join(dir, 'cache'));
    t.equal(ok.status, 0, `npm ci accepts the committed lock${ok.status ? `: ${ok.out}` : ''}`);
    const refused = npm(args, bad, join(dir, 'cache'));
    t.not(refused.status, 0, 'npm ci refuses a lock without one platform package');
    t.match(refused.out, /in sync|Missing/, 'because the lock is out of sync');
  },
);
