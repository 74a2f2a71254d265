/**
 * Device credentials (docs/api.md "Device credentials", docs/mqtt.md "Logging in"): TB's REST for them, MQTT
 * Basic logins with MQTT.js and mosquitto_pub in TB's order and with TB's refusal codes, and what a change of
 * credentials does to live sessions and old tokens. X.509 over TLS: mqtt-x509.test.ts.
 */
import { createHash } from 'node:crypto';
import mqttPacket from 'mqtt-packet';
import { type IClientOptions, type MqttClient, connectAsync } from 'mqtt';
import t from 'tap';
import { closed, hasBinary, latest, mqttPorts, rawSocket, run, sleep } from '../helpers/mqtt.js';
import {
  type Gateway,
  type Teardown,
  addDevice,
  cliJson,
  http,
  startGateway,
  waitLongPoll,
} from '../helpers/server.js';
import { addUser, adminHeaders, authHeaders, login } from '../helpers/users.js';

const sha3 = (s: string): string => createHash('sha3-256').update(s).digest('hex');
const basic = (clientId: string | null, userName: string | null, password: string | null): string =>
  JSON.stringify({ clientId, userName, password });

interface Credentials {
  id: { id: string };
  createdTime: number;
  deviceId: { entityType: string; id: string };
  credentialsType: string;
  credentialsId: string;
  credentialsValue: string | null;
}

/** The CONNACK code a CONNECT gets: 0 when accepted (the client is then ended), else the refusal's code. */
async function connackCode(gw: Gateway, opts: IClientOptions): Promise<number> {
  const { port } = mqttPorts(gw);
  try {
    const c = await connectAsync(`mqtt://127.0.0.1:${port}`, {
      reconnectPeriod: 0,
      connectTimeout: 5_000,
      protocolVersion: 4,
      ...opts,
    });
    await c.endAsync(true);
    return 0;
  } catch (err) {
    return (err as { code?: number }).code ?? -1;
  }
}

async function connected(t: Teardown, gw: Gateway, opts: IClientOptions): Promise<MqttClient> {
  const { port } = mqttPorts(gw);
  const c = await connectAsync(`mqtt://127.0.0.1:${port}`, {
    reconnectPeriod: 0,
    connectTimeout: 5_000,
    protocolVersion: 4,
    ...opts,
  });
  t.teardown(() => {
    c.end(true);
  });
  return c;
}

/** The latest value of one key (null when the device has none: TB answers the key with a null value). */
async function latestValue(gw: Gateway, admin: Record<string, string>, id: string, key: string): Promise<unknown> {
  return (await latest(gw, admin, id, key))[key]?.[0]?.value ?? null;
}

async function setup(t: Teardown): Promise<{ gw: Gateway; admin: Record<string, string> }> {
  const gw = await startGateway(t);
  return { gw, admin: await adminHeaders(gw) };
}

const getCreds = async (gw: Gateway, admin: Record<string, string>, id: string): Promise<Credentials> => {
  const r = await http('GET', `${gw.url}/api/device/${id}/credentials`, undefined, admin);
  if (r.status !== 200) throw new Error(`credentials of ${id}: ${r.status} ${r.text}`);
  return r.json<Credentials>();
};

const postCreds = (gw: Gateway, headers: Record<string, string>, body: unknown) =>
  http('POST', `${gw.url}/api/device/credentials`, body as object, headers);

/** A device made with TB's device-with-credentials call; its id. */
async function deviceWith(
  gw: Gateway,
  admin: Record<string, string>,
  name: string,
  credentials: Record<string, unknown>,
  device: Record<string, unknown> = {},
): Promise<string> {
  const r = await http(
    'POST',
    `${gw.url}/api/device-with-credentials`,
    { device: { name, ...device }, credentials },
    admin,
  );
  if (r.status !== 200) throw new Error(`device-with-credentials ${name}: ${r.status} ${r.text}`);
  return r.json<{ id: { id: string } }>().id.id;
}

