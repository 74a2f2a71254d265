/**
 * Seeded property test (docs/cli.md "two modes, one output"): random series go in through the device API,
 * random history queries go out through `outpost query --json` locally (the data dir read-only beside the
 * daemon) and remotely, and both must equal REST's `values/timeseries` answer byte for byte.
 */
import t from 'tap';
import { cli, addDevice, http, startGateway, tempDir } from '../helpers/server.js';
import { addUser, authHeaders, login } from '../helpers/users.js';
import { rng } from '../helpers/prng.js';

const SEED = 0x17c11;
const QUERIES = 12;
const AGGS = ['NONE', 'AVG', 'MIN', 'MAX', 'SUM', 'COUNT'] as const;

t.test('query --json equals REST on random queries, local and remote', async (t) => {
  const rand = rng(SEED);
  const int = (n: number): number => Math.floor(rand() * n);
  const gw = await startGateway(t);
  const dev = await addDevice(gw.dataDir, 'rnd', ['--token', 'RND']);
  await addUser(gw.dataDir, 'p@example.com', 'pw', 'TENANT_ADMIN');
  const cfg = tempDir(t);
  const env = { XDG_CONFIG_HOME: cfg, OUTPOST_URL: '' };
  const li = await cli(['login', '--url', gw.url, '--username', 'p@example.com', '--password', 'pw'], env);
  t.equal(li.code, 0, li.stderr);
  const H = authHeaders((await login(gw, 'p@example.com', 'pw')).token);

  // a day of irregular points: longs, doubles (some integral: 42.0), strings, booleans; posted out of order
  const t0 = 1_767_225_600_000; // 2026-01-01T00:00Z
  const keys = ['l', 'd', 's', 'm'];
  const body: Array<{ ts: number; values: Record<string, unknown> }> = [];
  for (let i = 0; i < 3000; i++) {
    const ts = t0 + int(86_400_000);
    const v: Record<string, unknown> = {};
    if (rand() < 0.7) v['l'] = int(2000) - 1000;
    if (rand() < 0.7) v['d'] = rand() < 0.2 ? Math.round(rand() * 50) : (rand() - 0.5) * 1e4;
    if (rand() < 0.3) v['s'] = `v${int(50)}`;
    if (rand() < 0.5) v['m'] = rand() < 0.5 ? int(100) : rand() < 0.5 ? rand() * 10 : rand() < 0.5;
    if (Object.keys(v).length > 0) body.push({ ts, values: v });
  }
  // doubles that happen to be integral must stay doubles: post them as literals with ".0"
  const text = JSON.stringify(body).replace(/"d":(-?\d+)([,}])/g, '"d":$1.0$2');
  t.equal((await http('POST', `${gw.url}/api/v1/RND/telemetry`, text)).status, 200);

  // the queries are drawn first (the seed fixes them), then run three at a time: each is two CLI processes
  const drawn = Array.from({ length: QUERIES }, () => {
    const agg = AGGS[int(AGGS.length)] as (typeof AGGS)[number];
    const startTs = t0 - 3_600_000 + int(20 * 3_600_000);
    const endTs = startTs + 1 + int(30 * 3_600_000);
    const interval = agg === 'NONE' ? 0 : ([60_000, 600_000, 3_600_000, 7_200_000, 5_432_100][int(5)] as number);
    const limit = rand() < 0.4 ? 1 + int(300) : agg === 'NONE' ? 5000 : undefined;
    const ks = keys.filter(() => rand() < 0.6);
    if (ks.length === 0) ks.push('m');
    return { agg, startTs, endTs, interval, limit, ks };
  });
  const check = async ({ agg, startTs, endTs, interval, limit, ks }: (typeof drawn)[number]): Promise<void> => {
    const qs = `keys=${ks.join(',')}&startTs=${startTs}&endTs=${endTs}&interval=${interval}&agg=${agg}&orderBy=${agg === 'NONE' ? 'DESC' : 'ASC'}${limit === undefined ? '' : `&limit=${limit}`}`;
    const rest = await http(
      'GET',
      `${gw.url}/api/plugins/telemetry/DEVICE/${dev.id}/values/timeseries?${qs}`,
      undefined,
      H,
    );
    const args = [
      'query',
      'rnd',
      '--keys',
      ks.join(','),
      '--from',
      String(startTs),
      '--to',
      String(endTs),
      '--agg',
      agg,
      '--json',
      ...(interval ? ['--interval', String(interval)] : []),
      ...(limit === undefined ? [] : ['--limit', String(limit)]),
    ];
    const [l, r] = await Promise.all([
      cli([...args, '--data-dir', gw.dataDir], env),
      cli([...args, '--url', gw.url], env),
    ]);
    if (rest.status !== 200) {
      // a query REST refuses (too many buckets) is refused by the CLI too, with REST's message
      t.equal(l.code, 1, `${qs}: local refuses as REST (${rest.status})`);
      t.equal(r.code, 1, `${qs}: remote refuses as REST (${rest.status})`);
      return;
    }
    t.equal(l.stdout.trim(), rest.text, `${qs}: local == REST`);
    t.equal(r.stdout.trim(), rest.text, `${qs}: remote == REST`);
    compared++;
  };
  let compared = 0;
  for (let i = 0; i < drawn.length; i += 3) await Promise.all(drawn.slice(i, i + 3).map(check));
  t.ok(
    compared >= QUERIES / 2,
    `${compared} of ${QUERIES} queries answered and compared (the rest refused by REST and the CLI alike)`,
  );
});
