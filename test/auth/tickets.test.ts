/**
 * Access tickets (docs/cli.md): `outpost ticket keygen/issue`, then the accept/reject matrix on a gateway
 * whose config trusts one key: valid admin and customer tickets carry their authority's rules; tampered,
 * expired, untrusted and over-long tickets answer 401; ttl > 7 days is refused at issue; login --ticket works.
 */
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { issueTicket } from '../../src/auth/ticket-issue.js';
import { addDevice, cli, cliJson, http, startGateway, tempDir } from '../helpers/server.js';

t.test('ticket accept/reject matrix', async (t) => {
  const dir = tempDir(t);
  const keyFile = join(dir, 'operator.key');
  const other = join(dir, 'other.key');
  const [kg, kg2] = await Promise.all([
    cli(['ticket', 'keygen', '--out', keyFile]),
    cli(['ticket', 'keygen', '--out', other]),
  ]);
  t.equal(kg.code, 0);
  const pub = kg.stdout.trim();
  t.match(pub, /^[A-Za-z0-9_-]{43}$/, 'keygen prints a base64url public key');
  t.equal(statSync(keyFile).mode & 0o777, 0o600, 'secret key file is 0600');
  t.not(kg2.stdout.trim(), pub);
  t.not((await cli(['ticket', 'keygen', '--out', keyFile])).code, 0, 'keygen never overwrites a key');

  const config = join(dir, 'outpost.json');
  writeFileSync(config, JSON.stringify({ auth: { ticketKeys: [pub] } }));
  const gw = await startGateway(t, { args: ['--config', config] });
  await cliJson(['customer', 'add', '--data-dir', gw.dataDir, '--title', 'Acme']);
  const mine = await addDevice(gw.dataDir, 'acme-pump', ['--customer', 'Acme']);
  const theirs = await addDevice(gw.dataDir, 'other-pump');

  const issue = async (args: string[], key = keyFile): Promise<string> => {
    const r = await cli(['ticket', 'issue', '--key', key, ...args]);
    if (r.code !== 0) throw new Error(r.stderr);
    return r.stdout.trim();
  };
  const admin = await issue(['--email', 'tech@example.com', '--authority', 'TENANT_ADMIN', '--ttl', '8h']);
  const cust = await issue([
    '--email',
    'c@example.com',
    '--authority',
    'CUSTOMER_USER',
    '--customer',
    'Acme',
    '--ttl',
    '1d',
  ]);
  const untrusted = await issue(['--email', 'tech@example.com', '--authority', 'TENANT_ADMIN', '--ttl', '8h'], other);
  const header = JSON.parse(Buffer.from(admin.split('.')[0] as string, 'base64url').toString()) as unknown;
  t.same(header, { alg: 'EdDSA', typ: 'JWT' }, 'RFC 8037 header');
  const claims = JSON.parse(Buffer.from(admin.split('.')[1] as string, 'base64url').toString()) as Record<
    string,
    unknown
  >;
  t.same(Object.keys(claims).sort(), ['exp', 'iat', 'jti', 'scopes', 'sub']);
  t.equal((claims['exp'] as number) - (claims['iat'] as number), 8 * 3600);

  const tooLong = await cli([
    'ticket',
    'issue',
    '--key',
    keyFile,
    '--email',
    'x@example.com',
    '--authority',
    'TENANT_ADMIN',
    '--ttl',
    '8d',
  ]);
  t.equal(tooLong.code, 1, 'ttl > 7 days refused at issue');
  t.match(tooLong.stderr, /at most 7 days/);

  const secret = Buffer.from(readFileSync(keyFile, 'utf8').trim(), 'base64url');
  const nowSec = Math.floor(Date.now() / 1000);
  const expired = issueTicket(secret, {
    email: 'tech@example.com',
    authority: 'TENANT_ADMIN',
    ttlSec: 60,
    nowSec: nowSec - 120,
  });
  const [h, p, s] = admin.split('.') as [string, string, string];
  const tampered = `${h}.${Buffer.from(JSON.stringify({ ...claims, sub: 'boss@example.com' })).toString('base64url')}.${s}`;
  const badSig = `${h}.${p}.${s.slice(0, -4)}AAAA`;
  const unknownCustomer = await issue([
    '--email',
    'c@example.com',
    '--authority',
    'CUSTOMER_USER',
    '--customer',
    'Nobody',
    '--ttl',
    '1h',
  ]);

  const get = (path: string, ticket: string, header = 'X-Authorization'): Promise<number> =>
    http('GET', `${gw.url}${path}`, undefined, { [header]: `Bearer ${ticket}` }).then((r) => r.status);
  const latest = (id: string): string => `/api/plugins/telemetry/DEVICE/${id}/values/timeseries`;
  const matrix: Array<[string, string, string, number]> = [
    ['admin ticket, any device', admin, latest(theirs.id), 200],
    ['admin ticket, Authorization header', admin, latest(mine.id), 200],
    ['admin ticket, tenant status', admin, '/api/outpost/status', 200],
    ["customer ticket, own customer's device", cust, latest(mine.id), 200],
    ['customer ticket, another device', cust, latest(theirs.id), 403],
    ['customer ticket, tenant status', cust, '/api/outpost/status', 403],
    ['tampered claims', tampered, latest(mine.id), 401],
    ['tampered signature', badSig, latest(mine.id), 401],
    ['expired', expired, latest(mine.id), 401],
    ['untrusted key', untrusted, latest(mine.id), 401],
    ['customer unknown here', unknownCustomer, latest(mine.id), 401],
  ];
  for (const [what, ticket, path, status] of matrix) {
    t.equal(
      await get(path, ticket, what.includes('Authorization header') ? 'Authorization' : 'X-Authorization'),
      status,
      what,
    );
    // a second time: answered from the verified-ticket cache, with the same verdict
    t.equal(await get(path, ticket), status, `${what} (again, cached)`);
  }
  const err = await http('GET', `${gw.url}${latest(mine.id)}`, undefined, { 'X-Authorization': `Bearer ${tampered}` });
  t.match(err.json(), { status: 401, errorCode: 11 }, 'TB error JSON');

  // login --ticket: the ticket is the session of later remote commands
  const cfg = tempDir(t);
  const ticketFile = join(dir, 'ticket.jwt');
  writeFileSync(ticketFile, `${cust}\n`);
  const env = { XDG_CONFIG_HOME: cfg, OUTPOST_URL: '' };
  const li = await cli(['login', '--url', gw.url, '--ticket', ticketFile], env);
  t.equal(li.code, 0, li.stderr);
  t.match(li.stdout, /as c@example\.com \(CUSTOMER_USER\) with a ticket/);
  const devs = await cli(['devices', '--url', gw.url, '--json'], env);
  t.equal(devs.code, 0, devs.stderr);
  t.same(
    (JSON.parse(devs.stdout) as Array<{ name: string }>).map((d) => d.name),
    ['acme-pump'],
    "a customer ticket sees its customer's devices",
  );
  // logout revokes the ticket on this gateway, cached verdict included
  t.equal(await get(latest(mine.id), cust), 200);
  t.equal((await cli(['logout', '--url', gw.url], env)).code, 0);
  t.equal(await get(latest(mine.id), cust), 401, 'a logged-out ticket is refused');
  const bad = join(dir, 'bad.jwt');
  writeFileSync(bad, tampered);
  const lbad = await cli(['login', '--url', gw.url, '--ticket', bad], env);
  t.equal(lbad.code, 1);
  t.match(lbad.stderr, /^outpost: 401: Token has expired\n$/);
});
