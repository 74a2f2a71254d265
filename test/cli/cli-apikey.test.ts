/**
 * `outpost apikey` (docs/cli.md "API keys"), local and remote, against a running daemon: `add` prints the value
 * once and it works on REST; `list` never prints a value; `disable`, `enable` and `delete` take effect on the
 * daemon's very next request (its cache of key lookups forgets the key), whether they come from the data dir
 * (through the daemon) or over REST.
 */
import t, { type Test } from 'tap';
import { type CliResult, type HttpResult, http } from '../helpers/server.js';
import { failsOneLine, ok, techGateway } from '../helpers/tech.js';

interface KeyJson {
  id: { id: string };
  userId: { id: string };
  description: string;
  enabled: boolean;
  expirationTime: number;
  value?: string | null;
}

const json = <T>(t: Test, r: CliResult, what: string): T => JSON.parse(ok(t, r, what)) as T;

t.test('outpost apikey', async (t) => {
  const tg = await techGateway(t);
  const me = (value: string): Promise<HttpResult> =>
    http('GET', `${tg.gw.url}/api/auth/user`, undefined, { 'X-Authorization': `ApiKey ${value}` });

  for (const [mode, flags] of [
    ['local', tg.L],
    ['remote', tg.R],
  ] as const) {
    t.test(`${mode}: add, list, disable, enable, delete`, async (t) => {
      const user = mode === 'local' ? ['--user', 'tech@example.com'] : [];
      const added = json<KeyJson>(
        t,
        await tg.run([
          'apikey',
          'add',
          ...flags,
          ...user,
          '--description',
          `${mode} key`,
          '--expires',
          '30d',
          '--json',
        ]),
        'add',
      );
      const value = added.value ?? '';
      t.match(value, /^tb_[A-Za-z0-9_-]{86}$/, 'the value, once');
      t.ok(Math.abs(added.expirationTime - (Date.now() + 30 * 86_400_000)) < 600_000, '--expires 30d');
      t.equal((await me(value)).status, 200, 'it works on REST');

      const human = ok(t, await tg.run(['apikey', 'add', ...flags, ...user, '--description', 'shown']), 'add (text)');
      t.match(human, /^tb_[A-Za-z0-9_-]{86}\n/, 'the text output starts with the value');
      t.match(human, /not shown again/);

      const listed = json<KeyJson[]>(t, await tg.run(['apikey', 'list', ...flags, '--json']), 'list --json');
      const row = listed.find((k) => k.id.id === added.id.id);
      t.same([row?.description, row?.enabled], [`${mode} key`, true], 'listed');
      t.notOk(row && 'value' in row, 'list --json has no value');
      const table = ok(t, await tg.run(['apikey', 'list', ...flags]), 'list');
      t.match(table, added.id.id, 'the table names the key');
      t.notMatch(table, /tb_/, 'the table shows no value');

      const off = await tg.run(['apikey', 'disable', added.id.id, ...flags]);
      t.equal(ok(t, off, 'disable').trim(), `API key ${added.id.id} disabled`);
      const refused = await me(value);
      t.same(
        [refused.status, refused.json<{ message: string }>().message],
        [401, 'User account is not active'],
        'refused at once',
      );
      ok(t, await tg.run(['apikey', 'enable', added.id.id, ...flags]), 'enable');
      t.equal((await me(value)).status, 200, 'works again');

      ok(t, await tg.run(['apikey', 'delete', added.id.id, ...flags, '--yes']), 'delete');
      const gone = await me(value);
      t.same(
        [gone.status, gone.json<{ message: string }>().message],
        [401, 'Invalid username or password'],
        'deleted: refused at once',
      );
      failsOneLine(
        t,
        await tg.run(['apikey', 'delete', added.id.id, ...flags, '--yes']),
        /is not found/,
        'delete twice',
      );
    });
  }

  t.test('bad input: one line, nothing created', async (t) => {
    failsOneLine(t, await tg.run(['apikey', 'add', ...tg.L, '--description', 'x']), /--user/, 'local add needs --user');
    failsOneLine(
      t,
      await tg.run(['apikey', 'add', ...tg.L, '--user', 'nobody@example.com', '--description', 'x']),
      /no user/,
      'unknown user',
    );
    failsOneLine(
      t,
      await tg.run(['apikey', 'add', ...tg.L, '--user', 'tech@example.com', '--description', 'x', '--expires', '-1h']),
      /not in the future/,
      'an expiry in the past',
    );
    failsOneLine(
      t,
      await tg.run(['apikey', 'add', ...tg.R, '--user', 'other@example.com', '--description', 'x']),
      /user id/,
      'remotely, another email',
    );
  });
});
