/**
 * The timeseries handlers called in-process (: handlers are plain functions of an HttpContext), over
 * a real LMDB store in a temp dir and the real EventBus: REST writes publish `telemetry` for any entity type,
 * deletes publish `telemetryDeleted` exactly for the keys whose latest value went away or was rewritten.
 */
import t from 'tap';
import { deleteTimeseries, getTimeseriesValues, postTimeseries } from '../../src/api/telemetry/timeseries.js';
import { AuthService } from '../../src/auth/index.js';
import { type BusEvents, EventBus } from '../../src/bus/index.js';
import { loadConfig } from '../../src/config/index.js';
import type { Services } from '../../src/context.js';
import { makeLogger } from '../../src/log.js';
import type { HttpContext, Reply } from '../../src/uws/adapter.js';
import { TelemetryIngest } from '../../src/ingest/service.js';
import { EntityStore } from '../../src/store/entities.js';
import { openSeriesStore } from '../helpers/store.js';

function context(params: string[], query: string, token: string, body = ''): HttpContext {
  return {
    method: 'post',
    url: '/test',
    query: new URLSearchParams(query),
    params,
    aborted: false,
    header: (name) => (name === 'x-authorization' ? `Bearer ${token}` : undefined),
    body: () => Promise.resolve(Buffer.from(body)),
    onAbort: () => undefined,
    remoteAddress: () => '127.0.0.1',
  };
}

t.test('REST writes and deletes publish on the bus', async (t) => {
  const { env, dict, store: timeseries, dataDir } = openSeriesStore(t);
  const config = loadConfig({ dataDir }, {}, { logLevel: 'silent' });
  const entities = new EntityStore(env);
  await entities.ensureTenant();
  const bus = new EventBus();
  const auth = new AuthService(config, env, entities);
  const user = await entities.createUser({ email: 'h@example.com', passwordHash: 'unused', authority: 'TENANT_ADMIN' });
  const { token } = auth.issue(user);
  const asset = await entities.createAsset({ name: 'tank', type: 'tank' });
  // The timeseries handlers use only these services; the rest of Services is not needed here.
  const s = {
    config,
    log: makeLogger('silent'),
    env,
    dict,
    entities,
    timeseries,
    bus,
    ingest: new TelemetryIngest(timeseries, bus),
    auth,
    now: () => 99_000,
  } as unknown as Services;

  const written: Array<BusEvents['telemetry']> = [];
  const deleted: Array<BusEvents['telemetryDeleted']> = [];
  bus.on('telemetry', (e) => written.push(e));
  bus.on('telemetryDeleted', (e) => deleted.push(e));

  const path = ['ASSET', asset.id];
  await postTimeseries(s)(
    context(
      [...path, 'ANY'],
      '',
      token,
      '[{"ts":1000,"values":{"a":1,"b":2,"c":3}},{"ts":2000,"values":{"a":4,"b":5,"c":6}}]',
    ),
  );
  t.equal(written.length, 1, 'one telemetry event per write');
  t.equal(written[0]?.entityType, 'ASSET');
  t.equal(written[0]?.entityId, asset.id);
  t.same(
    [...(written[0]?.series ?? new Map())].map(([k, col]) => [k, col.ts]),
    [
      ['a', [1000, 2000]],
      ['b', [1000, 2000]],
      ['c', [1000, 2000]],
    ],
  );

  await t.rejects(
    postTimeseries(s)(context([...path, 'ANY'], '', token, '{"a":null}')),
    { code: 'BAD_PAYLOAD' },
    'null value → 400',
  );
  t.equal(written.length, 1, 'a rejected write publishes nothing');

  await deleteTimeseries(s)(context(path, 'keys=a,b,c&startTs=0&endTs=1500', token));
  t.same(deleted, [], 'latest untouched → no event');
  await deleteTimeseries(s)(context(path, 'keys=a&startTs=1500&endTs=3000&deleteLatest=false', token));
  t.same(deleted, [], 'deleteLatest=false → no event');
  await deleteTimeseries(s)(context(path, 'keys=b,c,nokey&startTs=1500&endTs=3000', token));
  t.same(
    deleted,
    [{ entityType: 'ASSET', entityId: asset.id, keys: ['b', 'c'] }],
    'exactly the keys whose latest was removed',
  );

  const latest = getTimeseriesValues(s, false)(context(path, 'keys=a,b,c', token)) as Reply;
  t.equal(
    latest.body,
    '{"a":[{"ts":2000,"value":"4"}],"b":[{"ts":99000,"value":null}],"c":[{"ts":99000,"value":null}]}',
    'a kept its latest (deleteLatest=false); b and c report null at now',
  );

  await postTimeseries(s)(
    context([...path, 'ANY'], '', token, '[{"ts":1000,"values":{"d":1}},{"ts":2000,"values":{"d":2}}]'),
  );
  await deleteTimeseries(s)(context(path, 'keys=d&startTs=1500&endTs=3000&rewriteLatestIfDeleted=true', token));
  t.same(deleted[1]?.keys, ['d'], 'a rewritten latest is reported too');
  const rewritten = getTimeseriesValues(s, false)(context(path, 'keys=d', token)) as Reply;
  t.equal(rewritten.body, '{"d":[{"ts":1000,"value":"1"}]}');
});
