/**
 * The JSON of every device and profile endpoint, checked against what ThingsBoard's official Python REST client
 * (`tb-rest-client`, thingsboard/thingsboard-python-rest-client, tb_rest_client/models/models_ce/) demands when
 * it deserialises an answer: a model's setter that raises on None makes its field required (a missing key is
 * None), and an enum setter raises on a value outside its list. The client itself is not installable on a
 * fresh machine here (it is on PyPI only, no Debian package), so its rules are written down below as fixtures
 * and this test applies them to the real daemon's answers.
 */
import t from 'tap';
import { http, startGateway } from '../helpers/server.js';
import { adminHeaders } from '../helpers/users.js';

/** device.py (OpenAPI 3.6.3): every field of `attribute_map`, and those whose setter raises on None */
const DEVICE_FIELDS = [
  'id',
  'createdTime',
  'tenantId',
  'customerId',
  'name',
  'type',
  'label',
  'deviceProfileId',
  'deviceData',
  'firmwareId',
  'softwareId',
  'additionalInfo',
];
const DEVICE_REQUIRED = ['name', 'deviceProfileId'];

/** device_profile.py: no field raises on None; three enum setters raise on a value outside their list */
const DEVICE_PROFILE_FIELDS = [
  'createdTime',
  'default',
  'defaultDashboardId',
  'defaultQueueName',
  'defaultRuleChainId',
  'description',
  'firmwareId',
  'id',
  'image',
  'name',
  'profileData',
  'provisionDeviceKey',
  'provisionType',
  'softwareId',
  'tenantId',
  'transportType',
  'type',
];
const DEVICE_PROFILE_ENUMS: Record<string, readonly string[]> = {
  provisionType: ['DISABLED', 'ALLOW_CREATE_NEW_DEVICES', 'CHECK_PRE_PROVISIONED_DEVICES'],
  transportType: ['DEFAULT', 'MQTT', 'COAP', 'LWM2M', 'SNMP'],
  type: ['DEFAULT'],
};

/** device_profile_info.py: the same two enums as the profile's transport and type */
const DEVICE_PROFILE_INFO_FIELDS = ['defaultDashboardId', 'id', 'image', 'name', 'transportType', 'type'];
const DEVICE_PROFILE_INFO_ENUMS: Record<string, readonly string[]> = {
  transportType: DEVICE_PROFILE_ENUMS['transportType'] ?? [],
  type: ['DEFAULT'],
};

type Json = Record<string, unknown>;

/** What the client's deserialiser would refuse in `obj`, as a list of reasons (empty: it builds the model). */
function refusals(
  obj: Json,
  fields: readonly string[],
  required: readonly string[],
  enums: Record<string, readonly string[]>,
): string[] {
  const out: string[] = [];
  for (const f of fields) if (!(f in obj)) out.push(`no "${f}"`);
  for (const f of required) if (obj[f] === null || obj[f] === undefined) out.push(`"${f}" is None`);
  for (const [f, allowed] of Object.entries(enums)) {
    const v = obj[f];
    if (v !== null && v !== undefined && !allowed.includes(String(v))) out.push(`"${f}" = ${String(v)}`);
  }
  for (const f of ['id', 'tenantId', 'customerId', 'deviceProfileId']) {
    const v = obj[f] as Json | null | undefined;
    if (v !== null && v !== undefined && (typeof v['id'] !== 'string' || typeof v['entityType'] !== 'string'))
      out.push(`"${f}" is not an entity id`);
  }
  return out;
}

const asDevice = (o: Json): string[] => refusals(o, DEVICE_FIELDS, DEVICE_REQUIRED, {});
const asProfile = (o: Json): string[] => refusals(o, DEVICE_PROFILE_FIELDS, [], DEVICE_PROFILE_ENUMS);
const asProfileInfo = (o: Json): string[] => refusals(o, DEVICE_PROFILE_INFO_FIELDS, [], DEVICE_PROFILE_INFO_ENUMS);

const gw = await startGateway(t);
const admin = await adminHeaders(gw);
const call = async (method: string, path: string, body?: object): Promise<unknown> => {
  const r = await http(method, `${gw.url}${path}`, body, admin);
  if (r.status !== 200) throw new Error(`${method} ${path} → ${r.status} ${r.text}`);
  return r.json();
};

t.test("every device answer builds the client's Device model", async (t) => {
  const created = (await call('POST', '/api/device', { name: 'tb-client-dev', type: 'pump', label: 'P' })) as Json;
  const id = (created['id'] as Json)['id'] as string;
  const customer = (await call('POST', '/api/customer', { title: 'Model Co' })) as Json;
  const cid = (customer['id'] as Json)['id'] as string;
  const answers: Array<[string, Json]> = [
    ['save_device', created],
    ['get_device_by_id', (await call('GET', `/api/device/${id}`)) as Json],
    ['get_tenant_device', (await call('GET', '/api/tenant/devices?deviceName=tb-client-dev')) as Json],
    ['assign_device_to_customer', (await call('POST', `/api/customer/${cid}/device/${id}`)) as Json],
    ...((await call('GET', `/api/customer/${cid}/devices?pageSize=10&page=0`)) as { data: Json[] }).data.map(
      (d): [string, Json] => ['get_customer_devices', d],
    ),
    ['unassign_device_from_customer', (await call('DELETE', `/api/customer/device/${id}`)) as Json],
    ...((await call('GET', '/api/tenant/devices?pageSize=10&page=0')) as { data: Json[] }).data.map(
      (d): [string, Json] => ['get_tenant_devices', d],
    ),
  ];
  for (const [what, json] of answers) t.same(asDevice(json), [], what);
  t.same(created['deviceData'], {
    configuration: { type: 'DEFAULT' },
    transportConfiguration: { type: 'DEFAULT' },
  });
});

t.test("every profile answer builds the client's DeviceProfile and DeviceProfileInfo models", async (t) => {
  const saved = (await call('POST', '/api/deviceProfile', {
    name: 'tb-client-profile',
    provisionDeviceKey: 'model-key',
    profileData: { provisionConfiguration: { type: 'ALLOW_CREATE_NEW_DEVICES', provisionDeviceSecret: 'x' } },
  })) as Json;
  const id = (saved['id'] as Json)['id'] as string;
  const profiles: Array<[string, Json]> = [
    ['save_device_profile', saved],
    ['get_device_profile_by_id', (await call('GET', `/api/deviceProfile/${id}`)) as Json],
    ['set_default_device_profile', (await call('POST', `/api/deviceProfile/${id}/default`)) as Json],
    ...((await call('GET', '/api/deviceProfiles?pageSize=10&page=0')) as { data: Json[] }).data.map(
      (d): [string, Json] => ['get_device_profiles', d],
    ),
  ];
  for (const [what, json] of profiles) t.same(asProfile(json), [], what);
  const infos: Array<[string, Json]> = [
    ['get_default_device_profile_info', (await call('GET', '/api/deviceProfileInfo/default')) as Json],
    ['get_device_profile_info_by_id', (await call('GET', `/api/deviceProfileInfo/${id}`)) as Json],
    ...((await call('GET', '/api/deviceProfileInfos?pageSize=10&page=0')) as { data: Json[] }).data.map(
      (d): [string, Json] => ['get_device_profile_infos', d],
    ),
  ];
  for (const [what, json] of infos) t.same(asProfileInfo(json), [], what);
});
