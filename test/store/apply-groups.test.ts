/**
 * The log's apply puts every record's points of a series into one head fragment per window (store/series/apply.ts,
 * applyGroups), not one per group commit: what an apply writes to LMDB grows with the series it touches, not with
 * the commits it holds. Sync's outbox still records exactly what it did: nothing for points already sent from the
 * log, and a send under way's points alone under their record's LSN; a ts written twice keeps the later value.
 */
import t from 'tap';
import { SeriesColumn } from '../../src/model/batch.js';
import { kvLong } from '../../src/model/kv.js';
import { OutboxRecorder } from '../../src/store/outbox.js';
import { nodeWalFs, type PendingPoints } from '../../src/store/wal.js';
import { applyGroups, type Logged } from '../../src/store/series/apply.js';
import { rng } from '../helpers/prng.js';
import { tempDir } from '../helpers/server.js';
import { openSeriesStore, openTestEnv } from '../helpers/store.js';

const T0 = 1_700_000_000_000;

t.test('an apply of many group commits writes one head fragment per series and window', async (t) => {
  const { store, env } = openSeriesStore(t, {
    commitDelayMs: 0,
    wal: { fs: nodeWalFs(tempDir(t)), segmentBytes: 1 << 20, applyIntervalMs: 3_600_000, applyMaxPoints: 1_000_000 },
  });
  const headCount = (): number => (env.head.getStats() as { entryCount: number }).entryCount;
  const devices = ['dev-a', 'dev-b', 'dev-c'];
  const commits = 40;
  for (let i = 0; i < commits; i++) {
    // one post at a time: each its own group commit, as a LAN sensor's
    for (const d of devices)
      await store.write(d, [
        {
          ts: T0 + i * 5000,
          values: [
            ['temp', kvLong(i)],
            ['hum', kvLong(100 + i)],
          ],
        },
      ]);
  }
  // the same ts written again by a later commit: the later value is the one kept
  await store.write('dev-a', [{ ts: T0, values: [['temp', kvLong(-1)]] }]);
  t.equal(headCount(), 0, 'everything acknowledged is in the log, not yet in LMDB');
  store.applyLogged();
  const fragments = headCount();
  // 40 posts 5 s apart span one 20-minute window, or two when T0's window ends within them
  t.ok(fragments <= devices.length * 2 * 2, `${fragments} fragments for ${devices.length * 2} series`);
  t.ok(fragments >= devices.length * 2, 'each series has its fragment');
  const temps = [...store.range('dev-a', 'temp', { startTs: 0, endTs: T0 * 2, order: 'ASC' })];
  t.equal(temps.length, commits, 'every point is there, once');
  t.same(temps[0], { ts: T0, value: kvLong(-1) }, 'the later write of a ts wins');
  t.same(
    temps.slice(1).map((p) => p.value),
    Array.from({ length: commits - 1 }, (_, i) => kvLong(i + 1)),
    'the others as posted',
  );
  t.same(store.latest('dev-c').get('hum'), { ts: T0 + (commits - 1) * 5000, value: kvLong(100 + commits - 1) });
  await store.closeLog();
});

const logged = (lsn: number, points: PendingPoints): Logged => ({
  points,
  lsn,
  count: 0,
  durable: true,
  done: Promise.resolve(),
});

t.test(
  'applyGroups: each ts goes to the group of the last record that wrote it, groups by what sync sent',
  async (t) => {
    const { env } = openTestEnv(t);
    const next = rng(2_828);
    const devices = ['d0', 'd1', 'd2'];
    const keys = ['a', 'b'];
    for (let round = 0; round < 60; round++) {
      const outbox = new OutboxRecorder(env);
      const records = 2 + Math.floor(next() * 6);
      /** `${lsn}:${device}` → 'sent' | 'sending' (absent: left to send) */
      const state = new Map<string, string>();
      /** `${device}/${key}/${ts}` → [lsn, value] of the last write */
      const last = new Map<string, [number, number]>();
      const batch: Logged[] = [];
      for (let lsn = 1; lsn <= records; lsn++) {
        const points: PendingPoints = new Map();
        for (const d of devices) {
          if (next() < 0.3) continue;
          const r = next();
          if (r < 0.3) {
            outbox.sendingFromLog(lsn, d);
            outbox.sentFromLog(lsn, d, true);
            state.set(`${lsn}:${d}`, 'sent');
          } else if (r < 0.5) {
            outbox.sendingFromLog(lsn, d);
            state.set(`${lsn}:${d}`, 'sending');
          }
          const series = new Map<string, SeriesColumn[]>();
          for (const k of keys) {
            const cols: SeriesColumn[] = [];
            // one or two requests of the commit wrote this series, with ts from a small pool so they collide
            for (let c = 0; c < 1 + Math.floor(next() * 2); c++) {
              const col = new SeriesColumn();
              for (let p = 0; p < 1 + Math.floor(next() * 3); p++) {
                const ts = T0 + Math.floor(next() * 6) * 1000;
                const v = lsn * 1000 + c * 100 + p;
                col.push(ts, kvLong(v));
                last.set(`${d}/${k}/${ts}`, [lsn, v]);
              }
              cols.push(col);
            }
            series.set(k, cols);
          }
          points.set(d, series);
        }
        batch.push(logged(lsn, points));
      }
      const groups = applyGroups(batch, outbox);
      /** what putPoints keeps of each group: per series, its columns appended, the last of each ts */
      const kept = new Map<string, { value: number; group: number }>();
      let twice = 0;
      groups.forEach((g, gi) => {
        for (const [d, series] of g.points) {
          for (const [k, cols] of series) {
            const merged = new SeriesColumn();
            for (const c of cols) merged.append(c);
            const distinct = merged.sortedDistinct();
            for (let i = 0; i < distinct.length; i++) {
              const id = `${d}/${k}/${distinct.ts[i]}`;
              if (kept.has(id)) twice++;
              kept.set(id, { value: Number(distinct.value(i).v), group: gi });
            }
          }
        }
      });
      t.equal(twice, 0, `round ${round}: no ts in two groups`);
      let wrong = 0;
      for (const [id, [lsn, v]] of last) {
        const got = kept.get(id);
        const d = id.split('/')[0] as string;
        const s = state.get(`${lsn}:${d}`);
        const g = got === undefined ? undefined : (groups[got.group] as (typeof groups)[number]);
        const groupOk =
          g !== undefined &&
          (s === 'sent' ? !g.record : s === 'sending' ? g.record && g.lsn === lsn : g.record && g.lsn === undefined);
        if (got?.value !== v || !groupOk) wrong++;
      }
      t.equal(wrong, 0, `round ${round}: ${last.size} ts, each with its last value in its writer's group`);
      t.equal(kept.size, last.size, `round ${round}: nothing else`);
    }
  },
);

t.test('applyGroups: one record stays as it is, with its LSN for the outbox', async (t) => {
  const points: PendingPoints = new Map([['d', new Map([['a', [new SeriesColumn()]]])]]);
  const groups = applyGroups([logged(7, points)], undefined);
  t.equal(groups.length, 1);
  t.equal(groups[0]?.points, points, 'the record itself');
  t.equal(groups[0]?.lsn, 7);
});
