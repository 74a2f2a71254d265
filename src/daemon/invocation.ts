/**
 * How to run the `outpost` command in this install, for the hints the daemon prints: `outpost` when a command
 * of that name on PATH runs this very program (the installer's wrapper, `npm link`, a global install), else
 * `npx outpost` from a clone (npm finds a package's own bin), else node and the entry's path.
 */
import { existsSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { delimiter, join, relative } from 'node:path';

export function outpostCommand(entry: string = process.argv[1] ?? '', cwd: string = process.cwd()): string {
  let main: string;
  try {
    main = realpathSync(entry);
  } catch {
    return 'outpost';
  }
  for (const dir of (process.env['PATH'] ?? '').split(delimiter)) {
    if (dir === '') continue;
    const candidate = join(dir, 'outpost');
    try {
      if (realpathSync(candidate) === main) return 'outpost';
      // a wrapper script names the entry it runs (the installer's sets the user and data dir first)
      if (statSync(candidate).size < 16_384 && readFileSync(candidate, 'utf8').includes(main)) return 'outpost';
    } catch {
      /* not there, or not readable */
    }
  }
  const rel = relative(cwd, main);
  if (!rel.startsWith('..') && existsSync(join(cwd, 'package.json'))) return 'npx outpost';
  return `node ${rel.startsWith('..') ? main : rel}`;
}
