/**
 * One daemon per data dir and per port: a second `serve` is refused at once with one line naming what is in
 * use and the pid holding it, changes nothing, and the first keeps answering. Two daemons over one store each
 * kept their own write-ahead log and lost acknowledged points at the next kill -9; here, after the refused
 * attempts, a kill -9 loses nothing acknowledged, and the kernel-held lock does not block the restart.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { mqttPorts } from '../helpers/mqtt.js';
import { readEntity } from '../helpers/readback.js';
import { type Gateway, MAIN, addDevice, http, startGateway, tempDir } from '../helpers/server.js';

interface Exit {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** `outpost serve ...args`, to its exit (bounded: a daemon that starts is killed and reported as such) */
function serve(args: string[], env: Record<string, string> = {}): Promise<Exit> {
  const started = Date.now();
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, [MAIN, 'serve', ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (b: Buffer) => {
      stdout += b.toString();
    });
    proc.stderr.on('data', (b: Buffer) => {
      stderr += b.toString();
    });
    const timer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
    proc.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: Date.now() - started });
    });
  });
}

t.test(
  'a second daemon on the same data dir or port is refused; kill -9 then loses nothing acknowledged',
  async (t) => {
    const gw = await startGateway(t);
    const dev = await addDevice(gw.dataDir, 'meter');
    const post = async (ts: number): Promise<number> =>
      (await http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, { ts, values: { n: ts } })).status;

    // a steady stream of posts across both refused attempts: every 200 must survive the kill -9 below
    const acked: number[] = [];
    let posting = true;
    const poster = (async () => {
      for (let ts = 1; posting; ts++) if ((await post(ts)) === 200) acked.push(ts);
    })();

    const sameDir = await serve(['--host', '127.0.0.1', '--port', '0', '--data-dir', gw.dataDir]);
    t.equal(sameDir.code, 1, 'same data dir: exit 1');
    t.equal(sameDir.stdout, '', 'same data dir: nothing on stdout (no log line: it never started)');
    t.match(
      sameDir.stderr,
      new RegExp(
        `^outpost: data dir \\S+ is in use by another outpost serve \\(pid ${gw.proc.pid}\\); nothing was changed\\n$`,
      ),
      'same data dir: one line naming the dir and the pid',
    );
    t.ok(sameDir.ms < 10_000, `same data dir: refused at once (${sameDir.ms} ms)`);

    const otherDir = join(tempDir(t), 'other');
    const samePort = await serve(['--host', '127.0.0.1', '--port', String(gw.port), '--data-dir', otherDir]);
    t.equal(samePort.code, 1, 'same port: exit 1');
    t.match(
      samePort.stderr,
      new RegExp(
        `^outpost: cannot listen on 127\\.0\\.0\\.1:${gw.port}: the port is in use by pid ${gw.proc.pid} \\([^\\n]*\\); nothing was changed\\n$`,
      ),
      'same port: one line naming the port and the pid',
    );
    t.notOk(existsSync(otherDir), 'same port: the refused daemon did not even create its data dir');

    // its MQTT port: refused before the store is created too, naming the port and the pid
    const mqttPort = mqttPorts(gw).port;
    const sameMqtt = await serve(['--host', '127.0.0.1', '--port', '0', '--data-dir', otherDir], {
      OUTPOST_MQTT_PORT: String(mqttPort),
    });
    t.equal(sameMqtt.code, 1, 'same MQTT port: exit 1');
    t.match(
      sameMqtt.stderr,
      new RegExp(
        `^outpost: cannot listen for MQTT on 127\\.0\\.0\\.1:${mqttPort}: the port is in use by pid ${gw.proc.pid} \\([^\\n]*\\); nothing was changed: give MQTT another port with OUTPOST_MQTT_PORT or mqtt\\.port \\(0 turns it off\\)\\n$`,
      ),
      'same MQTT port: one line naming the port, the pid and how to choose another',
    );
    t.notOk(existsSync(otherDir), 'same MQTT port: the refused daemon did not create its data dir');

    // the wildcard address overlaps the first daemon's 127.0.0.1 too
    const wildcard = await serve(['--host', '0.0.0.0', '--port', String(gw.port), '--data-dir', otherDir]);
    t.equal(wildcard.code, 1, '0.0.0.0 on the same port: exit 1');

    // the first daemon still answers, alone on its port (no request lands on another process)
    const before = acked.length;
    for (let i = 0; i < 20; i++) t.equal(await post(1_000_000 + i), 200, `the first daemon answers (${i})`);
    for (let i = 0; i < 20; i++) acked.push(1_000_000 + i);
    posting = false;
    await poster;
    t.ok(before > 0, `posts were acknowledged during the refused attempts (${before})`);

    t.equal(await gw.stop('SIGKILL'), null, 'killed -9');
    const dump = await readEntity(gw.dataDir, dev.id);
    const stored = new Set((dump.points['n'] ?? []).map((p) => p.ts));
    t.equal(
      acked.filter((ts) => !stored.has(ts)).length,
      0,
      `every acknowledged point survived the kill -9 (${acked.length})`,
    );

    // the kernel dropped the lock with the process: the restart is not blocked
    const again = await startGateway(t, { dataDir: gw.dataDir });
    const latest = await http('POST', `${again.url}/api/v1/${dev.token}/telemetry`, {
      ts: 3_000_000,
      values: { n: 1 },
    });
    t.equal(latest.status, 200, 'the restarted daemon takes data');
    t.equal(await again.stop(), 0, 'and stops cleanly');
  },
);

t.test('the store and its secrets are private to the daemon user whatever the umask', async (t) => {
  const dataDir = join(tempDir(t), 'data');
  const old = process.umask(0o000); // children inherit it: a careless shell
  let gw: Gateway;
  try {
    gw = await startGateway(t, { dataDir });
  } finally {
    process.umask(old);
  }
  const dev = await addDevice(dataDir, 'sensor');
  t.equal((await http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, { t: 1 })).status, 200);
  t.equal(await gw.stop(), 0);
  t.equal(statSync(dataDir).mode & 0o777, 0o700, 'data dir 0700');
  const files = [
    ...readdirSync(dataDir).filter((f) => f !== 'wal'),
    ...readdirSync(join(dataDir, 'wal')).map((f) => join('wal', f)),
  ];
  t.ok(
    files.includes('outpost.mdb') && files.includes('outpost.mdb-lock') && files.includes('jwt.key'),
    files.join(' '),
  );
  for (const f of files) {
    const mode = statSync(join(dataDir, f)).mode & 0o777;
    t.equal(mode, statSync(join(dataDir, f)).isDirectory() ? 0o700 : 0o600, `${f} is ${mode.toString(8)}`);
  }

  // an admin command creating the store on its own (no daemon yet) does the same
  const byCli = join(tempDir(t), 'cli-made');
  const old2 = process.umask(0o000);
  try {
    await addDevice(byCli, 'x');
  } finally {
    process.umask(old2);
  }
  t.equal(statSync(byCli).mode & 0o777, 0o700, 'a data dir made by `device add` is 0700');
  t.equal(statSync(join(byCli, 'outpost.mdb')).mode & 0o777, 0o600, 'its outpost.mdb 0600');
  t.equal(statSync(join(byCli, 'outpost.mdb-lock')).mode & 0o777, 0o600, 'its lock file 0600');
});
