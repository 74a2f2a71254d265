/**
 * The soak's one-minute variant (docs/design/soak.md): a LAN Outpost under HTTP, MQTT, CoAP and Gateway-API load,
 * syncing over MQTT into an upstream Outpost that syncs over HTTP into a stand-in TB, with a fixed seed's faults
 * (kill -9, SIGTERM, the upstream frozen then killed, the link blackholed, the disk full when root can mount a
 * tmpfs, MQTT clients cut, the LAN's wall clock stepped when libfaketime is installed). Every acknowledged reading must be everywhere with its ts and value, nothing unsent anywhere,
 * every RPC answered to its caller delivered, no stack trace logged. `npm run bench:soak` runs it longer.
 */
import t from 'tap';
import { runSoak } from '../../scripts/bench/soak-run.js';

t.test('one minute of seeded faults loses nothing acknowledged', { timeout: 230_000 }, async (t) => {
  const seed = 42;
  const r = await runSoak({ minutes: 1, seed });
  const faultLog = r.faultLog.map((f) => `${f.at} s ${f.kind}: ${f.detail}`).join('\n');
  t.same(r.failures, [], `seed ${seed}: nothing failed; fault log:\n${faultLog}`);
  t.ok(r.acked > 200, `readings were acknowledged (${r.acked})`);
  t.ok(r.ackedBy.coap > 20, `CoAP readings were acknowledged by 2.01 (${r.ackedBy.coap})`);
  t.ok(r.faults.kill9 >= 1 && r.faults.sigterm >= 1 && r.faults.blackhole >= 1, 'the faults ran');
  t.ok(!r.clockStepped || r.faults.clockStep >= 1, 'the LAN clock was stepped (when libfaketime is installed)');
  t.ok(r.rpcAcked > 0, `RPCs went down and were answered (${r.rpcAcked})`);
});
