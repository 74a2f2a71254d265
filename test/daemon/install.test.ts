/**
 * Install on a gateway (docs/install.md): install.sh --root into a temp dir (files, modes, the `outpost`
 * command finding the installed config and data dir, idempotence, an upgrade keeping config and data, the
 * low-port drop-in, uninstall, purge, Node refused with the Raspberry Pi OS advice), the unit through
 * systemd-analyze (verify clean, exposure <= 2.0) where it exists, and one real x64 bundle: its layout, size,
 * native binaries, and the daemon and CLI running from it once installed.
 */
import { spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { tempDir } from '../helpers/server.js';

const REPO = fileURLToPath(new URL('../../..', import.meta.url));
const NODE_MAJOR = Number(process.versions.node.split('.')[0]);

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv = {}, timeout = 60_000): Run {
  const r = spawnSync(cmd, args, { encoding: 'utf8', env: { ...process.env, ...env }, timeout });
  return { code: r.status, stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
}

const mode = (p: string): string => (statSync(p).mode & 0o7777).toString(8).padStart(4, '0');

/**
 * A bundle's top folder made from this checkout, as scripts/bundle.sh lays it out; dist/src and node_modules are
 * links to the repo's (the installer copies links as links), so it is quick to make and runs for real.
 */
function fakeBundle(dir: string, bundle: { nodeArch?: string; nodeMajors?: number[] } = {}): string {
  const top = join(dir, 'outpost');
  mkdirSync(join(top, 'dist'), { recursive: true });
  symlinkSync(join(REPO, 'dist/src'), join(top, 'dist/src'));
  symlinkSync(join(REPO, 'node_modules'), join(top, 'node_modules'));
  cpSync(join(REPO, 'systemd'), join(top, 'systemd'), { recursive: true });
  cpSync(join(REPO, 'scripts/install.sh'), join(top, 'install.sh'));
  cpSync(join(REPO, 'package.json'), join(top, 'package.json'));
  cpSync(join(REPO, 'README.md'), join(top, 'README.md'));
  cpSync(join(REPO, 'docs'), join(top, 'docs'), { recursive: true });
  writeFileSync(
    join(top, 'bundle.json'),
    JSON.stringify({
      version: '0.0.0-test',
      arch: 'test',
      nodeArch: bundle.nodeArch ?? process.arch,
      nodeMajors: bundle.nodeMajors ?? [NODE_MAJOR],
    }),
  );
  return top;
}

/** The staged `outpost` command with its system paths pointed into the staging root, so it can run here. */
function stagedCommand(root: string, dir: string): string {
  const text = readFileSync(join(root, 'usr/local/bin/outpost'), 'utf8')
    .replaceAll('/opt/outpost', join(root, 'opt/outpost'))
    .replaceAll('/etc/outpost', join(root, 'etc/outpost'))
    .replaceAll('/etc/default/outpost', join(root, 'etc/default/outpost'))
    .replaceAll('/var/lib/outpost', join(root, 'var/lib/outpost'))
    // The tests run as root in CI containers: no switch to a user that does not exist here.
    .replace('id outpost >/dev/null 2>&1', 'false');
  const p = join(dir, 'outpost-cmd');
  writeFileSync(p, text);
  chmodSync(p, 0o755);
  return p;
}

function install(t: Test, top: string, args: string[], env: NodeJS.ProcessEnv = {}): Run {
  const r = run(join(top, 'install.sh'), args, env);
  t.equal(r.code, 0, `install.sh ${args.join(' ')} exits 0${r.code ? `: ${r.stderr}` : ''}`);
  return r;
}

t.test('install.sh --root: files, modes, the outpost command, upgrade, uninstall, purge', async (t) => {
  const dir = tempDir(t);
  const top = fakeBundle(dir);
  const root = join(dir, 'root');

  const first = install(t, top, ['--root', root]);
  t.match(
    first.stdout,
    /sudo outpost user add --email \S+ --password .* --authority TENANT_ADMIN/,
    'prints the first-user command',
  );
  t.match(first.stdout, /https?:\/\/\S+:8080/, 'and the URL');
  t.match(first.stdout, /installed Outpost/, 'a first install says installed');

  const at = (p: string): string => join(root, p);
  t.ok(existsSync(at('opt/outpost/dist/src/main.js')), 'program in /opt/outpost');
  t.equal(mode(at('opt/outpost/install.sh')), '0755', 'install.sh kept beside it, for --uninstall');
  t.equal(
    realpathSync(readlinkSync(at('opt/outpost/bin/node'))),
    realpathSync(process.execPath),
    'bin/node links the Node it checked',
  );
  t.equal(mode(at('etc/outpost')), '0750', '/etc/outpost: root and the service group');
  t.equal(mode(at('etc/outpost/outpost.json')), '0640', 'config readable by the service, not by others');
  t.same(JSON.parse(readFileSync(at('etc/outpost/outpost.json'), 'utf8')), { port: 8080 }, 'a default config');
  t.equal(mode(at('var/lib/outpost')), '0700', 'data dir private to the service user');
  t.equal(mode(at('usr/local/bin/outpost')), '0755', '`outpost` on PATH');
  t.equal(mode(at('etc/systemd/system/outpost.service')), '0644', 'unit installed');
  t.equal(
    readFileSync(at('etc/systemd/system/outpost.service'), 'utf8'),
    readFileSync(join(REPO, 'systemd/outpost.service'), 'utf8'),
    "the bundle's unit",
  );
  t.notOk(existsSync(at('etc/systemd/system/outpost.service.d')), 'no capability drop-in for port 8080');
  t.match(first.stdout, /staged into/, 'staging neither starts the unit nor creates the user');

  // The command finds the installed data dir and config with no flags.
  const cmd = stagedCommand(root, dir);
  const dev = run(cmd, ['device', 'add', '--name', 'pump-1'], { OUTPOST_DATA_DIR: '', OUTPOST_CONFIG: '' });
  t.equal(dev.code, 0, `outpost device add${dev.code ? `: ${dev.stderr}` : ''}`);
  t.match(JSON.parse(dev.stdout), { name: 'pump-1' }, 'prints the device');
  t.ok(
    readdirSync(at('var/lib/outpost')).some((f) => f.endsWith('.mdb')),
    'the store is in the installed data dir',
  );
  // The unit's EnvironmentFile moves the data dir for the daemon: the command follows it.
  mkdirSync(at('etc/default'));
  writeFileSync(at('etc/default/outpost'), `OUTPOST_PORT=8081\nOUTPOST_DATA_DIR="${join(dir, 'moved')}"\n`);
  const moved = run(cmd, ['device', 'add', '--name', 'pump-m'], { OUTPOST_DATA_DIR: '', OUTPOST_CONFIG: '' });
  t.equal(moved.code, 0, `outpost device add with /etc/default/outpost${moved.code ? `: ${moved.stderr}` : ''}`);
  t.ok(
    readdirSync(join(dir, 'moved')).some((f) => f.endsWith('.mdb')),
    'the store follows OUTPOST_DATA_DIR from /etc/default/outpost',
  );
  const mine = run(cmd, ['device', 'add', '--name', 'pump-e'], {
    OUTPOST_DATA_DIR: join(dir, 'mine'),
    OUTPOST_CONFIG: '',
  });
  t.equal(mine.code, 0, "the caller's OUTPOST_DATA_DIR");
  t.ok(
    readdirSync(join(dir, 'mine')).some((f) => f.endsWith('.mdb')),
    'wins over /etc/default/outpost',
  );
  rmSync(at('etc/default'), { recursive: true });
  writeFileSync(at('etc/outpost/outpost.json'), '{ "port": 8080, "noSuchKey": 1 }\n');
  const bad = run(cmd, ['device', 'add', '--name', 'pump-2'], { OUTPOST_DATA_DIR: '', OUTPOST_CONFIG: '' });
  t.not(bad.code, 0, 'and it reads the installed config (an unknown key is refused)');
  t.match(bad.stderr, /noSuchKey/, 'naming the key');

  // Upgrade: config byte for byte, data kept; a port below 1024 gets the capability drop-in, and loses it again.
  const config = '{\n  "port": 80,\n  "logLevel": "debug"\n}\n';
  writeFileSync(at('etc/outpost/outpost.json'), config);
  writeFileSync(at('var/lib/outpost/marker'), 'data');
  const second = install(t, top, ['--root', root]);
  t.match(second.stdout, /upgraded Outpost/, 'a second run upgrades');
  t.match(second.stdout, /kept \/etc\/outpost\/outpost.json/, 'says it kept the config');
  t.equal(readFileSync(at('etc/outpost/outpost.json'), 'utf8'), config, 'config unchanged');
  t.equal(readFileSync(at('var/lib/outpost/marker'), 'utf8'), 'data', 'data kept');
  t.ok(
    readdirSync(at('var/lib/outpost')).some((f) => f.endsWith('.mdb')),
    'store kept',
  );
  t.match(
    readFileSync(at('etc/systemd/system/outpost.service.d/10-low-port.conf'), 'utf8'),
    /AmbientCapabilities=CAP_NET_BIND_SERVICE[\s\S]*PrivateUsers=no/,
    'port 80: CAP_NET_BIND_SERVICE drop-in',
  );
  t.match(second.stdout, /http:\/\/\S+:80\/api\/ /, 'the URL follows the configured port');
  writeFileSync(at('etc/outpost/outpost.json'), '{ "port": 8080 }\n');
  install(t, top, ['--root', root]);
  t.notOk(existsSync(at('etc/systemd/system/outpost.service.d')), 'back on 8080: drop-in removed');
  t.notOk(existsSync(at('opt/outpost.new')) || existsSync(at('opt/outpost.old')), 'no leftovers of the swap');

  const un = install(t, at('opt/outpost'), ['--uninstall', '--root', root]);
  t.match(un.stdout, /kept/, 'uninstall says what it kept');
  for (const gone of ['opt/outpost', 'usr/local/bin/outpost', 'etc/systemd/system/outpost.service'])
    t.notOk(existsSync(at(gone)), `uninstall removes ${gone}`);
  t.ok(existsSync(at('etc/outpost/outpost.json')), 'uninstall keeps the config');
  t.equal(readFileSync(at('var/lib/outpost/marker'), 'utf8'), 'data', 'uninstall keeps the data');

  install(t, top, ['--root', root]);
  t.equal(readFileSync(at('var/lib/outpost/marker'), 'utf8'), 'data', 'reinstall finds the data');
  install(t, top, ['--purge', '--root', root]);
  for (const gone of [
    'opt/outpost',
    'usr/local/bin/outpost',
    'etc/systemd/system/outpost.service',
    'etc/outpost',
    'var/lib/outpost',
  ]) {
    t.notOk(existsSync(at(gone)), `purge removes ${gone}`);
  }
});

t.test('install.sh refuses what cannot run, saying what to do', async (t) => {
  const dir = tempDir(t);
  const fakeNode = (version: string): string => {
    const p = join(dir, `node-${version}`);
    writeFileSync(p, `#!/bin/sh\necho ${version}\n`);
    chmodSync(p, 0o755);
    return p;
  };
  const refuse = (what: string, top: string, env: NodeJS.ProcessEnv, msg: RegExp): void => {
    const r = run(join(top, 'install.sh'), ['--root', join(dir, 'root')], env);
    t.equal(r.code, 1, `${what}: exit 1`);
    t.match(r.stderr, msg, `${what}: ${r.stderr.split('\n')[0]}`);
    t.notOk(existsSync(join(dir, 'root/opt/outpost')), `${what}: nothing installed`);
  };
  const top = fakeBundle(join(dir, 'a'), { nodeMajors: [20, 22] });
  refuse(
    'Node 16',
    top,
    { OUTPOST_NODE: fakeNode('v16.20.2') },
    /Node v16\.20\.2 .* not supported: Outpost runs on Node 18 to 22[\s\S]*bookworm[\s\S]*NodeSource[\s\S]*official tarball/,
  );
  refuse('Node 24', top, { OUTPOST_NODE: fakeNode('v24.1.0') }, /not supported/);
  refuse(
    "bookworm's Node 18.19",
    top,
    { OUTPOST_NODE: fakeNode('v18.19.0') },
    /carries native binaries for Node 20 and 22, not for Node 18[\s\S]*apt install nodejs[\s\S]*18\.19[\s\S]*setup_22\.x/,
  );
  refuse('no Node', top, { OUTPOST_NODE: join(dir, 'nowhere/node') }, /Node\.js is not installed[\s\S]*NodeSource/);
  const other = process.arch === 'arm64' ? 'x64' : 'arm64';
  refuse(
    'another architecture',
    fakeBundle(join(dir, 'b'), { nodeArch: other }),
    {},
    new RegExp(`this bundle is for ${other} but .* is ${process.arch}`),
  );
  const r = run(join(REPO, 'scripts/install.sh'), ['--root', join(dir, 'root')]);
  t.equal(r.code, 1, 'not from a bundle: exit 1');
  t.match(r.stderr, /extracted bundle/, 'says to run it from a bundle');
});

const hasAnalyze = run('systemd-analyze', ['--version']).code === 0;

t.test(
  'the unit: systemd-analyze verify is clean and exposure <= 2.0',
  { skip: hasAnalyze ? false : 'systemd-analyze is not installed' },
  async (t) => {
    const dir = tempDir(t);
    // verify checks that ExecStart's binary exists: /opt/outpost/bin/node only does once installed.
    const unit = join(dir, 'outpost.service');
    const text = readFileSync(join(REPO, 'systemd/outpost.service'), 'utf8');
    t.match(text, /^ExecStart=\/opt\/outpost\/bin\/node /m, 'runs the Node install.sh linked');
    writeFileSync(unit, text.replace('/opt/outpost/bin/node', process.execPath));
    const v = run('systemd-analyze', ['verify', unit]);
    t.equal(v.code, 0, 'verify exits 0');
    t.equal(v.stderr.trim(), '', `verify prints nothing${v.stderr ? `: ${v.stderr}` : ''}`);

    const s = run('systemd-analyze', ['security', '--offline=true', '--no-pager', unit]);
    const m = /Overall exposure level for outpost\.service: (\d+\.\d+)/.exec(s.stdout + s.stderr);
    t.ok(m, `security prints the exposure${m ? '' : `: ${s.stdout}${s.stderr}`}`);
    t.ok(Number(m?.[1]) <= 2.0, `exposure ${m?.[1]} <= 2.0`);
    for (const k of [
      'SystemCallFilter=@system-service',
      'ProtectClock=yes',
      'ProtectKernelLogs=yes',
      'ProtectProc=invisible',
      'UMask=0077',
      'CapabilityBoundingSet=\n',
    ]) {
      t.ok(text.includes(k), `unit has ${k.trim()}`);
    }
    t.notMatch(text, /^MemoryDenyWriteExecute=yes/m, 'V8 needs W+X memory');
    t.notMatch(text, /^(WatchdogSec|Type=notify)/m, 'no watchdog the daemon would not feed');
  },
);

t.test('an x64 bundle: layout, size, native binaries, and it runs once installed', async (t) => {
  const dir = tempDir(t);
  const out = join(dir, 'build');
  // From npm's cache only (filled by the `npm install` before `npm test`): no network in the test suite.
  const b = run(
    'bash',
    [join(REPO, 'scripts/bundle.sh'), 'x64', '--no-build', '--out', out],
    { npm_config_offline: 'true' },
    120_000,
  );
  if (b.code !== 0 && /ENOTCACHED/.test(b.stderr)) {
    t.comment(`npm's cache lacks the x64 packages, bundle not built: ${b.stderr.split('\n')[0]}`);
    return;
  }
  t.equal(b.code, 0, `bundle.sh x64 exits 0${b.code ? `: ${b.stderr}` : ''}`);
  const version = (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string }).version;
  const tarball = join(out, `outpost-${version}-linux-x64.tar.gz`);
  const size = statSync(tarball).size;
  t.ok(size <= 10 * 1024 * 1024, `${size} bytes <= 10 MiB`);
  const list = run('tar', ['-tzf', tarball]).stdout.trim().split('\n');
  t.same(
    list.filter((p) => !p.startsWith('outpost/')),
    [],
    'one top folder, outpost/',
  );
  for (const f of [
    'outpost/install.sh',
    'outpost/README.md',
    'outpost/docs/configuration.md',
    'outpost/systemd/outpost.service',
    'outpost/dist/src/main.js',
    'outpost/bundle.json',
    'outpost/package.json',
  ]) {
    t.ok(list.includes(f), `has ${f}`);
  }
  t.notOk(
    list.some((p) => p.startsWith('outpost/dist/test') || p.endsWith('.map') || p.endsWith('.ts')),
    'no tests, sources or maps',
  );
  const natives = list.filter((p) => p.endsWith('.node'));
  t.same(
    natives.filter((p) => !/linux[-_]x64/.test(p)),
    [],
    `only linux x64 binaries (${natives.length})`,
  );
  t.same(
    natives
      .filter((p) => p.includes('uws_'))
      .map((p) => p.split('/').pop())
      .sort(),
    ['uws_linux_x64_115.node', 'uws_linux_x64_127.node'],
    'uWS for Node 20 and 22',
  );
  t.notOk(
    natives.some((p) => p.includes('musl')),
    'glibc builds only',
  );

  if (![20, 22].includes(NODE_MAJOR)) return;
  const x = join(dir, 'x');
  mkdirSync(x);
  t.equal(run('tar', ['-xzf', tarball, '-C', x]).code, 0, 'extracts');
  const root = join(dir, 'root');
  install(t, join(x, 'outpost'), ['--root', root]);
  const main = join(root, 'opt/outpost/dist/src/main.js');
  const dataDir = join(dir, 'data');
  const dev = run(process.execPath, [main, 'device', 'add', '--name', 'b-1', '--data-dir', dataDir]);
  t.equal(dev.code, 0, `the bundle's CLI opens the store (lmdb loads)${dev.code ? `: ${dev.stderr}` : ''}`);
  const proc = spawn(process.execPath, [main, 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', dataDir], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    let log = '';
    const onData = (d: Buffer): void => {
      log += d.toString();
      const m = /listening on (http:\/\/[^\s,]+)/.exec(log);
      if (m?.[1] !== undefined) resolve(m[1]);
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    void exited.then((code) => reject(new Error(`daemon exited ${code}: ${log}`)));
  });
  const token = (JSON.parse(dev.stdout) as { token: string }).token;
  const post = await fetch(`${url}/api/v1/${token}/telemetry`, { method: 'POST', body: '{"t":1}' });
  t.equal(post.status, 200, "the bundle's daemon (uWS loads) stores telemetry");
  proc.kill('SIGTERM');
  t.equal(await exited, 0, 'and exits 0 on SIGTERM');
});

t.test('the unit and `npm start` give the daemon the same memory settings, and node takes them', async (t) => {
  const unit = readFileSync(join(REPO, 'systemd/outpost.service'), 'utf8');
  const exec = /^ExecStart=\/opt\/outpost\/bin\/node (.*) \/opt\/outpost\/dist\/src\/main\.js serve$/m.exec(unit);
  const unitFlags = (exec?.[1] ?? '').split(' ');
  t.ok(
    unitFlags.includes('--max-semi-space-size=2'),
    'the unit caps V8 young generation (docs/design/memory-budget.md)',
  );
  t.ok(
    unitFlags.includes('--max-old-space-size=512'),
    "the unit sizes V8's old generation for a gateway, not a server (docs/design/memory-budget.md)",
  );
  t.match(unit, /^Environment=MALLOC_ARENA_MAX=2$/m, 'the unit caps glibc arenas');
  t.match(
    unit,
    /^Environment=MALLOC_TRIM_THRESHOLD_=131072$/m,
    "the unit has glibc give a thread's arena back once 128 KiB are free at its top",
  );
  const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { scripts: { start: string } };
  t.equal(
    pkg.scripts.start,
    `MALLOC_ARENA_MAX=2 MALLOC_TRIM_THRESHOLD_=131072 node ${unitFlags.join(' ')} dist/src/main.js serve`,
    '`npm start` starts the daemon as the unit does',
  );
  t.ok(
    readFileSync(join(REPO, 'scripts/install.sh'), 'utf8').includes(
      `$prefix/bin/node ${unitFlags.join(' ')} $prefix/dist/src/main.js serve`,
    ),
    "install.sh's start by hand passes the unit's flags",
  );
  // a young generation of 2 MiB semi-spaces: V8 took the flag (an unknown or misspelt one is ignored with a warning)
  const r = run(process.execPath, [
    ...unitFlags,
    '-e',
    'const a=[];for(let i=0;i<2e5;i++)a.push({i});const s=require("v8").getHeapSpaceStatistics().find(x=>x.space_name==="new_space");console.log(s.space_size)',
  ]);
  t.equal(r.code, 0, `node runs with the unit's flags: ${r.stderr}`);
  t.ok(Number(r.stdout.trim()) <= 4 * 1024 * 1024, `new space ${r.stdout.trim()} bytes <= 2 semi-spaces of 2 MiB`);
  // the old generation's limit: V8 took it (its own default here is several GiB)
  const limit = run(process.execPath, [...unitFlags, '-p', 'require("v8").getHeapStatistics().heap_size_limit']);
  const mib = Number(limit.stdout.trim()) / 2 ** 20;
  t.ok(mib >= 512 && mib <= 600, `heap limit ${mib} MiB: the old generation's 512 and the young one's`);
  const install = readFileSync(join(REPO, 'scripts/install.sh'), 'utf8');
  t.ok(
    install.includes(`$prefix/bin/node ${unitFlags.join(' ')} $prefix/dist/src/main.js serve`),
    "install.sh's line to start the daemon by hand passes the unit's flags",
  );
  t.equal(r.stderr.trim(), '', 'node warns about no flag');
});
