/**
 * `outpost attributes set` and `attributes delete` (docs/cli.md): a device's shared or server attributes, written
 * where every command acts (target.ts). Remotely REST's `POST .../attributes/{scope}` and `DELETE .../{scope}`;
 * locally through the daemon's own attribute store (src/admin/ops.ts), so a write reaches long-polls, MQTT and
 * CoAP subscribers and websockets as REST's does. The gateway checks the body as REST does: nothing is written
 * unless all of it is valid.
 */
import type { Command } from 'commander';
import { resolveDevice } from './backend.js';
import type { ModeOptions } from './backend-types.js';
import { example } from './common.js';
import { CliError } from './errors.js';
import { safeText } from './format.js';
import { keysOption, withRemote, writeOptions } from './options.js';
import { targetOf } from './target.js';
import { printWrite, writeLocal } from './write.js';

const SCOPES: Readonly<Record<string, string>> = {
  client: 'CLIENT_SCOPE',
  shared: 'SHARED_SCOPE',
  server: 'SERVER_SCOPE',
};

/** `shared`, `SHARED` or `SHARED_SCOPE` (as `attributes --scope` and REST name it) → REST's scope */
function scopeArg(raw: string, write: boolean): string {
  const folded = raw.toLowerCase().replace(/_scope$/, '');
  const scope = SCOPES[folded];
  if (scope === undefined)
    throw new CliError(`--scope ${safeText(raw)}: shared or server (SHARED_SCOPE, SERVER_SCOPE)`);
  // a device's client attributes are its own to post (ThingsBoard's REST refuses to write them too)
  if (write && scope === 'CLIENT_SCOPE')
    throw new CliError(
      'Invalid scope: CLIENT_SCOPE: client attributes are posted by the device; give --scope shared or server',
    );
  return scope;
}

/** REST's attribute body: a JSON object; checked here first so a typo fails before anything is sent */
function bodyArg(text: string): string {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    throw new CliError(`the attributes are not JSON (${(err as Error).message}): give an object, e.g. '{"target":22}'`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw new CliError(`the attributes must be a JSON object, e.g. '{"target":22}'`);
  return text;
}

export function registerAttributeWrites(program: Command): void {
  // registered by read.ts (the read); its own options stop before `set`/`delete` so theirs are theirs
  const attributes = program.commands.find((c) => c.name() === 'attributes');
  if (attributes === undefined) return;
  example(
    writeOptions(
      attributes
        .command('set')
        .argument('<device>', 'device name or id')
        .argument('<json>', 'the attributes, a JSON object: \'{"target":22}\'')
        .description("set a device's shared or server attributes (its subscribers are told, as over REST)")
        .requiredOption('--scope <scope>', '(required) shared or server (SHARED_SCOPE, SERVER_SCOPE)'),
    ).action(async (ref: string, json: string, o: ModeOptions & { scope: string }) => {
      const scope = scopeArg(o.scope, true);
      const body = bodyArg(json);
      const t = await targetOf(o, { command: 'attributes set', remote: true });
      if (t.mode === 'local')
        return printWrite(t, await writeLocal(t, o, { op: 'attributes.save', device: ref, scope, body }));
      await withRemote(t.url, async (b) => {
        const dev = await resolveDevice(b, ref);
        await b.saveAttributes(dev.id, scope, body);
        printWrite(t, { id: dev.id, name: dev.name, scope, saved: Object.keys(JSON.parse(body) as object) }, true, b);
      });
    }),
    'outpost attributes set pump-1 --scope shared \'{"target":22}\'',
    'outpost attributes set pump-1 --scope SERVER_SCOPE \'{"site":"north"}\' --url http://gw-12.local:8080',
  );
  example(
    writeOptions(
      attributes
        .command('delete')
        .argument('<device>', 'device name or id')
        .argument('<keys>', 'the keys, comma separated: a,b')
        .description("delete a device's attributes of one scope")
        .requiredOption('--scope <scope>', '(required) shared, server or client'),
    ).action(async (ref: string, rawKeys: string, o: ModeOptions & { scope: string }) => {
      const scope = scopeArg(o.scope, false);
      const keys = keysOption(rawKeys);
      if (keys === undefined) throw new CliError('give the keys to delete: a,b');
      const t = await targetOf(o, { command: 'attributes delete', remote: true });
      if (t.mode === 'local')
        return printWrite(t, await writeLocal(t, o, { op: 'attributes.delete', device: ref, scope, keys }));
      await withRemote(t.url, async (b) => {
        const dev = await resolveDevice(b, ref);
        await b.deleteAttributes(dev.id, scope, keys);
        printWrite(t, { id: dev.id, name: dev.name, scope, keys }, true, b);
      });
    }),
    'outpost attributes delete pump-1 target,mode --scope shared',
  );
}