t.test('REST: GET, change, POST back, as TB; its 400s; one namespace of credentials ids', async (t) => {
  const { gw, admin } = await setup(t);
  const d1 = await addDevice(gw.dataDir, 'cred-1');
  const d2 = await addDevice(gw.dataDir, 'cred-2');

  const c = await getCreds(gw, admin, d1.id);
  t.match(c, {
    id: { id: /^[0-9a-f-]{36}$/ },
    deviceId: { entityType: 'DEVICE', id: d1.id },
    credentialsType: 'ACCESS_TOKEN',
    credentialsId: d1.token,
    credentialsValue: null,
  });

  const changed = await postCreds(gw, admin, {
    ...c,
    credentialsType: 'MQTT_BASIC',
    credentialsValue: basic('plc-1', 'plc', 's3cret'),
  });
  t.equal(changed.status, 200, changed.text);
  const want = {
    id: c.id,
    credentialsType: 'MQTT_BASIC',
    credentialsId: sha3('plc-1|plc'),
    credentialsValue: basic('plc-1', 'plc', 's3cret'),
  };
  t.match(changed.json(), want);
  const read = await getCreds(gw, admin, d1.id);
  t.match(read, want, 'GET gives the password back in clear, as TB');
  const again = await postCreds(gw, admin, read);
  t.equal(again.status, 200);
  t.same(again.json(), read, 'the same object posted back changes nothing');

  // TB's 400s, errorCode 31; none of them changes anything
  const refusals: Array<[Record<string, unknown>, string]> = [
    [{ credentialsValue: basic(null, null, 'x') }, 'Both mqtt client id and user name are empty!'],
    [{ credentialsValue: basic('', '', null) }, 'Both mqtt client id and user name are empty!'],
    [{ credentialsValue: basic('c', null, 'p') }, 'Password cannot be specified along with client id'],
    [{ credentialsValue: '{not json' }, 'Invalid credentials body for simple mqtt credentials!'],
    [{ credentialsValue: '{"clientId":"c","extra":1}' }, 'Invalid credentials body for simple mqtt credentials!'],
    [{ credentialsType: null }, 'Device credentials type should be specified'],
    [{ credentialsType: 'ACCESS_TOKEN', credentialsId: '' }, 'Device credentials id should be specified!'],
    [
      { id: null, credentialsType: 'ACCESS_TOKEN', credentialsId: 'fresh' },
      'Credentials for this device are already specified!',
    ],
    [
      { credentialsType: 'ACCESS_TOKEN', credentialsId: d2.token },
      'Device credentials are already assigned to another device!',
    ],
    // a user name alone is its own credentials id: the same namespace as tokens
    [{ credentialsValue: basic(null, d2.token, 'pw') }, 'Device credentials are already assigned to another device!'],
  ];
  for (const [patch, message] of refusals) {
    const r = await postCreds(gw, admin, { ...read, ...patch });
    t.equal(r.status, 400, `${JSON.stringify(patch)} → 400`);
    t.match(r.json(), { status: 400, errorCode: 31, message });
  }
  t.same(await getCreds(gw, admin, d1.id), read, 'refused posts changed nothing');

  // the other way: an access token taking an MQTT Basic id is refused too
  const d3 = await deviceWith(gw, admin, 'cred-3', {
    credentialsType: 'MQTT_BASIC',
    credentialsValue: basic(null, 'only-user', null),
  });
  t.equal((await getCreds(gw, admin, d3)).credentialsId, 'only-user');
  const taken = await postCreds(gw, admin, { ...(await getCreds(gw, admin, d2.id)), credentialsId: 'only-user' });
  t.match(taken.json(), {
    status: 400,
    errorCode: 31,
    message: 'Device credentials are already assigned to another device!',
  });

  const unknown = await postCreds(gw, admin, {
    ...read,
    deviceId: { entityType: 'DEVICE', id: '0a8f1d2e-0000-4000-8000-000000000000' },
  });
  t.equal(unknown.status, 404);

  // the CLI shows them as REST does
  const shown = await cliJson<Credentials>(['device', 'credentials', 'cred-1', '--data-dir', gw.dataDir]);
  t.match(shown, want);
});

