/**
 * Failed MQTT CONNECTs are throttled as HTTP logins are (docs/mqtt.md "Failed logins"): after 10 refusals in a
 * minute for one credential (MQTT Basic user name, else client id) or from one address, CONNECTs with that
 * credential, or from that address, are refused for a minute without a look at the password (the right one too):
 * 3.1.1 return code 5, MQTT 5 0x9F. Unknown access tokens count for their address. Refusals are logged with the
 * address, client id and user name, escaped, at most a line a minute of each kind, and counted in
 * outpost_failures_total. Linux's loopback answers from any 127/8 address: each case has addresses of its own.
 */
import t from 'tap';
import { connackFrom, mqttPorts } from '../../helpers/mqtt.js';
import { type Gateway, addDevice, http, startGateway } from '../../helpers/server.js';

function metric(text: string, kind: string): number {
  const m = new RegExp(`^outpost_failures_total\\{kind="${kind}"\\} (\\d+)$`, 'm').exec(text);
  return m === null ? Number.NaN : Number(m[1]);
}

const refusedLines = (gw: Gateway): string[] => gw.logs.filter((l) => l.includes('mqtt: refused a CONNECT'));

const gw = await startGateway(t);
const port = mqttPorts(gw).port;
const basic = { clientId: 'cid-B', username: 'user-B', password: 'right-pw' };
await addDevice(gw.dataDir, 'basic-dev', ['--mqtt-basic', 'cid-B:user-B:right-pw']);
const dev = await addDevice(gw.dataDir, 'token-dev');

t.test('wrong MQTT Basic passwords lock the credential and the address; the right password is refused', async (t) => {
  t.equal(await connackFrom(port, '127.0.0.3', basic), 0, 'the right password connects before');
  const codes: Array<number | undefined> = [];
  for (let i = 0; i < 10; i++) codes.push(await connackFrom(port, '127.0.0.3', { ...basic, password: `wrong-${i}` }));
  t.same(codes, Array(10).fill(5), '10 wrong passwords: not authorized');
  t.equal(await connackFrom(port, '127.0.0.3', basic), 5, 'then the right password is refused (3.1.1: 5)');
  t.equal(
    await connackFrom(port, '127.0.0.3', { ...basic, protocolVersion: 5 }),
    0x9f,
    'MQTT 5: 0x9F connection rate exceeded',
  );
  t.equal(await connackFrom(port, '127.0.0.4', basic), 5, 'the credential is locked from any address');
  t.equal(
    await connackFrom(port, '127.0.0.3', { clientId: 'x', username: dev.token }),
    5,
    'the address is locked for any credential',
  );
  t.equal(
    await connackFrom(port, '127.0.0.5', { clientId: 'x', username: dev.token }),
    0,
    'another device from another address connects',
  );
  const lines = refusedLines(gw);
  t.equal(lines.filter((l) => /: wrong password/.test(l)).length, 1, 'one line for 10 wrong passwords');
  t.match(
    lines.find((l) => /wrong password/.test(l)),
    /mqtt: refused a CONNECT from 127\.0\.0\.3, client id "cid-B", user name "user-B": wrong password/,
    'it names the address, the client id and the user name',
  );
  t.equal(lines.filter((l) => /too many failed logins/.test(l)).length, 1, 'one line for the refusals while locked');
  t.notOk(
    gw.logs.some((l) => l.includes('wrong-') || l.includes('right-pw')),
    'no password in the log',
  );
  const metrics = (await http('GET', `${gw.url}/metrics`)).text;
  t.equal(metric(metrics, 'mqttLogin'), 10, 'outpost_failures_total{kind="mqttLogin"}');
  t.equal(metric(metrics, 'mqttLoginThrottled'), 4, 'outpost_failures_total{kind="mqttLoginThrottled"}');
});

t.test('unknown access tokens lock their address; a flood of them costs no more log lines', async (t) => {
  const codes: Array<number | undefined> = [];
  for (let i = 0; i < 200; i++)
    codes.push(await connackFrom(port, '127.0.0.6', { clientId: `c${i}`, username: `GUESSEDTOKEN${i}` }));
  t.same(codes.slice(0, 10), Array(10).fill(5), '10 unknown tokens: not authorized');
  t.same(codes.slice(10), Array(190).fill(5), 'then refused while the address is locked');
  t.equal(
    await connackFrom(port, '127.0.0.6', { clientId: 'x', username: dev.token }),
    5,
    'the valid token from that address too',
  );
  t.equal(await connackFrom(port, '127.0.0.7', { clientId: 'x', username: dev.token }), 0, 'from another, it connects');
  t.notOk(
    gw.logs.some((l) => l.includes('GUESSEDTOKEN')),
    'never a whole token, as the HTTP device API logs them',
  );
  t.equal(refusedLines(gw).length, 2, 'still one line of each kind within the minute');
  const metrics = (await http('GET', `${gw.url}/metrics`)).text;
  t.equal(metric(metrics, 'mqttLogin'), 20, 'the unknown tokens counted as refused CONNECTs');
  t.equal(metric(metrics, 'mqttLoginThrottled'), 4 + 191, 'and the refusals while locked');
});

t.test('what a client sends is escaped in the log line', async (t) => {
  const fresh = await startGateway(t);
  const code = await connackFrom(mqttPorts(fresh).port, '127.0.0.8', {
    clientId: 'evil\nwarn forged line',
    username: '\u001b[2J',
  });
  t.equal(code, 5);
  const lines = refusedLines(fresh);
  t.equal(lines.length, 1);
  t.match(lines[0], /client id "evil\\nwarn forged line", user name "\\u001b…"/, 'the newline escaped');
  t.notOk(
    fresh.logs.some((l) => l.startsWith('warn forged line') || l.includes('\u001b')),
    'no forged line, no control character',
  );
});
