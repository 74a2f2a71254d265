/**
 * What `outpost alarms` shows a technician's terminal (tmux, 80 columns, colour on): each alarm on one line
 * that fits, its id whole (what `ack` and `clear` take), the severity coloured, a type carrying terminal
 * controls shown escaped and the screen left alone; `ack` typed from what the screen showed reaches the daemon.
 */
import t from 'tap';
import { MAIN, addDevice, http, startGateway } from '../helpers/server.js';
import { adminHeaders } from '../helpers/mqtt.js';
import { hasTmux } from '../helpers/tech.js';
import { terminal } from '../helpers/terminal.js';

const skip = hasTmux ? false : 'tmux is not installed (apt-get install -y tmux)';

const ESC = String.fromCharCode(27);

/** the SGR parameters (`1`, `31`, ..) set just before the first `word` starting a line of `screen` */
function sgrBefore(screen: string, word: string): string[] {
  for (const line of screen.split('\n')) {
    const parts = line.split(ESC);
    // the text of each part after its sequence (`[..m`): the word must open the first text that is not empty
    const texts = parts.map((p, i) => (i === 0 ? p : p.slice(p.indexOf('m') + 1)));
    const at = texts.findIndex((x) => x !== '');
    if (at < 0 || !(texts[at] as string).startsWith(word)) continue;
    return parts.slice(1, at + 1).flatMap((p) => p.slice(1, p.indexOf('m')).split(';'));
  }
  return [];
}

t.test('outpost alarms at 80 columns: one line per alarm, its id whole, coloured, escaped', { skip }, async (t) => {
  const gw = await startGateway(t);
  const H = await adminHeaders(gw);
  const dev = await addDevice(gw.dataDir, 'freezer-north-warehouse-01');
  const raise = async (type: string, severity: string): Promise<string> => {
    const r = await http(
      'POST',
      `${gw.url}/api/alarm`,
      { type, severity, originator: { entityType: 'DEVICE', id: dev.id } },
      H,
    );
    if (r.status !== 200) throw new Error(r.text);
    return r.json<{ id: { id: string } }>().id.id;
  };
  const hot = await raise('High Temperature In The Cold Room', 'CRITICAL');
  const door = await raise('Door\x1b[2Jopen', 'MINOR');
  const term = terminal(t, { cols: 80, color: true });
  const text = term.run(`echo MARK; ${process.execPath} ${MAIN} alarms --data-dir ${gw.dataDir}`);
  const shown = { text, sgr: term.screenSgr() };
  const lines = shown.text.split('\n').map((l) => l.trimEnd());
  t.ok(lines.includes('MARK'), 'the line before the command is still on the screen', { screen: shown.text });
  t.same(term.wrapped(), [], 'no line wrapped');
  const rows = lines.filter((l) => /^(CRITICAL|MINOR)\s/.test(l));
  t.equal(rows.length, 2, 'one line per alarm', { screen: shown.text });
  t.ok(rows[0]?.endsWith(door) && rows[1]?.endsWith(hot), 'newest first, each id whole at the end of its line');
  t.ok(shown.text.includes('Door\\x1b'), 'the control shown as text');
  const critical = sgrBefore(shown.sgr, 'CRITICAL');
  t.ok(critical.includes('1') && critical.includes('31'), `CRITICAL in bold red on the screen (${critical})`);
  t.ok(sgrBefore(shown.sgr, 'MINOR').includes('33'), 'MINOR in yellow on the screen');

  const acked = term.run(`${process.execPath} ${MAIN} alarms ack ${hot} --data-dir ${gw.dataDir}`);
  t.match(acked.replace(/\n/g, ''), new RegExp(`alarm ${hot} acknowledged: CRITICAL`), 'acknowledged');
  const st = await http('GET', `${gw.url}/api/alarm/info/${hot}`, undefined, H);
  t.equal(st.json<{ status: string }>().status, 'ACTIVE_ACK', 'the daemon has it at once');
});
