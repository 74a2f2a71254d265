/**
 * "A 2.01 means on disk" (docs/coap.md): 200 CON uploads from several clients, kill -9 right after the last
 * 2.01, restart, every point there. A commit held back longer than coap.piggybackMs: an empty ACK first, the
 * 2.01 as a separate CON afterwards. The CoAP port set explicitly, taken by another process, stops the start.
 */
import { createSocket } from 'node:dgram';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { CoapTestClient, coapPort } from '../../helpers/coap.js';
import { readEntity } from '../../helpers/readback.js';
import { addDevice, cli, startGateway, tempDir } from '../../helpers/server.js';

t.test('kill -9 after 200 acknowledged CON posts: all 200 there after the restart', async (t) => {
  const gw = await startGateway(t);
  const port = coapPort(gw);
  const devices = await Promise.all([0, 1, 2, 3].map((i) => addDevice(gw.dataDir, `cdur-${i}`)));
  const clients = await Promise.all(devices.map(() => CoapTestClient.open(t, port)));
  const answers: Array<Promise<{ code: string }>> = [];
  for (let n = 0; n < 200; n++) {
    const i = n % 4;
    answers.push(
      (clients[i] as CoapTestClient).request({
        method: 'POST',
        path: `api/v1/${devices[i]?.token}/telemetry`,
        payload: `{"ts":${1700000000000 + n},"values":{"n":${n},"d":${n}.0}}`,
      }),
    );
  }
  const codes = await Promise.all(answers);
  t.ok(
    codes.every((c) => c.code === '2.01'),
    'every post answered 2.01',
  );
  gw.proc.kill('SIGKILL');
  await new Promise((r) => gw.proc.once('exit', r));
  let total = 0;
  for (const [i, d] of devices.entries()) {
    const dump = await readEntity(gw.dataDir, d.id);
    const ns = (dump.points['n'] ?? []).map((p) => Number(p.value));
    t.same(
      ns,
      Array.from({ length: 50 }, (_, k) => 4 * k + i),
      `device ${i}: its 50 points`,
    );
    t.equal(dump.points['d']?.[1]?.type, 'DOUBLE', '42.0 stays a double, as over HTTP');
    total += ns.length;
  }
  t.equal(total, 200);
});

t.test('a commit slower than coap.piggybackMs: empty ACK, then a separate CON 2.01', async (t) => {
  const dir = tempDir(t);
  writeFileSync(join(dir, 'c.json'), JSON.stringify({ store: { commitDelayMs: 600 }, coap: { piggybackMs: 100 } }));
  const gw = await startGateway(t, { args: ['--config', join(dir, 'c.json')] });
  const d = await addDevice(gw.dataDir, 'slow');
  const c = await CoapTestClient.open(t, coapPort(gw));
  const { buf, token, messageId } = c.build({
    method: 'POST',
    path: `api/v1/${d.token}/telemetry`,
    payload: '{"s":1}',
  });
  c.sendRaw(buf);
  const ack = await c.waitFor((p) => p.ack && p.messageId === messageId);
  t.equal(ack.code, '0.00', 'an empty ACK first');
  c.sendRaw(buf);
  const ack2 = await c.waitFor((p) => p.ack && p.messageId === messageId, 5000, c.received.indexOf(ack) + 1);
  t.equal(ack2.code, '0.00', 'a retransmission meanwhile gets the empty ACK again');
  const created = await c.waitFor((p) => p.token.equals(token) && p.code === '2.01');
  t.ok(created.confirmable, 'the 2.01 is a CON of its own');
  t.not(created.messageId, messageId);
});

t.test('coap.port taken by another process: the daemon exits 1 with one line', async (t) => {
  const holder = createSocket('udp4');
  await new Promise<void>((r) => holder.bind(0, '127.0.0.1', () => r()));
  t.teardown(() => holder.close());
  const taken = holder.address().port;
  const r = await cli(['serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', tempDir(t)], {
    OUTPOST_COAP_PORT: String(taken),
  });
  t.equal(r.code, 1);
  t.match(r.stderr, new RegExp(`CoAP on 127\\.0\\.0\\.1:${taken}: the port is in use`));
  t.match(
    r.stderr,
    /nothing was changed: give CoAP another port with OUTPOST_COAP_PORT or coap\.port \(0 turns it off\)\n$/,
  );
});
