/**
 * Configuration (docs/configuration.md): flags > env > config file > defaults, unknown keys and wrong types
 * rejected, ports validated, the result deeply frozen.
 */
import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import t from 'tap';
import { DEFAULTS, checkServeConfig, loadConfig } from '../../src/config/index.js';
import { OutpostError } from '../../src/errors.js';
import { tempDir } from '../helpers/server.js';

/** The catalogue code of what `fn` throws, or 'no error'. */
function codeOf(fn: () => unknown): string {
  try {
    fn();
    return 'no error';
  } catch (err) {
    return err instanceof OutpostError ? err.code : `not an OutpostError: ${String(err)}`;
  }
}

t.test('defaults with an empty environment', async (t) => {
  const c = loadConfig({}, {});
  t.equal(c.host, '0.0.0.0');
  t.equal(c.port, 8080);
  t.equal(c.dataDir, resolve('./data'), 'data dir resolved to an absolute path');
  t.equal(c.http.maxBodyBytes, 4 * 1024 * 1024);
  t.equal(c.http.maxRpcBodyBytes, 64 * 1024);
  t.equal(c.tls.cert, '');
  t.equal(c.http.plainPort, 0, 'no plain HTTP beside HTTPS unless asked: a certificate makes port HTTPS only');
  t.equal(c.sync.backfill, true);
  t.equal(loadConfig({ port: 0 }, {}).http.plainPort, 0, '--port 0 does not turn it on');
  const tls = { tlsCert: '/x.pem', tlsKey: '/k.pem' };
  t.equal(loadConfig(tls, { OUTPOST_HTTP_PLAIN_PORT: '8081' }).http.plainPort, 8081);
  t.equal(loadConfig(tls, { OUTPOST_HTTP_PLAIN_PORT: 'ephemeral' }).http.plainPort, -1, 'OS-chosen, as MQTT ports');
  const admin = loadConfig({}, { OUTPOST_HTTP_PLAIN_PORT: '8081' });
  t.equal(admin.http.plainPort, 8081, 'the admin CLI loads it without the certificate (a flag or the unit env)');
  t.equal(
    codeOf(() => checkServeConfig(admin)),
    'CONFIG_INVALID',
    'serve refuses it without a certificate',
  );
  t.equal(
    codeOf(() => checkServeConfig(loadConfig(tls, { OUTPOST_HTTP_PLAIN_PORT: '8081' }))),
    'no error',
  );
  t.equal(c.query.maxIntervals, DEFAULTS.query.maxIntervals);
});

t.test('precedence: flags > env > file > defaults, key by key', async (t) => {
  const dir = tempDir(t);
  const file = join(dir, 'outpost.json');
  writeFileSync(
    file,
    JSON.stringify({
      host: '10.0.0.1',
      port: 1111,
      dataDir: '/from/file',
      http: { maxBodyBytes: 1000 },
      logLevel: 'silent',
    }),
  );

  const fileOnly = loadConfig({ config: file }, {});
  t.equal(fileOnly.host, '10.0.0.1');
  t.equal(fileOnly.port, 1111);
  t.equal(fileOnly.dataDir, '/from/file');
  t.equal(fileOnly.http.maxBodyBytes, 1000, 'nested file key');
  t.equal(
    fileOnly.http.maxRpcBodyBytes,
    DEFAULTS.http.maxRpcBodyBytes,
    'sibling of a nested file key keeps its default',
  );
  t.equal(fileOnly.logLevel, 'silent');

  const env = { OUTPOST_CONFIG: file, OUTPOST_HOST: '10.0.0.2', OUTPOST_PORT: '2222' };
  const envOverFile = loadConfig({}, env);
  t.equal(envOverFile.host, '10.0.0.2', 'env beats file');
  t.equal(envOverFile.port, 2222);
  t.equal(envOverFile.dataDir, '/from/file', 'file value kept where env says nothing');

  const flagsOverEnv = loadConfig({ port: '3333', dataDir: '/from/flag' }, { ...env, OUTPOST_DATA_DIR: '/from/env' });
  t.equal(flagsOverEnv.port, 3333, 'flag beats env');
  t.equal(flagsOverEnv.dataDir, '/from/flag', 'flag beats env');
  t.equal(flagsOverEnv.host, '10.0.0.2', 'env value kept where no flag is given');
  t.equal(
    loadConfig({}, { ...env, OUTPOST_DATA_DIR: '/from/env' }).dataDir,
    '/from/env',
    'env beats file for the data dir',
  );

  const other = join(dir, 'other.json');
  writeFileSync(other, JSON.stringify({ port: 4444 }));
  t.equal(loadConfig({ config: other }, env).port, 2222, '--config picks the file, env still wins over it');
  t.equal(loadConfig({ config: other }, { OUTPOST_CONFIG: file }).port, 4444, '--config beats OUTPOST_CONFIG');
  t.equal(loadConfig({ port: 0 }, {}).port, 0, 'port 0 (any free port) is allowed');
  t.equal(loadConfig({ port: '' }, { OUTPOST_PORT: '' }).port, 8080, 'empty strings mean "not given"');
});

