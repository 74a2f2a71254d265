/**
 * Device-controlled text never drives the technician's terminal (docs/cli.md): names, types, keys and values
 * carrying escape sequences are shown with their controls escaped (`\x1b`) in every human output, local and
 * remote, piped and on a terminal (tmux); `--json` and `--csv` keep them exact; a cut to the column width never
 * splits an escape.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import t, { type Test } from 'tap';
import { fitLines, safeText, table } from '../../src/cli/format.js';
import { statusLines } from '../../src/cli/status.js';
import type { StatusJson } from '../../src/status/index.js';
import { MAIN, http, tempDir } from '../helpers/server.js';
import { hasTmux, ok, techGateway } from '../helpers/tech.js';
import { waitFor } from '../helpers/wait.js';

const EVIL = 'evil\x1b]0;PWNED\x07\x1b[31mRED\x1b[0m\rFAKE';
const EVIL_KEY = 'k\x1b[2J\x9b8m';
const LINK = '\x1b]8;;http://attacker.test\x1b\\click\x1b]8;;\x1b\\';
/** any C0 control but the newline that ends lines, DEL, or C1 control */
// biome-ignore lint/suspicious/noControlCharactersInRegex: the controls are what the test looks for
const RAW_CONTROL = /[\x00-\x09\x0b-\x1f\x7f-\x9f]/;

t.test('safeText and table cuts', async (t) => {
  t.equal(safeText(EVIL), 'evil\\x1b]0;PWNED\\x07\\x1b[31mRED\\x1b[0m\\x0dFAKE');
  t.equal(safeText('plain ü 漢'), 'plain ü 漢', 'printable text untouched');
  for (let width = 8; width <= 40; width++) {
    const out = table(['NAME', 'X'], [[EVIL, 'x']], width);
    t.notMatch(out, RAW_CONTROL, `width ${width}: no raw control`);
    const cell = (out.split('\n')[1] as string).split('  ')[0] as string;
    t.notMatch(cell, /\\(x[0-9a-f]?)?…/, `width ${width}: no escape cut in half (${cell})`);
  }
});

t.test("status: the sync's error (it names devices) escaped; fitted lines never cut an escape", async (t) => {
  const status = {
    version: '0.1.0',
    daemon: true,
    uptimeSec: 5,
    startedTs: 0,
    now: 60_000,
    clock: { synchronized: null },
    store: { liveBytes: 0, fileBytes: 0, maxDiskBytes: 0 },
    compaction: { backlogFragments: 0, compactedWindows: null },
    sync: {
      enabled: true,
      state: 'backoff',
      url: 'http://upstream.test',
      backlogPoints: 1,
      sentPoints: 0,
      droppedPoints: 0,
      lastError: `device ${EVIL} parked: the upstream refused it`,
      lastErrorTs: 1000,
    },
  } as unknown as StatusJson;
  const lines = statusLines(status);
  t.notMatch(lines.join('\n'), RAW_CONTROL, 'no raw control');
  t.match(lines.join('\n'), '\nlast error 0m 59s ago (', 'the error, on its own line');
  for (let width = 8; width <= 60; width++) {
    const out = fitLines([...lines, { cut: safeText(EVIL) }], width);
    t.ok(
      out.every((l) => [...l].length <= width),
      `width ${width}: every line fits`,
    );
    t.notMatch(out.join('\n'), /\\(x[0-9a-f]?)?…/, `width ${width}: no escape cut in half`);
  }
});

