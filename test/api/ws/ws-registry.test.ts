/**
 * Unit tests of the websocket protocol parser, reply rendering and the subscription fan-out (no sockets:
 * a session is anything with `send`).
 */
import '../../helpers/sandbox.js';
import t from 'tap';
import { FrameError, parseFrame, splitKeys } from '../../../src/api/ws/protocol.js';
import { type Subscription, SubscriptionRegistry, type WsSink, shownKey } from '../../../src/api/ws/registry.js';
import { PARSE_ERROR_FRAME, renderData, renderError, renderPoint } from '../../../src/api/ws/render.js';
import type { TelemetryEvent } from '../../../src/bus/index.js';
import { TelemetryBatch } from '../../../src/model/batch.js';
import { type KvValue, kvDouble, kvLong, kvString } from '../../../src/model/kv.js';

class Sink implements WsSink {
  readonly frames: string[] = [];
  send(text: string): void {
    this.frames.push(text);
  }
  json(i: number): { subscriptionId: number; data: Record<string, unknown>; latestValues: Record<string, number> } {
    return JSON.parse(this.frames[i] as string);
  }
}

const E1 = 'e1';
const E2 = 'e2';

function tsSub(session: WsSink, cmdId: number, entityId: string, keys?: string[], latestOnly = false): Subscription {
  return { kind: 'TS', session, cmdId, entityId, keys: keys && new Set(keys), latestOnly, lastTs: new Map() };
}

function write(entityId: string, ...records: Array<[number, Record<string, KvValue>]>): TelemetryEvent {
  return {
    entityType: 'DEVICE',
    entityId,
    series: TelemetryBatch.fromRecords(records.map(([ts, v]) => ({ ts, values: Object.entries(v) }))).series,
  };
}

t.test('parseFrame: legacy arrays, strict like Jackson', async (t) => {
  const f = parseFrame(
    '{"tsSubCmds":[{"cmdId":"5","entityType":"DEVICE","entityId":"x","keys":" a, b ,,a","timeWindow":1.9,"type":"ignored"}],' +
      '"historyCmds":[{"cmdId":2,"entityType":"DEVICE","entityId":"x","keys":"k","startTs":1,"endTs":2}],"attrSubCmds":[{"cmdId":3,"scope":null}],' +
      '"entityDataCmds":[]}',
    'LEGACY',
  );
  t.same(
    f.cmds.map((c) => [c.kind, c.cmdId]),
    [
      ['ATTR_SUB', 3],
      ['TS_SUB', 5],
      ['HISTORY', 2],
    ],
    'TB order: attributes, ts, history',
  );
  const ts = f.cmds[1];
  if (ts?.kind !== 'TS_SUB') throw new Error('expected TS_SUB');
  t.same(ts.keys, ['a', 'b'], 'CSV keys trimmed, blanks and duplicates dropped');
  t.equal(ts.timeWindow, 1, 'fractions truncated');
  t.equal(ts.unsubscribe, false);
  t.equal(f.auth, undefined);
  for (const bad of [
    '',
    'null',
    '"x"',
    '{"tsSubCmds":[1]}',
    '{"tsSubCmds":[{"cmdId":1,"endTs":5}]}',
    '{"historyCmds":[{"timeWindow":5}]}',
    '{"attrSubCmds":[{"startTs":5}]}',
    '{"tsSubCmds":[{"unsubscribe":"yes"}]}',
    '{"tsSubCmds":[{"keys":["a"]}]}',
    '{"cmds":[]}',
  ]) {
    t.throws(() => parseFrame(bad, 'LEGACY'), FrameError, `rejected: ${bad}`);
  }
  t.same(splitKeys(' , '), undefined, 'blank keys = all keys');
});

t.test('parseFrame: /api/ws cmds with type discriminator and authCmd', async (t) => {
  const f = parseFrame(
    '{"authCmd":{"cmdId":0,"token":"T"},"cmds":[{"type":"TIMESERIES","cmdId":1,"entityType":"DEVICE","entityId":"x"},' +
      '{"type":"TIMESERIES_HISTORY","cmdId":2,"keys":"a"},{"type":"ATTRIBUTES","cmdId":3},{"type":"ALARM_DATA","cmdId":4,"query":{}}]}',
    'GENERAL',
  );
  t.same(f.auth, { cmdId: 0, token: 'T' });
  t.same(
    f.cmds.map((c) => c.kind),
    ['TS_SUB', 'HISTORY', 'ATTR_SUB', 'UNSUPPORTED'],
  );
  t.throws(() => parseFrame('{"cmds":[{"type":"BOGUS","cmdId":1}]}', 'GENERAL'), FrameError, 'unknown type');
  t.throws(() => parseFrame('{"cmds":[{"cmdId":1}]}', 'GENERAL'), FrameError, 'missing type');
  t.throws(() => parseFrame('{"tsSubCmds":[]}', 'GENERAL'), FrameError, 'legacy keys');
});

