/**
 * CoAP observations that cannot fill the table for good (docs/coap.md "Observe"): at most
 * `coap.maxObservationsPerAddress` from one address; every observer not checked for `coap.observeCheckMs` gets a
 * CON notification of the current state (RFC 7641 section 4.5), and one that answers RST is dropped; under
 * pressure (the table 90% full) the least recently checked NON observers are probed at once, so that a table
 * filled by NON observers that are gone makes room for a device that is there. Real datagrams, real daemon.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { generate } from 'coap-packet';
import t from 'tap';
import { CoapTestClient, coapPort, opt, readUint } from '../../helpers/coap.js';
import { adminHeaders } from '../../helpers/mqtt.js';
import { type Gateway, type Teardown, addDevice, startGateway, tempDir, waitStatus } from '../../helpers/server.js';

async function gateway(t: Teardown, coap: object): Promise<Gateway> {
  const dir = tempDir(t);
  writeFileSync(join(dir, 'c.json'), JSON.stringify({ coap }));
  return startGateway(t, { args: ['--config', join(dir, 'c.json')] });
}

/** A client that answers every CON it receives with an RST, as one that forgot its observations does. */
function forgetful(c: CoapTestClient): void {
  c.autoAck = false;
  c.socket.on('message', (buf) => {
    const type = ((buf[0] as number) >> 4) & 3;
    if (type === 0) c.sendRaw(generate({ code: '0.00', messageId: buf.readUInt16BE(2), reset: true }));
  });
}

const observations = async (gw: Gateway, admin: Record<string, string>, pred: (n: number) => boolean) =>
  waitStatus<{ coap: { observations: number } }>(gw, admin, (s) => pred(s.coap.observations));

t.test('observations per address: one address cannot take the table', async (t) => {
  const gw = await gateway(t, { maxObservationsPerAddress: 3 });
  const devs = await Promise.all([1, 2, 3, 4, 5].map((i) => addDevice(gw.dataDir, `pa-${i}`)));
  const a = await CoapTestClient.open(t, coapPort(gw));
  for (const d of devs.slice(0, 3)) {
    const r = await a.request({ path: `api/v1/${d.token}/attributes`, observe: 0, confirmable: false });
    t.equal(readUint(opt(r, 'Observe')), 0, `${d.name} registered`);
  }
  const fourth = await a.request({ path: `api/v1/${devs[3]?.token}/attributes`, observe: 0, confirmable: false });
  t.equal(fourth.code, '2.05');
  t.equal(opt(fourth, 'Observe'), undefined, 'the fourth from the same address: a plain read');
  const again = await a.request({ path: `api/v1/${devs[0]?.token}/attributes`, observe: 0, confirmable: false });
  t.equal(readUint(opt(again, 'Observe')), 0, 're-registering one it holds is a replacement, not one more');
  const b = await CoapTestClient.open(t, coapPort(gw), '127.0.0.2');
  const other = await b.request({ path: `api/v1/${devs[4]?.token}/attributes`, observe: 0, confirmable: false });
  t.equal(readUint(opt(other, 'Observe')), 0, 'another address registers');
});

t.test('a NON observer gets a CON notification once per coap.observeCheckMs; an RST ends it', async (t) => {
  const gw = await gateway(t, { observeCheckMs: 400 });
  const admin = await adminHeaders(gw);
  const d = await addDevice(gw.dataDir, 'live-1');
  const c = await CoapTestClient.open(t, coapPort(gw));
  const reg = await c.request({ path: `api/v1/${d.token}/attributes`, observe: 0, confirmable: false });
  t.equal(readUint(opt(reg, 'Observe')), 0);
  const from = c.received.length;
  const probe = await c.waitFor((p) => p.confirmable && p.token.equals(reg.token), 10_000, from);
  t.equal(probe.code, '2.05');
  t.same(JSON.parse(probe.payload.toString()), {}, 'the current state, the shape of the first answer');
  t.ok((readUint(opt(probe, 'Observe')) ?? 0) > 0, 'with the next Observe number');
  const seq = readUint(opt(probe, 'Observe')) ?? 0;
  const next = await c.waitFor(
    (p) => p.confirmable && p.token.equals(reg.token) && (readUint(opt(p, 'Observe')) ?? 0) > seq,
    10_000,
    from,
  );
  t.equal(next.code, '2.05', 'acknowledged: still registered, probed again a period later');
  await observations(gw, admin, (n) => n === 1);
  forgetful(c);
  await observations(gw, admin, (n) => n === 0);
  t.pass('an RST to the next probe ends the observation');
});

t.test('under pressure the oldest NON observers are probed; the gone make room for a device', async (t) => {
  const gw = await gateway(t, { maxObservations: 10 });
  const admin = await adminHeaders(gw);
  const devs = await Promise.all(Array.from({ length: 11 }, (_, i) => addDevice(gw.dataDir, `pr-${i}`)));
  const flood = await CoapTestClient.open(t, coapPort(gw));
  for (const d of devs.slice(0, 10)) {
    const r = await flood.request({ path: `api/v1/${d.token}/rpc`, observe: 0, confirmable: false });
    t.equal(readUint(opt(r, 'Observe')), 0);
  }
  // the flooder forgets its observations (a device rebooted, a script ended): it answers RST from now on
  forgetful(flood);
  const late = devs[10] as { token: string };
  const dev = await CoapTestClient.open(t, coapPort(gw), '127.0.0.2');
  const refused = await dev.request({ path: `api/v1/${late.token}/attributes`, observe: 0 });
  t.equal(opt(refused, 'Observe'), undefined, 'the table is full: a plain read');
  await observations(gw, admin, (n) => n < 10);
  const ok = await dev.request({ path: `api/v1/${late.token}/attributes`, observe: 0 });
  t.equal(readUint(opt(ok, 'Observe')), 0, 'room made: the device registers');
});
