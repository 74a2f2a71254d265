/**
 * `outpost login` / `logout` (docs/cli.md): a session per gateway URL in the credentials file (session.ts).
 * With `--ticket`, the access ticket itself is the session (it is verified by the gateway first); it cannot
 * be refreshed past its expiry, only replaced.
 */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { example } from './common.js';
import { CliError } from './errors.js';
import { print } from './options.js';
import {
  errorOf,
  httpRequest,
  normaliseUrl,
  readCredentials,
  readCurrentUrl,
  saveSession,
  writeCredentials,
  writeCurrentUrl,
} from './session.js';

/** Reads a password from the terminal without echoing it. */
export async function promptPassword(prompt = 'Password: '): Promise<string> {
  if (process.stdin.isTTY !== true) {
    const text = readFileSync(0, 'utf8');
    return text.replace(/\r?\n$/, '');
  }
  process.stderr.write(prompt);
  process.stdin.setRawMode(true);
  process.stdin.resume();
  return new Promise<string>((resolve, reject) => {
    let pw = '';
    const onData = (buf: Buffer): void => {
      for (const ch of buf.toString('utf8')) {
        if (ch === '\r' || ch === '\n') {
          process.stdin.setRawMode(false);
          process.stdin.pause();
          process.stdin.off('data', onData);
          process.stderr.write('\n');
          resolve(pw);
          return;
        }
        if (ch === '\u0003') {
          process.stdin.setRawMode(false);
          reject(new CliError('interrupted'));
          return;
        }
        if (ch === '\u007f') pw = pw.slice(0, -1);
        else pw += ch;
      }
    };
    process.stdin.on('data', onData);
  });
}

/** what a login changes for the next commands */
const NEXT = 'commands without --url or --data-dir now go to this gateway (outpost logout to stop)';

export function registerLogin(program: Command): void {
  example(
    program
      .command('login')
      .description('log in to a gateway; later commands without --url or --data-dir go to it')
      .option('--url <url>', 'the gateway (env OUTPOST_URL)')
      .option('--username <email>', 'your user')
      .option('--password <password>', 'prompted for when missing')
      .option('--ticket <file>', 'an access ticket from your operator (FILE, or - for stdin) instead of a password')
      .action(async (o: { url?: string; username?: string; password?: string; ticket?: string }) => {
        const raw = o.url ?? (process.env['OUTPOST_URL'] || undefined);
        if (raw === undefined) throw new CliError('login needs --url URL (or OUTPOST_URL)');
        const url = normaliseUrl(raw);
        if (o.ticket !== undefined) {
          const ticket = readFileSync(o.ticket === '-' ? 0 : o.ticket, 'utf8').trim();
          const s = await saveSession(url, ticket, undefined);
          return print(`logged in to ${url} as ${s.email} (${s.authority}) with a ticket; ${NEXT}`);
        }
        if (o.username === undefined) throw new CliError('login needs --username EMAIL (or --ticket FILE)');
        const password = o.password ?? (await promptPassword());
        const a = await httpRequest('POST', `${url}/api/auth/login`, {
          body: JSON.stringify({ username: o.username, password }),
        });
        if (a.status !== 200) throw errorOf(a);
        const pair = JSON.parse(a.text) as { token: string; refreshToken: string };
        const s = await saveSession(url, pair.token, pair.refreshToken);
        print(`logged in to ${url} as ${s.email} (${s.authority}); ${NEXT}`);
      }),
    'outpost login --url http://gw-12.local:8080 --username tech@example.com',
    'outpost login --url https://gw-12.local --ticket ticket.jwt',
  );

  example(
    program
      .command('logout')
      .description('end the session with a gateway (all of them without --url); commands are local again')
      .option('--url <url>', 'the gateway (env OUTPOST_URL)')
      .action(async (o: { url?: string }) => {
        const all = readCredentials();
        const raw = o.url ?? (process.env['OUTPOST_URL'] || undefined);
        const urls = raw === undefined ? Object.keys(all) : [normaliseUrl(raw)];
        if (urls.every((url) => all[url] === undefined))
          print(raw === undefined ? 'not logged in to any gateway' : `not logged in to ${urls[0]}`);
        for (const url of urls) {
          const s = all[url];
          if (!s) continue;
          // best effort: the gateway may be unreachable; the local copy goes either way
          await httpRequest('POST', `${url}/api/auth/logout`, { token: s.token, timeoutMs: 5000 }).catch(
            () => undefined,
          );
          delete all[url];
          print(`logged out of ${url}`);
        }
        writeCredentials(all);
        const current = readCurrentUrl();
        if (current !== undefined && (raw === undefined || urls.includes(current))) writeCurrentUrl(undefined);
      }),
    'outpost logout --url http://gw-12.local:8080',
  );
}