t.test('render: TB reply shape', async (t) => {
  t.equal(
    renderData(3, [
      ['a', [renderPoint(1, '1'), renderPoint(2, 'x"y')]],
      ['b', [renderPoint(5, null)]],
    ]),
    '{"subscriptionId":3,"errorCode":0,"errorMsg":null,"data":{"a":[[1,"1"],[2,"x\\"y"]],"b":[[5,null]]},"latestValues":{"a":2,"b":5}}',
  );
  t.equal(renderData(1, []), '{"subscriptionId":1,"errorCode":0,"errorMsg":null,"data":{},"latestValues":{}}');
  t.equal(
    renderError(9, 1, 'Failed to fetch data!'),
    '{"subscriptionId":9,"errorCode":1,"errorMsg":"Failed to fetch data!","data":null,"latestValues":{}}',
  );
  t.equal(
    PARSE_ERROR_FRAME,
    '{"subscriptionId":1,"errorCode":2,"errorMsg":"Failed to parse the payload","data":null,"latestValues":{}}',
  );
});

t.test('fan-out: only the written entity, one serialisation per distinct key set', async (t) => {
  const reg = new SubscriptionRegistry();
  const sinks = Array.from({ length: 100 }, () => new Sink());
  for (const [i, s] of sinks.entries()) reg.add(tsSub(s, i, E1, i % 2 === 0 ? ['t'] : ['t', 'h']));
  const other = new Sink();
  reg.add(tsSub(other, 1, E2));
  reg.onTelemetry(write(E1, [1000, { t: kvDouble(1.5), h: kvLong(40), x: kvString('ignored') }]));
  t.equal(other.frames.length, 0, 'a subscriber of another entity is not touched');
  t.equal(reg.stats.framesSent, 100);
  t.equal(reg.stats.tailsRendered, 2, 'two distinct key sets → two serialisations for 100 subscribers');
  t.equal(
    sinks[0]?.frames[0],
    '{"subscriptionId":0,"errorCode":0,"errorMsg":null,"data":{"t":[[1000,"1.5"]]},"latestValues":{"t":1000}}',
  );
  t.equal(
    sinks[1]?.frames[0],
    '{"subscriptionId":1,"errorCode":0,"errorMsg":null,"data":{"h":[[1000,"40"]],"t":[[1000,"1.5"]]},"latestValues":{"h":1000,"t":1000}}',
  );
  reg.onTelemetry(write(E1, [2000, { x: kvLong(1) }]));
  t.equal(reg.stats.framesSent, 100, 'a write without subscribed keys sends nothing');
  t.equal(other.frames.length, 0);
});

t.test('LATEST_TELEMETRY suppresses older points per key; plain subscriptions forward everything', async (t) => {
  const reg = new SubscriptionRegistry();
  const latest = new Sink();
  const all = new Sink();
  reg.add(tsSub(latest, 1, E1, undefined, true));
  reg.add(tsSub(all, 2, E1));
  reg.onTelemetry(write(E1, [5000, { a: kvLong(1), b: kvLong(1) }]));
  reg.onTelemetry(write(E1, [4000, { a: kvLong(2) }], [6000, { b: kvLong(2) }]));
  reg.onTelemetry(write(E1, [3000, { a: kvLong(3) }]));
  reg.onTelemetry(write(E1, [5000, { a: kvLong(4) }]));
  t.same(
    latest.frames.map((_, i) => latest.json(i).data),
    [{ a: [[5000, '1']], b: [[5000, '1']] }, { b: [[6000, '2']] }, { a: [[5000, '4']] }],
    'older points dropped, equal ts passes',
  );
  t.equal(all.frames.length, 4);
  t.same(all.json(1).data, { a: [[4000, '2']], b: [[6000, '2']] });

  reg.onTelemetry(write(E1, [7000, { a: kvLong(5) }], [6500, { a: kvLong(6) }]));
  t.same(
    latest.json(3).data,
    {
      a: [
        [6500, '6'],
        [7000, '5'],
      ],
    },
    'points of one write ascending',
  );
  t.same(latest.json(3).latestValues, { a: 7000 });

  reg.onTelemetryDeleted({ entityType: 'DEVICE', entityId: E1, keys: ['a'] });
  t.same(latest.json(4).data, { a: [[0, '']] }, 'deleted latest as [0,""]');
  reg.onTelemetry(write(E1, [1, { a: kvLong(7) }]));
  t.same(latest.json(5).data, { a: [[1, '7']] }, 'after a delete nothing is suppressed for that key');
  reg.onTelemetryDeleted(
    { entityType: 'DEVICE', entityId: E1, keys: ['a'] },
    () => new Map([['a', { ts: 0.5e3, value: kvLong(8) }]]),
  );
  t.same(latest.json(6).data, { a: [[500, '8']] }, 'a rewritten latest value is sent as the new value');
  reg.onTelemetry(write(E1, [400, { a: kvLong(9) }]));
  reg.onTelemetry(write(E1, [600, { a: kvLong(10) }]));
  t.same(latest.json(7).data, { a: [[600, '10']] }, 'LATEST state follows the rewritten value');
});