t.test('device-with-credentials is all or nothing; a customer user cannot change credentials', async (t) => {
  const { gw, admin } = await setup(t);
  const id = await deviceWith(gw, admin, 'with-basic', {
    credentialsType: 'MQTT_BASIC',
    credentialsValue: basic('wb', 'wb-user', 'wb-pass'),
  });
  t.match(await getCreds(gw, admin, id), { credentialsType: 'MQTT_BASIC', credentialsId: sha3('wb|wb-user') });

  const byName = (name: string) => http('GET', `${gw.url}/api/tenant/devices?deviceName=${name}`, undefined, admin);
  const bad = await http(
    'POST',
    `${gw.url}/api/device-with-credentials`,
    {
      device: { name: 'never-1' },
      credentials: { credentialsType: 'MQTT_BASIC', credentialsValue: basic(null, null, null) },
    },
    admin,
  );
  t.match(bad.json(), { status: 400, errorCode: 31, message: 'Both mqtt client id and user name are empty!' });
  t.equal((await byName('never-1')).status, 404, 'refused credentials: no device either');
  const dup = await http(
    'POST',
    `${gw.url}/api/device-with-credentials`,
    {
      device: { name: 'never-2' },
      credentials: { credentialsType: 'MQTT_BASIC', credentialsValue: basic('wb', 'wb-user', 'x') },
    },
    admin,
  );
  t.match(dup.json(), {
    status: 400,
    errorCode: 31,
    message: 'Device credentials are already assigned to another device!',
  });
  t.equal((await byName('never-2')).status, 404);
  const noCreds = await http('POST', `${gw.url}/api/device-with-credentials`, { device: { name: 'never-3' } }, admin);
  t.equal(noCreds.status, 400);
  t.equal((await byName('never-3')).status, 404);

  const customer = await cliJson(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'Acme']);
  await http('POST', `${gw.url}/api/customer/${customer.id}/device/${id}`, undefined, admin);
  await addUser(gw.dataDir, 'cu@example.com', 'secret-pass-2', 'CUSTOMER_USER', 'Acme');
  const cu = authHeaders((await login(gw, 'cu@example.com', 'secret-pass-2')).token);
  const mine = await getCreds(gw, cu, id);
  const r = await postCreds(gw, cu, { ...mine, credentialsType: 'ACCESS_TOKEN', credentialsId: 'stolen-token' });
  t.equal(r.status, 403);
  t.equal(r.json<{ errorCode: number }>().errorCode, 20);
  const withCreds = await http(
    'POST',
    `${gw.url}/api/device-with-credentials`,
    { device: { name: 'cu-dev' }, credentials: { credentialsType: 'ACCESS_TOKEN', credentialsId: 'cu-token' } },
    cu,
  );
  t.equal(withCreds.status, 403);
  t.same(await getCreds(gw, admin, id), mine, 'unchanged');
});

