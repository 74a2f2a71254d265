/**
 * `outpost apikey add|list|enable|disable|delete` (docs/cli.md "API keys"): a user's API keys, locally (the data
 * dir: writes go where the store is written, common.ts `adminWrite`, so a running daemon forgets a disabled or
 * deleted key at once) or remotely (`--url`, after `outpost login`: the gateway's `/api/apiKey` REST). `add`
 * prints the key's value, the only time it is shown; `list` never shows values.
 */
import type { Command } from 'commander';
import type { ConfigFlags } from '../config/index.js';
import { remoteUrlOf } from './backend.js';
import { adminWrite, commandGroup, confirm, example } from './common.js';
import { CliError } from './errors.js';
import { type TechOptions, print, techOptions } from './options.js';

/** TB's ApiKeyInfo JSON (`value` only in `add`'s answer) */
interface KeyJson {
  id: { id: string };
  createdTime: number;
  userId: { id: string };
  expirationTime: number;
  description: string;
  enabled: boolean;
  expired: boolean;
  value?: string | null;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** keys asked for at once when listing remotely: a user has a handful */
const PAGE_SIZE = 1000;

type Options = TechOptions & { user?: string };

/** `--expires`: a duration from now (`30d`, `12h`) or a time (ISO-8601, epoch ms); absent → 0, never. */
async function expirationOf(text: string | undefined, now: number): Promise<number> {
  if (text === undefined) return 0;
  const { parseDuration, parseTime } = await import('./time.js');
  const at = /^\d+(?:\.\d+)?(?:s|m|h|d|w)$/.test(text.trim())
    ? now + parseDuration(text, '--expires')
    : parseTime(text, now, '--expires');
  if (at <= now) throw new CliError(`--expires ${text} is not in the future`);
  return at;
}

/** The remote session and the id of the user `ref` names: an id, the logged-in user's email, or none (that user). */
async function remoteUser(url: string, ref: string | undefined) {
  const { RemoteSession } = await import('./session.js');
  const s = RemoteSession.open(url);
  if (ref !== undefined && UUID.test(ref)) return { s, userId: ref.toLowerCase() };
  if (ref !== undefined && ref.toLowerCase() !== s.email.toLowerCase())
    throw new CliError(`remotely, --user takes a user id (or your own email, ${s.email})`);
  const me = JSON.parse((await s.request('GET', '/api/auth/user')).text) as { id: { id: string } };
  return { s, userId: me.id.id };
}

/** Every key of the data dir, or of one user (email or id), with its user's email. */
async function localKeys(flags: ConfigFlags, user: string | undefined): Promise<Array<KeyJson & { email: string }>> {
  const [{ loadConfig }, { openStoreEnv }, { EntityStore }, { ApiKeyStore }, { apiKeyJson }, fs, path] =
    await Promise.all([
      import('../config/index.js'),
      import('../store/env.js'),
      import('../store/entities.js'),
      import('../store/api-keys.js'),
      import('../api/auth/api-key-json.js'),
      import('node:fs'),
      import('node:path'),
    ]);
  const config = loadConfig(flags);
  if (!fs.existsSync(path.join(config.dataDir, 'outpost.mdb')))
    throw new CliError(`no store in ${config.dataDir}: give --data-dir (or OUTPOST_DATA_DIR) or --config`);
  const env = openStoreEnv({ dataDir: config.dataDir, mapSizeBytes: config.store.mapSizeBytes, readOnly: true });
  try {
    const entities = new EntityStore(env);
    let userId: string | undefined;
    if (user !== undefined) {
      userId = (entities.userByEmail(user) ?? entities.user(user))?.id;
      if (userId === undefined) throw new CliError(`no user with email or id "${user}"`);
    }
    const now = Date.now();
    return new ApiKeyStore(env).list(userId).map((k) => ({
      ...(apiKeyJson(k, now) as unknown as KeyJson),
      email: entities.user(k.userId)?.email ?? '(deleted user)',
    }));
  } finally {
    await env.close();
  }
}

async function keysTable(rows: ReadonlyArray<KeyJson & { email?: string }>): Promise<string> {
  const { table, terminalColumns, style, localTime } = await import('./format.js');
  const state = (k: KeyJson): string => (k.expired ? 'expired' : k.enabled ? 'enabled' : 'disabled');
  const withUser = rows.some((k) => k.email !== undefined);
  return table(
    ['ID', ...(withUser ? ['USER'] : []), 'DESCRIPTION', 'STATE', 'EXPIRES', 'CREATED'],
    rows.map((k) => [
      k.id.id,
      ...(withUser ? [k.email ?? ''] : []),
      k.description,
      state(k),
      k.expirationTime === 0 ? 'never' : localTime(k.expirationTime),
      localTime(k.createdTime),
    ]),
    terminalColumns(),
    [],
    style(),
    new Set([0]),
  );
}

/** `disable`/`enable`: the key's JSON after the change. */
async function setEnabled(id: string, enabled: boolean, o: Options): Promise<void> {
  const url = remoteUrlOf(o);
  let key: string;
  if (url === undefined) {
    key = JSON.stringify(await adminWrite(o, { op: 'apikey.enable', id, enabled }));
  } else {
    const { RemoteSession } = await import('./session.js');
    key = (await RemoteSession.open(url).request('PUT', `/api/apiKey/${encodeURIComponent(id)}/enabled/${enabled}`))
      .text;
  }
  print(o.json ? key : `API key ${id} ${enabled ? 'enabled' : 'disabled'}`);
}

export function registerApiKey(program: Command): void {
  const apikey = commandGroup(program, 'apikey', "manage users' API keys (X-Authorization: ApiKey <value>)");
  example(
    techOptions(apikey.command('add'))
      .description('create an API key and print its value: it is shown this once, only its hash is kept')
      .requiredOption('--description <text>', '(required) what the key is for')
      .option('--user <emailOrId>', "the key's user (locally required; remotely an id, default: you)")
      .option('--expires <when>', 'when it stops working: a duration from now (30d, 12h) or a time (default: never)')
      .option('--disabled', 'create it disabled (enable it later)')
      .action(async (o: Options & { description: string; expires?: string; disabled?: boolean }) => {
        const now = Date.now();
        const expirationTime = await expirationOf(o.expires, now);
        const enabled = o.disabled !== true;
        const url = remoteUrlOf(o);
        let key: KeyJson;
        if (url === undefined) {
          if (o.user === undefined) throw new CliError('give --user EMAIL: the user the key acts as');
          const op = { op: 'apikey.add', user: o.user, description: o.description, enabled, expirationTime } as const;
          key = (await adminWrite(o, op)) as unknown as KeyJson;
        } else {
          const { s, userId } = await remoteUser(url, o.user);
          const body = {
            description: o.description,
            enabled,
            expirationTime,
            userId: { entityType: 'USER', id: userId },
          };
          key = JSON.parse((await s.request('POST', '/api/apiKey', { body: JSON.stringify(body) })).text) as KeyJson;
        }
        if (o.json) return print(JSON.stringify(key));
        print(
          [
            `${key.value ?? ''}`,
            `API key ${key.id.id} (${key.description}${enabled ? '' : ', disabled'}${expirationTime === 0 ? '' : `, expires ${new Date(expirationTime).toISOString()}`})`,
            'Keep the value now: it is not shown again. Send it as the header X-Authorization: ApiKey <value>',
          ].join('\n'),
        );
      }),
    'outpost apikey add --user admin@example.com --description "n8n flows" --expires 90d',
    'outpost apikey add --url http://gw-12.local:8080 --description tbctl',
  );
  example(
    techOptions(apikey.command('list'))
      .description('the API keys (never their values): every user locally, yours (or --user) remotely')
      .option('--user <emailOrId>', "only this user's keys (remotely an id, default: you)")
      .action(async (o: Options) => {
        const url = remoteUrlOf(o);
        let rows: Array<KeyJson & { email?: string }>;
        if (url === undefined) rows = await localKeys(o, o.user);
        else {
          const { s, userId } = await remoteUser(url, o.user);
          const page = JSON.parse(
            (await s.request('GET', `/api/apiKeys/${userId}?pageSize=${PAGE_SIZE}&page=0`)).text,
          ) as { data: KeyJson[] };
          rows = page.data;
        }
        if (o.json) return print(JSON.stringify(rows));
        print(rows.length === 0 ? '(no API keys: outpost apikey add)' : await keysTable(rows));
      }),
    'outpost apikey list',
    'outpost apikey list --user tech@example.com --json',
  );
  for (const [name, enabled] of [
    ['disable', false],
    ['enable', true],
  ] as const) {
    example(
      techOptions(apikey.command(name).argument('<id>', "the key's id (outpost apikey list)"))
        .description(enabled ? 'enable an API key again' : 'disable an API key: refused at once (401), kept for later')
        .action((id: string, o: Options) => setEnabled(id, enabled, o)),
      `outpost apikey ${name} 5b7f0c1e-8d2a-4c6e-9f10-3a4b5c6d7e8f`,
    );
  }
  example(
    techOptions(apikey.command('delete').argument('<id>', "the key's id (outpost apikey list)"))
      .description('delete an API key: refused at once (401) and gone; asks first')
      .option('--yes', 'do not ask (required when stdin is not a terminal)')
      .action(async (id: string, o: Options & { yes?: boolean }) => {
        if (o.yes !== true) await confirm(`delete API key ${id}?`);
        const url = remoteUrlOf(o);
        if (url === undefined) await adminWrite(o, { op: 'apikey.delete', id });
        else {
          const { RemoteSession } = await import('./session.js');
          await RemoteSession.open(url).request('DELETE', `/api/apiKey/${encodeURIComponent(id)}`);
        }
        print(o.json ? JSON.stringify({ id, deleted: true }) : `API key ${id} deleted`);
      }),
    'outpost apikey delete 5b7f0c1e-8d2a-4c6e-9f10-3a4b5c6d7e8f --yes',
  );
}
