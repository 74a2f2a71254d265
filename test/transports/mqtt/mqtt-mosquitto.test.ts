/**
 * Debian's mosquitto clients against the daemon, in the forms ThingsBoard's getting-started pages use
 * (`mosquitto_pub -d -q 1 -h HOST -t "v1/devices/me/telemetry" -u "$TOKEN" -m '{"temperature":25}'`), MQTT
 * 3.1.1 and 5. Skipped where mosquitto-clients is not installed.
 */
import t from 'tap';
import { adminHeaders, hasBinary, latest, mqttPorts, run, sleep } from '../../helpers/mqtt.js';
import { addDevice, http, startGateway } from '../../helpers/server.js';

const skip =
  hasBinary('mosquitto_pub') && hasBinary('mosquitto_sub')
    ? false
    : 'mosquitto_pub/mosquitto_sub not installed (Debian: apt-get install mosquitto-clients)';

t.test("mosquitto_pub and mosquitto_sub as in TB's docs", { skip }, async (t) => {
  const gw = await startGateway(t);
  const { port } = mqttPorts(gw);
  const dev = await addDevice(gw.dataDir, 'mosq-dev');
  const admin = await adminHeaders(gw);
  const common = ['-h', '127.0.0.1', '-p', String(port)];

  const pub = await run('mosquitto_pub', [
    '-d',
    '-q',
    '1',
    ...common,
    '-t',
    'v1/devices/me/telemetry',
    '-u',
    dev.token,
    '-m',
    '{"temperature":25}',
  ]);
  t.equal(pub.code, 0, pub.out);
  t.match(pub.out, /received PUBACK/);
  t.equal((await latest(gw, admin, dev.id, 'temperature'))['temperature']?.[0]?.value, '25');

  const v5 = await run('mosquitto_pub', [
    '-V',
    'mqttv5',
    '-q',
    '1',
    ...common,
    '-t',
    'v1/devices/me/attributes',
    '-u',
    dev.token,
    '-m',
    '{"fw":"2.1"}',
  ]);
  t.equal(v5.code, 0, v5.out);
  t.same((await http('GET', `${gw.url}/api/v1/${dev.token}/attributes?clientKeys=fw`)).json(), {
    client: { fw: '2.1' },
  });

  const refused = await run('mosquitto_pub', [
    '-q',
    '1',
    ...common,
    '-t',
    'v1/devices/me/telemetry',
    '-u',
    'wrong-token',
    '-m',
    '{"x":1}',
  ]);
  t.not(refused.code, 0);
  t.match(refused.out, /not authori[sz]ed/i);

  // server-side RPC to a mosquitto_sub that waits for one message
  const sub = run('mosquitto_sub', [
    '-v',
    '-C',
    '1',
    '-W',
    '8',
    ...common,
    '-u',
    dev.token,
    '-t',
    'v1/devices/me/rpc/request/+',
  ]);
  await sleep(500);
  const rpc = await http(
    'POST',
    `${gw.url}/api/plugins/rpc/oneway/${dev.id}`,
    { method: 'setLed', params: { on: true } },
    admin,
  );
  t.equal(rpc.status, 200);
  const got = await sub;
  t.equal(got.code, 0, got.out);
  t.equal(got.out.trim(), 'v1/devices/me/rpc/request/1 {"method":"setLed","params":{"on":true}}');

  // a wildcard subscription is refused
  const wild = await run('mosquitto_sub', ['-C', '1', '-W', '3', ...common, '-u', dev.token, '-t', 'v1/devices/#']);
  t.match(wild.out, /denied/i, 'mosquitto_sub is told its subscription was refused');
});