t.test("MQTT login in TB's order with TB's codes, 3.1.1 and 5 (MQTT.js)", async (t) => {
  const { gw, admin } = await setup(t);
  const token = await addDevice(gw.dataDir, 'tok');
  const byClient = await deviceWith(gw, admin, 'by-client', {
    credentialsType: 'MQTT_BASIC',
    credentialsValue: basic('cid-A', null, null),
  });
  const full = await deviceWith(gw, admin, 'full', {
    credentialsType: 'MQTT_BASIC',
    credentialsValue: basic('cid-B', 'user-B', 'pw-B'),
  });
  await deviceWith(gw, admin, 'by-user', {
    credentialsType: 'MQTT_BASIC',
    credentialsValue: basic(null, 'user-C', 'pw-C'),
  });
  const open = await deviceWith(gw, admin, 'no-pass', {
    credentialsType: 'MQTT_BASIC',
    credentialsValue: basic('cid-D', 'user-D', null),
  });

  for (const v of [4, 5] as const) {
    const bad = v === 5 ? 0x86 : 5;
    const at = `(MQTT ${v === 5 ? '5' : '3.1.1'})`;
    const o = { protocolVersion: v };
    t.equal(await connackCode(gw, { ...o, clientId: 'cid-A' }), 0, `client id alone ${at}`);
    t.equal(
      await connackCode(gw, { ...o, clientId: 'cid-B', username: 'user-B', password: 'pw-B' }),
      0,
      `all three ${at}`,
    );
    t.equal(
      await connackCode(gw, { ...o, clientId: 'any-id', username: 'user-C', password: 'pw-C' }),
      0,
      `user name alone ${at}`,
    );
    t.equal(
      await connackCode(gw, { ...o, clientId: 'cid-D', username: 'user-D', password: 'whatever' }),
      0,
      `no stored password ${at}`,
    );
    t.equal(await connackCode(gw, { ...o, clientId: 'x1', username: token.token }), 0, `access token ${at}`);
    t.equal(
      await connackCode(gw, { ...o, clientId: 'cid-B', username: 'user-B', password: 'wrong' }),
      bad,
      `wrong password ${at}`,
    );
    t.equal(await connackCode(gw, { ...o, clientId: 'cid-B', username: 'user-B' }), bad, `missing password ${at}`);
    t.equal(
      await connackCode(gw, { ...o, clientId: 'other', username: 'user-C', password: 'nope' }),
      bad,
      `wrong password, user name alone ${at}`,
    );
    t.equal(
      await connackCode(gw, { ...o, clientId: 'x2', username: 'no-such-user', password: 'p' }),
      bad,
      `unknown user ${at}`,
    );
    t.equal(
      await connackCode(gw, { ...o, clientId: 'no-such-client' }),
      v === 5 ? 0x85 : 2,
      `a client id no credentials name: identifier rejected ${at}`,
    );
    t.equal(
      await connackCode(gw, { ...o, clientId: 'cid-B' }),
      v === 5 ? 0x85 : 2,
      `a client id that needs a user name ${at}`,
    );
  }

  // the CLI sets MQTT Basic credentials too; the password is all after the second ':'
  const cliBasic = await cliJson([
    'device',
    'add',
    '--data-dir',
    gw.dataDir,
    '--name',
    'cli-basic',
    '--mqtt-basic',
    'cli-c:cli-u:pa:ss',
  ]);
  t.match(cliBasic, { credentialsType: 'MQTT_BASIC', credentialsId: sha3('cli-c|cli-u') });
  t.equal(
    await connackCode(gw, { clientId: 'cli-c', username: 'cli-u', password: 'pa:ss' }),
    0,
    'device add --mqtt-basic',
  );
  t.equal(await connackCode(gw, { clientId: 'cli-c', username: 'cli-u', password: 'pa' }), 5);

  // each kind lands its data on its device
  for (const [opts, id] of [
    [{ clientId: 'cid-A' }, byClient],
    [{ clientId: 'cid-B', username: 'user-B', password: 'pw-B' }, full],
    [{ clientId: 'cid-D', username: 'user-D' }, open],
  ] as const) {
    const c = await connected(t, gw, opts);
    await c.publishAsync('v1/devices/me/telemetry', '{"kind":1}', { qos: 1 });
    t.match(await latest(gw, admin, id, 'kind'), { kind: [{ value: '1' }] });
    await c.endAsync();
  }

  // a refused CONNECT stores nothing, even with a PUBLISH right behind it in the same write
  const s = await rawSocket(t, mqttPorts(gw).port);
  const gen = (p: object): Buffer => mqttPacket.generate(p as mqttPacket.Packet);
  s.write(
    Buffer.concat([
      gen({
        cmd: 'connect',
        protocolId: 'MQTT',
        protocolVersion: 4,
        clean: true,
        keepalive: 30,
        clientId: 'cid-B',
        username: 'user-B',
        password: Buffer.from('wrong'),
      }),
      gen({
        cmd: 'publish',
        topic: 'v1/devices/me/telemetry',
        payload: Buffer.from('{"leak":1}'),
        qos: 1,
        messageId: 1,
        dup: false,
        retain: false,
      }),
    ]),
  );
  await s.ended;
  t.equal(Buffer.concat(s.received).subarray(0, 4).toString('hex'), '20020005', 'CONNACK 5, nothing else');
  t.equal(await latestValue(gw, admin, full, 'leak'), null, 'nothing stored');
});