t.test('attributes: scope filter, keys filter, deletions', async (t) => {
  const reg = new SubscriptionRegistry();
  const any = new Sink();
  const shared = new Sink();
  reg.add({ kind: 'ATTR', session: any, cmdId: 1, entityId: E1, keys: undefined, scope: undefined });
  reg.add({ kind: 'ATTR', session: shared, cmdId: 2, entityId: E1, keys: new Set(['k']), scope: 'SHARED_SCOPE' });
  reg.onAttributes({
    entityType: 'DEVICE',
    entityId: E1,
    scope: 'CLIENT_SCOPE',
    updated: [['k', kvLong(1)]],
    ts: 10,
    deleted: [],
  });
  t.equal(shared.frames.length, 0, 'other scope filtered');
  t.same(any.json(0).data, { k: [[10, '1']] });
  reg.onAttributes({
    entityType: 'DEVICE',
    entityId: E1,
    scope: 'SHARED_SCOPE',
    updated: [
      ['z', kvLong(1)],
      ['k', kvString('v')],
    ],
    ts: 20,
    deleted: [],
  });
  t.same(shared.json(0).data, { k: [[20, 'v']] }, 'keys filter');
  t.same(Object.keys(any.json(1).data), ['k', 'z'], 'sorted keys');
  reg.onAttributes({ entityType: 'DEVICE', entityId: E1, scope: 'SHARED_SCOPE', updated: [], ts: 30, deleted: ['k'] });
  t.equal(
    shared.frames[1],
    '{"subscriptionId":2,"errorCode":0,"errorMsg":null,"data":{"k":[[0,""]]},"latestValues":{"k":0}}',
  );
  t.equal(reg.stats.tailsRendered, 4, 'the deletion tail was rendered once for both subscribers');
});

t.test('attributes: a write the first reply already showed is not sent again as a change', async (t) => {
  // A write is readable once committed and announced once flushed: the first reply can show it before its
  // event comes (the daemon's own lastActivityTime, written after a device's first post, hits this).
  const reg = new SubscriptionRegistry();
  const c = new Sink();
  const shown = new Map([
    [shownKey('SERVER_SCOPE', 'lastActivityTime'), renderPoint(50, '50').json],
    [shownKey('CLIENT_SCOPE', 'fw'), renderPoint(40, '1.0').json],
  ]);
  reg.add({ kind: 'ATTR', session: c, cmdId: 1, entityId: E1, keys: undefined, scope: undefined, shown });
  const ev = (scope: 'SERVER_SCOPE' | 'CLIENT_SCOPE', key: string, ts: number, v: KvValue) =>
    ({ entityType: 'DEVICE', entityId: E1, scope, updated: [[key, v]], ts, deleted: [] }) as const;
  reg.onAttributes(ev('SERVER_SCOPE', 'lastActivityTime', 50, kvLong(50)));
  t.equal(c.frames.length, 0, 'the point shown is not sent twice');
  reg.onAttributes(ev('SERVER_SCOPE', 'lastActivityTime', 50, kvLong(50)));
  t.same(c.json(0).data, { lastActivityTime: [[50, '50']] }, 'only once: the same point written again is a change');
  reg.onAttributes(ev('SERVER_SCOPE', 'fw', 40, kvString('1.0')));
  t.same(c.json(1).data, { fw: [[40, '1.0']] }, 'the same key in another scope is not the one shown');
  reg.onAttributes(ev('CLIENT_SCOPE', 'fw', 45, kvString('1.1')));
  t.same(c.json(2).data, { fw: [[45, '1.1']] }, 'a change since the first reply is sent');
  reg.onAttributes(ev('CLIENT_SCOPE', 'fw', 40, kvString('1.0')));
  t.same(c.json(3).data, { fw: [[40, '1.0']] }, 'the key was released by its first change');
  t.equal(shown.size, 0, 'nothing kept once every shown key changed');
});

t.test('unsubscribe, session removal, entity deletion, cmdId replacement', async (t) => {
  const reg = new SubscriptionRegistry();
  const a = new Sink();
  const b = new Sink();
  reg.add(tsSub(a, 1, E1));
  reg.add(tsSub(a, 2, E2));
  reg.add(tsSub(b, 1, E1));
  t.equal(reg.count(a), 2);
  reg.add(tsSub(a, 1, E2));
  t.equal(reg.count(a), 2, 'same cmdId replaces');
  t.equal(reg.subscribersOf(E1), 1);
  t.equal(reg.subscribersOf(E2), 2);
  t.equal(reg.remove(a, 1), true);
  t.equal(reg.remove(a, 1), false);
  reg.removeSession(a);
  t.equal(reg.count(a), 0);
  t.equal(reg.subscribersOf(E2), 0, 'index emptied');
  t.equal(
    reg.endWhere(E1, () => 'END'),
    1,
    'the entity gone: its one subscription ends',
  );
  t.same(b.frames, ['END'], 'with the end frame');
  t.equal(reg.count(b), 0);
  t.equal(reg.subscribersOf(E1), 0);
  reg.onTelemetry(write(E1, [1, { a: kvLong(1) }]));
  t.equal(a.frames.length + b.frames.length, 1, 'nothing after the end');
});
