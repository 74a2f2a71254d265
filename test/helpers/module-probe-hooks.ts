/** The loader hooks of module-probe.ts: appends each loaded module's URL to OUTPOST_MODULE_LOG. */
import { appendFileSync } from 'node:fs';

type Next = (url: string, context: unknown) => Promise<unknown>;

export async function load(url: string, context: unknown, next: Next): Promise<unknown> {
  const loaded = await next(url, context);
  appendFileSync(process.env['OUTPOST_MODULE_LOG'] as string, `${url}\n`);
  return loaded;
}