t.test(
  'mosquitto_pub -i -u -P',
  {
    skip: hasBinary('mosquitto_pub')
      ? false
      : 'mosquitto_pub not installed (Debian: apt-get install mosquitto-clients)',
  },
  async (t) => {
    const { gw, admin } = await setup(t);
    const { port } = mqttPorts(gw);
    const id = await deviceWith(gw, admin, 'mosq-basic', {
      credentialsType: 'MQTT_BASIC',
      credentialsValue: basic('mosq-cid', 'mosq-user', 'mosq-pw'),
    });
    const cidOnly = await deviceWith(gw, admin, 'mosq-cid-only', {
      credentialsType: 'MQTT_BASIC',
      credentialsValue: basic('only-cid', null, null),
    });
    const pub = (extra: string[], body: string) =>
      run('mosquitto_pub', [
        '-d',
        '-q',
        '1',
        '-h',
        '127.0.0.1',
        '-p',
        String(port),
        '-t',
        'v1/devices/me/telemetry',
        ...extra,
        '-m',
        body,
      ]);

    const ok = await pub(['-i', 'mosq-cid', '-u', 'mosq-user', '-P', 'mosq-pw'], '{"mosq":7}');
    t.equal(ok.code, 0, ok.out);
    t.match(await latest(gw, admin, id, 'mosq'), { mosq: [{ value: '7' }] });
    const cid = await pub(['-i', 'only-cid'], '{"mosq":8}');
    t.equal(cid.code, 0, cid.out);
    t.match(await latest(gw, admin, cidOnly, 'mosq'), { mosq: [{ value: '8' }] });

    const wrong = await pub(['-i', 'mosq-cid', '-u', 'mosq-user', '-P', 'nope'], '{"mosq":9}');
    t.not(wrong.code, 0);
    t.match(wrong.out, /not authori[sz]ed|bad user name or password/i);
    const unknownId = await pub(['-i', 'nobody-here'], '{"mosq":9}');
    t.not(unknownId.code, 0);
    t.match(unknownId.out, /identifier rejected/i);
    const v5 = await pub(['-V', 'mqttv5', '-i', 'nobody-here'], '{"mosq":9}');
    t.not(v5.code, 0);
    t.match(v5.out, /client identifier not valid/i);
    t.match(await latest(gw, admin, id, 'mosq'), { mosq: [{ value: '7' }] }, 'refused clients stored nothing');
  },
);

