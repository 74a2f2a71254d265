/**
 * A bare upstream for bench:sync: ThingsBoard's provisioning and telemetry answered with next to no work (bodies
 * read and dropped). It stands in for a server elsewhere, which costs the gateway's cores nothing: the second
 * Outpost spends about a core ingesting what the gateway drains, on the same two cores.
 *
 *   node dist/scripts/bench/sink.js   (prints "listening on http://127.0.0.1:<port>")
 */
import * as uws from 'uWebSockets.js';

const app = uws.App();
app.post('/api/v1/provision', (res) => {
  res.onAborted(() => undefined);
  let body = '';
  res.onData((ab, last) => {
    body += Buffer.from(ab).toString('utf8');
    if (!last) return;
    const name = (JSON.parse(body) as { deviceName: string }).deviceName;
    res.cork(() =>
      res
        .writeHeader('Content-Type', 'application/json')
        .end(JSON.stringify({ status: 'SUCCESS', credentialsType: 'ACCESS_TOKEN', credentialsValue: `sink-${name}` })),
    );
  });
});
app.post('/api/v1/:token/telemetry', (res) => {
  res.onAborted(() => undefined);
  res.onData((_ab, last) => {
    if (last) res.cork(() => res.end());
  });
});
app.any('/*', (res) => {
  res.onAborted(() => undefined);
  res.onData(() => undefined);
  res.writeStatus('404 Not Found').end();
});
app.listen('127.0.0.1', 0, (ls) => {
  if (!ls) throw new Error('cannot listen');
  console.log(`listening on http://127.0.0.1:${uws.us_socket_local_port(ls as unknown as uws.us_socket)}`);
});
