/**
 * Device profiles (docs/api.md "Device profiles"): a fresh store's `default` profile; a device's type is its
 * profile's name, found or created from every place a device is created (REST, CLI, MQTT Gateway API,
 * provisioning); a device created with a profile id takes its name; renaming a profile renames its devices'
 * type; names and provision keys are unique; delete, default, paging; provisioning per profile over HTTP and
 * MQTT, the config's key standing for the default profile; a store from before profiles gets them when opened.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { EntityStore } from '../../src/store/entities.js';
import { openStoreEnv } from '../../src/store/env.js';
import { Inbox, mqttClient } from '../helpers/mqtt.js';
import { addDevice, http, startGateway, tempDir } from '../helpers/server.js';
import { addUser, adminHeaders, authHeaders, login } from '../helpers/users.js';

interface Id {
  entityType: string;
  id: string;
}
interface DeviceJson {
  id: Id;
  name: string;
  type: string;
  deviceProfileId: Id;
}
interface ProfileJson {
  id: Id;
  name: string;
  default: boolean;
  provisionType: string;
  provisionDeviceKey: string | null;
  profileData: { provisionConfiguration: { type: string; provisionDeviceSecret: string | null } };
}
interface Page<T> {
  data: T[];
  totalElements: number;
  totalPages: number;
  hasNext: boolean;
}

const cfgDir = tempDir(t);
const cfg = join(cfgDir, 'outpost.json');
writeFileSync(cfg, JSON.stringify({ provision: { key: 'cfg-key', secret: 'cfg-secret' } }));
const gw = await startGateway(t, { args: ['--config', cfg] });
const admin = await adminHeaders(gw);

const post = async <T>(path: string, body: object, status = 200): Promise<T> => {
  const r = await http('POST', `${gw.url}${path}`, body, admin);
  if (r.status !== status) throw new Error(`POST ${path} → ${r.status} ${r.text}`);
  return r.json<T>();
};
const get = async <T>(path: string, headers: Record<string, string> = admin): Promise<T> => {
  const r = await http('GET', `${gw.url}${path}`, undefined, headers);
  if (r.status !== 200) throw new Error(`GET ${path} → ${r.status} ${r.text}`);
  return r.json<T>();
};
const deviceNamed = (name: string): Promise<DeviceJson> =>
  get<DeviceJson>(`/api/tenant/devices?deviceName=${encodeURIComponent(name)}`);
const profileNamed = async (name: string): Promise<ProfileJson | undefined> =>
  (await get<Page<ProfileJson>>(`/api/deviceProfiles?pageSize=100&page=0&textSearch=${name}`)).data.find(
    (p) => p.name === name,
  );

t.test('a fresh store has one default profile named default; devices without a type get it', async (t) => {
  const def = await get<{ id: Id; name: string }>('/api/deviceProfileInfo/default');
  t.equal(def.name, 'default');
  t.equal(def.id.entityType, 'DEVICE_PROFILE');
  const full = await get<ProfileJson>(`/api/deviceProfile/${def.id.id}`);
  t.equal(full.default, true);
  t.equal(full.provisionType, 'DISABLED');
  const d = await post<DeviceJson>('/api/device', { name: 'plain' });
  t.same(d.deviceProfileId, def.id, 'the default profile');
  t.equal(d.type, 'default');
  const names = await get<Array<{ id: Id; name: string }>>('/api/deviceProfile/names');
  t.ok(
    names.some((n) => n.name === 'default' && n.id.id === def.id.id),
    'listed by /api/deviceProfile/names',
  );
});

t.test('type = profile name, found or created: REST, CLI, MQTT Gateway API', async (t) => {
  const a = await post<DeviceJson>('/api/device', { name: 'pump-1', type: 'pump' });
  const pump = await profileNamed('pump');
  t.ok(pump, 'the profile was created');
  t.same(a.deviceProfileId, pump?.id);
  const b = await post<DeviceJson>('/api/device', { name: 'pump-2', type: 'pump' });
  t.same(b.deviceProfileId, pump?.id, 'a second device of the type finds the same profile');
  await addDevice(gw.dataDir, 'valve-1', ['--type', 'valve']);
  const v = await deviceNamed('valve-1');
  t.equal(v.type, 'valve');
  t.same(v.deviceProfileId, (await profileNamed('valve'))?.id, 'CLI device add --type');
  const gwDev = await addDevice(gw.dataDir, 'edge-gw', ['--gateway']);
  const c = await mqttClient(t, gw, gwDev.token);
  await c.publishAsync('v1/gateway/connect', '{"device":"meter-1","type":"meter"}', { qos: 1 });
  const m = await deviceNamed('meter-1');
  t.equal(m.type, 'meter');
  t.same(m.deviceProfileId, (await profileNamed('meter'))?.id, 'MQTT gateway connect with a type');
  // an update naming another type moves the device to that profile
  const moved = await post<DeviceJson>('/api/device', { ...b, type: 'valve', deviceProfileId: undefined });
  t.equal(moved.type, 'valve');
  t.same(moved.deviceProfileId, (await profileNamed('valve'))?.id);
});

t.test('a device created with a deviceProfileId takes its name; an unknown one → 400', async (t) => {
  const pump = await profileNamed('pump');
  const d = await post<DeviceJson>('/api/device', { name: 'pump-3', type: 'whatever', deviceProfileId: pump?.id });
  t.equal(d.type, 'pump');
  t.same(d.deviceProfileId, pump?.id);
  const r = await http(
    'POST',
    `${gw.url}/api/device`,
    { name: 'orphan', deviceProfileId: { entityType: 'DEVICE_PROFILE', id: '0a0a0a0a-0000-4000-8000-000000000000' } },
    admin,
  );
  t.equal(r.status, 400);
  t.equal((await http('GET', `${gw.url}/api/tenant/devices?deviceName=orphan`, undefined, admin)).status, 404);
});

t.test('renaming a profile renames its devices type; names and provision keys are unique', async (t) => {
  const pump = (await profileNamed('pump')) as ProfileJson;
  const renamed = await post<ProfileJson>('/api/deviceProfile', { ...pump, name: 'pumps' });
  t.equal(renamed.name, 'pumps');
  t.same(renamed.id, pump.id);
  for (const name of ['pump-1', 'pump-3']) t.equal((await deviceNamed(name)).type, 'pumps', `${name} follows`);
  t.equal((await deviceNamed('valve-1')).type, 'valve', 'other devices keep theirs');
  // a device created with the old name now finds no profile of that name: a new one is made
  const fresh = await post<DeviceJson>('/api/device', { name: 'pump-9', type: 'pump' });
  t.not(fresh.deviceProfileId.id, pump.id.id);
  const dupName = await http('POST', `${gw.url}/api/deviceProfile`, { name: 'valve' }, admin);
  t.equal(dupName.status, 400, 'a taken name');
  const keyed = {
    provisionDeviceKey: 'k-1',
    profileData: { provisionConfiguration: { type: 'ALLOW_CREATE_NEW_DEVICES', provisionDeviceSecret: 's-1' } },
  };
  await post<ProfileJson>('/api/deviceProfile', { name: 'keyed-1', ...keyed });
  const dupKey = await http('POST', `${gw.url}/api/deviceProfile`, { name: 'keyed-2', ...keyed }, admin);
  t.equal(dupKey.status, 400, 'a taken provision key');
  t.match(dupKey.json<{ message: string }>().message, /provision device key/);
  t.equal(await profileNamed('keyed-2'), undefined, 'nothing created');
});

t.test('delete: 404 unknown, 400 default or in use; default moves with POST .../default', async (t) => {
  const def = await get<{ id: Id }>('/api/deviceProfileInfo/default');
  const del = (id: string): Promise<number> =>
    http('DELETE', `${gw.url}/api/deviceProfile/${id}`, undefined, admin).then((r) => r.status);
  t.equal(await del(def.id.id), 400, 'the default');
  t.equal(await del((await profileNamed('valve'))?.id.id ?? ''), 400, 'used by devices');
  t.equal(await del('0a0a0a0a-0000-4000-8000-000000000000'), 404);
  t.equal(await del('not-a-uuid'), 400);
  const spare = await post<ProfileJson>('/api/deviceProfile', { name: 'spare' });
  t.equal(await del(spare.id.id), 200);
  t.equal((await http('GET', `${gw.url}/api/deviceProfile/${spare.id.id}`, undefined, admin)).status, 404);
  const next = await post<ProfileJson>('/api/deviceProfile', { name: 'site-default' });
  const made = await post<ProfileJson>(`/api/deviceProfile/${next.id.id}/default`, {});
  t.equal(made.default, true);
  t.equal((await get<ProfileJson>(`/api/deviceProfile/${def.id.id}`)).default, false, 'the old default is not');
  t.same((await get<{ id: Id }>('/api/deviceProfileInfo/default')).id, next.id);
  const d = await post<DeviceJson>('/api/device', { name: 'untyped' });
  t.equal(d.type, 'site-default', 'a device without a type gets the new default');
  await post(`/api/deviceProfile/${def.id.id}/default`, {});
});

t.test('paging, infos and roles: customer users read, only the tenant admin writes', async (t) => {
  const all = await get<Page<ProfileJson>>('/api/deviceProfiles?pageSize=2&page=0&sortProperty=name&sortOrder=ASC');
  t.equal(all.data.length, 2);
  t.ok(all.totalElements >= 5);
  t.equal(all.hasNext, true);
  const sorted = all.data.map((p) => p.name);
  t.same(sorted, [...sorted].sort());
  const infos = await get<Page<{ name: string; type: string; transportType: string }>>(
    '/api/deviceProfileInfos?pageSize=100&page=0&transportType=DEFAULT',
  );
  t.equal(infos.totalElements, all.totalElements);
  t.same(Object.keys(infos.data[0] ?? {}).sort(), [
    'defaultDashboardId',
    'id',
    'image',
    'name',
    'tenantId',
    'transportType',
    'type',
  ]);
  t.equal((await get<Page<unknown>>('/api/deviceProfileInfos?pageSize=10&page=0&transportType=MQTT')).totalElements, 0);
  t.equal((await http('GET', `${gw.url}/api/deviceProfiles?page=0`, undefined, admin)).status, 400, 'no pageSize');
  await post('/api/customer', { title: 'Readers' });
  await addUser(gw.dataDir, 'reader@profiles.test', 'pw', 'CUSTOMER_USER', 'Readers');
  const reader = authHeaders((await login(gw, 'reader@profiles.test', 'pw')).token);
  const def = await get<{ id: Id }>('/api/deviceProfileInfo/default', reader);
  t.equal((await http('POST', `${gw.url}/api/deviceProfile`, { name: 'nope' }, reader)).status, 403);
  t.equal((await http('DELETE', `${gw.url}/api/deviceProfile/${def.id.id}`, undefined, reader)).status, 403);
  t.equal((await http('GET', `${gw.url}/api/deviceProfiles?pageSize=1&page=0`)).status, 401, 'no token');
});

t.test(
  'only the tenant admin reads the provisioning key and secret; a customer user reads infos without them',
  async (t) => {
    const secretKeys = ['provisionDeviceKey', 'provisionDeviceSecret', 'profileData', 'provisionConfiguration'];
    const saved = await post<ProfileJson>('/api/deviceProfile', {
      name: 'fenced',
      provisionDeviceKey: 'fenced-key',
      profileData: {
        provisionConfiguration: { type: 'ALLOW_CREATE_NEW_DEVICES', provisionDeviceSecret: 'fenced-sec' },
      },
    });
    const full = await get<ProfileJson>(`/api/deviceProfile/${saved.id.id}`);
    t.equal(full.provisionDeviceKey, 'fenced-key', 'the tenant admin reads the key');
    t.equal(full.profileData.provisionConfiguration.provisionDeviceSecret, 'fenced-sec', '... and the secret');
    const listed = await get<Page<ProfileJson>>('/api/deviceProfiles?pageSize=100&page=0');
    t.equal(listed.data.find((p) => p.name === 'fenced')?.provisionDeviceKey, 'fenced-key');

    await post('/api/customer', { title: 'Fenced' });
    await addUser(gw.dataDir, 'fenced@profiles.test', 'pw', 'CUSTOMER_USER', 'Fenced');
    const reader = authHeaders((await login(gw, 'fenced@profiles.test', 'pw')).token);
    for (const path of [`/api/deviceProfile/${saved.id.id}`, '/api/deviceProfiles?pageSize=100&page=0']) {
      const r = await http('GET', `${gw.url}${path}`, undefined, reader);
      t.equal(r.status, 403, `${path}: a customer user is refused`);
      t.has(r.json(), { status: 403, message: "You don't have permission to perform this operation!", errorCode: 20 });
      t.notMatch(r.text, /fenced-key|fenced-sec/);
    }
    const unknownId = '00000000-0000-4000-8000-000000000001';
    const unknown = await http('GET', `${gw.url}/api/deviceProfile/${unknownId}`, undefined, reader);
    t.equal(unknown.status, 403, 'refused before the lookup: an unknown id tells a customer nothing more');
    const infoPaths = [
      `/api/deviceProfileInfo/${saved.id.id}`,
      '/api/deviceProfileInfos?pageSize=100&page=0',
      '/api/deviceProfileInfo/default',
      '/api/deviceProfile/names',
    ];
    for (const path of infoPaths) {
      const r = await http('GET', `${gw.url}${path}`, undefined, reader);
      t.equal(r.status, 200, `${path}: a customer user reads it`);
      t.notMatch(r.text, /fenced-key|fenced-sec|cfg-key|cfg-secret/, `${path}: no key, no secret`);
      for (const k of secretKeys) t.notOk(r.text.includes(`"${k}"`), `${path}: no ${k} field`);
    }
    t.equal(
      (await get<{ name: string }>(`/api/deviceProfileInfo/${saved.id.id}`, reader)).name,
      'fenced',
      'the info names the profile',
    );
  },
);

t.test('provisioning per profile, over HTTP and MQTT', async (t) => {
  const provision = (body: object): Promise<Record<string, unknown>> =>
    http('POST', `${gw.url}/api/v1/provision`, body).then((r) => r.json());
  const conf = (type: string, secret: string | null): object => ({
    profileData: { provisionConfiguration: { type, provisionDeviceSecret: secret } },
  });
  await post('/api/deviceProfile', {
    name: 'sensor',
    provisionDeviceKey: 'sensor-key',
    ...conf('ALLOW_CREATE_NEW_DEVICES', 'sensor-secret'),
  });
  const ok = await provision({
    deviceName: 's-1',
    provisionDeviceKey: 'sensor-key',
    provisionDeviceSecret: 'sensor-secret',
  });
  t.equal(ok['status'], 'SUCCESS');
  const s1 = await deviceNamed('s-1');
  t.equal(s1.type, 'sensor', "the profile's name is the type");
  t.same(s1.deviceProfileId, (await profileNamed('sensor'))?.id);
  t.equal(
    (await provision({ deviceName: 's-1', provisionDeviceKey: 'sensor-key', provisionDeviceSecret: 'sensor-secret' }))[
      'status'
    ],
    'FAILURE',
    'a name that exists',
  );
  t.equal(
    (await provision({ deviceName: 's-2', provisionDeviceKey: 'sensor-key', provisionDeviceSecret: 'wrong' }))[
      'status'
    ],
    'NOT_FOUND',
    'a wrong secret',
  );
  // over MQTT: the same answer
  const c = await mqttClient(t, gw, 'provision');
  const inbox = new Inbox(c);
  await c.subscribeAsync('/provision/response', { qos: 1 });
  await c.publishAsync(
    '/provision/request',
    JSON.stringify({ deviceName: 's-mqtt', provisionDeviceKey: 'sensor-key', provisionDeviceSecret: 'sensor-secret' }),
    { qos: 1 },
  );
  t.equal(JSON.parse((await inbox.next((m) => m.topic === '/provision/response')).text).status, 'SUCCESS');
  t.equal((await deviceNamed('s-mqtt')).type, 'sensor', 'over MQTT too');
  // pre-provisioned: only devices of the profile created beforehand get their credentials
  const pre = await post<ProfileJson>('/api/deviceProfile', {
    name: 'pre',
    provisionDeviceKey: 'pre-key',
    ...conf('CHECK_PRE_PROVISIONED_DEVICES', 'pre-secret'),
  });
  const made = await http(
    'POST',
    `${gw.url}/api/device?accessToken=PRE-TOKEN-1`,
    { name: 'pre-1', deviceProfileId: pre.id },
    admin,
  );
  t.equal(made.status, 200);
  const preReq = (deviceName: string): object => ({
    deviceName,
    provisionDeviceKey: 'pre-key',
    provisionDeviceSecret: 'pre-secret',
  });
  t.same(await provision(preReq('pre-1')), {
    credentialsType: 'ACCESS_TOKEN',
    credentialsValue: 'PRE-TOKEN-1',
    status: 'SUCCESS',
  });
  t.equal((await provision(preReq('pre-unknown')))['status'], 'FAILURE', 'no such device');
  t.equal((await provision(preReq('s-1')))['status'], 'FAILURE', 'a device of another profile');
  t.equal(
    (await http('GET', `${gw.url}/api/tenant/devices?deviceName=pre-unknown`, undefined, admin)).status,
    404,
    'nothing created',
  );
  // switched to DISABLED: the key opens nothing
  await post('/api/deviceProfile', { ...pre, name: 'pre', ...conf('DISABLED', null) });
  t.equal((await provision(preReq('pre-1')))['status'], 'NOT_FOUND', 'a disabled profile');
  // the config's key and secret are the default profile's
  const cfgOk = await provision({
    deviceName: 'c-1',
    provisionDeviceKey: 'cfg-key',
    provisionDeviceSecret: 'cfg-secret',
  });
  t.equal(cfgOk['status'], 'SUCCESS');
  const def = await get<{ id: Id; name: string }>('/api/deviceProfileInfo/default');
  const c1 = await deviceNamed('c-1');
  t.same(c1.deviceProfileId, def.id);
  t.equal(c1.type, def.name);
  // a profile whose provisioning is on needs a key and a secret
  const noSecret = await http(
    'POST',
    `${gw.url}/api/deviceProfile`,
    { name: 'half', provisionDeviceKey: 'h', ...conf('ALLOW_CREATE_NEW_DEVICES', null) },
    admin,
  );
  t.equal(noSecret.status, 400);
  const badType = await http('POST', `${gw.url}/api/deviceProfile`, { name: 'odd', ...conf('SOMETIMES', 'x') }, admin);
  t.equal(badType.status, 400);
});

t.test('a type or profile name that cannot be a name is refused, nothing created', async (t) => {
  const long = 'x'.repeat(256);
  const status = async (path: string, body: object): Promise<number> =>
    (await http('POST', `${gw.url}${path}`, body, admin)).status;
  t.equal(await status('/api/device', { name: 'long-type', type: long }), 400, 'a 256-character type');
  t.equal(await status('/api/device', { name: 'ctl-type', type: 'a\u0007b' }), 400, 'a control character');
  t.equal(await status('/api/deviceProfile', { name: long }), 400, 'a 256-character profile name');
  t.equal(await status('/api/deviceProfile', { name: '  ' }), 400, 'a blank profile name');
  const plain = await deviceNamed('plain');
  t.equal(await status('/api/device', { ...plain, type: long }), 400, 'an update to such a type');
  t.equal((await deviceNamed('plain')).type, plain.type, 'the device unchanged');
  t.equal((await http('GET', `${gw.url}/api/tenant/devices?deviceName=long-type`, undefined, admin)).status, 404);
  const gwDev = await addDevice(gw.dataDir, 'names-gw', ['--gateway']);
  const c = await mqttClient(t, gw, gwDev.token, { protocolVersion: 5 });
  const refused = await c
    .publishAsync('v1/gateway/connect', JSON.stringify({ device: 'long-sub', type: long }), { qos: 1 })
    .then(
      () => undefined,
      (e: { code?: number }) => e,
    );
  t.equal(refused?.code, 0x99, 'MQTT 5: payload format invalid');
  t.equal((await http('GET', `${gw.url}/api/tenant/devices?deviceName=long-sub`, undefined, admin)).status, 404);
  t.equal(
    (await get<Page<ProfileJson>>('/api/deviceProfiles?pageSize=100&page=0')).data.filter((p) => p.name.length > 255)
      .length,
    0,
    'no such profile',
  );
});

t.test('a store from before profiles: the default profile, and its devices types as profiles, at open', async (t) => {
  const dir = tempDir(t);
  const env = openStoreEnv({ dataDir: dir, mapSizeBytes: 256 * 1024 * 1024 });
  const entities = new EntityStore(env);
  const { tenant } = await entities.ensureTenant();
  // rewind to the old shape: devices without a profile, no profiles, no default
  const old = [
    { name: 'old-pump', type: 'pump' },
    { name: 'old-plain', type: 'default' },
  ];
  await env.root.transaction(() => {
    for (const { value } of env.entities.getRange({})) {
      const r = value as { entityType: string; id: string; name?: string };
      if (r.entityType === 'DEVICE_PROFILE') {
        void env.entities.remove(r.id);
        void env.names.remove([tenant.id, 'DEVICE_PROFILE', r.name ?? '']);
      }
    }
    void env.meta.remove('defaultDeviceProfileId');
    for (const [i, d] of old.entries()) {
      const id = `00000000-0000-4000-8000-00000000000${i}`;
      void env.entities.put(id, {
        entityType: 'DEVICE',
        id,
        tenantId: tenant.id,
        createdTime: Date.now(),
        customerId: '13814000-1dd2-11b2-8080-808080808080',
        name: d.name,
        type: d.type,
        label: null,
        token: `OLD-TOKEN-${i}`,
      });
      void env.names.put([tenant.id, 'DEVICE', d.name], id);
      void env.tokens.put(`OLD-TOKEN-${i}`, id);
    }
  });
  await env.close();
  const upgraded = await startGateway(t, { dataDir: dir });
  const h = await adminHeaders(upgraded);
  const byName = async (name: string): Promise<DeviceJson> =>
    (await http('GET', `${upgraded.url}/api/tenant/devices?deviceName=${name}`, undefined, h)).json<DeviceJson>();
  const def = (await http('GET', `${upgraded.url}/api/deviceProfileInfo/default`, undefined, h)).json<{
    id: Id;
    name: string;
  }>();
  t.equal(def.name, 'default');
  t.same((await byName('old-plain')).deviceProfileId, def.id, 'a default device gets the default profile');
  const pump = await byName('old-pump');
  t.equal(pump.type, 'pump');
  const prof = await http('GET', `${upgraded.url}/api/deviceProfile/${pump.deviceProfileId.id}`, undefined, h);
  t.equal(prof.status, 200);
  t.equal(prof.json<ProfileJson>().name, 'pump', 'its type became a profile');
  t.equal((await http('GET', `${upgraded.url}/api/v1/OLD-TOKEN-0/attributes`)).status, 200, 'its token still works');
});