t.test('a change of credentials closes live sessions; the old token is refused on HTTP and MQTT', async (t) => {
  const { gw, admin } = await setup(t);
  const dev = await addDevice(gw.dataDir, 'rotating');
  const other = await addDevice(gw.dataDir, 'bystander');
  const v5 = await connected(t, gw, { protocolVersion: 5, username: dev.token, clientId: 'rot-5' });
  const bystander = await connected(t, gw, { username: other.token, clientId: 'by-4' });
  let disconnectCode: number | undefined;
  v5.on('disconnect', (p) => {
    disconnectCode = p.reasonCode;
  });
  t.equal((await http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, { before: 1 })).status, 200);

  const c = await getCreds(gw, admin, dev.id);
  // posting the same object back closes nothing
  t.equal((await postCreds(gw, admin, c)).status, 200);
  await v5.publishAsync('v1/devices/me/telemetry', '{"still":1}', { qos: 1 });
  t.ok(v5.connected, 'same credentials posted back: session kept');

  // a long-poll held with the old token must not get what comes next: it is answered 401 at the change
  const held = http('GET', `${gw.url}/api/v1/${dev.token}/rpc?timeout=30000`);
  await waitLongPoll(gw, admin, (st) => st.rpcPolls === 1);
  const r = await postCreds(gw, admin, {
    ...c,
    credentialsType: 'MQTT_BASIC',
    credentialsValue: basic('rot', 'rot-user', 'rot-pw'),
  });
  t.equal(r.status, 200, r.text);
  await closed(v5);
  t.equal(disconnectCode, 0x98, 'MQTT 5: DISCONNECT administrative action');
  t.equal((await held).status, 401, 'the long-poll held with the old token: 401');
  t.equal(
    (await http('POST', `${gw.url}/api/v1/${dev.token}/telemetry`, { after: 1 })).status,
    401,
    'old token: HTTP 401',
  );
  t.equal(await connackCode(gw, { username: dev.token, clientId: 'rot-4' }), 5, 'old token: MQTT refused');
  t.equal(await connackCode(gw, { protocolVersion: 5, username: dev.token }), 0x86);
  t.equal(
    await connackCode(gw, { clientId: 'rot', username: 'rot-user', password: 'rot-pw' }),
    0,
    'new credentials work',
  );
  t.equal(await latestValue(gw, admin, dev.id, 'after'), null, 'nothing stored by the old token');
  t.ok(bystander.connected, "another device's session stays");
  await bystander.publishAsync('v1/devices/me/telemetry', '{"fine":1}', { qos: 1 });

  // and back to a new token: the MQTT Basic ids stop working, the new token works on both transports
  const back = await postCreds(gw, admin, {
    ...(await getCreds(gw, admin, dev.id)),
    credentialsType: 'ACCESS_TOKEN',
    credentialsId: 'fresh-token-1',
    credentialsValue: null,
  });
  t.equal(back.status, 200, back.text);
  t.equal(await connackCode(gw, { clientId: 'rot', username: 'rot-user', password: 'rot-pw' }), 5);
  t.equal(await connackCode(gw, { username: 'fresh-token-1' }), 0);
  t.equal((await http('POST', `${gw.url}/api/v1/fresh-token-1/telemetry`, { fresh: 1 })).status, 200);
  // an MQTT Basic user name is no access token over HTTP (TB: tokens only there)
  await postCreds(gw, admin, {
    ...(await getCreds(gw, admin, dev.id)),
    credentialsType: 'MQTT_BASIC',
    credentialsValue: basic(null, 'http-user', null),
  });
  t.equal((await http('POST', `${gw.url}/api/v1/http-user/telemetry`, { x: 1 })).status, 401);
  await sleep(0);
});

t.test('a gateway logging in with MQTT Basic publishes for its sub-devices', async (t) => {
  const { gw, admin } = await setup(t);
  await deviceWith(
    gw,
    admin,
    'basic-gw',
    { credentialsType: 'MQTT_BASIC', credentialsValue: basic('gw-cid', 'gw-user', 'gw-pw') },
    { additionalInfo: { gateway: true } },
  );
  const c = await connected(t, gw, { clientId: 'gw-cid', username: 'gw-user', password: 'gw-pw' });
  await c.publishAsync(
    'v1/gateway/telemetry',
    JSON.stringify({ 'field-1': [{ ts: Date.now(), values: { level: 3 } }] }),
    { qos: 1 },
  );
  const sub = await http('GET', `${gw.url}/api/tenant/devices?deviceName=field-1`, undefined, admin);
  t.equal(sub.status, 200);
  t.match(await latest(gw, admin, sub.json<{ id: { id: string } }>().id.id, 'level'), { level: [{ value: '3' }] });
  // provisioning by client id, as TB: accepted at once whatever else the CONNECT says
  t.equal(await connackCode(gw, { clientId: 'provision' }), 0);
});