t.test('the result is deeply frozen', async (t) => {
  const c = loadConfig({}, {});
  t.ok(Object.isFrozen(c));
  t.ok(Object.isFrozen(c.http));
  t.ok(Object.isFrozen(c.tls));
  t.throws(
    () => {
      (c as { port: number }).port = 1;
    },
    TypeError,
    'assignment throws in strict mode',
  );
  t.throws(() => {
    (c.http as { maxBodyBytes: number }).maxBodyBytes = 1;
  }, TypeError);
  t.equal(DEFAULTS.port, 8080, 'the defaults object itself is never mutated');
  t.not(Object.isFrozen(DEFAULTS.http), true, 'loading does not freeze the shared defaults');
});

t.test('invalid configuration is rejected with CONFIG_INVALID', async (t) => {
  const dir = tempDir(t);
  const write = (name: string, text: string): string => {
    const f = join(dir, name);
    writeFileSync(f, text);
    return f;
  };
  const cases: Array<[string, () => unknown]> = [
    ['unknown top-level key', () => loadConfig({ config: write('a.json', '{"prot":1}') }, {})],
    ['unknown nested key', () => loadConfig({ config: write('b.json', '{"http":{"maxBody":1}}') }, {})],
    ['wrong type (string for number)', () => loadConfig({ config: write('c.json', '{"port":"8080"}') }, {})],
    ['wrong type (number for object)', () => loadConfig({ config: write('d.json', '{"http":5}') }, {})],
    ['wrong type (null)', () => loadConfig({ config: write('e.json', '{"host":null}') }, {})],
    ['file not JSON', () => loadConfig({ config: write('f.json', '{port: 1}') }, {})],
    ['file not an object', () => loadConfig({ config: write('g.json', '[1]') }, {})],
    ['missing file', () => loadConfig({ config: join(dir, 'nope.json') }, {})],
    ['file port out of range', () => loadConfig({ config: write('h.json', '{"port":70000}') }, {})],
    ['negative body cap', () => loadConfig({ config: write('i.json', '{"http":{"maxBodyBytes":-1}}') }, {})],
    ['bad logLevel', () => loadConfig({ config: write('j.json', '{"logLevel":"loud"}') }, {})],
    ['flag port not a number', () => loadConfig({ port: 'abc' }, {})],
    ['flag port too big', () => loadConfig({ port: '65536' }, {})],
    ['flag port negative', () => loadConfig({ port: '-1' }, {})],
    ['flag port fractional', () => loadConfig({ port: '80.5' }, {})],
    ['env port with junk', () => loadConfig({}, { OUTPOST_PORT: '8080x' })],
    ['TLS cert without key', () => loadConfig({ tlsCert: '/x.pem' }, {})],
    [
      'plain HTTP on the HTTPS port',
      () => loadConfig({ tlsCert: '/x.pem', tlsKey: '/k.pem', port: 8443 }, { OUTPOST_HTTP_PLAIN_PORT: '8443' }),
    ],
    ['http.plainPort out of range', () => loadConfig({}, { OUTPOST_HTTP_PLAIN_PORT: '70000' })],
    ['http.plainPort in the file', () => loadConfig({ config: write('q.json', '{"http":{"plainPort":-2}}') }, {})],
    ['sync.backfill not a boolean', () => loadConfig({ config: write('r.json', '{"sync":{"backfill":1}}') }, {})],
    ['__proto__ key', () => loadConfig({ config: write('k.json', '{"__proto__":{}}') }, {})],
    ['inherited key name', () => loadConfig({ config: write('m.json', '{"toString":"x"}') }, {})],
    [
      'commit delay below -1 (the budget)',
      () => loadConfig({ config: write('n.json', '{"store":{"commitDelayMs":-2}}') }, {}),
    ],
    [
      'a write budget of 0',
      () => loadConfig({ config: write('p.json', '{"store":{"writeBudgetBytesPerDay":0}}') }, {}),
    ],
    [
      'commit delay over a minute',
      () => loadConfig({ config: write('o.json', '{"store":{"commitDelayMs":60001}}') }, {}),
    ],
  ];
  for (const [name, fn] of cases) t.equal(codeOf(fn), 'CONFIG_INVALID', name);
  try {
    loadConfig({ config: write('l.json', '{"http":{"maxBody":1}}') }, {});
  } catch (err) {
    t.match((err as Error).message, /unknown config key "http\.maxBody"/, 'the message names the full key path');
  }
});