t.test('devices, latest, attributes, query and tail, local and remote, piped', async (t) => {
  const tg = await techGateway(t);
  const dev = await http('POST', `${tg.gw.url}/api/device?accessToken=EVIL1`, { name: 'evil-1', type: 'pump' }, tg.H);
  t.equal(dev.status, 200, dev.text);
  const values = { [EVIL_KEY]: EVIL, link: LINK };
  t.equal((await http('POST', `${tg.gw.url}/api/v1/EVIL1/telemetry`, values)).status, 200);
  t.equal((await http('POST', `${tg.gw.url}/api/v1/EVIL1/attributes`, values)).status, 200);

  for (const [mode, flags] of [
    ['local', tg.L],
    ['remote', tg.R],
  ] as const) {
    for (const args of [['devices'], ['latest', 'evil-1'], ['attributes', 'evil-1'], ['query', 'evil-1']]) {
      const what = `${mode} ${args.join(' ')}`;
      const out = ok(t, await tg.run([...args, ...flags]), what);
      t.notMatch(out, RAW_CONTROL, `${what}: no raw control character reaches stdout`);
      // names and types refuse control characters (docs/api.md): `devices` lists the device, the others its data
      t.match(out, args[0] === 'devices' ? 'evil-1' : '\\x1b]8;;http', `${what}: shown escaped`);
    }
    const json = JSON.parse(ok(t, await tg.run(['latest', 'evil-1', '--json', ...flags]), `${mode} latest --json`));
    t.equal(json[EVIL_KEY]?.[0]?.value, EVIL, `${mode}: --json keeps the value exact`);
    const csv = ok(t, await tg.run(['query', 'evil-1', '--csv', ...flags]), `${mode} query --csv`);
    t.ok(csv.includes('\x1b]8;;http://attacker.test'), `${mode}: --csv keeps the value exact`);
    await tailShowsEscaped(t, tg.env, [...flags], tg.gw.url);
  }
});

/** `tail` piped: a new point with escapes shows up escaped. */
async function tailShowsEscaped(t: Test, env: NodeJS.ProcessEnv, flags: string[], url: string): Promise<void> {
  const proc = spawn(process.execPath, [MAIN, 'tail', 'evil-1', ...flags], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout.on('data', (b: Buffer) => {
    out += b.toString('utf8');
  });
  try {
    await waitFor(
      async () => {
        if (out.includes('PWNED')) return true;
        await http('POST', `${url}/api/v1/EVIL1/telemetry`, { [EVIL_KEY]: EVIL });
        return false;
      },
      { interval: 50, message: 'the tail showing the point' },
    ).catch(() => undefined);
  } finally {
    proc.kill('SIGINT');
  }
  t.match(out, 'k\\x1b[2J\\x9b8m  evil\\x1b]0;PWNED\\x07', `tail ${flags[0]}: key and value escaped`);
  t.notMatch(out, RAW_CONTROL, `tail ${flags[0]}: no raw control character`);
}

t.test(
  'on a terminal (tmux): the title stays, the text shows escaped',
  { skip: hasTmux ? false : 'tmux is not installed (apt-get install -y tmux)' },
  async (t) => {
    const tg = await techGateway(t, { login: false });
    const dev = await http('POST', `${tg.gw.url}/api/device?accessToken=EVIL1`, { name: 'evil-1', type: 'pump' }, tg.H);
    t.equal(dev.status, 200, dev.text);
    t.equal((await http('POST', `${tg.gw.url}/api/v1/EVIL1/telemetry`, { [EVIL_KEY]: EVIL, link: LINK })).status, 200);
    const sock = `${tempDir(t)}/tmux.sock`;
    const tm = (...args: string[]): string => execFileSync('tmux', ['-S', sock, ...args], { encoding: 'utf8' });
    tm('new-session', '-d', '-x', '100', '-y', '30', '-e', 'TZ=UTC', '-e', 'OUTPOST_URL=', 'sh');
    t.teardown(() => {
      spawnSync('tmux', ['-S', sock, 'kill-server']);
    });
    tm('set-option', '-g', 'allow-rename', 'on');
    tm('set-option', '-g', 'set-titles', 'on');
    const titleBefore = tm('display-message', '-p', '#{pane_title}').trim();
    for (const cmd of ['devices', 'latest evil-1']) {
      tm(
        'send-keys',
        `clear; ${process.execPath} ${MAIN} ${cmd} --data-dir ${tg.gw.dataDir}; tmux -S ${sock} wait-for -S done`,
        'Enter',
      );
      tm('wait-for', 'done');
      const screen = tm('capture-pane', '-p');
      t.match(screen, cmd === 'devices' ? 'evil-1' : 'k\\x1b[2J\\x9b8m', `${cmd}: escaped on screen`);
      t.notMatch(screen, /^FAKE/m, `${cmd}: no line overwritten by a carriage return`);
      t.equal(tm('display-message', '-p', '#{pane_title}').trim(), titleBefore, `${cmd}: the title is not set`);
    }
  },
);
